// `lens collect`'s transcoding (tools/lens/common/otlp_transcode.hpp) of spans, metrics and logs:
// requests are built and encoded with libprotobuf's classes generated from tests/proto, the JSON
// produced is read back with nlohmann/json, and compared with libprotobuf's own JSON printer and
// with the library's OTLP/JSON writers.
#include "common/otlp_transcode.hpp"

#include <gmock/gmock.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "export/exporters.hpp"
#include "export/otlp_signals.hpp"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace {

namespace pb_common = opentelemetry::proto::common::v1;
namespace pb_trace = opentelemetry::proto::trace::v1;
using Request = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using Json = nlohmann::json;
using lens_cli::json_to_json;
using lens_cli::protobuf_to_json;
using lens_cli::TranscodeResult;
using ::testing::HasSubstr;

constexpr char kTraceHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanHex[] = "00f067aa0ba902b7";
constexpr char kParentHex[] = "b7ad6b7169203331";
constexpr char kLinkTraceHex[] = "0af7651916cd43dd8448eb211c80319c";
constexpr char kLinkSpanHex[] = "53995c3f42cd8ad8";

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

std::string to_hex(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto b = static_cast<unsigned char>(c);
    out.push_back(kHex[b >> 4]);
    out.push_back(kHex[b & 0xF]);
  }
  return out;
}

// Standard base64 (RFC 4648 with padding), written here independently of the transcoder.
std::string base64_decode(std::string_view text) {
  static constexpr std::string_view kAlphabet =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : text) {
    if (c == '=') break;
    acc = (acc << 6) | static_cast<std::uint32_t>(kAlphabet.find(c));
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((acc >> bits) & 0xFF));
    }
  }
  return out;
}

std::string base64_encode(std::string_view bytes) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::uint32_t acc = 0;
  int bits = 0;
  for (const char c : bytes) {
    acc = (acc << 8) | static_cast<unsigned char>(c);
    bits += 8;
    while (bits >= 6) {
      bits -= 6;
      out.push_back(kAlphabet[(acc >> bits) & 63]);
    }
  }
  if (bits > 0) out.push_back(kAlphabet[(acc << (6 - bits)) & 63]);
  while (out.size() % 4 != 0) out.push_back('=');
  return out;
}

// A protobuf writer for hand-made byte sequences (fields out of order, repeated, unknown, broken).
struct Bytes {
  std::string s;

  Bytes& varint(std::uint64_t v) {
    while (v >= 0x80) {
      s.push_back(static_cast<char>((v & 0x7F) | 0x80));
      v >>= 7;
    }
    s.push_back(static_cast<char>(v));
    return *this;
  }
  Bytes& tag(std::uint32_t number, std::uint32_t wire) { return varint((number << 3) | wire); }
  Bytes& uint(std::uint32_t number, std::uint64_t v) { return tag(number, 0).varint(v); }
  Bytes& len(std::uint32_t number, std::string_view payload) {
    tag(number, 2).varint(payload.size());
    s.append(payload);
    return *this;
  }
  Bytes& fixed64(std::uint32_t number, std::uint64_t v) {
    tag(number, 1);
    for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  Bytes& fixed32(std::uint32_t number, std::uint32_t v) {
    tag(number, 5);
    for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    return *this;
  }
  Bytes& raw(std::string_view b) {
    s.append(b);
    return *this;
  }
};

// A request of one resource group, one scope group and the given span bytes.
std::string request_with_span(const std::string& span) {
  const std::string scope_spans = Bytes().len(2, span).s;
  const std::string resource_spans = Bytes().len(2, scope_spans).s;
  return Bytes().len(1, resource_spans).s;
}

void set_kv(pb_common::KeyValue* kv, const std::string& key, const std::string& value) {
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

// A span with every field set.
void fill_full_span(pb_trace::Span* s) {
  s->set_trace_id(from_hex(kTraceHex));
  s->set_span_id(from_hex(kSpanHex));
  s->set_trace_state("vendor=a,other=b");
  s->set_parent_span_id(from_hex(kParentHex));
  s->set_flags(0x301);
  s->set_name("train_step");
  s->set_kind(pb_trace::Span::SPAN_KIND_CLIENT);
  s->set_start_time_unix_nano(1'700'000'000'123'456'789ULL);
  s->set_end_time_unix_nano(18'446'744'073'709'551'615ULL);  // fixed64's maximum
  set_kv(s->add_attributes(), "model", "llama");
  auto* it = s->add_attributes();
  it->set_key("iteration");
  it->mutable_value()->set_int_value(42);
  s->set_dropped_attributes_count(3);
  auto* e = s->add_events();
  e->set_time_unix_nano(1'700'000'000'500'000'000ULL);
  e->set_name("checkpoint");
  set_kv(e->add_attributes(), "path", "/ckpt");
  e->set_dropped_attributes_count(1);
  auto* plain = s->add_events();
  plain->set_name("plain");
  s->set_dropped_events_count(4);
  auto* l = s->add_links();
  l->set_trace_id(from_hex(kLinkTraceHex));
  l->set_span_id(from_hex(kLinkSpanHex));
  l->set_trace_state("k=v");
  set_kv(l->add_attributes(), "reason", "batch");
  l->set_dropped_attributes_count(2);
  l->set_flags(0x301);
  s->set_dropped_links_count(5);
  s->mutable_status()->set_code(pb_trace::Status::STATUS_CODE_ERROR);
  s->mutable_status()->set_message("CUDA out of memory");
}

// Attributes of every AnyValue kind, nested ones included.
void fill_any_values(pb_trace::Span* s) {
  auto add = [&](const std::string& key) {
    auto* kv = s->add_attributes();
    kv->set_key(key);
    return kv->mutable_value();
  };
  add("str")->set_string_value("héllo \"q\"\n");
  add("empty_str")->set_string_value("");
  add("yes")->set_bool_value(true);
  add("no")->set_bool_value(false);
  add("zero")->set_int_value(0);
  add("neg")->set_int_value(-7);
  add("max")->set_int_value(std::numeric_limits<std::int64_t>::max());
  add("min")->set_int_value(std::numeric_limits<std::int64_t>::min());
  add("half")->set_double_value(0.5);
  add("whole")->set_double_value(2.0);
  add("tenth")->set_double_value(0.1);
  add("nan")->set_double_value(std::numeric_limits<double>::quiet_NaN());
  add("inf")->set_double_value(std::numeric_limits<double>::infinity());
  add("ninf")->set_double_value(-std::numeric_limits<double>::infinity());
  add("bytes0")->set_bytes_value("");
  add("bytes1")->set_bytes_value(std::string("\xff", 1));
  add("bytes2")->set_bytes_value(std::string("\x00\x01", 2));
  add("bytes3")->set_bytes_value("abc");
  add("bytes4")->set_bytes_value(std::string("\xfb\xff\xbf\x00", 4));
  auto* arr = add("arr")->mutable_array_value();
  arr->add_values()->set_int_value(1);
  arr->add_values()->set_string_value("two");
  auto* inner = arr->add_values()->mutable_array_value();
  inner->add_values()->set_bool_value(true);
  inner->add_values()->set_double_value(1.5);
  add("empty_arr")->mutable_array_value();
  auto* kvl = add("kvl")->mutable_kvlist_value();
  set_kv(kvl->add_values(), "a", "x");
  auto* nested = kvl->add_values();
  nested->set_key("nested");
  auto* nested_list = nested->mutable_value()->mutable_kvlist_value();
  auto* deep = nested_list->add_values();
  deep->set_key("n");
  deep->mutable_value()->set_int_value(-1);
  add("unset");  // an AnyValue with no member: {}
  s->add_attributes()->set_key("no_value");
}

Request full_request() {
  Request req;
  auto* rs = req.add_resource_spans();
  set_kv(rs->mutable_resource()->add_attributes(), "service.name", "trainer");
  auto* rank = rs->mutable_resource()->add_attributes();
  rank->set_key("dl.rank");
  rank->mutable_value()->set_int_value(3);
  rs->mutable_resource()->set_dropped_attributes_count(6);
  rs->set_schema_url("https://opentelemetry.io/schemas/1.24.0");
  auto* ss = rs->add_scope_spans();
  ss->mutable_scope()->set_name("nemo.lens");
  ss->mutable_scope()->set_version("1.2.3");
  set_kv(ss->mutable_scope()->add_attributes(), "scope.attr", "v");
  ss->mutable_scope()->set_dropped_attributes_count(7);
  ss->set_schema_url("https://opentelemetry.io/schemas/1.21.0");
  fill_full_span(ss->add_spans());
  fill_any_values(ss->add_spans());
  return req;
}

std::string serialize(const Request& req) {
  std::string bytes;
  EXPECT_TRUE(req.SerializeToString(&bytes));
  return bytes;
}

std::string transcode_text(std::string_view bytes) {
  std::string out;
  const TranscodeResult r = protobuf_to_json(bytes, out);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_TRUE(r.error.empty());
  EXPECT_EQ(out.find('\n'), std::string::npos) << "not one line: " << out;
  return out;
}

Json parse(const std::string& text) {
  Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  EXPECT_FALSE(j.is_discarded()) << "not valid JSON: " << text;
  return j;
}

Json transcode(const Request& req) { return parse(transcode_text(serialize(req))); }

const Json& attribute(const Json& attributes, const std::string& key) {
  for (const Json& kv : attributes) {
    if (kv.at("key") == key) return kv;
  }
  static const Json kMissing;
  ADD_FAILURE() << "no attribute " << key << " in " << attributes.dump();
  return kMissing;
}

TranscodeResult transcode_error(std::string_view bytes,
                                lens_cli::Signal signal = lens_cli::Signal::kTraces) {
  std::string out = "kept";
  TranscodeResult r = protobuf_to_json(bytes, out, signal);
  EXPECT_FALSE(r.ok) << "accepted: " << out;
  EXPECT_EQ(out, "kept") << "output left behind on failure";
  EXPECT_EQ(r.spans, 0U);
  return r;
}

// ---- protobuf_to_json: the encoding -------------------------------------------------------

TEST(ProtobufToJson, SpanFieldsFollowTheOtlpJsonEncoding) {
  const Json j = transcode(full_request());
  const Json& span = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(span.at("traceId"), kTraceHex);
  EXPECT_EQ(span.at("spanId"), kSpanHex);
  EXPECT_EQ(span.at("parentSpanId"), kParentHex);
  EXPECT_EQ(span.at("traceState"), "vendor=a,other=b");
  EXPECT_EQ(span.at("flags"), 0x301);
  EXPECT_TRUE(span.at("flags").is_number_unsigned());
  EXPECT_EQ(span.at("name"), "train_step");
  EXPECT_EQ(span.at("kind"), 3);
  EXPECT_EQ(span.at("startTimeUnixNano"), "1700000000123456789");
  EXPECT_EQ(span.at("endTimeUnixNano"), "18446744073709551615");
  EXPECT_EQ(attribute(span.at("attributes"), "model").at("value"),
            Json({{"stringValue", "llama"}}));
  EXPECT_EQ(attribute(span.at("attributes"), "iteration").at("value"), Json({{"intValue", "42"}}));
  EXPECT_EQ(span.at("droppedAttributesCount"), 3);

  ASSERT_EQ(span.at("events").size(), 2U);
  const Json& event = span.at("events").at(0);
  EXPECT_EQ(event.at("timeUnixNano"), "1700000000500000000");
  EXPECT_EQ(event.at("name"), "checkpoint");
  EXPECT_EQ(attribute(event.at("attributes"), "path").at("value").at("stringValue"), "/ckpt");
  EXPECT_EQ(event.at("droppedAttributesCount"), 1);
  EXPECT_EQ(span.at("events").at(1),
            Json::parse(R"({"timeUnixNano":"0","name":"plain","attributes":[]})"));
  EXPECT_EQ(span.at("droppedEventsCount"), 4);

  ASSERT_EQ(span.at("links").size(), 1U);
  const Json& link = span.at("links").at(0);
  EXPECT_EQ(link.at("traceId"), kLinkTraceHex);
  EXPECT_EQ(link.at("spanId"), kLinkSpanHex);
  EXPECT_EQ(link.at("traceState"), "k=v");
  EXPECT_EQ(link.at("flags"), 0x301);
  EXPECT_EQ(attribute(link.at("attributes"), "reason").at("value").at("stringValue"), "batch");
  EXPECT_EQ(link.at("droppedAttributesCount"), 2);
  EXPECT_EQ(span.at("droppedLinksCount"), 5);
  EXPECT_EQ(span.at("status"), Json::parse(R"({"code":2,"message":"CUDA out of memory"})"));
}

TEST(ProtobufToJson, ResourceScopeAndSchemaUrls) {
  const Json j = transcode(full_request());
  const Json& rs = j.at("resourceSpans").at(0);
  EXPECT_EQ(attribute(rs.at("resource").at("attributes"), "service.name").at("value"),
            Json({{"stringValue", "trainer"}}));
  EXPECT_EQ(attribute(rs.at("resource").at("attributes"), "dl.rank").at("value"),
            Json({{"intValue", "3"}}));
  EXPECT_EQ(rs.at("resource").at("droppedAttributesCount"), 6);
  EXPECT_EQ(rs.at("schemaUrl"), "https://opentelemetry.io/schemas/1.24.0");
  const Json& ss = rs.at("scopeSpans").at(0);
  EXPECT_EQ(ss.at("scope").at("name"), "nemo.lens");
  EXPECT_EQ(ss.at("scope").at("version"), "1.2.3");
  EXPECT_EQ(attribute(ss.at("scope").at("attributes"), "scope.attr").at("value").at("stringValue"),
            "v");
  EXPECT_EQ(ss.at("scope").at("droppedAttributesCount"), 7);
  EXPECT_EQ(ss.at("schemaUrl"), "https://opentelemetry.io/schemas/1.21.0");
}

TEST(ProtobufToJson, EveryAnyValueKind) {
  const Json j = transcode(full_request());
  const Json& attrs =
      j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(1).at("attributes");
  auto value = [&](const std::string& key) { return attribute(attrs, key).at("value"); };
  EXPECT_EQ(value("str"), Json({{"stringValue", "héllo \"q\"\n"}}));
  EXPECT_EQ(value("empty_str"), Json({{"stringValue", ""}}));
  EXPECT_EQ(value("yes"), Json({{"boolValue", true}}));
  EXPECT_EQ(value("no"), Json({{"boolValue", false}}));
  EXPECT_EQ(value("zero"), Json({{"intValue", "0"}}));
  EXPECT_EQ(value("neg"), Json({{"intValue", "-7"}}));
  EXPECT_EQ(value("max"), Json({{"intValue", "9223372036854775807"}}));
  EXPECT_EQ(value("min"), Json({{"intValue", "-9223372036854775808"}}));
  EXPECT_EQ(value("half").at("doubleValue").get<double>(), 0.5);
  EXPECT_TRUE(value("whole").at("doubleValue").is_number_float());  // written "2.0"
  EXPECT_EQ(value("whole").at("doubleValue").get<double>(), 2.0);
  EXPECT_EQ(value("tenth").at("doubleValue").get<double>(), 0.1);
  EXPECT_EQ(value("nan"), Json({{"doubleValue", "NaN"}}));
  EXPECT_EQ(value("inf"), Json({{"doubleValue", "Infinity"}}));
  EXPECT_EQ(value("ninf"), Json({{"doubleValue", "-Infinity"}}));
  EXPECT_EQ(value("bytes0"), Json({{"bytesValue", ""}}));
  EXPECT_EQ(value("bytes1"), Json({{"bytesValue", "/w=="}}));
  EXPECT_EQ(value("bytes2"), Json({{"bytesValue", "AAE="}}));
  EXPECT_EQ(value("bytes3"), Json({{"bytesValue", "YWJj"}}));
  EXPECT_EQ(value("bytes4"), Json({{"bytesValue", "+/+/AA=="}}));
  EXPECT_EQ(value("arr"), Json::parse(R"({"arrayValue":{"values":[
      {"intValue":"1"},{"stringValue":"two"},
      {"arrayValue":{"values":[{"boolValue":true},{"doubleValue":1.5}]}}]}})"));
  EXPECT_EQ(value("empty_arr"), Json::parse(R"({"arrayValue":{"values":[]}})"));
  EXPECT_EQ(value("kvl"), Json::parse(R"({"kvlistValue":{"values":[
      {"key":"a","value":{"stringValue":"x"}},
      {"key":"nested","value":{"kvlistValue":{"values":[{"key":"n","value":{"intValue":"-1"}}]}}}
      ]}})"));
  EXPECT_EQ(value("unset"), Json::object());
  EXPECT_EQ(attribute(attrs, "no_value"), Json({{"key", "no_value"}}));
}

