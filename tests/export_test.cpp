// The built-in exporters: the OTLP/JSON encoding, the console and file exporters, the factory and
// InMemorySpanExporter. Outputs are checked by parsing them with an independent JSON parser
// (nlohmann/json), never by comparing against text produced by the code under test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "export/exporters.hpp"
#include "export/json_writer.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "nemo/lens/exporter.hpp"
#include "nemo/lens/version.hpp"
#include "scoped_env.hpp"

namespace nemo::lens {
namespace {

using detail::append_otlp_json;
using detail::ConsoleSpanExporter;
using detail::FileSpanExporter;
using Json = nlohmann::json;
using lens_test::ScopedEnv;

constexpr auto kNoDeadline = std::chrono::steady_clock::time_point::max();

constexpr char kTraceHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanHex[] = "00f067aa0ba902b7";
constexpr char kParentHex[] = "b7ad6b7169203331";
constexpr char kLinkTraceHex[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kLinkSpanHex[] = "53995c3f42cd8ad8";

TraceId trace_id(const char* hex) { return *TraceId::from_hex(hex); }
SpanId span_id(const char* hex) { return *SpanId::from_hex(hex); }

std::string error_of(const std::function<void()>& f) {
  return lens_test::error_message_of<ConfigError>(f);
}

// A span with every field set and every attribute type.
SpanData full_span() {
  SpanData s;
  s.name = "train_step";
  s.group = "STEP";
  s.context.trace_id = trace_id(kTraceHex);
  s.context.span_id = span_id(kSpanHex);
  s.context.trace_flags = 0x01;
  s.context.trace_state = "vendor=a,other=b";
  s.parent_span_id = span_id(kParentHex);
  s.parent_is_remote = false;
  s.kind = SpanKind::kClient;
  s.start_time_unix_nano = 1'700'000'000'123'456'789;
  s.end_time_unix_nano = 1'700'000'001'000'000'000;
  s.attributes = {
      {"flag", true},
      {"off", false},
      {"iteration", std::int64_t{42}},
      {"max", std::numeric_limits<std::int64_t>::max()},
      {"min", std::numeric_limits<std::int64_t>::min()},
      {"loss", 0.5},
      {"whole", 2.0},
      {"tiny", 5e-324},
      {"huge", 1.7976931348623157e308},
      {"tenth", 0.1},
      {"negative_zero", -0.0},
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"inf", std::numeric_limits<double>::infinity()},
      {"ninf", -std::numeric_limits<double>::infinity()},
      {"model", std::string("llama")},
      {"bools", std::vector<bool>{true, false, true}},
      {"layers", std::vector<std::int64_t>{0, -1, 9'007'199'254'740'993}},
      {"lrs", std::vector<double>{0.25, 3.0, std::numeric_limits<double>::quiet_NaN()}},
      {"names", std::vector<std::string>{"a", "b\"c", ""}},
      {"empty", std::vector<std::int64_t>{}},
  };
  s.dropped_attributes_count = 3;
  s.events = {
      SpanEvent{"checkpoint", 1'700'000'000'500'000'000, {{"path", std::string("/ckpt")}}, 1},
      SpanEvent{"plain", 1'700'000'000'600'000'000, {}, 0},
  };
  s.dropped_events_count = 4;
  SpanLink link;
  link.context.trace_id = trace_id(kLinkTraceHex);
  link.context.span_id = span_id(kLinkSpanHex);
  link.context.trace_flags = 0x01;
  link.context.is_remote = true;
  link.context.trace_state = "k=v";
  link.attributes = {{"reason", std::string("batch")}};
  link.dropped_attributes_count = 2;
  s.links = {link};
  s.dropped_links_count = 5;
  s.status_code = StatusCode::kError;
  s.status_message = "CUDA out of memory";
  s.thread_id = 4711;
  return s;
}

// A span with only the required fields: a root, no events, links or drops.
SpanData minimal_span() {
  SpanData s;
  s.name = "minimal";
  s.context.trace_id = trace_id(kTraceHex);
  s.context.span_id = span_id(kParentHex);
  s.start_time_unix_nano = 10;
  s.end_time_unix_nano = 25;
  return s;
}

Resource test_resource() {
  Resource r;
  r.attributes = {{"service.name", std::string("trainer")},
                  {"service.instance.id", std::string("job-7/rank-3")},
                  {"dl.rank", std::int64_t{3}},
                  {"host.name", std::string("node-17")},
                  {"dl.world_size", std::int64_t{8}}};
  return r;
}

std::string otlp(const std::vector<const SpanData*>& spans, const Resource& resource = {}) {
  std::string out;
  append_otlp_json(out, spans, resource);
  return out;
}

Json parse(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not valid JSON: " << text;
  return j;
}

const Json& only_span(const Json& request) {
  return request.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
}

// The AnyValue of the attribute `key` in an OTLP attribute list; null when absent.
Json otlp_attribute(const Json& attributes, const std::string& key) {
  Json found;
  int count = 0;
  for (const Json& kv : attributes) {
    if (kv.at("key") == key) {
      found = kv.at("value");
      ++count;
    }
  }
  EXPECT_LE(count, 1) << "duplicate key " << key;
  return found;
}

// ---- The JSON writer's raw-cursor writes, against independent implementations ----

// std::to_chars's digits of `v`.
template <class Int>
std::string to_chars_of(Int v) {
  char buf[32];
  return std::string(buf, static_cast<std::size_t>(std::to_chars(buf, buf + sizeof buf, v).ptr - buf));
}

TEST(JsonWriter, IntegersAreWhatToCharsWrites) {
  std::vector<std::uint64_t> values = {0, std::numeric_limits<std::uint64_t>::max()};
  for (std::uint64_t p = 1; p <= 10000000000000000000ULL; p *= 10) {
    values.insert(values.end(), {p - 1, p, p + 1});
    if (p > std::numeric_limits<std::uint64_t>::max() / 10) break;
  }
  std::mt19937_64 rng(29);
  for (int i = 0; i < 200000; ++i) values.push_back(rng() >> (rng() % 64));  // every magnitude
  char buf[detail::json::kMaxIntegerSize + detail::json::kSlack];
  for (const std::uint64_t v : values) {
    ASSERT_EQ(std::string(buf, detail::json::write_uint(buf, v)), to_chars_of(v)) << v;
    const auto i = static_cast<std::int64_t>(v);
    ASSERT_EQ(std::string(buf, detail::json::write_int(buf, i)), to_chars_of(i)) << i;
    ASSERT_EQ(std::string(buf, detail::json::write_int(buf, -(i >> 1))), to_chars_of(-(i >> 1)));
  }
  const std::int64_t min = std::numeric_limits<std::int64_t>::min();
  EXPECT_EQ(std::string(buf, detail::json::write_int(buf, min)), to_chars_of(min));
  std::string out = "x";
  detail::json::append_uint(out, 18446744073709551615ULL);
  detail::json::append_int(out, -42);
  EXPECT_EQ(out, "x18446744073709551615-42");
}

TEST(JsonWriter, IdsInHexAreWhatToHexWrites) {
  std::mt19937_64 rng(29);
  char buf[40];
  for (int i = 0; i < 10000; ++i) {
    TraceId t;
    SpanId s;
    for (auto& b : t.bytes) b = static_cast<std::uint8_t>(rng());
    for (auto& b : s.bytes) b = static_cast<std::uint8_t>(rng());
    ASSERT_EQ(std::string(buf, detail::json::write_hex(buf, t.bytes.data(), 16)), t.to_hex());
    ASSERT_EQ(std::string(buf, detail::json::write_hex(buf, s.bytes.data(), 8)), s.to_hex());
  }
}

TEST(JsonWriter, PlainStringsAreThoseWrittenAsTheyAre) {
  // Every byte alone, in the middle of a string and at either end.
  for (int c = 0; c < 256; ++c) {
    const std::string one(1, static_cast<char>(c));
    for (const std::string& s : {one, "ab" + one + "cd", one + "xyz", "xyz" + one}) {
      std::string written;
      detail::json::append_string(written, s);
      EXPECT_EQ(detail::json::is_plain(s), written == "\"" + s + "\"") << c;
    }
  }
  EXPECT_TRUE(detail::json::is_plain(""));
}

// ---- OTLP/JSON ----

TEST(OtlpJson, RequestEnvelope) {
  SpanData s = full_span();
  std::string text = otlp({&s}, test_resource());
  EXPECT_EQ(text.find('\n'), std::string::npos) << "one line";
  Json j = parse(text);
  ASSERT_EQ(j.at("resourceSpans").size(), 1u);
  const Json& rs = j["resourceSpans"][0];
  const Json& resource_attributes = rs.at("resource").at("attributes");
  ASSERT_EQ(resource_attributes.size(), 5u);
  EXPECT_EQ(resource_attributes[0], Json::parse(R"({"key":"service.name",
                                                     "value":{"stringValue":"trainer"}})"));
  EXPECT_EQ(otlp_attribute(resource_attributes, "dl.rank"), Json::parse(R"({"intValue":"3"})"));
  ASSERT_EQ(rs.at("scopeSpans").size(), 1u);
  const Json& scope = rs["scopeSpans"][0].at("scope");
  EXPECT_EQ(scope.at("name"), "nemo.lens");
  EXPECT_EQ(scope.at("version"), NEMO_LENS_VERSION_STRING);
  EXPECT_EQ(rs["scopeSpans"][0].at("spans").size(), 1u);
}

TEST(OtlpJson, SpanFields) {
  SpanData s = full_span();
  Json span = only_span(parse(otlp({&s})));
  EXPECT_EQ(span.at("traceId"), kTraceHex);
  EXPECT_EQ(span.at("spanId"), kSpanHex);
  EXPECT_EQ(span.at("parentSpanId"), kParentHex);
  EXPECT_EQ(span.at("traceState"), "vendor=a,other=b");
  EXPECT_EQ(span.at("name"), "train_step");
  EXPECT_EQ(span.at("kind"), 3);
  EXPECT_EQ(span.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(span.at("endTimeUnixNano"), "1700000001000000000");
  EXPECT_EQ(span.at("droppedAttributesCount"), 3);
  EXPECT_EQ(span.at("droppedEventsCount"), 4);
  EXPECT_EQ(span.at("droppedLinksCount"), 5);
  EXPECT_EQ(span.at("status"), Json::parse(R"({"code":2,"message":"CUDA out of memory"})"));
}

TEST(OtlpJson, FlagsAreTraceFlagsPlusParentIsRemoteBits) {
  SpanData s = minimal_span();
  s.context.trace_flags = 0x01;
  EXPECT_EQ(only_span(parse(otlp({&s}))).at("flags"), 0x101) << "sampled, parent known local";
  s.parent_span_id = span_id(kSpanHex);
  s.parent_is_remote = true;
  EXPECT_EQ(only_span(parse(otlp({&s}))).at("flags"), 0x301) << "sampled, parent remote";
  s.context.trace_flags = 0x00;
  s.parent_is_remote = false;
  EXPECT_EQ(only_span(parse(otlp({&s}))).at("flags"), 0x100) << "not sampled";
  s.context.trace_flags = 0xFF;
  const Json flags = only_span(parse(otlp({&s}))).at("flags");
  EXPECT_EQ(flags.get<std::uint32_t>() & 0xFF, 0xFFu) << "all 8 W3C bits carried";
  EXPECT_EQ(flags.get<std::uint32_t>() & ~0x3FFu, 0u) << "bits 10-31 are zero";
}

TEST(OtlpJson, KindAndStatusCodesAreIntegers) {
  SpanData s = minimal_span();
  const std::pair<SpanKind, int> kinds[] = {{SpanKind::kInternal, 1},
                                            {SpanKind::kServer, 2},
                                            {SpanKind::kClient, 3},
                                            {SpanKind::kProducer, 4},
                                            {SpanKind::kConsumer, 5}};
  for (auto [kind, number] : kinds) {
    s.kind = kind;
    EXPECT_EQ(only_span(parse(otlp({&s}))).at("kind"), number);
  }
  const std::pair<StatusCode, int> codes[] = {
      {StatusCode::kUnset, 0}, {StatusCode::kOk, 1}, {StatusCode::kError, 2}};
  for (auto [code, number] : codes) {
    s.status_code = code;
    EXPECT_EQ(only_span(parse(otlp({&s}))).at("status"), Json({{"code", number}}));
  }
}

TEST(OtlpJson, EveryAttributeType) {
  SpanData s = full_span();
  const Json attributes = only_span(parse(otlp({&s}))).at("attributes");
  auto value = [&](const char* key) { return otlp_attribute(attributes, key); };
  EXPECT_EQ(value("flag"), Json::parse(R"({"boolValue":true})"));
  EXPECT_EQ(value("off"), Json::parse(R"({"boolValue":false})"));
  EXPECT_EQ(value("iteration"), Json::parse(R"({"intValue":"42"})"));
  EXPECT_EQ(value("max"), Json::parse(R"({"intValue":"9223372036854775807"})"));
  EXPECT_EQ(value("min"), Json::parse(R"({"intValue":"-9223372036854775808"})"));
  EXPECT_EQ(value("loss").at("doubleValue").get<double>(), 0.5);
  EXPECT_TRUE(value("whole").at("doubleValue").is_number_float()) << "2.0 stays a double";
  EXPECT_EQ(value("whole").at("doubleValue").get<double>(), 2.0);
  EXPECT_EQ(value("tiny").at("doubleValue").get<double>(), 5e-324);
  EXPECT_EQ(value("huge").at("doubleValue").get<double>(), 1.7976931348623157e308);
  EXPECT_EQ(value("tenth").at("doubleValue").get<double>(), 0.1);
  EXPECT_TRUE(std::signbit(value("negative_zero").at("doubleValue").get<double>()));
  EXPECT_EQ(value("nan"), Json::parse(R"({"doubleValue":"NaN"})"));
  EXPECT_EQ(value("inf"), Json::parse(R"({"doubleValue":"Infinity"})"));
  EXPECT_EQ(value("ninf"), Json::parse(R"({"doubleValue":"-Infinity"})"));
  EXPECT_EQ(value("model"), Json::parse(R"({"stringValue":"llama"})"));
  EXPECT_EQ(value("bools"), Json::parse(R"({"arrayValue":{"values":[
      {"boolValue":true},{"boolValue":false},{"boolValue":true}]}})"));
  EXPECT_EQ(value("layers"), Json::parse(R"({"arrayValue":{"values":[
      {"intValue":"0"},{"intValue":"-1"},{"intValue":"9007199254740993"}]}})"));
  const Json lrs = value("lrs").at("arrayValue").at("values");
  ASSERT_EQ(lrs.size(), 3u);
  EXPECT_EQ(lrs[0].at("doubleValue").get<double>(), 0.25);
  EXPECT_EQ(lrs[1].at("doubleValue").get<double>(), 3.0);
  EXPECT_EQ(lrs[2], Json::parse(R"({"doubleValue":"NaN"})"));
  EXPECT_EQ(value("names"), Json::parse(R"({"arrayValue":{"values":[
      {"stringValue":"a"},{"stringValue":"b\"c"},{"stringValue":""}]}})"));
  EXPECT_EQ(value("empty"), Json::parse(R"({"arrayValue":{"values":[]}})"));
}

