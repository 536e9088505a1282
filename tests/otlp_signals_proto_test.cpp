// The hand-written OTLP encodings of metrics and logs (append_otlp_metrics_proto / _json,
// append_otlp_logs_proto / _json in src/export/otlp_metrics.cpp and otlp_logs.cpp) checked with an
// independent implementation: the distribution's libprotobuf and classes generated from .proto
// files written from the specification (tests/proto).
//
// Every request built here goes through the same checks (encode()):
// - the protobuf decodes with libprotobuf, and libprotobuf re-serializes the decoded message to
//   exactly the same bytes (fields in field-number order, proto3 defaults left out, packed
//   repeated scalars, shortest lengths);
// - the JSON parses with nlohmann/json and equals libprotobuf's JSON printing of the decoded
//   message (enums as integers), ids aside: OTLP/JSON writes them in hex where the protobuf JSON
//   mapping has base64, so the test turns ours into base64 before comparing;
// - libprotobuf's JsonStringToMessage reads that JSON back into the same message (byte for byte
//   once serialized).
// The tests then check the decoded messages field by field.
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "export/otlp_signals.hpp"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"

namespace {

using namespace nemo::lens;
using detail::HistogramPoint;
using detail::LogRecordData;
using detail::MetricData;
using detail::MetricKind;
using detail::NumberPoint;
using detail::Temporality;
namespace pb_common = opentelemetry::proto::common::v1;
namespace pb_metrics = opentelemetry::proto::metrics::v1;
namespace pb_logs = opentelemetry::proto::logs::v1;
using MetricsRequest = opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
using LogsRequest = opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest;
using Json = nlohmann::json;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr std::int64_t kT0 = 1'700'000'000'000'000'000;
constexpr char kTraceHex[] = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr char kSpanHex[] = "00f067aa0ba902b7";

// ---- Independent helpers -----------------------------------------------------------------------

std::string from_hex(std::string_view hex) {
  std::string out;
  for (std::size_t i = 0; i + 1 < hex.size(); i += 2) {
    out.push_back(static_cast<char>(std::stoi(std::string(hex.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

// Standard base64 (RFC 4648 with padding): the protobuf JSON mapping's form of bytes.
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

// OTLP/JSON's hex ids (LogRecord's traceId and spanId) as the protobuf JSON mapping's base64.
void hex_ids_to_base64(Json& j) {
  if (j.is_array()) {
    for (Json& v : j) hex_ids_to_base64(v);
  } else if (j.is_object()) {
    for (auto& [key, v] : j.items()) {
      if ((key == "traceId" || key == "spanId") && v.is_string()) {
        v = base64_encode(from_hex(v.get<std::string>()));
      } else {
        hex_ids_to_base64(v);
      }
    }
  }
}

// The one other known difference: the AnyValue writer shared with the span encoding always writes
// an arrayValue's "values" (possibly []), where libprotobuf leaves an empty repeated field out.
void empty_array_values_dropped(Json& j) {
  if (j.is_array()) {
    for (Json& v : j) empty_array_values_dropped(v);
  } else if (j.is_object()) {
    for (auto& [key, v] : j.items()) {
      if (key == "arrayValue" && v.is_object() && v.contains("values") && v["values"].empty()) {
        v.erase("values");
      }
      empty_array_values_dropped(v);
    }
  }
}

std::string bytes_of(const auto& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}

// ---- The checks every request goes through -----------------------------------------------------

// What encode() returns: the decoded request and both encodings.
template <class Request>
struct Encoded {
  Request request;
  std::string proto;
  Json json;  // our JSON, parsed (ids still hex)
  std::string json_text;
};

template <class Request>
void check_json(const Encoded<Request>& e) {
  ASSERT_FALSE(e.json.is_discarded()) << "not JSON: " << e.json_text.substr(0, 2000);
  // Equal to libprotobuf's printing of the decoded message.
  std::string reference;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_enums_as_ints = true;
  ASSERT_TRUE(google::protobuf::util::MessageToJsonString(e.request, &reference, options).ok());
  const Json expected = Json::parse(reference);
  Json ours = e.json;
  hex_ids_to_base64(ours);
  empty_array_values_dropped(ours);
  EXPECT_EQ(ours, expected) << "ours:        " << e.json_text.substr(0, 2000)
                            << "\nlibprotobuf: " << reference.substr(0, 2000);
  // Read back by libprotobuf: the same message.
  Json readable = e.json;
  hex_ids_to_base64(readable);
  Request parsed;
  const auto status = google::protobuf::util::JsonStringToMessage(readable.dump(), &parsed);
  ASSERT_TRUE(status.ok()) << status.ToString() << "\n" << e.json_text.substr(0, 2000);
  EXPECT_TRUE(parsed.SerializeAsString() == e.proto) << "JSON read back differs from the protobuf";
}

template <class Request, class Item, class EncodeProto, class EncodeJson>
Encoded<Request> encode(const std::vector<Item>& items, const Resource& resource,
                        EncodeProto encode_proto, EncodeJson encode_json) {
  Encoded<Request> e;
  encode_proto(e.proto, std::span<const Item>(items), resource);
  EXPECT_TRUE(e.request.ParseFromString(e.proto));
  // libprotobuf writes the decoded message back byte for byte.
  EXPECT_TRUE(e.request.SerializeAsString() == e.proto)
      << "libprotobuf serializes the decoded message differently";
  // Appending keeps what the buffer held.
  std::string appended = "prefix";
  encode_proto(appended, std::span<const Item>(items), resource);
  EXPECT_TRUE(appended == "prefix" + e.proto);

  encode_json(e.json_text, std::span<const Item>(items), resource);
  e.json = Json::parse(e.json_text, nullptr, /*allow_exceptions=*/false);
  EXPECT_EQ(e.json_text.find('\n'), std::string::npos);
  appended = "prefix";
  encode_json(appended, std::span<const Item>(items), resource);
  EXPECT_TRUE(appended == "prefix" + e.json_text);
  check_json(e);
  return e;
}

Encoded<MetricsRequest> encode_metrics(const std::vector<MetricData>& metrics,
                                       const Resource& resource = {}) {
  return encode<MetricsRequest>(metrics, resource, detail::append_otlp_metrics_proto,
                                detail::append_otlp_metrics_json);
}

Encoded<LogsRequest> encode_logs(const std::vector<LogRecordData>& records,
                                 const Resource& resource = {}) {
  return encode<LogsRequest>(records, resource, detail::append_otlp_logs_proto,
                             detail::append_otlp_logs_json);
}

// ---- Test data ---------------------------------------------------------------------------------

Resource test_resource() {
  Resource r;
  r.attributes = {{"service.name", std::string("trainer")}, {"dl.rank", std::int64_t{3}}};
  return r;
}

// One attribute of every AttributeValue kind, with edge values.
std::vector<KeyValue> every_kind_of_attribute() {
  return {{"flag", true},
          {"off", false},
          {"count", std::int64_t{-42}},
          {"min", std::numeric_limits<std::int64_t>::min()},
          {"zero", std::int64_t{0}},
          {"loss", 0.125},
          {"nan", kNaN},
          {"inf", -kInf},
          {"name", std::string("mlp \"quoted\" \xce\xbb\n")},
          {"empty", std::string()},
          {"flags", std::vector<bool>{true, false}},
          {"sizes", std::vector<std::int64_t>{1, -2, 300}},
          {"rates", std::vector<double>{0.5, -1.0, kInf}},
          {"tags", std::vector<std::string>{"a", ""}},
          {"none", std::vector<std::string>{}}};
}

MetricData number_metric(MetricKind kind, std::string name, std::vector<NumberPoint> points) {
  MetricData m;
  m.scope_name = "nemo.lens";
  m.scope_version = "1.2.3";
  m.name = std::move(name);
  m.kind = kind;
  m.number_points = std::move(points);
  return m;
}

NumberPoint point(std::variant<std::int64_t, double> value, std::int64_t start, std::int64_t time,
                  std::vector<KeyValue> attributes = {}) {
  NumberPoint p;
  p.value = value;
  p.start_time_unix_nano = start;
  p.time_unix_nano = time;
  p.attributes = std::move(attributes);
  return p;
}

const pb_common::AnyValue* find(const google::protobuf::RepeatedPtrField<pb_common::KeyValue>& kvs,
                                const std::string& key) {
  for (const auto& kv : kvs) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

const pb_metrics::Metric& only_metric(const MetricsRequest& request) {
  return request.resource_metrics(0).scope_metrics(0).metrics(0);
}

// ---- Metrics -----------------------------------------------------------------------------------

TEST(OtlpMetrics, SumsWithIntAndDoubleValuesBothTemporalities) {
  MetricData counter = number_metric(
      MetricKind::kSum, "lens.spans.exported",
      {point(std::int64_t{42}, kT0, kT0 + 5, {{"exporter", std::string("otlp")}}),
       point(std::numeric_limits<std::int64_t>::max(), kT0, kT0 + 5, {{"exporter", std::string("file")}}),
       point(std::int64_t{0}, kT0, kT0 + 5)});
  counter.description = "Spans handed to the exporter";
  counter.unit = "{span}";
  counter.monotonic = true;
  counter.temporality = Temporality::kCumulative;
  MetricData updown = number_metric(MetricKind::kSum, "queue.depth",
                                    {point(-2.5, kT0 + 1, kT0 + 2), point(0.0, kT0 + 1, kT0 + 2),
                                     point(std::int64_t{-7}, kT0 + 1, kT0 + 2)});
  updown.monotonic = false;
  updown.temporality = Temporality::kDelta;

  auto e = encode_metrics({counter, updown}, test_resource());
  ASSERT_EQ(e.request.resource_metrics_size(), 1);
  const auto& rm = e.request.resource_metrics(0);
  ASSERT_EQ(rm.resource().attributes_size(), 2);
  EXPECT_EQ(rm.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rm.resource().attributes(0).value().string_value(), "trainer");
  EXPECT_EQ(rm.resource().attributes(1).value().int_value(), 3);
  ASSERT_EQ(rm.scope_metrics_size(), 1);
  EXPECT_EQ(rm.scope_metrics(0).scope().name(), "nemo.lens");
  EXPECT_EQ(rm.scope_metrics(0).scope().version(), "1.2.3");
  ASSERT_EQ(rm.scope_metrics(0).metrics_size(), 2);

  const pb_metrics::Metric& c = rm.scope_metrics(0).metrics(0);
  EXPECT_EQ(c.name(), "lens.spans.exported");
  EXPECT_EQ(c.description(), "Spans handed to the exporter");
  EXPECT_EQ(c.unit(), "{span}");
  ASSERT_EQ(c.data_case(), pb_metrics::Metric::kSum);
  EXPECT_TRUE(c.sum().is_monotonic());
  EXPECT_EQ(c.sum().aggregation_temporality(), pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  ASSERT_EQ(c.sum().data_points_size(), 3);
  const auto& p0 = c.sum().data_points(0);
  EXPECT_EQ(p0.start_time_unix_nano(), static_cast<std::uint64_t>(kT0));
  EXPECT_EQ(p0.time_unix_nano(), static_cast<std::uint64_t>(kT0 + 5));
  ASSERT_EQ(p0.value_case(), pb_metrics::NumberDataPoint::kAsInt);
  EXPECT_EQ(p0.as_int(), 42);
  ASSERT_EQ(p0.attributes_size(), 1);
  EXPECT_EQ(p0.attributes(0).key(), "exporter");
  EXPECT_EQ(p0.attributes(0).value().string_value(), "otlp");
  EXPECT_EQ(p0.flags(), 0u);
  EXPECT_EQ(p0.exemplars_size(), 0);
  EXPECT_EQ(c.sum().data_points(1).as_int(), std::numeric_limits<std::int64_t>::max());
  // A zero is still a value: the oneof member is set.
  ASSERT_EQ(c.sum().data_points(2).value_case(), pb_metrics::NumberDataPoint::kAsInt);
  EXPECT_EQ(c.sum().data_points(2).as_int(), 0);
  EXPECT_EQ(c.sum().data_points(2).attributes_size(), 0);

  const pb_metrics::Metric& u = rm.scope_metrics(0).metrics(1);
  EXPECT_EQ(u.name(), "queue.depth");
  EXPECT_TRUE(u.description().empty());
  EXPECT_TRUE(u.unit().empty());
  ASSERT_EQ(u.data_case(), pb_metrics::Metric::kSum);
  EXPECT_FALSE(u.sum().is_monotonic());
  EXPECT_EQ(u.sum().aggregation_temporality(), pb_metrics::AGGREGATION_TEMPORALITY_DELTA);
  ASSERT_EQ(u.sum().data_points_size(), 3);
  ASSERT_EQ(u.sum().data_points(0).value_case(), pb_metrics::NumberDataPoint::kAsDouble);
  EXPECT_EQ(u.sum().data_points(0).as_double(), -2.5);
  EXPECT_EQ(u.sum().data_points(0).start_time_unix_nano(), static_cast<std::uint64_t>(kT0 + 1));
  ASSERT_EQ(u.sum().data_points(1).value_case(), pb_metrics::NumberDataPoint::kAsDouble);
  EXPECT_EQ(u.sum().data_points(1).as_double(), 0.0);
  EXPECT_EQ(u.sum().data_points(2).as_int(), -7);

  // The JSON's shape, beyond agreeing with libprotobuf: 64-bit integers as strings, enums as
  // numbers, left-out defaults.
  Json& jc = e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0];
  EXPECT_EQ(jc["sum"]["aggregationTemporality"], 2);
  EXPECT_EQ(jc["sum"]["isMonotonic"], true);
  EXPECT_EQ(jc["sum"]["dataPoints"][0]["asInt"], "42");
  EXPECT_EQ(jc["sum"]["dataPoints"][0]["startTimeUnixNano"], std::to_string(kT0));
  EXPECT_EQ(jc["sum"]["dataPoints"][1]["asInt"], "9223372036854775807");
  Json& ju = e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][1];
  EXPECT_FALSE(ju.contains("description"));
  EXPECT_FALSE(ju.contains("unit"));
  EXPECT_FALSE(ju["sum"].contains("isMonotonic"));
  EXPECT_EQ(ju["sum"]["aggregationTemporality"], 1);
  EXPECT_EQ(ju["sum"]["dataPoints"][1]["asDouble"], 0.0);
  EXPECT_FALSE(ju["sum"]["dataPoints"][1].contains("attributes"));
}

TEST(OtlpMetrics, GaugesHaveNoStartTime) {
  const MetricData gauge = number_metric(
      MetricKind::kGauge, "gpu.memory.used",
      {point(std::int64_t{1} << 40, 0, kT0, {{"gpu", std::int64_t{0}}}),
       point(0.75, 0, kT0, {{"gpu", std::int64_t{1}}}), point(std::int64_t{0}, 0, kT0)});
  auto e = encode_metrics({gauge});
  const pb_metrics::Metric& m = only_metric(e.request);
  ASSERT_EQ(m.data_case(), pb_metrics::Metric::kGauge);
  ASSERT_EQ(m.gauge().data_points_size(), 3);
  EXPECT_EQ(m.gauge().data_points(0).start_time_unix_nano(), 0u);
  EXPECT_EQ(m.gauge().data_points(0).time_unix_nano(), static_cast<std::uint64_t>(kT0));
  EXPECT_EQ(m.gauge().data_points(0).as_int(), std::int64_t{1} << 40);
  EXPECT_EQ(m.gauge().data_points(0).attributes(0).value().int_value(), 0);
  EXPECT_EQ(m.gauge().data_points(1).as_double(), 0.75);
  ASSERT_EQ(m.gauge().data_points(2).value_case(), pb_metrics::NumberDataPoint::kAsInt);
  // Left out of both encodings, not written as 0.
  for (const Json& p : e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"]) {
    EXPECT_FALSE(p.contains("startTimeUnixNano")) << p;
    EXPECT_TRUE(p.contains("timeUnixNano")) << p;
  }
  // The resource without attributes is still there, empty.
  EXPECT_TRUE(e.request.resource_metrics(0).has_resource());
  EXPECT_EQ(e.json["resourceMetrics"][0]["resource"], Json::object());
}

TEST(OtlpMetrics, NonFiniteValuesAndExtremeDoubles) {
  const MetricData gauge = number_metric(
      MetricKind::kGauge, "g",
      {point(kNaN, 0, kT0), point(kInf, 0, kT0), point(-kInf, 0, kT0), point(5e-324, 0, kT0),
       point(1.7976931348623157e308, 0, kT0), point(0.1, 0, kT0), point(-3.0, 0, kT0)});
  auto e = encode_metrics({gauge});
  const auto& points = only_metric(e.request).gauge().data_points();
  EXPECT_TRUE(std::isnan(points[0].as_double()));
  EXPECT_EQ(points[1].as_double(), kInf);
  EXPECT_EQ(points[2].as_double(), -kInf);
  EXPECT_EQ(points[3].as_double(), 5e-324);
  EXPECT_EQ(points[4].as_double(), 1.7976931348623157e308);
  EXPECT_EQ(points[5].as_double(), 0.1);
  Json& j = e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["gauge"]["dataPoints"];
  EXPECT_EQ(j[0]["asDouble"], "NaN");
  EXPECT_EQ(j[1]["asDouble"], "Infinity");
  EXPECT_EQ(j[2]["asDouble"], "-Infinity");
  EXPECT_NE(e.json_text.find("\"asDouble\":-3.0"), std::string::npos) << e.json_text;
  EXPECT_NE(e.json_text.find("\"asDouble\":0.1}"), std::string::npos) << e.json_text;
}

TEST(OtlpMetrics, HistogramWithBoundsCountsMinAndMax) {
  MetricData h;
  h.scope_name = "nemo.lens";
  h.name = "span.duration";
  h.unit = "ms";
  h.description = "Span durations";
  h.kind = MetricKind::kHistogram;
  h.temporality = Temporality::kDelta;
  HistogramPoint p;
  p.attributes = {{"group", std::string("step")}};
  p.start_time_unix_nano = kT0;
  p.time_unix_nano = kT0 + 10;
  p.count = 6;
  p.sum = 123.5;
  p.explicit_bounds = {0.0, 5.0, 10.5, kInf};
  p.bucket_counts = {1, 0, 3, 2, 0};
  p.min = -1.0;
  p.max = 100.25;
  h.histogram_points.push_back(p);
  // A point nothing was recorded into: count and min/max left out, sum 0 written.
  HistogramPoint empty;
  empty.start_time_unix_nano = kT0;
  empty.time_unix_nano = kT0 + 10;
  empty.explicit_bounds = {1.0};
  empty.bucket_counts = {0, 0};
  h.histogram_points.push_back(empty);
  // Huge counts, no bounds (a single bucket), min == max == 0.
  HistogramPoint huge;
  huge.time_unix_nano = kT0;
  huge.count = std::numeric_limits<std::uint64_t>::max();
  huge.sum = 0.0;
  huge.bucket_counts = {std::numeric_limits<std::uint64_t>::max()};
  huge.min = 0.0;
  huge.max = 0.0;
  h.histogram_points.push_back(huge);

  MetricData cumulative = h;
  cumulative.temporality = Temporality::kCumulative;
  cumulative.histogram_points.resize(1);

  auto e = encode_metrics({h, cumulative}, test_resource());
  const pb_metrics::Metric& m = only_metric(e.request);
  EXPECT_EQ(m.name(), "span.duration");
  EXPECT_EQ(m.unit(), "ms");
  EXPECT_EQ(m.description(), "Span durations");
  ASSERT_EQ(m.data_case(), pb_metrics::Metric::kHistogram);
  EXPECT_EQ(m.histogram().aggregation_temporality(), pb_metrics::AGGREGATION_TEMPORALITY_DELTA);
  ASSERT_EQ(m.histogram().data_points_size(), 3);

  const pb_metrics::HistogramDataPoint& d = m.histogram().data_points(0);
  EXPECT_EQ(d.start_time_unix_nano(), static_cast<std::uint64_t>(kT0));
  EXPECT_EQ(d.time_unix_nano(), static_cast<std::uint64_t>(kT0 + 10));
  EXPECT_EQ(d.count(), 6u);
  ASSERT_TRUE(d.has_sum());
  EXPECT_EQ(d.sum(), 123.5);
  ASSERT_EQ(d.explicit_bounds_size(), 4);
  EXPECT_EQ(d.explicit_bounds(0), 0.0);
  EXPECT_EQ(d.explicit_bounds(2), 10.5);
  EXPECT_EQ(d.explicit_bounds(3), kInf);
  ASSERT_EQ(d.bucket_counts_size(), 5);
  EXPECT_EQ(d.bucket_counts(0), 1u);
  EXPECT_EQ(d.bucket_counts(1), 0u);
  EXPECT_EQ(d.bucket_counts(2), 3u);
  EXPECT_EQ(d.bucket_counts(3), 2u);
  ASSERT_TRUE(d.has_min());
  EXPECT_EQ(d.min(), -1.0);
  ASSERT_TRUE(d.has_max());
  EXPECT_EQ(d.max(), 100.25);
  ASSERT_EQ(d.attributes_size(), 1);
  EXPECT_EQ(d.attributes(0).value().string_value(), "step");
  EXPECT_EQ(d.flags(), 0u);

  const pb_metrics::HistogramDataPoint& z = m.histogram().data_points(1);
  EXPECT_EQ(z.count(), 0u);
  ASSERT_TRUE(z.has_sum());
  EXPECT_EQ(z.sum(), 0.0);
  EXPECT_FALSE(z.has_min());
  EXPECT_FALSE(z.has_max());
  ASSERT_EQ(z.bucket_counts_size(), 2);
  EXPECT_EQ(z.bucket_counts(1), 0u);
  EXPECT_EQ(z.explicit_bounds_size(), 1);
  EXPECT_EQ(z.attributes_size(), 0);

  const pb_metrics::HistogramDataPoint& g = m.histogram().data_points(2);
  EXPECT_EQ(g.start_time_unix_nano(), 0u);
  EXPECT_EQ(g.count(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(g.bucket_counts(0), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(g.explicit_bounds_size(), 0);
  ASSERT_TRUE(g.has_min());  // present even at 0
  EXPECT_EQ(g.min(), 0.0);
  ASSERT_TRUE(g.has_max());

  const pb_metrics::Metric& c = e.request.resource_metrics(0).scope_metrics(0).metrics(1);
  EXPECT_EQ(c.histogram().aggregation_temporality(), pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  EXPECT_EQ(c.histogram().data_points_size(), 1);

  Json& j = e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]["histogram"];
  EXPECT_EQ(j["aggregationTemporality"], 1);
  EXPECT_EQ(j["dataPoints"][0]["count"], "6");
  EXPECT_EQ(j["dataPoints"][0]["bucketCounts"], Json::parse(R"(["1","0","3","2","0"])"));
  EXPECT_EQ(j["dataPoints"][0]["explicitBounds"], Json::parse(R"([0.0,5.0,10.5,"Infinity"])"));
  EXPECT_EQ(j["dataPoints"][0]["min"], -1.0);
  EXPECT_FALSE(j["dataPoints"][1].contains("count"));
  EXPECT_FALSE(j["dataPoints"][1].contains("min"));
  EXPECT_FALSE(j["dataPoints"][1].contains("max"));
  EXPECT_EQ(j["dataPoints"][1]["sum"], 0.0);
  EXPECT_EQ(j["dataPoints"][2]["count"], "18446744073709551615");
  EXPECT_FALSE(j["dataPoints"][2].contains("explicitBounds"));
}

TEST(OtlpMetrics, AttributesOfEveryType) {
  Resource resource;
  resource.attributes = every_kind_of_attribute();
  const MetricData m = number_metric(MetricKind::kSum, "s",
                                     {point(std::int64_t{1}, kT0, kT0 + 1, every_kind_of_attribute())});
  auto e = encode_metrics({m}, resource);
  for (const auto* kvs : {&e.request.resource_metrics(0).resource().attributes(),
                          &only_metric(e.request).sum().data_points(0).attributes()}) {
    ASSERT_EQ(kvs->size(), 15);
    EXPECT_EQ((*kvs)[0].key(), "flag");
    EXPECT_TRUE(find(*kvs, "flag")->bool_value());
    ASSERT_EQ(find(*kvs, "off")->value_case(), pb_common::AnyValue::kBoolValue);
    EXPECT_FALSE(find(*kvs, "off")->bool_value());
    EXPECT_EQ(find(*kvs, "count")->int_value(), -42);
    EXPECT_EQ(find(*kvs, "min")->int_value(), std::numeric_limits<std::int64_t>::min());
    ASSERT_EQ(find(*kvs, "zero")->value_case(), pb_common::AnyValue::kIntValue);
    EXPECT_EQ(find(*kvs, "loss")->double_value(), 0.125);
    EXPECT_TRUE(std::isnan(find(*kvs, "nan")->double_value()));
    EXPECT_EQ(find(*kvs, "inf")->double_value(), -kInf);
    EXPECT_EQ(find(*kvs, "name")->string_value(), "mlp \"quoted\" \xce\xbb\n");
    ASSERT_EQ(find(*kvs, "empty")->value_case(), pb_common::AnyValue::kStringValue);
    const auto& flags = find(*kvs, "flags")->array_value();
    ASSERT_EQ(flags.values_size(), 2);
    EXPECT_TRUE(flags.values(0).bool_value());
    ASSERT_EQ(flags.values(1).value_case(), pb_common::AnyValue::kBoolValue);
    const auto& sizes = find(*kvs, "sizes")->array_value();
    ASSERT_EQ(sizes.values_size(), 3);
    EXPECT_EQ(sizes.values(1).int_value(), -2);
    EXPECT_EQ(find(*kvs, "rates")->array_value().values(2).double_value(), kInf);
    ASSERT_EQ(find(*kvs, "tags")->array_value().values_size(), 2);
    ASSERT_EQ(find(*kvs, "tags")->array_value().values(1).value_case(), pb_common::AnyValue::kStringValue);
    ASSERT_EQ(find(*kvs, "none")->value_case(), pb_common::AnyValue::kArrayValue);
    EXPECT_EQ(find(*kvs, "none")->array_value().values_size(), 0);
  }
  Json& attrs = e.json["resourceMetrics"][0]["resource"]["attributes"];
  EXPECT_EQ(attrs[3]["value"]["intValue"], "-9223372036854775808");
  EXPECT_EQ(attrs[6]["value"]["doubleValue"], "NaN");
}

TEST(OtlpMetrics, OneScopeGroupPerRunOfConsecutiveMetricsOfTheSameScope) {
  auto metric = [](std::string scope, std::string version, std::string name) {
    MetricData m = number_metric(MetricKind::kGauge, std::move(name), {point(1.0, 0, kT0)});
    m.scope_name = std::move(scope);
    m.scope_version = std::move(version);
    return m;
  };
  auto e = encode_metrics({metric("a", "", "a1"), metric("a", "", "a2"), metric("b", "", "b1"),
                                 metric("a", "2.0", "a3"), metric("a", "", "a4"),
                                 metric("", "", "anonymous")});
  ASSERT_EQ(e.request.resource_metrics_size(), 1);
  const auto& groups = e.request.resource_metrics(0).scope_metrics();
  ASSERT_EQ(groups.size(), 5);
  const std::vector<std::vector<std::string>> names = {{"a1", "a2"}, {"b1"}, {"a3"}, {"a4"}, {"anonymous"}};
  const std::vector<std::string> scopes = {"a", "b", "a", "a", ""};
  for (int i = 0; i < groups.size(); ++i) {
    const auto u = static_cast<std::size_t>(i);
    EXPECT_EQ(groups[i].scope().name(), scopes[u]);
    EXPECT_EQ(groups[i].scope().version(), i == 2 ? "2.0" : "");
    ASSERT_EQ(static_cast<std::size_t>(groups[i].metrics_size()), names[u].size());
    for (int k = 0; k < groups[i].metrics_size(); ++k) {
      EXPECT_EQ(groups[i].metrics(k).name(), names[u][static_cast<std::size_t>(k)]);
    }
  }
  Json& j = e.json["resourceMetrics"][0]["scopeMetrics"];
  EXPECT_EQ(j[0]["scope"], Json::parse(R"({"name":"a"})"));
  EXPECT_EQ(j[2]["scope"], Json::parse(R"({"name":"a","version":"2.0"})"));
  EXPECT_EQ(j[4]["scope"], Json::object());
  EXPECT_TRUE(e.request.resource_metrics(0).scope_metrics(4).has_scope());
}

TEST(OtlpMetrics, NoMetricsIsOneResourceWithoutScopes) {
  auto e = encode_metrics({}, test_resource());
  ASSERT_EQ(e.request.resource_metrics_size(), 1);
  EXPECT_EQ(e.request.resource_metrics(0).resource().attributes_size(), 2);
  EXPECT_EQ(e.request.resource_metrics(0).scope_metrics_size(), 0);
  EXPECT_FALSE(e.json["resourceMetrics"][0].contains("scopeMetrics"));
}

TEST(OtlpMetrics, MetricsWithoutPoints) {
  MetricData gauge = number_metric(MetricKind::kGauge, "", {});
  MetricData sum = number_metric(MetricKind::kSum, "s", {});
  MetricData histogram = number_metric(MetricKind::kHistogram, "h", {});
  auto e = encode_metrics({gauge, sum, histogram});
  const auto& ms = e.request.resource_metrics(0).scope_metrics(0).metrics();
  ASSERT_EQ(ms.size(), 3);
  EXPECT_EQ(ms[0].data_case(), pb_metrics::Metric::kGauge);  // the oneof is still set
  EXPECT_TRUE(ms[0].name().empty());
  EXPECT_EQ(ms[1].data_case(), pb_metrics::Metric::kSum);
  EXPECT_EQ(ms[1].sum().aggregation_temporality(), pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  EXPECT_EQ(ms[2].data_case(), pb_metrics::Metric::kHistogram);
  EXPECT_EQ(ms[2].histogram().data_points_size(), 0);
  EXPECT_EQ(e.json["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0], Json::parse(R"({"gauge":{}})"));
}

TEST(OtlpMetrics, InvalidUtf8IsRepairedSoProto3Accepts) {
  MetricData m = number_metric(
      MetricKind::kSum, std::string("bad\xff\xfe name"),
      {point(std::int64_t{1}, kT0, kT0, {{std::string("k\xc3"), std::string("v\xe2\x82")}})});
  m.description = std::string("\xed\xa0\x80 surrogate");
  m.unit = std::string("\xc0\xaf");
  m.scope_name = std::string("scope\x80");
  m.scope_version = std::string("\xf4\x90\x80\x80");
  Resource resource;
  resource.attributes = {{"host", std::vector<std::string>{std::string("\xf0\x9f\x98")}}};
  auto e = encode_metrics({m}, resource);  // libprotobuf refuses invalid UTF-8 strings
  const auto& sm = e.request.resource_metrics(0).scope_metrics(0);
  const std::string fffd = "\xef\xbf\xbd";
  EXPECT_EQ(sm.metrics(0).name(), "bad" + fffd + fffd + " name");
  EXPECT_EQ(sm.metrics(0).description(), fffd + fffd + fffd + " surrogate");
  EXPECT_EQ(sm.metrics(0).unit(), fffd + fffd);
  EXPECT_EQ(sm.scope().name(), "scope" + fffd);
  EXPECT_EQ(sm.scope().version(), fffd + fffd + fffd + fffd);
  EXPECT_EQ(sm.metrics(0).sum().data_points(0).attributes(0).key(), "k" + fffd);
  EXPECT_EQ(sm.metrics(0).sum().data_points(0).attributes(0).value().string_value(), "v" + fffd);
  EXPECT_EQ(e.request.resource_metrics(0).resource().attributes(0).value().array_value().values(0).string_value(),
            fffd);
}

TEST(OtlpMetrics, NegativeTimesAreClampedAndLeftOut) {
  const MetricData m = number_metric(MetricKind::kSum, "s", {point(std::int64_t{1}, -5, -1)});
  auto e = encode_metrics({m});
  EXPECT_EQ(only_metric(e.request).sum().data_points(0).start_time_unix_nano(), 0u);
  EXPECT_EQ(only_metric(e.request).sum().data_points(0).time_unix_nano(), 0u);
}

TEST(OtlpMetrics, LargeRequestsGetMultiByteLengths) {
  // Lengths of 128 bytes and more take two or more varint bytes; the writer moves the content when
  // its guess was short. 1000 histograms of 200 buckets make the request about 7 MB.
  std::vector<MetricData> metrics;
  for (int i = 0; i < 1000; ++i) {
    MetricData h;
    h.scope_name = i < 500 ? "first" : "second";
    h.name = "h" + std::to_string(i);
    h.description = std::string(static_cast<std::size_t>(i % 300), 'd');
    h.kind = MetricKind::kHistogram;
    HistogramPoint p;
    p.time_unix_nano = kT0 + i;
    p.count = static_cast<std::uint64_t>(i);
    for (int b = 0; b < 200; ++b) {
      p.explicit_bounds.push_back(b * 0.5);
      p.bucket_counts.push_back(static_cast<std::uint64_t>(b));
    }
    p.bucket_counts.push_back(1);
    p.attributes = {{"blob", std::string(i == 7 ? 300'000 : 10, 'x')}};
    h.histogram_points = {p, p};
    metrics.push_back(std::move(h));
  }
  auto e = encode_metrics(metrics, test_resource());
  ASSERT_EQ(e.request.resource_metrics(0).scope_metrics_size(), 2);
  EXPECT_EQ(e.request.resource_metrics(0).scope_metrics(1).metrics_size(), 500);
  const auto& h7 = e.request.resource_metrics(0).scope_metrics(0).metrics(7);
  EXPECT_EQ(h7.histogram().data_points(1).attributes(0).value().string_value().size(), 300'000u);
  EXPECT_EQ(h7.histogram().data_points(1).bucket_counts_size(), 201);
  EXPECT_EQ(h7.histogram().data_points(1).explicit_bounds(199), 99.5);
}

// ---- Logs --------------------------------------------------------------------------------------

LogRecordData record(std::string body, std::int32_t severity = 9, std::string text = "INFO") {
  LogRecordData r;
  r.scope_name = "nemo.lens";
  r.time_unix_nano = kT0;
  r.observed_time_unix_nano = kT0 + 1000;
  r.severity_number = severity;
  r.severity_text = std::move(text);
  r.body = std::move(body);
  return r;
}

TEST(OtlpLogs, RecordInsideASpanHasItsTraceContext) {
  LogRecordData r = record("checkpoint written", 13, "WARN");
  r.attributes = {{"path", std::string("/ckpt/step-100")}, {"bytes", std::int64_t{4096}}};
  r.dropped_attributes_count = 2;
  r.trace_id = *TraceId::from_hex(kTraceHex);
  r.span_id = *SpanId::from_hex(kSpanHex);
  r.trace_flags = 1;
  auto e = encode_logs({r}, test_resource());

  ASSERT_EQ(e.request.resource_logs_size(), 1);
  const auto& rl = e.request.resource_logs(0);
  ASSERT_EQ(rl.resource().attributes_size(), 2);
  EXPECT_EQ(rl.resource().attributes(0).value().string_value(), "trainer");
  ASSERT_EQ(rl.scope_logs_size(), 1);
  EXPECT_EQ(rl.scope_logs(0).scope().name(), "nemo.lens");
  EXPECT_TRUE(rl.scope_logs(0).scope().version().empty());
  ASSERT_EQ(rl.scope_logs(0).log_records_size(), 1);
  const pb_logs::LogRecord& l = rl.scope_logs(0).log_records(0);
  EXPECT_EQ(l.time_unix_nano(), static_cast<std::uint64_t>(kT0));
  EXPECT_EQ(l.observed_time_unix_nano(), static_cast<std::uint64_t>(kT0 + 1000));
  EXPECT_EQ(l.severity_number(), pb_logs::SEVERITY_NUMBER_WARN);
  EXPECT_EQ(l.severity_text(), "WARN");
  ASSERT_TRUE(l.has_body());
  ASSERT_EQ(l.body().value_case(), pb_common::AnyValue::kStringValue);
  EXPECT_EQ(l.body().string_value(), "checkpoint written");
  ASSERT_EQ(l.attributes_size(), 2);
  EXPECT_EQ(l.attributes(0).key(), "path");
  EXPECT_EQ(l.attributes(0).value().string_value(), "/ckpt/step-100");
  EXPECT_EQ(l.attributes(1).value().int_value(), 4096);
  EXPECT_EQ(l.dropped_attributes_count(), 2u);
  EXPECT_EQ(l.flags(), 1u);
  EXPECT_EQ(l.trace_id(), bytes_of(r.trace_id));
  EXPECT_EQ(l.span_id(), bytes_of(r.span_id));
  EXPECT_TRUE(l.event_name().empty());

  Json& j = e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
  EXPECT_EQ(j["traceId"], kTraceHex);
  EXPECT_EQ(j["spanId"], kSpanHex);
  EXPECT_EQ(j["flags"], 1);
  EXPECT_EQ(j["severityNumber"], 13);
  EXPECT_EQ(j["timeUnixNano"], std::to_string(kT0));
  EXPECT_EQ(j["observedTimeUnixNano"], std::to_string(kT0 + 1000));
  EXPECT_EQ(j["body"], Json::parse(R"({"stringValue":"checkpoint written"})"));
  EXPECT_EQ(j["droppedAttributesCount"], 2);
}

TEST(OtlpLogs, RecordOutsideASpanHasNoTraceContext) {
  LogRecordData r = record("starting");
  auto e = encode_logs({r});
  const pb_logs::LogRecord& l = e.request.resource_logs(0).scope_logs(0).log_records(0);
  EXPECT_TRUE(l.trace_id().empty());
  EXPECT_TRUE(l.span_id().empty());
  EXPECT_EQ(l.flags(), 0u);
  EXPECT_EQ(l.attributes_size(), 0);
  EXPECT_EQ(l.dropped_attributes_count(), 0u);
  Json& j = e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0];
  EXPECT_FALSE(j.contains("traceId"));
  EXPECT_FALSE(j.contains("spanId"));
  EXPECT_FALSE(j.contains("flags"));
  EXPECT_FALSE(j.contains("attributes"));
  EXPECT_FALSE(j.contains("droppedAttributesCount"));
}

TEST(OtlpLogs, UnsampledSpanContextKeepsItsIdsWithoutFlags) {
  LogRecordData r = record("unsampled");
  r.trace_id = *TraceId::from_hex(kTraceHex);
  r.span_id = *SpanId::from_hex(kSpanHex);
  r.trace_flags = 0;
  auto e = encode_logs({r});
  const pb_logs::LogRecord& l = e.request.resource_logs(0).scope_logs(0).log_records(0);
  EXPECT_EQ(l.trace_id(), bytes_of(r.trace_id));
  EXPECT_EQ(l.span_id(), bytes_of(r.span_id));
  EXPECT_EQ(l.flags(), 0u);
}

TEST(OtlpLogs, EverySeverityNumber) {
  static constexpr const char* kNames[] = {"TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL"};
  std::vector<LogRecordData> records;
  for (std::int32_t n = 1; n <= 24; ++n) {
    const std::string base = kNames[(n - 1) / 4];
    const int step = (n - 1) % 4;
    records.push_back(record("m" + std::to_string(n), n, step == 0 ? base : base + std::to_string(step + 1)));
  }
  records.push_back(record("unspecified", 0, ""));
  auto e = encode_logs(records);
  const auto& out = e.request.resource_logs(0).scope_logs(0).log_records();
  ASSERT_EQ(out.size(), 25);
  for (int i = 0; i < 24; ++i) {
    const auto& l = out[i];
    EXPECT_EQ(static_cast<int>(l.severity_number()), i + 1);
    // The number is the specification's for the text: INFO2 is SEVERITY_NUMBER_INFO2.
    EXPECT_EQ(pb_logs::SeverityNumber_Name(l.severity_number()), "SEVERITY_NUMBER_" + l.severity_text());
    EXPECT_EQ(e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][i]["severityNumber"], i + 1);
  }
  EXPECT_EQ(out[24].severity_number(), pb_logs::SEVERITY_NUMBER_UNSPECIFIED);
  EXPECT_TRUE(out[24].severity_text().empty());
  Json& j = e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][24];
  EXPECT_FALSE(j.contains("severityNumber"));
  EXPECT_FALSE(j.contains("severityText"));
}

TEST(OtlpLogs, EmptyBodyIsLeftOut) {
  LogRecordData r = record("");
  r.time_unix_nano = 0;  // unknown: left out, as a 0 observed time
  r.observed_time_unix_nano = 0;
  auto e = encode_logs({r});
  const pb_logs::LogRecord& l = e.request.resource_logs(0).scope_logs(0).log_records(0);
  EXPECT_FALSE(l.has_body());
  EXPECT_EQ(l.time_unix_nano(), 0u);
  EXPECT_EQ(l.observed_time_unix_nano(), 0u);
  EXPECT_EQ(e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0],
            Json::parse(R"({"severityNumber":9,"severityText":"INFO"})"));
}

TEST(OtlpLogs, AttributesOfEveryType) {
  LogRecordData r = record("attrs");
  r.attributes = every_kind_of_attribute();
  Resource resource;
  resource.attributes = every_kind_of_attribute();
  auto e = encode_logs({r}, resource);
  const auto& kvs = e.request.resource_logs(0).scope_logs(0).log_records(0).attributes();
  ASSERT_EQ(kvs.size(), 15);
  EXPECT_EQ(find(kvs, "count")->int_value(), -42);
  EXPECT_EQ(find(kvs, "rates")->array_value().values(0).double_value(), 0.5);
  EXPECT_EQ(find(kvs, "tags")->array_value().values(0).string_value(), "a");
  EXPECT_EQ(e.request.resource_logs(0).resource().attributes_size(), 15);
}

TEST(OtlpLogs, OneScopeGroupPerRunOfConsecutiveRecordsOfTheSameScope) {
  std::vector<LogRecordData> records;
  for (const char* scope : {"nemo.lens", "nemo.lens", "trainer", "nemo.lens", ""}) {
    records.push_back(record(scope));
    records.back().scope_name = scope;
  }
  auto e = encode_logs(records);
  const auto& groups = e.request.resource_logs(0).scope_logs();
  ASSERT_EQ(groups.size(), 4);
  EXPECT_EQ(groups[0].scope().name(), "nemo.lens");
  EXPECT_EQ(groups[0].log_records_size(), 2);
  EXPECT_EQ(groups[1].scope().name(), "trainer");
  EXPECT_EQ(groups[2].scope().name(), "nemo.lens");
  EXPECT_EQ(groups[2].log_records_size(), 1);
  EXPECT_TRUE(groups[3].has_scope());
  EXPECT_TRUE(groups[3].scope().name().empty());
  EXPECT_EQ(e.json["resourceLogs"][0]["scopeLogs"][3]["scope"], Json::object());
}

TEST(OtlpLogs, NoRecordsIsOneResourceWithoutScopes) {
  auto e = encode_logs({}, test_resource());
  ASSERT_EQ(e.request.resource_logs_size(), 1);
  EXPECT_EQ(e.request.resource_logs(0).scope_logs_size(), 0);
  EXPECT_EQ(e.json_text,
            R"({"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"trainer"}},)"
            R"({"key":"dl.rank","value":{"intValue":"3"}}]}}]})");
}

TEST(OtlpLogs, InvalidUtf8IsRepairedSoProto3Accepts) {
  LogRecordData r = record(std::string("bad\xff body"), 17, std::string("ERR\xc3"));
  r.scope_name = std::string("logger\xe2\x82");
  r.attributes = {{std::string("k\x80"), std::string("v\xff")}};
  auto e = encode_logs({r});
  const std::string fffd = "\xef\xbf\xbd";
  const auto& sl = e.request.resource_logs(0).scope_logs(0);
  EXPECT_EQ(sl.scope().name(), "logger" + fffd);
  EXPECT_EQ(sl.log_records(0).body().string_value(), "bad" + fffd + " body");
  EXPECT_EQ(sl.log_records(0).severity_text(), "ERR" + fffd);
  EXPECT_EQ(sl.log_records(0).attributes(0).key(), "k" + fffd);
  EXPECT_EQ(sl.log_records(0).attributes(0).value().string_value(), "v" + fffd);
}

TEST(OtlpLogs, ControlCharactersAndQuotesInTheBody) {
  using namespace std::string_literals;
  const std::string body = "line 1\nline 2\t\"quoted\" \\ \x01 end\0nul"s;
  auto e = encode_logs({record(body)});
  EXPECT_EQ(e.request.resource_logs(0).scope_logs(0).log_records(0).body().string_value(), body);
  EXPECT_EQ(e.json["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]["body"]["stringValue"], body);
}

TEST(OtlpLogs, LargeBatches) {
  std::vector<LogRecordData> records;
  for (int i = 0; i < 5000; ++i) {
    LogRecordData r = record(std::string(static_cast<std::size_t>(i % 500), 'b'), 1 + i % 24, "X");
    r.scope_name = i < 2500 ? "a" : "b";
    if (i % 2 == 0) {
      r.trace_id = *TraceId::from_hex(kTraceHex);
      r.span_id = *SpanId::from_hex(kSpanHex);
      r.trace_flags = 1;
    }
    if (i == 42) r.body = std::string(3'000'000, 'z');
    records.push_back(std::move(r));
  }
  auto e = encode_logs(records, test_resource());
  ASSERT_EQ(e.request.resource_logs(0).scope_logs_size(), 2);
  EXPECT_EQ(e.request.resource_logs(0).scope_logs(1).log_records_size(), 2500);
  EXPECT_EQ(e.request.resource_logs(0).scope_logs(0).log_records(42).body().string_value().size(),
            3'000'000u);
}

}  // namespace