TEST(ProtobufToJson, DefaultsOmittedExceptWhatTheLibraryAlwaysWrites) {
  Request req;
  auto* span = req.add_resource_spans()->add_scope_spans()->add_spans();
  span->set_name("bare");
  const std::string text = transcode_text(serialize(req));
  EXPECT_EQ(text,
            R"({"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[)"
            R"({"flags":0,"name":"bare","kind":0,"startTimeUnixNano":"0","endTimeUnixNano":"0",)"
            R"("attributes":[],"status":{"code":0}}]}]}]})");

  // An empty Status message present, and a link with nothing set.
  span->mutable_status();
  span->add_links();
  const Json j = transcode(req);
  const Json& s = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("status"), Json({{"code", 0}}));
  EXPECT_EQ(s.at("links").at(0), Json::parse(R"({"flags":0,"attributes":[]})"));
}

// A span that decodes but that lens report would skip is flagged (TranscodeResult::unreadable,
// what lens collect refuses), with the first such span of the request named.
TEST(ProtobufToJson, FlagsSpansTheReaderWouldSkip) {
  auto unreadable = [](const std::function<void(pb_trace::Span*)>& change) {
    Request req = full_request();
    pb_trace::Span* span = req.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(1);
    span->set_trace_id(from_hex(kLinkTraceHex));  // the span of every AnyValue has no ids
    span->set_span_id(from_hex(kLinkSpanHex));
    change(span);
    std::string out;
    const TranscodeResult r = protobuf_to_json(serialize(req), out);
    EXPECT_TRUE(r.ok) << r.error;  // still transcoded: the flag is the receiver's to act on
    return r.unreadable;
  };
  EXPECT_EQ(unreadable([](pb_trace::Span*) {}), "");
  EXPECT_EQ(unreadable([](pb_trace::Span* s) { s->clear_trace_id(); }), "span 2: no traceId");
  EXPECT_EQ(unreadable([](pb_trace::Span* s) { s->set_trace_id(std::string(16, '\0')); }),
            "span 2: traceId is all zeros");
  EXPECT_EQ(unreadable([](pb_trace::Span* s) { s->clear_span_id(); }), "span 2: no spanId");
  EXPECT_EQ(unreadable([](pb_trace::Span* s) { s->set_span_id(std::string(8, '\0')); }),
            "span 2: spanId is all zeros");
  EXPECT_EQ(unreadable([](pb_trace::Span* s) {
              s->set_start_time_unix_nano(10);
              s->set_end_time_unix_nano(9);
            }),
            "span 2: endTimeUnixNano is before startTimeUnixNano");
  // A parent of zeros is a root, and an empty span a zero-length one: both read.
  EXPECT_EQ(unreadable([](pb_trace::Span* s) {
              s->set_parent_span_id(std::string(8, '\0'));
              s->set_end_time_unix_nano(s->start_time_unix_nano());
            }),
            "");
}

TEST(ProtobufToJson, EmptyRequestAndEmptyGroups) {
  std::string out;
  TranscodeResult r = protobuf_to_json("", out);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.spans, 0U);
  EXPECT_EQ(out, R"({"resourceSpans":[]})");

  Request req;
  req.add_resource_spans()->add_scope_spans()->mutable_scope();
  EXPECT_EQ(
      transcode_text(serialize(req)),
      R"({"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"scope":{},"spans":[]}]}]})");
}

TEST(ProtobufToJson, SeveralResourceAndScopeGroupsKeepTheirOrderAndCount) {
  Request req;
  int n = 0;
  for (int r = 0; r < 3; ++r) {
    auto* rs = req.add_resource_spans();
    set_kv(rs->mutable_resource()->add_attributes(), "service.name", "svc" + std::to_string(r));
    for (int s = 0; s < 2; ++s) {
      auto* ss = rs->add_scope_spans();
      ss->mutable_scope()->set_name("scope" + std::to_string(r) + std::to_string(s));
      for (int k = 0; k <= s + r; ++k) {
        auto* span = ss->add_spans();
        span->set_trace_id(from_hex(kTraceHex));
        span->set_span_id(from_hex(kSpanHex));
        span->set_name("span" + std::to_string(n++));
      }
    }
  }
  std::string out;
  const TranscodeResult result = protobuf_to_json(serialize(req), out);
  ASSERT_TRUE(result.ok) << result.error;
  EXPECT_EQ(result.spans, static_cast<std::uint64_t>(n));
  const Json j = parse(out);
  ASSERT_EQ(j.at("resourceSpans").size(), 3U);
  int seen = 0;
  for (int r = 0; r < 3; ++r) {
    const Json& rs = j.at("resourceSpans").at(static_cast<std::size_t>(r));
    EXPECT_EQ(
        attribute(rs.at("resource").at("attributes"), "service.name").at("value").at("stringValue"),
        "svc" + std::to_string(r));
    ASSERT_EQ(rs.at("scopeSpans").size(), 2U);
    for (int s = 0; s < 2; ++s) {
      const Json& ss = rs.at("scopeSpans").at(static_cast<std::size_t>(s));
      EXPECT_EQ(ss.at("scope").at("name"), "scope" + std::to_string(r) + std::to_string(s));
      ASSERT_EQ(ss.at("spans").size(), static_cast<std::size_t>(s + r + 1));
      for (const Json& span : ss.at("spans"))
        EXPECT_EQ(span.at("name"), "span" + std::to_string(seen++));
    }
  }
  EXPECT_EQ(seen, n);
}

TEST(ProtobufToJson, AppendsToWhatTheStringHolds) {
  std::string out = "previous line\n";
  const TranscodeResult r = protobuf_to_json(serialize(full_request()), out);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 2U);
  ASSERT_EQ(out.rfind("previous line\n{", 0), 0U);
  parse(out.substr(14));
}

TEST(ProtobufToJson, UnknownFieldsOfEveryWireTypeAreSkipped) {
  const Request clean = full_request();
  Request noisy = clean;
  auto add_unknown = [](google::protobuf::Message* m) {
    auto* u = m->GetReflection()->MutableUnknownFields(m);
    u->AddVarint(100, 12345);
    u->AddFixed32(101, 7);
    u->AddFixed64(102, 8);
    u->AddLengthDelimited(103, "opaque \xff bytes");
    u->AddVarint(536'870'911, 1);  // the largest field number
  };
  add_unknown(&noisy);
  auto* rs = noisy.mutable_resource_spans(0);
  add_unknown(rs);
  add_unknown(rs->mutable_resource());
  add_unknown(rs->mutable_resource()->mutable_attributes(0));
  add_unknown(rs->mutable_resource()->mutable_attributes(0)->mutable_value());
  auto* ss = rs->mutable_scope_spans(0);
  add_unknown(ss);
  add_unknown(ss->mutable_scope());
  auto* span = ss->mutable_spans(0);
  add_unknown(span);
  add_unknown(span->mutable_events(0));
  add_unknown(span->mutable_links(0));
  add_unknown(span->mutable_status());
  // Status's reserved field 1 (the deprecated code) is unknown too.
  span->mutable_status()
      ->GetReflection()
      ->MutableUnknownFields(span->mutable_status())
      ->AddVarint(1, 2);
  add_unknown(ss->mutable_spans(1)->mutable_attributes(19)->mutable_value()->mutable_array_value());
  add_unknown(
      ss->mutable_spans(1)->mutable_attributes(21)->mutable_value()->mutable_kvlist_value());
  const std::string noisy_bytes = serialize(noisy);
  ASSERT_GT(noisy_bytes.size(), serialize(clean).size() + 100);
  EXPECT_EQ(transcode_text(noisy_bytes), transcode_text(serialize(clean)));
}

TEST(ProtobufToJson, FieldsInAnyOrderAndRepeatedFieldsInterleaved) {
  const std::string attr_a = Bytes().len(1, "a").len(2, Bytes().uint(3, 1).s).s;
  const std::string attr_b = Bytes().len(1, "b").len(2, Bytes().len(1, "B").s).s;
  const std::string event_1 = Bytes().len(2, "e1").fixed64(1, 5).s;
  const std::string event_2 = Bytes().len(2, "e2").s;
  // Span fields from 16 down to 1, with attributes and events split around other fields.
  const std::string span = Bytes()
                               .fixed32(16, 1)
                               .len(15, Bytes().uint(3, 1).len(2, "fine").s)
                               .len(11, event_1)
                               .len(9, attr_b)
                               .fixed64(8, 20)
                               .fixed64(7, 10)
                               .len(11, event_2)
                               .uint(6, 2)
                               .len(5, "reordered")
                               .len(9, attr_a)
                               .len(4, from_hex(kParentHex))
                               .len(3, "t=s")
                               .len(2, from_hex(kSpanHex))
                               .len(1, from_hex(kTraceHex))
                               .s;
  // ScopeSpans with its spans before its scope, ResourceSpans with its resource last.
  const std::string scope_spans = Bytes().len(2, span).len(1, Bytes().len(1, "sc").s).s;
  const std::string resource =
      Bytes().len(1, Bytes().len(1, "service.name").len(2, Bytes().len(1, "x").s).s).s;
  const std::string bytes =
      Bytes().len(1, Bytes().len(3, "url").len(2, scope_spans).len(1, resource).s).s;

  // libprotobuf reads the same bytes; re-serialised in field order they transcode identically.
  Request parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(transcode_text(bytes), transcode_text(serialize(parsed)));

  const Json j = parse(transcode_text(bytes));
  const Json& rs = j.at("resourceSpans").at(0);
  EXPECT_EQ(rs.at("schemaUrl"), "url");
  EXPECT_EQ(rs.at("scopeSpans").at(0).at("scope").at("name"), "sc");
  const Json& s = rs.at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("traceId"), kTraceHex);
  EXPECT_EQ(s.at("spanId"), kSpanHex);
  EXPECT_EQ(s.at("parentSpanId"), kParentHex);
  EXPECT_EQ(s.at("traceState"), "t=s");
  EXPECT_EQ(s.at("flags"), 1);
  EXPECT_EQ(s.at("name"), "reordered");
  EXPECT_EQ(s.at("kind"), 2);
  EXPECT_EQ(s.at("startTimeUnixNano"), "10");
  EXPECT_EQ(s.at("endTimeUnixNano"), "20");
  EXPECT_EQ(s.at("attributes"), Json::parse(R"([{"key":"b","value":{"stringValue":"B"}},
                                                {"key":"a","value":{"intValue":"1"}}])"));
  ASSERT_EQ(s.at("events").size(), 2U);
  EXPECT_EQ(s.at("events").at(0).at("name"), "e1");
  EXPECT_EQ(s.at("events").at(0).at("timeUnixNano"), "5");
  EXPECT_EQ(s.at("events").at(1).at("name"), "e2");
  EXPECT_EQ(s.at("status"), Json::parse(R"({"code":1,"message":"fine"})"));
}