TEST(OtlpJson, DoublesRoundTripExactly) {
  const double values[] = {1.0 / 3,
                           2.0 / 3,
                           1e-7,
                           123456789.123456789,
                           6.02214076e23,
                           -4.9406564584124654e-324,
                           2.2250738585072014e-308,
                           1e21,
                           1e22,
                           9007199254740993.0,
                           0.30000000000000004};
  for (double v : values) {
    SpanData s = minimal_span();
    s.attributes = {{"v", v}};
    const Json a = only_span(parse(otlp({&s}))).at("attributes");
    EXPECT_EQ(otlp_attribute(a, "v").at("doubleValue").get<double>(), v) << v;
  }
}

TEST(OtlpJson, EventsAndLinks) {
  SpanData s = full_span();
  Json span = only_span(parse(otlp({&s})));
  ASSERT_EQ(span.at("events").size(), 2u);
  EXPECT_EQ(span["events"][0], Json::parse(R"({"timeUnixNano":"1700000000500000000",
      "name":"checkpoint", "attributes":[{"key":"path","value":{"stringValue":"/ckpt"}}],
      "droppedAttributesCount":1})"));
  EXPECT_EQ(span["events"][1], Json::parse(R"({"timeUnixNano":"1700000000600000000",
      "name":"plain", "attributes":[]})"));
  ASSERT_EQ(span.at("links").size(), 1u);
  EXPECT_EQ(span["links"][0],
            Json::parse(std::string(R"({"traceId":")") + kLinkTraceHex + R"(","spanId":")" +
                        kLinkSpanHex + R"(","traceState":"k=v","flags":769,
      "attributes":[{"key":"reason","value":{"stringValue":"batch"}}],
      "droppedAttributesCount":2})"));
}