TEST(ProtobufToJson, RepeatedSingularFieldsLastOneWins) {
  const std::string span = Bytes()
                               .len(5, "first")
                               .uint(6, 1)
                               .len(15, Bytes().uint(3, 2).len(2, "old").s)
                               .len(5, "second")
                               .uint(6, 4)
                               .len(15, Bytes().uint(3, 1).s)
                               .len(9, Bytes()
                                           .len(1, "k")
                                           .len(2, Bytes().len(1, "dropped").s)
                                           .len(2, Bytes().uint(3, 9).len(1, "last").s)
                                           .s)
                               .s;
  const Json j = parse(transcode_text(request_with_span(span)));
  const Json& s = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("name"), "second");  // as libprotobuf: the last scalar
  EXPECT_EQ(s.at("kind"), 4);
  // Status: the last message whole (libprotobuf would merge in the earlier "old").
  EXPECT_EQ(s.at("status"), Json({{"code", 1}}));
  // KeyValue.value twice, and the AnyValue oneof set twice inside the last one.
  EXPECT_EQ(s.at("attributes").at(0), Json::parse(R"({"key":"k","value":{"stringValue":"last"}})"));

  Request parsed;
  ASSERT_TRUE(parsed.ParseFromString(request_with_span(span)));
  const auto& ps = parsed.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_EQ(ps.name(), "second");
  EXPECT_EQ(ps.attributes(0).value().string_value(), "last");
}

TEST(ProtobufToJson, SupersededMessagesAreStillChecked) {
  const std::string bad_status = Bytes().tag(3, 2).varint(1).s;  // code with wire type 2, cut
  const std::string span = Bytes().len(15, bad_status).len(15, "").s;
  EXPECT_THAT(transcode_error(request_with_span(span)).error, HasSubstr("of Status"));

  // An AnyValue's array replaced by a string; a KeyValue's value (a kvlist) replaced by another.
  const std::string bad_array = Bytes().len(1, Bytes().uint(1, 1).s).s;  // values as a varint
  const std::string any = Bytes().len(5, bad_array).len(1, "fine").s;
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(9, Bytes().len(2, any).s).s)).error,
              HasSubstr("field 1 of AnyValue has wire type 0, expected 2"));
  const std::string kv = Bytes().len(2, Bytes().len(6, bad_array).s).len(2, "").s;
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(9, kv).s)).error,
              HasSubstr("field 1 of KeyValue has wire type 0, expected 2"));
  // A resource and a scope replaced by later ones.
  const std::string bad_resource = Bytes().fixed32(1, 0).s;
  EXPECT_THAT(transcode_error(Bytes().len(1, Bytes().len(1, bad_resource).len(1, "").s).s).error,
              HasSubstr("field 1 of Resource has wire type 5, expected 2"));
  const std::string scope_spans = Bytes().len(1, Bytes().uint(2, 1).s).len(1, "").s;
  EXPECT_THAT(transcode_error(Bytes().len(1, Bytes().len(2, scope_spans).s).s).error,
              HasSubstr("field 2 of InstrumentationScope has wire type 0, expected 2"));
}

TEST(ProtobufToJson, InvalidUtf8IsReplacedAndControlCharactersEscaped) {
  const std::string span = Bytes()
                               .len(5, std::string("a\xff"
                                                   "b\xe2\x82"
                                                   "c\x01",
                                                   7))
                               .s;
  const std::string text = transcode_text(request_with_span(span));
  EXPECT_NE(text.find(R"("name":"a)"
                      "\xEF\xBF\xBD"
                      "b"
                      "\xEF\xBF\xBD"
                      R"(c\u0001")"),
            std::string::npos)
      << text;
  parse(text);
}

TEST(ProtobufToJson, EnumsAndCountsTakeTheLow32BitsOfTheirVarint) {
  // kind -1 (a 10-byte varint, as int32 enums are sent), an unknown status code, a count > 2^32.
  const std::string span = Bytes()
                               .uint(6, static_cast<std::uint64_t>(-1))
                               .uint(10, (std::uint64_t{1} << 32) + 5)
                               .len(15, Bytes().uint(3, 77).s)
                               .s;
  const Json j = parse(transcode_text(request_with_span(span)));
  const Json& s = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_EQ(s.at("kind"), -1);
  EXPECT_EQ(s.at("droppedAttributesCount"), 5);
  EXPECT_EQ(s.at("status").at("code"), 77);
  Request parsed;  // libprotobuf reads the same values
  ASSERT_TRUE(parsed.ParseFromString(request_with_span(span)));
  EXPECT_EQ(parsed.resource_spans(0).scope_spans(0).spans(0).kind(), -1);
  EXPECT_EQ(parsed.resource_spans(0).scope_spans(0).spans(0).dropped_attributes_count(), 5U);
}

// ---- protobuf_to_json: independent references --------------------------------------------

// Drops what a proto3 JSON printer may omit (zero, "0", "", false, [], {}), except the members
// of AnyValue, which are written even at their default.
Json without_defaults(const Json& j) {
  if (j.is_array()) {
    Json out = Json::array();
    for (const Json& v : j) out.push_back(without_defaults(v));
    return out;
  }
  if (!j.is_object()) return j;
  Json out = Json::object();
  for (const auto& [key, v] : j.items()) {
    const bool any_value_member = key.size() > 5 && key.ends_with("Value");
    Json n = without_defaults(v);
    const bool is_default = (n.is_number() && n == 0) || n == "" || n == "0" || n == false ||
                            (n.is_array() && n.empty()) || (n.is_object() && n.empty());
    if (!is_default || any_value_member) out[key] = n;
  }
  return out;
}

// libprotobuf's JSON has base64 ids; the OTLP JSON encoding hex ones.
void ids_to_hex(Json& j) {
  if (j.is_array()) {
    for (Json& v : j) ids_to_hex(v);
  } else if (j.is_object()) {
    for (auto& [key, v] : j.items()) {
      if ((key == "traceId" || key == "spanId" || key == "parentSpanId") && v.is_string()) {
        v = to_hex(base64_decode(v.get<std::string>()));
      } else {
        ids_to_hex(v);
      }
    }
  }
}

TEST(ProtobufToJson, AgreesWithLibprotobufJsonPrinter) {
  Request req = full_request();
  // A second resource group with an absent resource and scope, and a root span.
  auto* span = req.add_resource_spans()->add_scope_spans()->add_spans();
  span->set_trace_id(from_hex(kLinkTraceHex));
  span->set_span_id(from_hex(kLinkSpanHex));
  span->set_name("root");
  span->set_kind(pb_trace::Span::SPAN_KIND_SERVER);
  span->mutable_status()->set_code(pb_trace::Status::STATUS_CODE_OK);

  std::string reference;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_enums_as_ints = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(req, &reference, options).ok());
  Json expected = parse(reference);
  ids_to_hex(expected);
  EXPECT_EQ(without_defaults(transcode(req)), without_defaults(expected))
      << "libprotobuf: " << expected.dump();
  // Sanity of the comparison: the ids went through both sides as hex.
  EXPECT_EQ(
      expected.at("resourceSpans").at(1).at("scopeSpans").at(0).at("spans").at(0).at("spanId"),
      kLinkSpanHex);
}

TEST(ProtobufToJson, AgreesWithLibprotobufOnRandomRequests) {
  std::mt19937_64 rng(20240611);
  auto pick = [&](std::uint64_t n) { return rng() % n; };
  for (int round = 0; round < 200; ++round) {
    Request req;
    const std::uint64_t groups = pick(3);
    for (std::uint64_t g = 0; g < groups; ++g) {
      auto* rs = req.add_resource_spans();
      if (pick(2) != 0)
        set_kv(rs->mutable_resource()->add_attributes(), "r", std::to_string(rng()));
      const std::uint64_t scopes = pick(3);
      for (std::uint64_t s = 0; s < scopes; ++s) {
        auto* ss = rs->add_scope_spans();
        if (pick(2) != 0) ss->mutable_scope()->set_name("scope");
        const std::uint64_t spans = pick(4);
        for (std::uint64_t k = 0; k < spans; ++k) {
          auto* span = ss->add_spans();
          if (pick(4) == 0) {
            fill_any_values(span);
            span->mutable_attributes()->DeleteSubrange(11, 3);  // NaN and the infinities
          } else {
            fill_full_span(span);
          }
          span->set_start_time_unix_nano(rng());
          span->set_flags(static_cast<std::uint32_t>(rng()));
          span->set_kind(static_cast<pb_trace::Span::SpanKind>(pick(6)));
          if (pick(2) != 0) span->clear_parent_span_id();
          if (pick(2) != 0) span->clear_status();
          auto* kv = span->add_attributes();
          kv->set_key("d");
          kv->mutable_value()->set_double_value(
              std::ldexp(static_cast<double>(rng() >> 11), -static_cast<int>(pick(80))));
        }
      }
    }
    std::string reference;
    google::protobuf::util::JsonPrintOptions options;
    options.always_print_enums_as_ints = true;
    ASSERT_TRUE(google::protobuf::util::MessageToJsonString(req, &reference, options).ok());
    Json expected = parse(reference);
    ids_to_hex(expected);
    ASSERT_EQ(without_defaults(transcode(req)), without_defaults(expected)) << "round " << round;
  }
}

// The library's OTLP/JSON writer and this transcoder agree byte for byte: the writer's JSON is
// read by libprotobuf (ids turned into base64 first), encoded, and transcoded back.
std::string library_json_through_protobuf(const std::string& library_json) {
  Json j = parse(library_json);
  std::function<void(Json&)> hex_to_base64 = [&](Json& v) {
    if (v.is_array()) {
      for (Json& e : v) hex_to_base64(e);
    } else if (v.is_object()) {
      for (auto& [key, e] : v.items()) {
        if (key == "traceId" || key == "spanId" || key == "parentSpanId") {
          e = base64_encode(from_hex(e.get<std::string>()));
        } else {
          hex_to_base64(e);
        }
      }
    }
  };
  hex_to_base64(j);
  Request req;
  const auto status = google::protobuf::util::JsonStringToMessage(j.dump(), &req);
  EXPECT_TRUE(status.ok()) << status.ToString();
  return transcode_text(serialize(req));
}