TEST(OtlpJson, DefaultsAreLeftOut) {
  SpanData s = minimal_span();
  Json span = only_span(parse(otlp({&s})));
  for (const char* key : {"parentSpanId", "traceState", "droppedAttributesCount", "events",
                          "droppedEventsCount", "links", "droppedLinksCount"}) {
    EXPECT_FALSE(span.contains(key)) << key;
  }
  EXPECT_EQ(span.at("status"), Json::parse(R"({"code":0})"));
  EXPECT_EQ(span.at("attributes"), Json::array()) << "no group, no thread id";
  EXPECT_EQ(span.at("kind"), 1);
  EXPECT_EQ(span.at("startTimeUnixNano"), "10");

  // A link without trace state.
  SpanLink link;
  link.context.trace_id = trace_id(kLinkTraceHex);
  link.context.span_id = span_id(kLinkSpanHex);
  s.links = {link};
  span = only_span(parse(otlp({&s})));
  EXPECT_FALSE(span.at("links")[0].contains("traceState"));
  EXPECT_FALSE(span.at("links")[0].contains("droppedAttributesCount"));
  EXPECT_EQ(span.at("links")[0].at("flags"), 0x100);
}

TEST(OtlpJson, GroupAndThreadIdBecomeAttributes) {
  SpanData s = minimal_span();
  s.group = "STEP";
  s.thread_id = 123456;
  s.attributes = {{"iteration", std::int64_t{1}}};
  Json attributes = only_span(parse(otlp({&s}))).at("attributes");
  ASSERT_EQ(attributes.size(), 3u);
  EXPECT_EQ(attributes[0].at("key"), "iteration") << "the span's own attributes come first";
  EXPECT_EQ(otlp_attribute(attributes, "nemo.span.group"),
            Json::parse(R"({"stringValue":"STEP"})"));
  EXPECT_EQ(otlp_attribute(attributes, "thread.id"), Json::parse(R"({"intValue":"123456"})"));

  // An attribute of the span with the same key wins; keys stay unique.
  s.attributes = {{"thread.id", std::int64_t{7}}, {"nemo.span.group", std::string("mine")}};
  attributes = only_span(parse(otlp({&s}))).at("attributes");
  ASSERT_EQ(attributes.size(), 2u);
  EXPECT_EQ(otlp_attribute(attributes, "thread.id"), Json::parse(R"({"intValue":"7"})"));
  EXPECT_EQ(otlp_attribute(attributes, "nemo.span.group"),
            Json::parse(R"({"stringValue":"mine"})"));
}