TEST(ProtobufToJson, IdenticalToTheLibraryWriterOutput) {
  using namespace nemo::lens;
  SpanData full;
  full.name = "train_step \"quoted\" \xce\xbb";
  full.group = "step";
  full.context.trace_id = *TraceId::from_hex(kTraceHex);
  full.context.span_id = *SpanId::from_hex(kSpanHex);
  full.context.trace_flags = 0x01;
  full.context.trace_state = "vendor=a";
  full.parent_span_id = *SpanId::from_hex(kParentHex);
  full.parent_is_remote = true;
  full.kind = SpanKind::kConsumer;
  full.start_time_unix_nano = 1'700'000'000'123'456'789;
  full.end_time_unix_nano = 1'700'000'001'000'000'000;
  full.attributes = {
      {"flag", true},
      {"min", std::numeric_limits<std::int64_t>::min()},
      {"loss", 0.5},
      {"whole", 2.0},
      {"tiny", 5e-324},
      {"huge", 1.7976931348623157e308},
      {"negative_zero", -0.0},
      {"nan", std::numeric_limits<double>::quiet_NaN()},
      {"ninf", -std::numeric_limits<double>::infinity()},
      {"model", std::string("llama\n")},
      {"bools", std::vector<bool>{true, false}},
      {"layers", std::vector<std::int64_t>{0, -1, 9'007'199'254'740'993}},
      {"lrs", std::vector<double>{0.25, 3.0}},
      {"names", std::vector<std::string>{"a", ""}},
      {"empty", std::vector<std::int64_t>{}},
  };
  full.dropped_attributes_count = 3;
  full.events = {
      SpanEvent{"checkpoint", 1'700'000'000'500'000'000, {{"path", std::string("/c")}}, 1},
      SpanEvent{"plain", 1'700'000'000'600'000'000, {}, 0}};
  full.dropped_events_count = 4;
  SpanLink link;
  link.context.trace_id = *TraceId::from_hex(kLinkTraceHex);
  link.context.span_id = *SpanId::from_hex(kLinkSpanHex);
  link.context.trace_flags = 0x01;
  link.context.is_remote = true;
  link.context.trace_state = "k=v";
  link.attributes = {{"reason", std::string("batch")}};
  link.dropped_attributes_count = 2;
  full.links = {link, SpanLink{}};
  full.dropped_links_count = 5;
  full.status_code = StatusCode::kError;
  full.status_message = "CUDA out of memory";
  full.thread_id = 4711;

  SpanData minimal;
  minimal.name = "minimal";
  minimal.context.trace_id = *TraceId::from_hex(kTraceHex);
  minimal.context.span_id = *SpanId::from_hex(kParentHex);
  minimal.start_time_unix_nano = 10;
  minimal.end_time_unix_nano = 25;

  Resource resource;
  resource.attributes = {{"service.name", std::string("trainer")}, {"dl.rank", std::int64_t{3}}};

  for (const Resource& r : {resource, Resource{}}) {
    std::string library_json;
    const std::vector<const SpanData*> spans{&full, &minimal};
    detail::append_otlp_json(library_json, spans, r);
    EXPECT_EQ(library_json_through_protobuf(library_json), library_json);
  }
}

// ---- protobuf_to_json: refusals ----------------------------------------------------------

TEST(ProtobufToJson, EveryTruncationIsRefusedOrYieldsValidJson) {
  const std::string bytes = serialize(full_request());
  ASSERT_GT(bytes.size(), 500U);
  std::size_t accepted = 0;
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    const std::string prefix = bytes.substr(0, n);
    std::string out = "kept";
    const TranscodeResult r = protobuf_to_json(prefix, out);
    if (r.ok) {
      ++accepted;
      ASSERT_EQ(out.rfind("kept", 0), 0U);
      parse(out.substr(4));
      Request reference;  // what is accepted, libprotobuf accepts too
      EXPECT_TRUE(reference.ParseFromString(prefix)) << "prefix " << n;
    } else {
      EXPECT_EQ(out, "kept") << "prefix " << n;
      EXPECT_FALSE(r.error.empty());
      EXPECT_NE(r.error.find(" at byte "), std::string::npos) << r.error;
    }
  }
  EXPECT_GE(accepted, 1U);  // the empty prefix
  EXPECT_LT(accepted, 10U);
}

TEST(ProtobufToJson, MutatedAndRandomInputNeverCrashes) {
  std::mt19937_64 rng(7);
  const std::string valid = serialize(full_request());
  for (int round = 0; round < 3000; ++round) {
    std::string input;
    if (round % 2 == 0) {
      input = valid;
      const int flips = 1 + static_cast<int>(rng() % 4);
      for (int i = 0; i < flips; ++i) {
        input[rng() % input.size()] = static_cast<char>(rng());
      }
    } else {
      input.resize(rng() % 64);
      for (char& c : input) c = static_cast<char>(rng());
    }
    std::string out;
    const TranscodeResult r = protobuf_to_json(input, out);
    if (r.ok) {
      parse(out);
    } else {
      EXPECT_TRUE(out.empty());
      EXPECT_FALSE(r.error.empty());
    }
  }
}

TEST(ProtobufToJson, NamesWhatIsWrong) {
  // A tag whose varint stops at the end of the input: byte 0 is 0x0A, byte 1 a length of 3.
  EXPECT_EQ(transcode_error(std::string("\x0a\x03\x0a\x01\x80", 5)).error,
            "truncated varint at byte 4");
  EXPECT_EQ(transcode_error(std::string("\x0a\x05\x0a\x01", 4)).error,
            "field 1 of ExportTraceServiceRequest has length 5 but its message has 2 bytes left "
            "at byte 1");
  // A length that fits the input but not the enclosing message.
  EXPECT_THAT(transcode_error(Bytes().len(1, Bytes().tag(2, 2).varint(4).s).raw("abcd").s).error,
              HasSubstr("field 2 of ResourceSpans has length 4 but its message has 0 bytes left"));
  EXPECT_EQ(transcode_error(request_with_span(Bytes().uint(1, 5).s)).error,
            "field 1 of Span has wire type 0, expected 2 at byte 6");
  EXPECT_THAT(transcode_error(request_with_span(Bytes().fixed64(16, 1).s)).error,
              HasSubstr("field 16 of Span has wire type 1, expected 5"));
  EXPECT_THAT(transcode_error(request_with_span(Bytes().tag(40, 3).s)).error,
              HasSubstr("field 40 of Span has wire type 3 (group)"));
  EXPECT_THAT(transcode_error(Bytes().tag(9, 4).s).error, HasSubstr("wire type 4 (group)"));
  EXPECT_THAT(transcode_error(Bytes().tag(9, 7).s).error,
              HasSubstr("field 9 of ExportTraceServiceRequest has invalid wire type 7"));
  EXPECT_THAT(transcode_error(Bytes().tag(9, 6).s).error, HasSubstr("invalid wire type 6"));
  EXPECT_THAT(transcode_error(Bytes().tag(0, 0).varint(1).s).error,
              HasSubstr("invalid field number 0"));
  EXPECT_THAT(transcode_error(Bytes().varint(std::uint64_t{1} << 35).varint(1).s).error,
              HasSubstr("invalid field number"));
  EXPECT_EQ(transcode_error(Bytes().tag(9, 0).raw(std::string(10, '\x80')).raw("\x01").s).error,
            "varint longer than 10 bytes at byte 1");
  EXPECT_THAT(transcode_error(Bytes().fixed64(9, 0).s.substr(0, 5)).error,
              HasSubstr("truncated fixed64 field 9"));
  EXPECT_THAT(transcode_error(Bytes().fixed32(9, 0).s.substr(0, 3)).error,
              HasSubstr("truncated fixed32 field 9"));
  // A 10-byte varint (the most there is) is fine, and its bits past 64 are dropped.
  std::string out;
  EXPECT_TRUE(
      protobuf_to_json(Bytes().tag(9, 0).raw(std::string(9, '\xff')).raw("\x7f").s, out).ok);
}

TEST(ProtobufToJson, RefusesIdsOfTheWrongLength) {
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(1, "12345").s)).error,
              HasSubstr("Span.trace_id is 5 bytes long, expected 16 (or 0)"));
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(2, "123456789").s)).error,
              HasSubstr("Span.span_id is 9 bytes long, expected 8"));
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(4, from_hex(kTraceHex)).s)).error,
              HasSubstr("Span.parent_span_id is 16 bytes long"));
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(13, Bytes().len(1, "x").s).s)).error,
              HasSubstr("Span.Link.trace_id is 1 bytes long"));
  EXPECT_THAT(transcode_error(request_with_span(Bytes().len(13, Bytes().len(2, "x").s).s)).error,
              HasSubstr("Span.Link.span_id is 1 bytes long"));
  // Empty ids are omitted.
  const Json j = parse(transcode_text(request_with_span(Bytes().len(1, "").len(2, "").s)));
  const Json& s = j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans").at(0);
  EXPECT_FALSE(s.contains("traceId"));
  EXPECT_FALSE(s.contains("spanId"));
}

// A request whose one span has an attribute nested `arrays` arrays deep around a string.
Request nested_request(int arrays) {
  Request req;
  auto* kv = req.add_resource_spans()->add_scope_spans()->add_spans()->add_attributes();
  kv->set_key("deep");
  pb_common::AnyValue* v = kv->mutable_value();
  for (int i = 0; i < arrays; ++i) v = v->mutable_array_value()->add_values();
  v->set_string_value("bottom");
  return req;
}

TEST(ProtobufToJson, RefusesNestingDeeperThan32) {
  // Request > ResourceSpans (1) > ScopeSpans (2) > Span (3) > KeyValue (4) > AnyValue (5), then
  // two levels per array: the innermost AnyValue is at depth 5 + 2 * arrays.
  const Json j = transcode(nested_request(13));  // depth 31
  Json v = j.at("resourceSpans")
               .at(0)
               .at("scopeSpans")
               .at(0)
               .at("spans")
               .at(0)
               .at("attributes")
               .at(0)
               .at("value");
  for (int i = 0; i < 13; ++i) v = Json(v.at("arrayValue").at("values").at(0));
  EXPECT_EQ(v, Json({{"stringValue", "bottom"}}));
  EXPECT_THAT(transcode_error(serialize(nested_request(14))).error,
              HasSubstr("messages nested deeper than 32"));
  EXPECT_THAT(transcode_error(serialize(nested_request(1000))).error,
              HasSubstr("messages nested deeper than 32"));
}

// ---- json_to_json ------------------------------------------------------------------------

TEST(JsonToJson, CompactsOntoOneLineAndCountsSpans) {
  const std::string body = R"({
    "resourceSpans": [
      {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "a\nb"}}]},
       "scopeSpans": [
         {"scope": {"name": "s"}, "spans": [{"name": "x", "flags": 1}, {"name": "y"}]},
         {"spans": []},
         {"spans": [{"name": "z", "attributes": [{"key": "d", "value": {"doubleValue": 1.50}}]}]}
       ]},
      {"scopeSpans": [{"spans": [{"name": "w", "kind": 2, "startTimeUnixNano": "12"}]}],
       "schemaUrl": "u"}
    ]
  }
  )";
  std::string out = "kept";
  const TranscodeResult r = json_to_json(body, out);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 4U);
  ASSERT_EQ(out.rfind("kept", 0), 0U);
  const std::string line = out.substr(4);
  EXPECT_EQ(line.find('\n'), std::string::npos);
  EXPECT_EQ(line.find(' '), std::string::npos);
  EXPECT_EQ(parse(line), Json::parse(body));
  EXPECT_NE(line.find(R"("doubleValue":1.50)"), std::string::npos)
      << "number text changed: " << line;
  EXPECT_EQ(line.rfind(R"({"resourceSpans":[{"resource":)", 0), 0U) << "key order changed";
}

TEST(JsonToJson, CopiesTokensAsWritten) {
  const std::string compact =
      R"({"z":1,"a":[-5,18446744073709551615,123456789012345678901234,1e-7,-0.0,1E+2,1e-999],)"
      R"("s":"\u00e9\ud83d\ude00\/\u0001\"\\ é","t":true,"f":false,"n":null,"o":{},"e":[],)"
      R"("resourceSpans":null})";
  std::string spaced;
  for (const char c : compact) {  // whitespace after every structural character
    spaced.push_back(c);
    if (c == ',' || c == ':' || c == '{' || c == '[') spaced += " \t\r\n ";
  }
  spaced = "\xEF\xBB\xBF \n" + spaced + "\n\n";  // a byte order mark, then surrounding space
  std::string out;
  const TranscodeResult r = json_to_json(spaced, out);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 0U);
  EXPECT_EQ(out, compact);
  EXPECT_EQ(parse(out).at("s"), "\xC3\xA9\xF0\x9F\x98\x80/\x01\"\\ \xC3\xA9");
}

TEST(JsonToJson, FindsTheRequestKeysWhateverTheirSpelling) {
  std::string out;
  const TranscodeResult r =
      json_to_json(R"({"resource\u0053pans":[{"\u0073copeSpans":[{"spans":[{},{}]}]}]})", out);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 2U);
  out.clear();
  EXPECT_EQ(json_to_json(R"({"resource\u0053pans":7})", out).error,
            "resourceSpans is not an array");
}

TEST(JsonToJson, IsTheIdentityOnTranscodedProtobuf) {
  const std::string line = transcode_text(serialize(full_request()));
  std::string out;
  const TranscodeResult r = json_to_json(line, out);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 2U);
  EXPECT_EQ(out, line);
}