TEST(OtlpJson, StringsAreEscaped) {
  SpanData s = minimal_span();
  std::string all_controls;
  for (char c = 0x01; c < 0x20; ++c) all_controls.push_back(c);
  all_controls.push_back('\0');
  s.name = std::string("quote\" backslash\\ slash/ tab\t nl\n cr\r bell\a del\x7f nul") + '\0';
  s.status_message = "日本語 é 🚀";
  s.attributes = {{"controls", all_controls}, {"key\"\n", std::string("v")}};
  const std::string text = otlp({&s});
  EXPECT_EQ(text.find('\n'), std::string::npos);
  EXPECT_NE(text.find(R"(tab\t nl\n cr\r bell\u0007)"), std::string::npos) << text;
  EXPECT_NE(text.find(R"(nul\u0000")"), std::string::npos) << text;
  const Json span = only_span(parse(text));
  EXPECT_EQ(span.at("name").get<std::string>(), s.name);
  EXPECT_EQ(span.at("status").at("message"), "日本語 é 🚀");
  EXPECT_EQ(otlp_attribute(span.at("attributes"), "controls").at("stringValue"), all_controls);
  EXPECT_EQ(otlp_attribute(span.at("attributes"), "key\"\n"),
            Json::parse(R"({"stringValue":"v"})"));
  for (unsigned char c : text) EXPECT_GE(c, 0x20) << "raw control character in the output";
}

TEST(OtlpJson, InvalidUtf8BecomesReplacementCharacters) {
  const std::string r = "\xEF\xBF\xBD";  // U+FFFD
  const std::pair<std::string, std::string> cases[] = {
      {"a\xFFz", "a" + r + "z"},                 // never valid
      {"\x80", r},                               // lone continuation byte
      {"\xC0\xAF", r + r},                       // overlong '/'
      {"\xE0\x80\xAF", r + r + r},               // overlong 3-byte form
      {"\xED\xA0\x80", r + r + r},               // surrogate U+D800
      {"\xF4\x90\x80\x80", r + r + r + r},       // above U+10FFFF
      {"x\xE6\x97", "x" + r},                    // truncated at the end
      {"\xF0\x9F\x98x", r + "x"},                // truncated 4-byte form, one U+FFFD
      {"\xE6\x97\xA5\xE6", "\xE6\x97\xA5" + r},  // valid then truncated
      {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},  // U+10FFFF is valid
      {"\xEF\xBF\xBD", r},                       // U+FFFD itself
  };
  for (const auto& [input, expected] : cases) {
    SpanData s = minimal_span();
    s.name = input;
    s.attributes = {{input, input}};
    const std::string text = otlp({&s});
    const Json span = only_span(parse(text));  // parse() fails on invalid UTF-8
    EXPECT_EQ(span.at("name").get<std::string>(), expected);
    EXPECT_EQ(span.at("attributes")[0].at("key").get<std::string>(), expected);
    EXPECT_EQ(span.at("attributes")[0].at("value").at("stringValue").get<std::string>(), expected);
  }
}

TEST(OtlpJson, BatchesAppendAndSkipNulls) {
  SpanData a = full_span();
  SpanData b = minimal_span();
  std::string out = "prefix ";
  append_otlp_json(out, std::vector<const SpanData*>{&a, nullptr, &b}, test_resource());
  ASSERT_EQ(out.rfind("prefix ", 0), 0u) << "appends";
  const Json spans = parse(out.substr(7)).at("resourceSpans")[0].at("scopeSpans")[0].at("spans");
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].at("name"), "train_step");
  EXPECT_EQ(spans[1].at("name"), "minimal");

  const Json empty = parse(otlp({}));
  EXPECT_EQ(empty.at("resourceSpans")[0].at("scopeSpans")[0].at("spans"), Json::array());
  EXPECT_EQ(empty.at("resourceSpans")[0].at("resource").at("attributes"), Json::array());
}

TEST(OtlpJson, NegativeTimesAreClampedToZero) {
  SpanData s = minimal_span();
  s.start_time_unix_nano = -5;
  EXPECT_EQ(only_span(parse(otlp({&s}))).at("startTimeUnixNano"), "0");
}

// ---- Console ----

// Runs a console export into a temporary stream and returns what it wrote.
std::string console_output(const std::vector<const SpanData*>& spans, const Resource& resource,
                           ExportResult* result = nullptr) {
  std::FILE* f = std::tmpfile();
  EXPECT_NE(f, nullptr);
  ConsoleSpanExporter exporter(f);
  ExportResult r = exporter.export_spans(spans, resource, kNoDeadline);
  if (result != nullptr) *result = r;
  EXPECT_TRUE(exporter.force_flush(kNoDeadline));
  std::rewind(f);
  std::string text;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, n);
  std::fclose(f);
  return text;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(ConsoleExporter, OneObjectPerSpanPerLine) {
  SpanData a = full_span();
  SpanData b = minimal_span();
  ExportResult result = ExportResult::kFailure;
  const std::string text = console_output({&a, nullptr, &b}, test_resource(), &result);
  EXPECT_EQ(result, ExportResult::kSuccess);
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  const auto lines = lines_of(text);
  ASSERT_EQ(lines.size(), 2u);

  const Json full = parse(lines[0]);
  EXPECT_EQ(full.at("name"), "train_step");
  EXPECT_EQ(full.at("group"), "STEP");
  EXPECT_EQ(full.at("trace_id"), kTraceHex);
  EXPECT_EQ(full.at("span_id"), kSpanHex);
  EXPECT_EQ(full.at("parent_span_id"), kParentHex);
  EXPECT_EQ(full.at("kind"), "client");
  EXPECT_EQ(full.at("start_unix_nano"), 1'700'000'000'123'456'789);
  EXPECT_EQ(full.at("end_unix_nano"), 1'700'000'001'000'000'000);
  EXPECT_EQ(full.at("duration_ns"), 876'543'211);
  EXPECT_EQ(full.at("status"), Json::parse(R"({"code":"error","message":"CUDA out of memory"})"));
  EXPECT_EQ(full.at("dropped_attributes_count"), 3);
  EXPECT_EQ(full.at("dropped_events_count"), 4);
  EXPECT_EQ(full.at("dropped_links_count"), 5);
  EXPECT_EQ(full.at("thread_id"), 4711);
  EXPECT_FALSE(full.contains("truncated"));
  EXPECT_EQ(full.at("resource"), Json::parse(R"({"service.name":"trainer",
      "service.instance.id":"job-7/rank-3","dl.rank":3})"));

  const Json& attributes = full.at("attributes");
  EXPECT_EQ(attributes.size(), a.attributes.size());
  EXPECT_EQ(attributes.at("flag"), true);
  EXPECT_EQ(attributes.at("iteration"), 42);
  EXPECT_EQ(attributes.at("max"), std::numeric_limits<std::int64_t>::max());
  EXPECT_EQ(attributes.at("min"), std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(attributes.at("loss"), 0.5);
  EXPECT_TRUE(attributes.at("whole").is_number_float());
  EXPECT_EQ(attributes.at("nan"), "NaN");
  EXPECT_EQ(attributes.at("inf"), "Infinity");
  EXPECT_EQ(attributes.at("ninf"), "-Infinity");
  EXPECT_EQ(attributes.at("model"), "llama");
  EXPECT_EQ(attributes.at("bools"), Json::parse("[true,false,true]"));
  EXPECT_EQ(attributes.at("layers"), Json::parse("[0,-1,9007199254740993]"));
  EXPECT_EQ(attributes.at("lrs"), Json::parse(R"([0.25,3.0,"NaN"])"));
  EXPECT_EQ(attributes.at("names"), Json::parse(R"(["a","b\"c",""])"));
  EXPECT_EQ(attributes.at("empty"), Json::array());

  ASSERT_EQ(full.at("events").size(), 2u);
  EXPECT_EQ(full["events"][0], Json::parse(R"({"name":"checkpoint",
      "time_unix_nano":1700000000500000000,"attributes":{"path":"/ckpt"},
      "dropped_attributes_count":1})"));
  EXPECT_EQ(full["events"][1], Json::parse(R"({"name":"plain",
      "time_unix_nano":1700000000600000000,"attributes":{}})"));
  ASSERT_EQ(full.at("links").size(), 1u);
  EXPECT_EQ(full["links"][0],
            Json::parse(std::string(R"({"trace_id":")") + kLinkTraceHex + R"(","span_id":")" +
                        kLinkSpanHex + R"(","trace_state":"k=v",
      "attributes":{"reason":"batch"},"dropped_attributes_count":2})"));

  const Json minimal = parse(lines[1]);
  EXPECT_EQ(minimal.at("kind"), "internal");
  EXPECT_EQ(minimal.at("group"), "");
  EXPECT_EQ(minimal.at("duration_ns"), 15);
  EXPECT_EQ(minimal.at("status"), Json::parse(R"({"code":"unset"})"));
  EXPECT_EQ(minimal.at("attributes"), Json::object());
  for (const char* key : {"parent_span_id", "events", "links", "dropped_attributes_count",
                          "dropped_events_count", "dropped_links_count", "truncated"}) {
    EXPECT_FALSE(minimal.contains(key)) << key;
  }
}

TEST(ConsoleExporter, KindsStatusesTruncationAndSmallResource) {
  SpanData s = minimal_span();
  s.truncated = true;
  s.status_code = StatusCode::kOk;
  s.kind = SpanKind::kConsumer;
  Resource r;
  r.attributes = {{"host.name", std::string("n1")}, {"service.name", std::string("svc")}};
  const Json line = parse(console_output({&s}, r));
  EXPECT_EQ(line.at("truncated"), true);
  EXPECT_EQ(line.at("status"), Json::parse(R"({"code":"ok"})"));
  EXPECT_EQ(line.at("kind"), "consumer");
  EXPECT_EQ(line.at("resource"), Json::parse(R"({"service.name":"svc"})"));
  const std::pair<SpanKind, const char*> kinds[] = {{SpanKind::kServer, "server"},
                                                    {SpanKind::kProducer, "producer"}};
  for (auto [kind, name] : kinds) {
    s.kind = kind;
    EXPECT_EQ(parse(console_output({&s}, {})).at("kind"), name);
  }
  EXPECT_EQ(parse(console_output({&s}, {})).at("resource"), Json::object());
}

TEST(ConsoleExporter, InvalidUtf8AndControlsStayValidJson) {
  SpanData s = minimal_span();
  s.name = "bad\xFF\n";
  s.group = "g\x01";
  const auto lines = lines_of(console_output({&s}, {}));
  ASSERT_EQ(lines.size(), 1u);
  const Json line = parse(lines[0]);
  EXPECT_EQ(line.at("name"), "bad\xEF\xBF\xBD\n");
  EXPECT_EQ(line.at("group"), "g\x01");
}

TEST(ConsoleExporter, EmptyBatchWritesNothing) {
  ExportResult result = ExportResult::kFailure;
  EXPECT_EQ(console_output({}, test_resource(), &result), "");
  EXPECT_EQ(result, ExportResult::kSuccess);
}

TEST(ConsoleExporter, WriteErrorIsAFailure) {
  std::FILE* full = std::fopen("/dev/full", "w");
  if (full == nullptr) GTEST_SKIP() << "no /dev/full";
  ConsoleSpanExporter exporter(full);
  SpanData s = minimal_span();
  const SpanData* batch[] = {&s};
  EXPECT_EQ(exporter.export_spans(batch, {}, kNoDeadline), ExportResult::kFailure);
  EXPECT_EQ(exporter.export_spans(batch, {}, kNoDeadline), ExportResult::kFailure)
      << "fails again, not stuck";
  std::fclose(full);

  ConsoleSpanExporter null_stream(nullptr);
  EXPECT_EQ(null_stream.export_spans(batch, {}, kNoDeadline), ExportResult::kFailure);
}

// ---- File ----

class FileExporter : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (std::filesystem::temp_directory_path() / "lens-export-test-XXXXXX");
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  static std::vector<std::string> read_lines(const std::filesystem::path& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    EXPECT_TRUE(text.empty() || text.back() == '\n') << "ends with a newline";
    return lines_of(text);
  }

  std::filesystem::path dir_;
};