TEST(JsonToJson, RefusesWhatIsNotARequest) {
  auto refused = [](std::string_view body) {
    std::string out = "kept";
    const TranscodeResult r = json_to_json(body, out);
    EXPECT_FALSE(r.ok) << body;
    EXPECT_EQ(out, "kept") << body;
    EXPECT_EQ(r.spans, 0U);
    return r.error;
  };
  EXPECT_THAT(refused(""), HasSubstr("invalid JSON"));
  EXPECT_THAT(refused("   "), HasSubstr("invalid JSON"));
  EXPECT_THAT(refused(R"({"resourceSpans":[]} x)"), HasSubstr("invalid JSON"));
  EXPECT_THAT(refused(R"({"resourceSpans":[)"), HasSubstr("invalid JSON"));
  EXPECT_THAT(refused("{\"a\":\"\xff\"}"), HasSubstr("invalid JSON"));
  EXPECT_EQ(refused(R"({"a":1e999})"), "invalid JSON: number out of range at byte 5");
  EXPECT_EQ(refused(R"({"a":-2e308})"), "invalid JSON: number out of range at byte 5");
  EXPECT_EQ(refused("{\"a\":" + std::string(400, '9') + "}"),
            "invalid JSON: number out of range at byte 5");
  EXPECT_EQ(refused(R"({"a":01})"), "invalid JSON: expected ',' or '}' at byte 6");
  EXPECT_EQ(refused(R"({"a":1.})"), "invalid JSON: invalid number at byte 5");
  EXPECT_EQ(refused(R"({"a":.5})"), "invalid JSON: unexpected '.' at byte 5");
  EXPECT_EQ(refused(R"({"a":-})"), "invalid JSON: invalid number at byte 5");
  EXPECT_EQ(refused(R"({"a":1e+})"), "invalid JSON: invalid number at byte 5");
  EXPECT_EQ(refused(R"({"a":[1,]})"), "invalid JSON: unexpected ']' at byte 8");
  EXPECT_EQ(refused(R"({"a":1,})"), "invalid JSON: expected a key at byte 7");
  EXPECT_EQ(refused(R"({"a" 1})"), "invalid JSON: expected ':' at byte 5");
  EXPECT_EQ(refused(R"({a:1})"), "invalid JSON: expected a key at byte 1");
  EXPECT_EQ(refused(R"({"a":tru})"), "invalid JSON: unexpected 't' at byte 5");
  EXPECT_EQ(refused(R"({"a":"\x"})"), "invalid JSON: invalid escape at byte 6");
  EXPECT_EQ(refused(R"({"a":"\u12G4"})"), "invalid JSON: invalid \\u escape at byte 6");
  EXPECT_EQ(refused("{\"a\":\"tab\there\"}"),
            "invalid JSON: control character in a string at byte 9");
  EXPECT_EQ(refused("{\"a\":\"\xed\xa0\x80\"}"),
            "invalid JSON: invalid UTF-8 in a string at byte 6");
  EXPECT_EQ(refused(R"({"a":"open)"), "invalid JSON: unterminated string at byte 5");
  EXPECT_EQ(refused("{\"a\":1}\x01"), "invalid JSON: unexpected 0x01 at byte 7");
  EXPECT_EQ(refused("[]"), "the body is not a JSON object");
  EXPECT_EQ(refused("\"str\""), "the body is not a JSON object");
  EXPECT_EQ(refused(" 42"), "the body is not a JSON object");
  EXPECT_EQ(refused("null"), "the body is not a JSON object");
  EXPECT_EQ(refused("x"), "invalid JSON: unexpected 'x' at byte 0");
  EXPECT_EQ(refused(""), "invalid JSON: empty body at byte 0");
  EXPECT_EQ(refused(R"({"resourceSpans":{}})"), "resourceSpans is not an array");
  EXPECT_EQ(refused(R"({"resourceSpans":"x"})"), "resourceSpans is not an array");
  EXPECT_EQ(refused(R"({"resourceSpans":[1]})"), "an element of resourceSpans is not an object");
  EXPECT_EQ(refused(R"({"resourceSpans":[{"scopeSpans":7}]})"),
            "resourceSpans[].scopeSpans is not an array");
  EXPECT_EQ(refused(R"({"resourceSpans":[{"scopeSpans":[[]]}]})"),
            "an element of resourceSpans[].scopeSpans is not an object");
  EXPECT_EQ(refused(R"({"resourceSpans":[{"scopeSpans":[{"spans":{}}]}]})"),
            "resourceSpans[].scopeSpans[].spans is not an array");
  // Only the request's own arrays are checked: the same keys elsewhere are data.
  std::string out;
  EXPECT_TRUE(
      json_to_json(R"({"other":{"resourceSpans":1},"resourceSpans":[{"x":{"scopeSpans":1}}]})", out)
          .ok);
}

// A lone UTF-16 surrogate escape (JavaScript strings may hold one; JSON.stringify writes it as
// \ud800) becomes U+FFFD, as invalid UTF-8 does on the protobuf path: the batch is kept, and
// the line is JSON that strict readers (nlohmann/json, lens report) parse.
TEST(JsonToJson, ReplacesLoneSurrogateEscapesWithTheReplacementCharacter) {
  auto compacted = [](std::string_view body) {
    std::string out;
    const TranscodeResult r = json_to_json(body, out);
    EXPECT_TRUE(r.ok) << body << ": " << r.error;
    EXPECT_TRUE(Json::accept(out)) << out;
    return out;
  };
  EXPECT_EQ(compacted(R"({"a":"bad\ud800"})"), R"({"a":"bad\ufffd"})");
  EXPECT_EQ(compacted(R"({"a":"\udc00"})"), R"({"a":"\ufffd"})");
  EXPECT_EQ(compacted(R"({"a":"\ud800\u0041"})"), R"({"a":"\ufffd\u0041"})");
  EXPECT_EQ(compacted(R"({"a":"\udbff\udbff\udfff"})"), R"({"a":"\ufffd\udbff\udfff"})");
  EXPECT_EQ(compacted(R"({"a":"x\ud800","\udc01k":"\ud834\udd1e\ud800"})"),
            R"({"a":"x\ufffd","\ufffdk":"\ud834\udd1e\ufffd"})");
  // Pairs and other escapes stay as written.
  EXPECT_EQ(compacted(R"({"a":"\ud834\udd1e \u00e9 \n"})"), R"({"a":"\ud834\udd1e \u00e9 \n"})");
  EXPECT_EQ(Json::parse(compacted(R"({"a":"bad\ud800"})"))["a"], "bad\xEF\xBF\xBD");
}

// Numbers OTLP/JSON has no spelling for, normalised where the member says what they are (an
// AnyValue's doubleValue and intValue, a data point's asDouble and asInt): the line keeps the
// value sent, in a form that strict readers parse.
TEST(JsonToJson, NormalisesNonStandardNumbersOfNumericMembers) {
  auto compacted = [](std::string_view body, lens_cli::Signal signal = lens_cli::Signal::kTraces) {
    std::string out;
    const TranscodeResult r = json_to_json(body, out, signal);
    EXPECT_TRUE(r.ok) << body << ": " << r.error;
    EXPECT_TRUE(Json::accept(out)) << out;
    return out;
  };
  // NaN and the infinities as JSON.stringify writes them: null. Which one it was is lost: NaN.
  EXPECT_EQ(compacted(R"({"v":{"doubleValue":null}})"), R"({"v":{"doubleValue":"NaN"}})");
  EXPECT_EQ(compacted(R"({"p":{"asDouble" : null}})"), R"({"p":{"asDouble":"NaN"}})");
  // The strings OTLP/JSON defines for them stay.
  for (const char* s : {"\"NaN\"", "\"Infinity\"", "\"-Infinity\"", "0.5", "-0", "1e+300"}) {
    const std::string body = std::string(R"({"v":{"doubleValue":)") + s + "}}";
    EXPECT_EQ(compacted(body), body);
  }
  // Beyond a double: the infinity of its sign.
  EXPECT_EQ(compacted(R"({"v":{"doubleValue":1e999}})"), R"({"v":{"doubleValue":"Infinity"}})");
  EXPECT_EQ(compacted(R"({"v":{"doubleValue":-2e308}})"), R"({"v":{"doubleValue":"-Infinity"}})");
  // An intValue that holds no int64 (what the JS SDK sends for a whole JavaScript number such
  // as 1e300, or for 2**63) is kept as the double it is.
  EXPECT_EQ(compacted(R"({"v":{"intValue":1e+300}})"), R"({"v":{"doubleValue":1e+300}})");
  EXPECT_EQ(compacted(R"({"v":{"intValue":9223372036854775808}})"),
            R"({"v":{"doubleValue":9223372036854775808}})");
  EXPECT_EQ(compacted(R"({"v":{"intValue":-9223372036854775809}})"),
            R"({"v":{"doubleValue":-9223372036854775809}})");
  EXPECT_EQ(compacted(R"({"v":{"intValue":2.5}})"), R"({"v":{"doubleValue":2.5}})");
  EXPECT_EQ(compacted(R"({"v":{"intValue":1e999}})"), R"({"v":{"doubleValue":"Infinity"}})");
  EXPECT_EQ(compacted("{\"v\":{\"intValue\":" + std::string(400, '9') + "}}"),
            R"({"v":{"doubleValue":"Infinity"}})");
  EXPECT_EQ(compacted(R"({"a":1,"p":{"asInt":1e+300}})", lens_cli::Signal::kMetrics),
            R"({"a":1,"p":{"asDouble":1e+300}})");
  // Whole numbers within int64, as numbers or strings, stay.
  for (const char* s : {"9223372036854775807", "-9223372036854775808", "0", "\"12\""}) {
    const std::string body = std::string(R"({"v":{"intValue":)") + s + "}}";
    EXPECT_EQ(compacted(body), body);
  }
  // Elsewhere a number beyond a double is still refused.
  std::string out;
  EXPECT_EQ(json_to_json(R"({"startTimeUnixNano":1e999})", out).error,
            "invalid JSON: number out of range at byte 21");
}

// What json_to_json must accept, decided on nlohmann/json's reading of the body.
bool has_request_shape(const Json& body) {
  auto array_or_null = [](const Json& object, const char* key) {
    return !object.contains(key) || object.at(key).is_array() || object.at(key).is_null();
  };
  if (!body.is_object() || !array_or_null(body, "resourceSpans")) return false;
  if (!body.contains("resourceSpans") || body.at("resourceSpans").is_null()) return true;
  for (const Json& rs : body.at("resourceSpans")) {
    if (!rs.is_object() || !array_or_null(rs, "scopeSpans")) return false;
    if (!rs.contains("scopeSpans") || rs.at("scopeSpans").is_null()) continue;
    for (const Json& ss : rs.at("scopeSpans")) {
      if (!ss.is_object() || !array_or_null(ss, "spans")) return false;
    }
  }
  return true;
}

std::uint64_t count_spans(const Json& body) {
  std::uint64_t n = 0;
  if (!body.contains("resourceSpans") || body.at("resourceSpans").is_null()) return 0;
  for (const Json& rs : body.at("resourceSpans")) {
    if (!rs.contains("scopeSpans") || rs.at("scopeSpans").is_null()) continue;
    for (const Json& ss : rs.at("scopeSpans")) {
      if (ss.contains("spans") && ss.at("spans").is_array()) n += ss.at("spans").size();
    }
  }
  return n;
}

TEST(JsonToJson, AgreesWithNlohmannJsonOnMutatedBodies) {
  const std::string valid =
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"k","value":)"
      R"({"stringValue":"v\u00e9\n"}}]},"scopeSpans":[{"scope":{"name":"s"},)"
      R"("spans":[{"name":"a","kind":1,"flags":257,"attributes":[{"key":"d",)"
      R"("value":{"doubleValue":-1.5e-3}},{"key":"b","value":{"boolValue":)"
      R"(true}}],"status":{}},{"name":"b\u00e9","x":null}]},{"spans":[{}]}]}]})";
  static constexpr char kAlphabet[] = "{}[]\",:\\ \t\n0123456789-+.eEtrufalsn\x80\xc3\xa9uabcdef";
  std::mt19937_64 rng(99);
  int accepted = 0;
  for (int round = 0; round < 6000; ++round) {
    std::string body = valid;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int i = 0; i < edits; ++i) {
      const std::size_t at = rng() % body.size();
      const char c = kAlphabet[rng() % (sizeof kAlphabet - 1)];
      switch (rng() % 3) {
        case 0:
          body[at] = c;
          break;
        case 1:
          body.insert(at, 1, c);
          break;
        default:
          body.erase(at, 1);
      }
    }
    const Json reference = Json::parse(body, nullptr, /*allow_exceptions=*/false);
    const bool expected = !reference.is_discarded() && has_request_shape(reference);
    std::string out;
    const TranscodeResult r = json_to_json(body, out);
    ASSERT_EQ(r.ok, expected) << body << "\n" << r.error;
    if (r.ok) {
      ++accepted;
      EXPECT_EQ(parse(out), reference) << body;
      EXPECT_EQ(r.spans, count_spans(reference)) << body;
    }
  }
  EXPECT_GT(accepted, 300);
}

TEST(JsonToJson, RefusesNestingDeeperThan128) {
  auto nested = [](int depth) {
    return "{\"x\":" + std::string(static_cast<std::size_t>(depth - 1), '[') +
           std::string(static_cast<std::size_t>(depth - 1), ']') + "}";
  };
  std::string out;
  EXPECT_TRUE(json_to_json(nested(128), out).ok);
  out.clear();
  const TranscodeResult r = json_to_json(nested(129), out);
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.error, "JSON nested deeper than 128");
  EXPECT_TRUE(out.empty());
}

// ---- metrics and logs ----------------------------------------------------------------------

namespace pb_metrics = opentelemetry::proto::metrics::v1;
namespace pb_logs = opentelemetry::proto::logs::v1;
using MetricsRequest = opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
using LogsRequest = opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest;
using lens_cli::Signal;

std::string transcode_signal_text(std::string_view bytes, Signal signal,
                                  TranscodeResult* result = nullptr) {
  std::string out;
  const TranscodeResult r = protobuf_to_json(bytes, out, signal);
  EXPECT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 0U);
  EXPECT_EQ(out.find('\n'), std::string::npos) << "not one line: " << out;
  if (result != nullptr) *result = r;
  return out;
}

// What libprotobuf's JSON printer makes of `m` (enums as numbers), ids in hex; the request's
// signal array is always written by the transcoder, so it is added when libprotobuf left it out.
Json libprotobuf_json(const google::protobuf::Message& m, const std::string& root_key) {
  std::string reference;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_enums_as_ints = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &reference, options).ok());
  Json j = parse(reference);
  ids_to_hex(j);
  if (!j.contains(root_key)) j[root_key] = Json::array();
  return j;
}

// The transcoder's JSON of `m` equals libprotobuf's, member for member (not only without the
// defaults, as for spans).
template <class Request>
void expect_agrees_with_libprotobuf(const Request& m, Signal signal, const std::string& root_key,
                                    const std::string& context = {}) {
  std::string bytes;
  ASSERT_TRUE(m.SerializeToString(&bytes));
  const std::string text = transcode_signal_text(bytes, signal);
  const Json expected = libprotobuf_json(m, root_key);
  EXPECT_EQ(parse(text), expected)
      << context << "\nours:        " << text << "\nlibprotobuf: " << expected.dump();
}

void set_int_kv(pb_common::KeyValue* kv, const std::string& key, std::int64_t v) {
  kv->set_key(key);
  kv->mutable_value()->set_int_value(v);
}

void fill_exemplar(pb_metrics::Exemplar* e, bool with_ids) {
  set_kv(e->add_filtered_attributes(), "user", "alice");
  e->set_time_unix_nano(1'700'000'000'000'000'123ULL);
  e->set_as_double(0.25);
  if (with_ids) {
    e->set_span_id(from_hex(kSpanHex));
    e->set_trace_id(from_hex(kTraceHex));
  }
}

// Every kind of metric with every field set, and a metric without data.
MetricsRequest full_metrics_request() {
  MetricsRequest req;
  auto* rm = req.add_resource_metrics();
  set_kv(rm->mutable_resource()->add_attributes(), "service.name", "trainer");
  set_int_kv(rm->mutable_resource()->add_attributes(), "dl.rank", 3);
  rm->mutable_resource()->set_dropped_attributes_count(2);
  rm->set_schema_url("https://opentelemetry.io/schemas/1.24.0");
  auto* sm = rm->add_scope_metrics();
  sm->mutable_scope()->set_name("nemo.lens");
  sm->mutable_scope()->set_version("1.2.3");
  set_kv(sm->mutable_scope()->add_attributes(), "scope.attr", "v");
  sm->set_schema_url("https://opentelemetry.io/schemas/1.21.0");

  auto* gauge = sm->add_metrics();
  gauge->set_name("gpu.memory.used");
  gauge->set_description("bytes in use");
  gauge->set_unit("By");
  set_kv(gauge->add_metadata(), "source", "nvml");
  auto* gp = gauge->mutable_gauge()->add_data_points();
  set_int_kv(gp->add_attributes(), "gpu", 0);
  gp->set_time_unix_nano(1'700'000'000'000'000'000ULL);
  gp->set_as_double(1.5e9);
  fill_exemplar(gp->add_exemplars(), true);
  auto* gp2 = gauge->mutable_gauge()->add_data_points();
  gp2->set_as_double(0);  // a oneof member at 0: written
  gp2->set_flags(1);

  auto* sum = sm->add_metrics();
  sum->set_name("tokens");
  sum->mutable_sum()->set_aggregation_temporality(pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  sum->mutable_sum()->set_is_monotonic(true);
  auto* sp = sum->mutable_sum()->add_data_points();
  sp->set_start_time_unix_nano(1'700'000'000'000'000'000ULL);
  sp->set_time_unix_nano(18'446'744'073'709'551'615ULL);
  sp->set_as_int(std::numeric_limits<std::int64_t>::min());
  auto* ex = sp->add_exemplars();
  ex->set_as_int(-7);
  ex->set_span_id(from_hex(kSpanHex));
  sum->mutable_sum()->add_data_points()->set_as_int(0);

  auto* hist = sm->add_metrics();
  hist->set_name("step.duration");
  hist->set_unit("s");
  hist->mutable_histogram()->set_aggregation_temporality(pb_metrics::AGGREGATION_TEMPORALITY_DELTA);
  auto* hp = hist->mutable_histogram()->add_data_points();
  set_kv(hp->add_attributes(), "phase", "train");
  hp->set_start_time_unix_nano(5);
  hp->set_time_unix_nano(10);
  hp->set_count(7);
  hp->set_sum(3.25);
  for (const std::uint64_t c : {1, 0, 4, 2}) hp->add_bucket_counts(c);
  for (const double b : {0.1, 0.5, 2.5}) hp->add_explicit_bounds(b);
  fill_exemplar(hp->add_exemplars(), false);
  hp->set_flags(0);
  hp->set_min(0.05);
  hp->set_max(9.0);
  auto* hp0 = hist->mutable_histogram()->add_data_points();  // optional fields present at 0
  hp0->set_sum(0);
  hp0->set_min(0);
  hp0->set_max(-0.0);

  auto* exp = sm->add_metrics();
  exp->set_name("latency");
  exp->mutable_exponential_histogram()->set_aggregation_temporality(
      pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  auto* ep = exp->mutable_exponential_histogram()->add_data_points();
  set_kv(ep->add_attributes(), "op", "allreduce");
  ep->set_start_time_unix_nano(1);
  ep->set_time_unix_nano(2);
  ep->set_count(12);
  ep->set_sum(-4.5);
  ep->set_scale(-3);
  ep->set_zero_count(2);
  ep->mutable_positive()->set_offset(-2);
  for (const std::uint64_t c : {1ULL, 0ULL, 300ULL, 18'446'744'073'709'551'615ULL}) {
    ep->mutable_positive()->add_bucket_counts(c);
  }
  ep->mutable_negative()->set_offset(5);
  ep->set_flags(1);
  fill_exemplar(ep->add_exemplars(), true);
  ep->set_min(-1.0);
  ep->set_max(1e300);
  ep->set_zero_threshold(1e-9);
  auto* ep2 = exp->mutable_exponential_histogram()->add_data_points();
  ep2->set_scale(20);
  ep2->mutable_negative();  // present and empty

  auto* summary = sm->add_metrics();
  summary->set_name("rpc.latency");
  auto* qp = summary->mutable_summary()->add_data_points();
  set_kv(qp->add_attributes(), "method", "get");
  qp->set_start_time_unix_nano(3);
  qp->set_time_unix_nano(4);
  qp->set_count(100);
  qp->set_sum(12.5);
  auto* q0 = qp->add_quantile_values();
  q0->set_quantile(0);
  q0->set_value(0.01);
  auto* q1 = qp->add_quantile_values();
  q1->set_quantile(0.99);
  q1->set_value(0.5);
  qp->set_flags(1);

  sm->add_metrics()->set_name("no.data");
  rm->add_scope_metrics();     // an empty scope group
  req.add_resource_metrics();  // an empty resource group
  return req;
}

LogsRequest full_logs_request() {
  LogsRequest req;
  auto* rl = req.add_resource_logs();
  set_kv(rl->mutable_resource()->add_attributes(), "service.name", "trainer");
  rl->set_schema_url("https://opentelemetry.io/schemas/1.24.0");
  auto* sl = rl->add_scope_logs();
  sl->mutable_scope()->set_name("nemo.lens");
  sl->set_schema_url("u");
  auto* r = sl->add_log_records();
  r->set_time_unix_nano(1'700'000'000'000'000'001ULL);
  r->set_observed_time_unix_nano(1'700'000'000'000'000'002ULL);
  r->set_severity_number(pb_logs::SEVERITY_NUMBER_WARN);
  r->set_severity_text("WARN");
  r->mutable_body()->set_string_value("loss is NaN \"again\"\n");
  set_kv(r->add_attributes(), "code.function", "train_step");
  set_int_kv(r->add_attributes(), "iteration", 42);
  r->set_dropped_attributes_count(4);
  r->set_flags(0x01);
  r->set_trace_id(from_hex(kTraceHex));
  r->set_span_id(from_hex(kSpanHex));
  r->set_event_name("nemo.checkpoint");
  auto* structured = sl->add_log_records();
  auto* kvl = structured->mutable_body()->mutable_kvlist_value();
  set_kv(kvl->add_values(), "a", "x");
  set_int_kv(kvl->add_values(), "n", -1);
  structured->set_severity_number(static_cast<pb_logs::SeverityNumber>(-5));  // unknown, negative
  sl->add_log_records();                                                      // nothing set
  auto* empty_body = sl->add_log_records();
  empty_body->mutable_body();  // an AnyValue without a member: {}
  rl->add_scope_logs()->mutable_scope();
  req.add_resource_logs();
  return req;
}

TEST(TranscodeMetrics, AgreesWithLibprotobufJsonPrinter) {
  expect_agrees_with_libprotobuf(full_metrics_request(), Signal::kMetrics, "resourceMetrics");
}

TEST(TranscodeMetrics, CountsDataPointsOfEveryKind) {
  TranscodeResult r;
  transcode_signal_text(full_metrics_request().SerializeAsString(), Signal::kMetrics, &r);
  EXPECT_EQ(r.points, 2U + 2 + 2 + 2 + 1);
  EXPECT_EQ(r.records, 0U);
  std::string out;
  r = protobuf_to_json("", out, Signal::kMetrics);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.points, 0U);
  EXPECT_EQ(out, R"({"resourceMetrics":[]})");  // the signal's array even when empty
}

TEST(TranscodeMetrics, KeysInFieldNumberOrderAsTheLibraryWrites) {
  MetricsRequest req;
  auto* rm = req.add_resource_metrics();
  set_int_kv(rm->mutable_resource()->add_attributes(), "dl.rank", 1);
  auto* sm = rm->add_scope_metrics();
  sm->mutable_scope()->set_name("s");
  auto* m = sm->add_metrics();
  m->set_name("loss");
  m->set_unit("1");
  auto* p = m->mutable_sum()->add_data_points();
  set_kv(p->add_attributes(), "k", "v");
  p->set_as_double(2.0);
  p->set_time_unix_nano(9);
  p->set_start_time_unix_nano(8);
  m->mutable_sum()->set_aggregation_temporality(pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  auto* h = sm->add_metrics();
  h->set_name("h");
  auto* hp = h->mutable_histogram()->add_data_points();
  hp->set_max(4);
  hp->set_min(1);
  set_kv(hp->add_attributes(), "k", "v");
  hp->add_explicit_bounds(2);
  hp->add_bucket_counts(1);
  hp->add_bucket_counts(1);
  hp->set_sum(5);
  hp->set_count(2);
  EXPECT_EQ(transcode_signal_text(req.SerializeAsString(), Signal::kMetrics),
            R"({"resourceMetrics":[{"resource":{"attributes":[{"key":"dl.rank","value":)"
            R"({"intValue":"1"}}]},"scopeMetrics":[{"scope":{"name":"s"},"metrics":[)"
            R"({"name":"loss","unit":"1","sum":{"dataPoints":[{"startTimeUnixNano":"8",)"
            R"("timeUnixNano":"9","asDouble":2.0,"attributes":[{"key":"k","value":)"
            R"({"stringValue":"v"}}]}],"aggregationTemporality":2}},)"
            R"({"name":"h","histogram":{"dataPoints":[{"count":"2","sum":5.0,)"
            R"("bucketCounts":["1","1"],"explicitBounds":[2.0],"attributes":[{"key":"k",)"
            R"("value":{"stringValue":"v"}}],"min":1.0,"max":4.0}]}}]}]}]})");
}

// A random value among the kinds of AnyValue, without the empty containers whose JSON differs
// from libprotobuf's (the shared AnyValue writer always writes "values").
void random_any_value(std::mt19937_64& rng, pb_common::AnyValue* v, int depth = 0) {
  switch (rng() % (depth < 2 ? 6 : 4)) {
    case 0:
      v->set_string_value("s" + std::to_string(rng() % 100));
      break;
    case 1:
      v->set_bool_value(rng() % 2 != 0);
      break;
    case 2:
      v->set_int_value(static_cast<std::int64_t>(rng()));
      break;
    case 3:
      v->set_double_value(
          std::ldexp(static_cast<double>(rng() >> 11), -static_cast<int>(rng() % 80)));
      break;
    case 4:
      random_any_value(rng, v->mutable_array_value()->add_values(), depth + 1);
      break;
    default: {
      auto* kv = v->mutable_kvlist_value()->add_values();
      kv->set_key("n");
      random_any_value(rng, kv->mutable_value(), depth + 1);
    }
  }
}

void random_attributes(std::mt19937_64& rng,
                       google::protobuf::RepeatedPtrField<pb_common::KeyValue>* attributes) {
  const std::uint64_t n = rng() % 3;
  for (std::uint64_t i = 0; i < n; ++i) {
    auto* kv = attributes->Add();
    kv->set_key("k" + std::to_string(i));
    random_any_value(rng, kv->mutable_value());
  }
}

double random_double(std::mt19937_64& rng) {
  switch (rng() % 8) {
    case 0:
      return 0;
    case 1:
      return std::numeric_limits<double>::quiet_NaN();
    case 2:
      return -std::numeric_limits<double>::infinity();
    default:
      return std::ldexp(static_cast<double>(static_cast<std::int64_t>(rng()) >> 11),
                        static_cast<int>(rng() % 120) - 60);
  }
}

std::uint64_t random_u64(std::mt19937_64& rng) {
  return rng() % 3 == 0 ? 0 : rng() >> (rng() % 64);
}

void random_exemplars(std::mt19937_64& rng,
                      google::protobuf::RepeatedPtrField<pb_metrics::Exemplar>* exemplars) {
  if (rng() % 3 != 0) return;
  auto* e = exemplars->Add();
  if (rng() % 2 != 0) random_attributes(rng, e->mutable_filtered_attributes());
  e->set_time_unix_nano(random_u64(rng));
  if (rng() % 2 != 0)
    e->set_as_int(static_cast<std::int64_t>(rng()));
  else
    e->set_as_double(random_double(rng));
  if (rng() % 2 != 0) e->set_span_id(from_hex(kSpanHex));
  if (rng() % 2 != 0) e->set_trace_id(from_hex(kTraceHex));
}

MetricsRequest random_metrics_request(std::mt19937_64& rng) {
  MetricsRequest req;
  const std::uint64_t groups = rng() % 3;
  for (std::uint64_t g = 0; g < groups; ++g) {
    auto* rm = req.add_resource_metrics();
    if (rng() % 2 != 0) random_attributes(rng, rm->mutable_resource()->mutable_attributes());
    const std::uint64_t scopes = rng() % 3;
    for (std::uint64_t s = 0; s < scopes; ++s) {
      auto* sm = rm->add_scope_metrics();
      if (rng() % 2 != 0) sm->mutable_scope()->set_name("scope" + std::to_string(s));
      const std::uint64_t metrics = rng() % 4;
      for (std::uint64_t k = 0; k < metrics; ++k) {
        auto* m = sm->add_metrics();
        m->set_name("m" + std::to_string(k));
        if (rng() % 3 == 0) m->set_unit("ms");
        const std::uint64_t points = rng() % 3;
        const std::uint64_t kind = rng() % 6;
        for (std::uint64_t i = 0; i < points || kind == 5; ++i) {
          if (kind == 5) break;  // no data
          if (kind <= 1) {
            auto* p = kind == 0 ? m->mutable_gauge()->add_data_points()
                                : m->mutable_sum()->add_data_points();
            random_attributes(rng, p->mutable_attributes());
            p->set_start_time_unix_nano(random_u64(rng));
            p->set_time_unix_nano(random_u64(rng));
            if (rng() % 4 == 0) {
            } else if (rng() % 2 != 0) {
              p->set_as_int(static_cast<std::int64_t>(rng()));
            } else {
              p->set_as_double(random_double(rng));
            }
            random_exemplars(rng, p->mutable_exemplars());
            p->set_flags(static_cast<std::uint32_t>(rng() % 3));
          } else if (kind == 2) {
            auto* p = m->mutable_histogram()->add_data_points();
            random_attributes(rng, p->mutable_attributes());
            p->set_time_unix_nano(random_u64(rng));
            p->set_count(random_u64(rng));
            if (rng() % 2 != 0) p->set_sum(random_double(rng));
            const std::uint64_t buckets = rng() % 5;
            for (std::uint64_t b = 0; b < buckets; ++b) {
              p->add_bucket_counts(random_u64(rng));
              if (b > 0) p->add_explicit_bounds(random_double(rng));
            }
            random_exemplars(rng, p->mutable_exemplars());
            if (rng() % 2 != 0) p->set_min(random_double(rng));
            if (rng() % 2 != 0) p->set_max(random_double(rng));
          } else if (kind == 3) {
            auto* p = m->mutable_exponential_histogram()->add_data_points();
            random_attributes(rng, p->mutable_attributes());
            p->set_count(random_u64(rng));
            p->set_scale(static_cast<std::int32_t>(rng() % 41) - 20);
            p->set_zero_count(random_u64(rng));
            if (rng() % 2 != 0) {
              p->mutable_positive()->set_offset(static_cast<std::int32_t>(rng()));
              for (std::uint64_t b = rng() % 4; b > 0; --b) {
                p->mutable_positive()->add_bucket_counts(random_u64(rng));
              }
            }
            if (rng() % 3 == 0) p->mutable_negative()->add_bucket_counts(random_u64(rng));
            if (rng() % 2 != 0) p->set_zero_threshold(random_double(rng));
            if (rng() % 2 != 0) p->set_max(random_double(rng));
          } else {
            auto* p = m->mutable_summary()->add_data_points();
            p->set_count(random_u64(rng));
            p->set_sum(random_double(rng));
            for (std::uint64_t q = rng() % 3; q > 0; --q) {
              auto* v = p->add_quantile_values();
              v->set_quantile(static_cast<double>(rng() % 101) / 100);
              v->set_value(random_double(rng));
            }
          }
        }
        if (kind == 1) {
          m->mutable_sum()->set_aggregation_temporality(
              static_cast<pb_metrics::AggregationTemporality>(rng() % 3));
          m->mutable_sum()->set_is_monotonic(rng() % 2 != 0);
        } else if (kind == 2 && rng() % 2 != 0) {
          m->mutable_histogram()->set_aggregation_temporality(
              pb_metrics::AGGREGATION_TEMPORALITY_DELTA);
        } else if (kind == 3) {
          m->mutable_exponential_histogram()->set_aggregation_temporality(
              pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
        }
      }
    }
  }
  return req;
}

TEST(TranscodeMetrics, AgreesWithLibprotobufOnRandomRequests) {
  std::mt19937_64 rng(20250101);
  for (int round = 0; round < 300; ++round) {
    const MetricsRequest req = random_metrics_request(rng);
    expect_agrees_with_libprotobuf(req, Signal::kMetrics, "resourceMetrics",
                                   "round " + std::to_string(round));
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(TranscodeMetrics, PackedAndUnpackedRepeatedScalarsMixed) {
  auto fixed = [](std::initializer_list<std::uint64_t> values) {
    std::string s;
    for (std::uint64_t v : values) {
      for (int i = 0; i < 8; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
    }
    return s;
  };
  auto bits = [](double d) {
    std::uint64_t b = 0;
    std::memcpy(&b, &d, sizeof b);
    return b;
  };
  // bucket_counts: packed [1, 2], unpacked 3, packed [4]; explicit_bounds: unpacked, packed.
  const std::string point = Bytes()
                                .len(6, fixed({1, 2}))
                                .fixed64(7, bits(0.5))
                                .fixed64(6, 3)
                                .len(7, fixed({bits(1.5), bits(2.5)}))
                                .len(6, fixed({4}))
                                .len(6, "")  // an empty packed run
                                .s;
  // Buckets.bucket_counts (uint64): packed varints, then unpacked.
  const std::string buckets =
      Bytes().len(2, Bytes().varint(1).varint(300).varint(std::uint64_t{1} << 63).s).uint(2, 7).s;
  const std::string exp_point = Bytes().len(8, buckets).s;
  const std::string metrics =
      Bytes()
          .len(2, Bytes().len(1, "h").len(9, Bytes().len(1, point).s).s)
          .len(2, Bytes().len(1, "e").len(10, Bytes().len(1, exp_point).s).s)
          .s;
  const std::string bytes = Bytes().len(1, Bytes().len(2, metrics).s).s;
  MetricsRequest parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  const auto& hp =
      parsed.resource_metrics(0).scope_metrics(0).metrics(0).histogram().data_points(0);
  ASSERT_EQ(hp.bucket_counts_size(), 4);
  EXPECT_EQ(hp.explicit_bounds_size(), 3);
  expect_agrees_with_libprotobuf(parsed, Signal::kMetrics, "resourceMetrics");
  const Json j = parse(transcode_signal_text(bytes, Signal::kMetrics));
  const Json& m = j.at("resourceMetrics").at(0).at("scopeMetrics").at(0).at("metrics");
  EXPECT_EQ(m.at(0).at("histogram").at("dataPoints").at(0).at("bucketCounts"),
            Json::parse(R"(["1","2","3","4"])"));
  EXPECT_EQ(m.at(0).at("histogram").at("dataPoints").at(0).at("explicitBounds"),
            Json::parse("[0.5,1.5,2.5]"));
  EXPECT_EQ(m.at(1).at("exponentialHistogram").at("dataPoints").at(0).at("positive"),
            Json::parse(R"({"bucketCounts":["1","300","9223372036854775808","7"]})"));
}

TEST(TranscodeMetrics, TheLastDataMemberWinsAndOnlyItsPointsCount) {
  const std::string gauge = Bytes().len(1, Bytes().fixed64(4, 0).s).len(1, "").s;  // 2 points
  const std::string sum = Bytes().len(1, Bytes().fixed64(6, 5).s).uint(2, 1).s;    // 1 point
  const std::string metric = Bytes().len(1, "x").len(5, gauge).len(7, sum).s;
  const std::string bytes = Bytes().len(1, Bytes().len(2, Bytes().len(2, metric).s).s).s;
  TranscodeResult r;
  const Json j = parse(transcode_signal_text(bytes, Signal::kMetrics, &r));
  EXPECT_EQ(r.points, 1U);
  EXPECT_EQ(j.at("resourceMetrics").at(0).at("scopeMetrics").at(0).at("metrics").at(0),
            Json::parse(R"({"name":"x","sum":{"dataPoints":[{"asInt":"5"}],
                            "aggregationTemporality":1}})"));
  // The superseded member is still checked.
  const std::string bad_gauge = Bytes().len(1, Bytes().uint(4, 1).s).s;  // asDouble as a varint
  const std::string bad = Bytes().len(1, "x").len(5, bad_gauge).len(7, sum).s;
  EXPECT_THAT(
      transcode_error(Bytes().len(1, Bytes().len(2, Bytes().len(2, bad).s).s).s, Signal::kMetrics)
          .error,
      HasSubstr("field 4 of NumberDataPoint has wire type 0, expected 1"));
}

TEST(TranscodeMetrics, NamesWhatIsWrong) {
  auto in_point = [](const std::string& histogram_point) {
    const std::string metric = Bytes().len(1, "h").len(9, Bytes().len(1, histogram_point).s).s;
    return Bytes().len(1, Bytes().len(2, Bytes().len(2, metric).s).s).s;
  };
  EXPECT_THAT(
      transcode_error(in_point(Bytes().len(6, std::string(12, '\0')).s), Signal::kMetrics).error,
      HasSubstr("packed field 6 of HistogramDataPoint is 12 bytes long, not a multiple of 8"));
  EXPECT_THAT(
      transcode_error(in_point(Bytes().fixed32(7, 1).s), Signal::kMetrics).error,
      HasSubstr("field 7 of HistogramDataPoint has wire type 5, expected 1 (or 2, packed)"));
  EXPECT_THAT(transcode_error(in_point(Bytes().uint(4, 1).s), Signal::kMetrics).error,
              HasSubstr("field 4 of HistogramDataPoint has wire type 0, expected 1"));
  EXPECT_THAT(
      transcode_error(in_point(Bytes().len(8, Bytes().len(4, "123").s).s), Signal::kMetrics).error,
      HasSubstr("Exemplar.span_id is 3 bytes long, expected 8 (or 0)"));
  EXPECT_THAT(
      transcode_error(in_point(Bytes().len(8, Bytes().len(5, "123").s).s), Signal::kMetrics).error,
      HasSubstr("Exemplar.trace_id is 3 bytes long, expected 16 (or 0)"));
  // A packed varint run cut inside a varint.
  const std::string exp_point = Bytes().len(8, Bytes().len(2, "\x01\x80").s).s;
  const std::string metric = Bytes().len(1, "e").len(10, Bytes().len(1, exp_point).s).s;
  EXPECT_THAT(transcode_error(Bytes().len(1, Bytes().len(2, Bytes().len(2, metric).s).s).s,
                              Signal::kMetrics)
                  .error,
              HasSubstr("truncated varint at byte"));
  EXPECT_THAT(
      transcode_error(Bytes().len(1, Bytes().len(2, Bytes().uint(1, 3).s).s).s, Signal::kMetrics)
          .error,
      HasSubstr("field 1 of ScopeMetrics has wire type 0, expected 2"));
  EXPECT_THAT(
      transcode_error(Bytes().len(1, Bytes().len(2, Bytes().len(2, Bytes().uint(1, 3).s).s).s).s,
                      Signal::kMetrics)
          .error,
      HasSubstr("field 1 of Metric has wire type 0, expected 2"));
  EXPECT_THAT(transcode_error(Bytes().uint(1, 1).s, Signal::kMetrics).error,
              HasSubstr("field 1 of ExportMetricsServiceRequest has wire type 0, expected 2"));
}

TEST(TranscodeLogs, AgreesWithLibprotobufJsonPrinter) {
  expect_agrees_with_libprotobuf(full_logs_request(), Signal::kLogs, "resourceLogs");
  TranscodeResult r;
  transcode_signal_text(full_logs_request().SerializeAsString(), Signal::kLogs, &r);
  EXPECT_EQ(r.records, 4U);
  EXPECT_EQ(r.points, 0U);
}

TEST(TranscodeLogs, AgreesWithLibprotobufOnRandomRequests) {
  std::mt19937_64 rng(77);
  for (int round = 0; round < 300; ++round) {
    LogsRequest req;
    for (std::uint64_t g = rng() % 3; g > 0; --g) {
      auto* rl = req.add_resource_logs();
      if (rng() % 2 != 0) random_attributes(rng, rl->mutable_resource()->mutable_attributes());
      for (std::uint64_t s = rng() % 3; s > 0; --s) {
        auto* sl = rl->add_scope_logs();
        if (rng() % 2 != 0) sl->mutable_scope()->set_name("logger");
        for (std::uint64_t k = rng() % 4; k > 0; --k) {
          auto* r = sl->add_log_records();
          r->set_time_unix_nano(random_u64(rng));
          r->set_observed_time_unix_nano(random_u64(rng));
          r->set_severity_number(static_cast<pb_logs::SeverityNumber>(rng() % 25));
          if (rng() % 2 != 0) r->set_severity_text("INFO");
          if (rng() % 3 != 0) random_any_value(rng, r->mutable_body());
          random_attributes(rng, r->mutable_attributes());
          r->set_dropped_attributes_count(static_cast<std::uint32_t>(rng() % 3));
          r->set_flags(static_cast<std::uint32_t>(rng() % 2));
          if (rng() % 2 != 0) r->set_trace_id(from_hex(kTraceHex));
          if (rng() % 2 != 0) r->set_span_id(from_hex(kSpanHex));
          if (rng() % 3 == 0) r->set_event_name("event");
        }
      }
    }
    expect_agrees_with_libprotobuf(req, Signal::kLogs, "resourceLogs",
                                   "round " + std::to_string(round));
    if (::testing::Test::HasFailure()) break;
  }
}

TEST(TranscodeLogs, NamesWhatIsWrong) {
  auto with_record = [](const std::string& record) {
    return Bytes().len(1, Bytes().len(2, Bytes().len(2, record).s).s).s;
  };
  EXPECT_THAT(transcode_error(with_record(Bytes().len(9, "12345").s), Signal::kLogs).error,
              HasSubstr("LogRecord.trace_id is 5 bytes long, expected 16 (or 0)"));
  EXPECT_THAT(transcode_error(with_record(Bytes().len(10, "123").s), Signal::kLogs).error,
              HasSubstr("LogRecord.span_id is 3 bytes long, expected 8 (or 0)"));
  EXPECT_THAT(transcode_error(with_record(Bytes().fixed64(8, 1).s), Signal::kLogs).error,
              HasSubstr("field 8 of LogRecord has wire type 1, expected 5"));
  EXPECT_THAT(
      transcode_error(with_record(Bytes().len(5, Bytes().uint(1, 1).s).s), Signal::kLogs).error,
      HasSubstr("field 1 of AnyValue has wire type 0, expected 2"));
  // The reserved field 4 (the old name) is skipped whatever its wire type.
  std::string out;
  EXPECT_TRUE(protobuf_to_json(with_record(Bytes().uint(4, 1).s), out, Signal::kLogs).ok);
  EXPECT_THAT(transcode_error(Bytes().uint(1, 1).s, Signal::kLogs).error,
              HasSubstr("field 1 of ExportLogsServiceRequest has wire type 0, expected 2"));
}

TEST(TranscodeSignals, EveryTruncationIsRefusedOrYieldsValidJson) {
  const std::pair<std::string, Signal> inputs[] = {
      {full_metrics_request().SerializeAsString(), Signal::kMetrics},
      {full_logs_request().SerializeAsString(), Signal::kLogs}};
  for (const auto& [bytes, signal] : inputs) {
    std::size_t accepted = 0;
    for (std::size_t n = 0; n < bytes.size(); ++n) {
      const std::string prefix = bytes.substr(0, n);
      std::string out = "kept";
      const TranscodeResult r = protobuf_to_json(prefix, out, signal);
      if (r.ok) {
        ++accepted;
        parse(out.substr(4));
      } else {
        EXPECT_EQ(out, "kept") << "prefix " << n;
        EXPECT_NE(r.error.find(" at byte "), std::string::npos) << r.error;
        EXPECT_EQ(r.points + r.records, 0U);
      }
    }
    EXPECT_GE(accepted, 1U);
    EXPECT_LT(accepted, 10U);
  }
}

TEST(TranscodeSignals, MutatedAndRandomInputNeverCrashes) {
  std::mt19937_64 rng(11);
  const std::pair<std::string, Signal> inputs[] = {
      {full_metrics_request().SerializeAsString(), Signal::kMetrics},
      {full_logs_request().SerializeAsString(), Signal::kLogs}};
  for (int round = 0; round < 4000; ++round) {
    const auto& [valid, signal] = inputs[round % 2];
    std::string input = valid;
    if (round % 4 < 2) {
      for (int i = 1 + static_cast<int>(rng() % 4); i > 0; --i) {
        input[rng() % input.size()] = static_cast<char>(rng());
      }
    } else {
      input.resize(rng() % 64);
      for (char& c : input) c = static_cast<char>(rng());
    }
    std::string out;
    const TranscodeResult r = protobuf_to_json(input, out, signal);
    if (r.ok) {
      parse(out);
      std::string again;  // what the protobuf decoder writes, the JSON decoder takes as is
      const TranscodeResult j = json_to_json(out, again, signal);
      EXPECT_TRUE(j.ok) << j.error;
      EXPECT_EQ(again, out);
      EXPECT_EQ(j.points, r.points);
      EXPECT_EQ(j.records, r.records);
    } else {
      EXPECT_TRUE(out.empty());
      EXPECT_FALSE(r.error.empty());
    }
  }
}

// The library's metrics and logs writers and the transcoder agree byte for byte: the library's
// protobuf, transcoded, is its JSON.
TEST(TranscodeSignals, IdenticalToTheLibraryWritersOutput) {
  using namespace nemo::lens;
  using detail::HistogramPoint;
  using detail::MetricData;
  using detail::MetricKind;
  using detail::NumberPoint;
  Resource resource;
  resource.attributes = {{"service.name", std::string("trainer")}, {"dl.rank", std::int64_t{3}}};
  MetricData counter;
  counter.scope_name = "nemo.lens";
  counter.scope_version = "1.0";
  counter.name = "tokens";
  counter.unit = "{token}";
  counter.kind = MetricKind::kSum;
  counter.monotonic = true;
  NumberPoint a;
  a.attributes = {{"phase", std::string("train")}};
  a.start_time_unix_nano = 1'700'000'000'000'000'000;
  a.time_unix_nano = 1'700'000'001'000'000'000;
  a.value = std::int64_t{12800};
  counter.number_points = {a};
  MetricData gauge;
  gauge.scope_name = "nemo.lens";
  gauge.name = "lr";
  gauge.kind = MetricKind::kGauge;
  NumberPoint g;
  g.time_unix_nano = 1'700'000'001'000'000'000;
  g.value = 3e-4;
  gauge.number_points = {g};
  MetricData histogram;
  histogram.scope_name = "other";
  histogram.name = "step.duration";
  histogram.description = "seconds per step";
  histogram.unit = "s";
  histogram.kind = MetricKind::kHistogram;
  histogram.temporality = detail::Temporality::kDelta;
  HistogramPoint h;
  h.start_time_unix_nano = 5;
  h.time_unix_nano = 10;
  h.count = 3;
  h.sum = 1.5;
  h.bucket_counts = {1, 2, 0};
  h.explicit_bounds = {0.25, 1.0};
  h.min = 0.1;
  h.max = 0.9;
  HistogramPoint empty;
  empty.time_unix_nano = 10;
  empty.bucket_counts = {0, 0, 0};
  empty.explicit_bounds = {0.25, 1.0};
  histogram.histogram_points = {h, empty};
  const std::vector<MetricData> metrics = {counter, gauge, histogram};
  for (const Resource& r : {resource, Resource{}}) {
    std::string proto, library_json;
    detail::append_otlp_metrics_proto(proto, metrics, r);
    detail::append_otlp_metrics_json(library_json, metrics, r);
    EXPECT_EQ(transcode_signal_text(proto, Signal::kMetrics), library_json);
  }

  detail::LogRecordData in_span;
  in_span.scope_name = "nemo.lens";
  in_span.time_unix_nano = 1'700'000'000'000'000'001;
  in_span.observed_time_unix_nano = 1'700'000'000'000'000'002;
  in_span.severity_number = 13;
  in_span.severity_text = "WARN";
  in_span.body = "loss is NaN \"again\"\n";
  in_span.attributes = {{"iteration", std::int64_t{42}}, {"tags", std::vector<std::string>{"a"}}};
  in_span.dropped_attributes_count = 2;
  in_span.trace_id = *TraceId::from_hex(kTraceHex);
  in_span.span_id = *SpanId::from_hex(kSpanHex);
  in_span.trace_flags = 1;
  detail::LogRecordData plain;
  plain.scope_name = "spdlog";
  plain.time_unix_nano = 7;
  plain.severity_number = 9;
  const std::vector<detail::LogRecordData> records = {in_span, plain};
  for (const Resource& r : {resource, Resource{}}) {
    std::string proto, library_json;
    detail::append_otlp_logs_proto(proto, records, r);
    detail::append_otlp_logs_json(library_json, records, r);
    EXPECT_EQ(transcode_signal_text(proto, Signal::kLogs), library_json);
  }
}

// ---- json_to_json: metrics and logs ------------------------------------------------------

TEST(JsonToJson, CountsDataPointsAndLogRecords) {
  const std::string metrics = R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[
      {"name":"a","gauge":{"dataPoints":[{"asDouble":1},{"asDouble":2}]}},
      {"name":"b","sum":{"dataPoints":[{"asInt":"3"}],"aggregationTemporality":2}},
      {"name":"c","histogram":{"dataPoints":[{"count":"1"}]},"summary":{"dataPoints":[{}]}},
      {"name":"d","exponentialHistogram":null,"gauge":{"dataPoints":null}},
      {"name":"e","other":{"dataPoints":[{},{}]}}]},{}]},{"scopeMetrics":null}]})";
  std::string out;
  TranscodeResult r = json_to_json(metrics, out, Signal::kMetrics);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.points, 5U);
  EXPECT_EQ(r.spans, 0U);
  EXPECT_EQ(parse(out), Json::parse(metrics));
  const std::string logs =
      R"({"resourceLogs":[{"scopeLogs":[{"logRecords":[{"body":{"stringValue":"x"}},{}]},)"
      R"({"logRecords":[{}]}]}]})";
  out.clear();
  r = json_to_json(logs, out, Signal::kLogs);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.records, 3U);
  EXPECT_EQ(out, logs);
  // Another signal's request is only an object with unknown members.
  out.clear();
  r = json_to_json(logs, out, Signal::kMetrics);
  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.points, 0U);
}