TEST_F(FileExporter, OneOtlpLinePerBatch) {
  const auto path = dir_ / "trace.jsonl";
  FileSpanExporter exporter(path.string());
  EXPECT_EQ(exporter.path(), path.string());
  SpanData a = full_span();
  SpanData b = minimal_span();
  SpanData c = minimal_span();
  c.name = "third";
  const SpanData* first[] = {&a, &b};
  const SpanData* second[] = {&c};
  EXPECT_EQ(exporter.export_spans(first, test_resource(), kNoDeadline), ExportResult::kSuccess);
  EXPECT_EQ(exporter.export_spans({}, test_resource(), kNoDeadline), ExportResult::kSuccess);
  EXPECT_EQ(exporter.export_spans(second, test_resource(), kNoDeadline), ExportResult::kSuccess);
  EXPECT_TRUE(exporter.force_flush(kNoDeadline));

  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 2u) << "an empty batch writes nothing";
  const Json one = parse(lines[0]);
  const Json two = parse(lines[1]);
  const Json& spans1 = one.at("resourceSpans")[0].at("scopeSpans")[0].at("spans");
  ASSERT_EQ(spans1.size(), 2u);
  EXPECT_EQ(spans1[0].at("name"), "train_step");
  EXPECT_EQ(spans1[0].at("traceId"), kTraceHex);
  EXPECT_EQ(spans1[0].at("events").size(), 2u);
  EXPECT_EQ(spans1[1].at("name"), "minimal");
  EXPECT_EQ(
      otlp_attribute(one.at("resourceSpans")[0].at("resource").at("attributes"), "service.name"),
      Json::parse(R"({"stringValue":"trainer"})"));
  const Json& spans2 = two.at("resourceSpans")[0].at("scopeSpans")[0].at("spans");
  ASSERT_EQ(spans2.size(), 1u);
  EXPECT_EQ(spans2[0].at("name"), "third");

  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  const mode_t mask = ::umask(0);
  ::umask(mask);
  EXPECT_EQ(st.st_mode & 0777, 0644 & ~mask);

  exporter.shutdown(kNoDeadline);
  EXPECT_EQ(exporter.export_spans(second, {}, kNoDeadline), ExportResult::kFailure);
  EXPECT_FALSE(exporter.force_flush(kNoDeadline));
  exporter.shutdown(kNoDeadline);  // twice is harmless
}