TEST(JsonToJson, IsTheIdentityOnTranscodedMetricsAndLogs) {
  const std::pair<std::string, Signal> inputs[] = {
      {full_metrics_request().SerializeAsString(), Signal::kMetrics},
      {full_logs_request().SerializeAsString(), Signal::kLogs}};
  for (const auto& [bytes, signal] : inputs) {
    TranscodeResult proto;
    const std::string line = transcode_signal_text(bytes, signal, &proto);
    std::string out;
    const TranscodeResult r = json_to_json(line, out, signal);
    ASSERT_TRUE(r.ok) << r.error;
    EXPECT_EQ(out, line);
    EXPECT_EQ(r.points, proto.points);
    EXPECT_EQ(r.records, proto.records);
  }
}

TEST(JsonToJson, RefusesWhatIsNotAMetricsOrLogsRequest) {
  auto refused = [](std::string_view body, Signal signal) {
    std::string out = "kept";
    const TranscodeResult r = json_to_json(body, out, signal);
    EXPECT_FALSE(r.ok) << body;
    EXPECT_EQ(out, "kept") << body;
    return r.error;
  };
  const Signal m = Signal::kMetrics;
  EXPECT_EQ(refused(R"({"resourceMetrics":{}})", m), "resourceMetrics is not an array");
  EXPECT_EQ(refused(R"({"resourceMetrics":[1]})", m),
            "an element of resourceMetrics is not an object");
  EXPECT_EQ(refused(R"({"resourceMetrics":[{"scopeMetrics":{}}]})", m),
            "resourceMetrics[].scopeMetrics is not an array");
  EXPECT_EQ(refused(R"({"resourceMetrics":[{"scopeMetrics":["x"]}]})", m),
            "an element of resourceMetrics[].scopeMetrics is not an object");
  EXPECT_EQ(refused(R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":3}]}]})", m),
            "resourceMetrics[].scopeMetrics[].metrics is not an array");
  EXPECT_EQ(refused(R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[[]]}]}]})", m),
            "an element of resourceMetrics[].scopeMetrics[].metrics is not an object");
  EXPECT_EQ(refused(R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"sum":[]}]}]}]})", m),
            "resourceMetrics[].scopeMetrics[].metrics[].sum is not an object");
  EXPECT_EQ(
      refused(
          R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"histogram":{"dataPoints":{}}}]}]}]})",
          m),
      "resourceMetrics[].scopeMetrics[].metrics[].histogram.dataPoints is not an array");
  const Signal l = Signal::kLogs;
  EXPECT_EQ(refused(R"({"resourceLogs":"x"})", l), "resourceLogs is not an array");
  EXPECT_EQ(refused(R"({"resourceLogs":[{"scopeLogs":[{"logRecords":{}}]}]})", l),
            "resourceLogs[].scopeLogs[].logRecords is not an array");
  EXPECT_EQ(refused(R"({"resourceLogs":[{"scopeLogs":[1]}]})", l),
            "an element of resourceLogs[].scopeLogs is not an object");
  EXPECT_EQ(refused("[]", l), "the body is not a JSON object");
}

}  // namespace