TEST_F(FileExporter, AppendsToAnExistingFile) {
  const auto path = dir_ / "existing.jsonl";
  { std::ofstream(path) << "{\"earlier\":true}\n"; }
  SpanData s = minimal_span();
  const SpanData* batch[] = {&s};
  {
    FileSpanExporter exporter(path.string());
    EXPECT_EQ(exporter.export_spans(batch, {}, kNoDeadline), ExportResult::kSuccess);
  }  // the destructor closes
  {
    FileSpanExporter again(path.string());  // a second process or a restart
    EXPECT_EQ(again.export_spans(batch, {}, kNoDeadline), ExportResult::kSuccess);
  }
  const auto lines = read_lines(path);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(parse(lines[0]), Json::parse(R"({"earlier":true})"));
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(only_span(parse(lines[i])).at("name"), "minimal");
  }
}

TEST_F(FileExporter, UnopenablePathIsAConfigError) {
  const std::string missing_dir = (dir_ / "no-such-dir" / "t.jsonl").string();
  std::string message = error_of([&] { FileSpanExporter e(missing_dir); });
  EXPECT_EQ(message, "Cannot open the trace file '" + missing_dir + "': No such file or directory");
  message = error_of([&] { FileSpanExporter e(missing_dir, "X_EXPORT_PATH"); });
  EXPECT_EQ(message, "Cannot open the trace file '" + missing_dir +
                         "' (from X_EXPORT_PATH): No such file or directory");
  message = error_of([&] { FileSpanExporter e(dir_.string()); });
  EXPECT_NE(message.find("Cannot open the trace file '" + dir_.string() + "'"), std::string::npos)
      << message;
  EXPECT_NE(message.find("Is a directory"), std::string::npos) << message;
}

TEST_F(FileExporter, WriteErrorIsAFailure) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "no /dev/full";
  FileSpanExporter exporter("/dev/full");
  SpanData s = minimal_span();
  const SpanData* batch[] = {&s};
  EXPECT_EQ(exporter.export_spans(batch, {}, kNoDeadline), ExportResult::kFailure);
}

TEST(ExportPath, DefaultAndRankReplacement) {
  ScopedEnv env;
  NemoLensConfig config;
  EXPECT_EQ(detail::export_path(config, 3), "lens-traces-rank3.jsonl");
  EXPECT_EQ(detail::export_path_origin(config), "the default of NEMO_LENS_EXPORT_PATH");

  env.set("NEMO_LENS_EXPORT_PATH", "  /data/{rank}/trace-{rank}{rank}.jsonl ");
  EXPECT_EQ(detail::export_path(config, 12), "/data/12/trace-1212.jsonl");
  EXPECT_EQ(detail::export_path_origin(config), "NEMO_LENS_EXPORT_PATH");
  env.set("NEMO_LENS_EXPORT_PATH", "/data/fixed.jsonl");
  EXPECT_EQ(detail::export_path(config, 0), "/data/fixed.jsonl");
  env.set("NEMO_LENS_EXPORT_PATH", "{rank");
  EXPECT_EQ(detail::export_path(config, 0), "{rank");
  env.set("NEMO_LENS_EXPORT_PATH", "   ");
  EXPECT_EQ(detail::export_path(config, 5), "lens-traces-rank5.jsonl") << "blank is unset";
}

TEST(ExportPath, FallbackPrefix) {
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_PATH", "/fallback/r{rank}.jsonl");
  NemoLensConfig config = NemoLensConfig::from_env("MEGATRON_OTEL", "NEMO_LENS");
  EXPECT_EQ(detail::export_path(config, 1), "/fallback/r1.jsonl");
  EXPECT_EQ(detail::export_path_origin(config), "NEMO_LENS_EXPORT_PATH");
  env.set("MEGATRON_OTEL_EXPORT_PATH", "/primary/r{rank}.jsonl");
  EXPECT_EQ(detail::export_path(config, 1), "/primary/r1.jsonl");
  EXPECT_EQ(detail::export_path_origin(config), "MEGATRON_OTEL_EXPORT_PATH");
}

// ---- make_exporter ----

TEST(MakeExporter, ConsoleAndFile) {
  ScopedEnv env;
  NemoLensConfig config;
  for (const char* value : {"console", " Console\t", "CONSOLE"}) {
    config.exporter = value;
    auto exporter = detail::make_exporter(config, 0);
    EXPECT_NE(dynamic_cast<ConsoleSpanExporter*>(exporter.get()), nullptr) << value;
  }

  std::string tmpl = (std::filesystem::temp_directory_path() / "lens-factory-test-XXXXXX");
  ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
  env.set("NEMO_LENS_EXPORT_PATH", tmpl + "/rank-{rank}.jsonl");
  config.exporter = " File ";
  auto exporter = detail::make_exporter(config, 7);
  auto* file = dynamic_cast<FileSpanExporter*>(exporter.get());
  ASSERT_NE(file, nullptr);
  EXPECT_EQ(file->path(), tmpl + "/rank-7.jsonl");
  EXPECT_TRUE(std::filesystem::exists(tmpl + "/rank-7.jsonl"));
  exporter.reset();
  std::filesystem::remove_all(tmpl);
}

TEST(MakeExporter, UnopenableFileNamesTheVariable) {
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORTER", "file");
  env.set("NEMO_LENS_EXPORT_PATH", "/nonexistent-lens-dir/rank{rank}.jsonl");
  const NemoLensConfig config = NemoLensConfig::from_env();
  EXPECT_EQ(error_of([&] { detail::make_exporter(config, 2); }),
            "Cannot open the trace file '/nonexistent-lens-dir/rank2.jsonl' (from "
            "NEMO_LENS_EXPORT_PATH): No such file or directory");
}

TEST(MakeExporter, OtlpTakesItsSettingsFromTheStandardVariables) {
  ScopedEnv env;
  NemoLensConfig config;  // the default exporter is "otlp"
  auto exporter = detail::make_exporter(config, 0);
  EXPECT_NE(dynamic_cast<detail::OtlpSpanExporter*>(exporter.get()), nullptr);

  env.set("NEMO_LENS_EXPORTER", " OTLP ");
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/xml");
  config = NemoLensConfig::from_env();
  EXPECT_EQ(error_of([&] { detail::make_exporter(config, 0); }),
            "Invalid value for OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/xml'. Valid protocols: "
            "['grpc', 'http/json', 'http/protobuf'].");
}

TEST(MakeExporter, UnknownExporterNamesVariableValueAndChoices) {
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORTER", "zipkin");
  NemoLensConfig config = NemoLensConfig::from_env();
  EXPECT_EQ(error_of([&] { detail::make_exporter(config, 0); }),
            "Invalid value for NEMO_LENS_EXPORTER: 'zipkin': Unknown exporter type. Valid "
            "exporters: ['console', "
            "'file', 'otlp'].");

  config.exporter = "jaeger";  // changed in code after reading the environment
  EXPECT_EQ(error_of([&] { detail::make_exporter(config, 0); }),
            "Invalid value for NemoLensConfig::exporter: 'jaeger': Unknown exporter type. Valid "
            "exporters: ['console', "
            "'file', 'otlp'].");
  config.exporter = "";
  EXPECT_NE(error_of([&] {
              detail::make_exporter(config, 0);
            }).find("Invalid value for NemoLensConfig::exporter: ''"),
            std::string::npos);
}

// ---- InMemorySpanExporter and the interface's defaults ----

TEST(InMemoryExporter, KeepsCopiesInOrder) {
  InMemorySpanExporter memory;
  EXPECT_EQ(memory.export_calls(), 0u);
  EXPECT_TRUE(memory.spans().empty());
  SpanData a = full_span();
  SpanData b = minimal_span();
  const SpanData* first[] = {&a, nullptr};
  const SpanData* second[] = {&b};
  Resource r1 = test_resource();
  Resource r2;
  r2.attributes = {{"service.name", std::string("other")}};
  EXPECT_EQ(memory.export_spans(first, r1, kNoDeadline), ExportResult::kSuccess);
  a.name = "changed after export";
  EXPECT_EQ(memory.export_spans(second, r2, kNoDeadline), ExportResult::kSuccess);
  EXPECT_EQ(memory.export_spans({}, r2, kNoDeadline), ExportResult::kSuccess);

  const auto spans = memory.spans();
  ASSERT_EQ(spans.size(), 2u);
  EXPECT_EQ(spans[0].name, "train_step") << "a copy";
  EXPECT_EQ(spans[0].attributes.size(), full_span().attributes.size());
  EXPECT_EQ(spans[0].events.size(), 2u);
  EXPECT_EQ(spans[1].name, "minimal");
  EXPECT_EQ(memory.export_calls(), 3u);
  EXPECT_EQ(memory.resource().attributes, r2.attributes);

  memory.clear();
  EXPECT_TRUE(memory.spans().empty());
  EXPECT_EQ(memory.export_calls(), 3u) << "clear() forgets spans, not the call count";
  EXPECT_TRUE(memory.force_flush(kNoDeadline));
  memory.shutdown(kNoDeadline);
}

TEST(InMemoryExporter, ReadableWhileExporting) {
  InMemorySpanExporter memory;
  SpanData s = minimal_span();
  const SpanData* batch[] = {&s, &s};
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::size_t last = 0;
    while (!done.load()) {
      const std::size_t n = memory.spans().size();
      EXPECT_GE(n, last);
      EXPECT_EQ(n % 2, 0u) << "batches are added whole";
      last = n;
    }
  });
  for (int i = 0; i < 500; ++i) memory.export_spans(batch, {}, kNoDeadline);
  done = true;
  reader.join();
  EXPECT_EQ(memory.spans().size(), 1000u);
  EXPECT_EQ(memory.export_calls(), 500u);
}

TEST(InMemoryExporter, AttributeLookup) {
  SpanData s = full_span();
  ASSERT_NE(s.attribute("iteration"), nullptr);
  EXPECT_EQ(std::get<std::int64_t>(*s.attribute("iteration")), 42);
  EXPECT_EQ(s.attribute("missing"), nullptr);
  Resource r = test_resource();
  ASSERT_NE(r.attribute("service.name"), nullptr);
  EXPECT_EQ(std::get<std::string>(*r.attribute("service.name")), "trainer");
  EXPECT_EQ(Resource{}.attribute("service.name"), nullptr);
}

TEST(InMemoryExporter, InterfaceDefaults) {
  struct Minimal : SpanExporter {
    ExportResult export_spans(std::span<const SpanData* const>, const Resource&,
                              std::chrono::steady_clock::time_point) noexcept override {
      return ExportResult::kSuccess;
    }
  };
  std::unique_ptr<SpanExporter> e = std::make_unique<Minimal>();
  EXPECT_TRUE(e->force_flush(kNoDeadline));
  e->shutdown(kNoDeadline);
}

}  // namespace
}  // namespace nemo::lens
