// The OTLP encodings of collected metrics: opentelemetry-proto's collector/metrics/v1
// ExportMetricsServiceRequest in protobuf and in the OTLP specification's JSON Protobuf Encoding,
// written by hand straight from MetricData (see otlp_signals.hpp for what each emits). The tests
// decode both with the distribution's protobuf library and .proto files written from the
// specification (tests/otlp_signals_proto_test.cpp). Field numbers are those of
// opentelemetry-proto v1.
//
// Both encodings write the fields in field-number order and a field exactly when the other has it:
// the protobuf is what libprotobuf would serialize for the same message, and the JSON what its
// JSON printer would print (bytes as base64 aside: OTLP/JSON ids are hex, and metrics have none).
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/json_writer.hpp"
#include "export/otlp_common.hpp"
#include "export/otlp_signals.hpp"
#include "export/protobuf_wire.hpp"

namespace nemo::lens::detail {

namespace {

// Field numbers, by message (metrics/v1, collector/metrics/v1).
namespace request {
constexpr std::uint32_t kResourceMetrics = 1;
}
namespace resource_metrics {
constexpr std::uint32_t kResource = 1, kScopeMetrics = 2;
}
namespace scope_metrics {
constexpr std::uint32_t kScope = 1, kMetrics = 2;
}
namespace metric {
constexpr std::uint32_t kName = 1, kDescription = 2, kUnit = 3, kGauge = 5, kSum = 7,
                        kHistogram = 9;
}
// Gauge, Sum and Histogram (Sum's is_monotonic only).
namespace aggregation {
constexpr std::uint32_t kDataPoints = 1, kTemporality = 2, kIsMonotonic = 3;
}
namespace number_point {
constexpr std::uint32_t kStartTime = 2, kTime = 3, kAsDouble = 4, kAsInt = 6, kAttributes = 7;
}
namespace histogram_point {
constexpr std::uint32_t kStartTime = 2, kTime = 3, kCount = 4, kSum = 5, kBucketCounts = 6,
                        kExplicitBounds = 7, kAttributes = 9, kMin = 11, kMax = 12;
}

using otlp::attributes_bound;
using otlp::kMessageOverhead;
using otlp::string_bound;
using otlp::string_field;
using otlp::time_of;

bool same_scope(const MetricData& a, const MetricData& b) {
  return a.scope_name == b.scope_name && a.scope_version == b.scope_version;
}

// ---- Protobuf ----------------------------------------------------------------------------------

// Upper bounds of what the writers below write (each fixed64 or double field: 9 bytes at most).
std::size_t number_point_bound(const NumberPoint& p) {
  return kMessageOverhead + 3 * 9 + attributes_bound(p.attributes);
}
std::size_t histogram_point_bound(const HistogramPoint& p) {
  return kMessageOverhead + 6 * 9 + 2 * 16 +
         8 * (p.bucket_counts.size() + p.explicit_bounds.size()) + attributes_bound(p.attributes);
}
// The metric's own fields and the opening of its data message (the points reserve their own).
std::size_t metric_head_bound(const MetricData& m) {
  return 2 * kMessageOverhead + string_bound(m.name) + string_bound(m.description) +
         string_bound(m.unit);
}
// The fields after the points: temporality and is_monotonic.
constexpr std::size_t kAggregationTailBound = 16;

void time_field(pb::Writer& w, std::uint32_t field, std::int64_t unix_nano) {
  if (const std::uint64_t t = time_of(unix_nano); t != 0) w.fixed64_field(field, t);
}

void optional_double_field(pb::Writer& w, std::uint32_t field, const std::optional<double>& v) {
  if (v.has_value()) w.double_field(field, *v);
}

// A packed repeated fixed64 or double field, left out when empty. On little-endian hosts the
// vector's memory is already the wire form.
template <class T>
void packed_field(pb::Writer& w, std::uint32_t field, const std::vector<T>& v) {
  static_assert(sizeof(T) == 8, "fixed64 and double only");
  if (v.empty()) return;
  if constexpr (std::endian::native == std::endian::little) {
    w.bytes_field(field, std::string_view(reinterpret_cast<const char*>(v.data()), 8 * v.size()));
  } else {
    std::string bytes(8 * v.size(), '\0');
    for (std::size_t i = 0; i < v.size(); ++i) {
      std::uint64_t bits = 0;
      std::memcpy(&bits, &v[i], 8);
      for (std::size_t b = 0; b < 8; ++b)
        bytes[8 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
    }
    w.bytes_field(field, bytes);
  }
}

void append_number_point(pb::Writer& w, const NumberPoint& p) {
  w.reserve(number_point_bound(p));
  const auto mark = w.begin_message(aggregation::kDataPoints);
  time_field(w, number_point::kStartTime, p.start_time_unix_nano);
  time_field(w, number_point::kTime, p.time_unix_nano);
  // A oneof member: written even when 0.
  if (const auto* as_int = std::get_if<std::int64_t>(&p.value)) {
    w.fixed64_field(number_point::kAsInt, static_cast<std::uint64_t>(*as_int));
  } else {
    w.double_field(number_point::kAsDouble, std::get<double>(p.value));
  }
  otlp::key_values(w, number_point::kAttributes, p.attributes);
  w.end_message(mark);
}

void append_histogram_point(pb::Writer& w, const HistogramPoint& p) {
  w.reserve(histogram_point_bound(p));
  const auto mark = w.begin_message(aggregation::kDataPoints, 2);
  time_field(w, histogram_point::kStartTime, p.start_time_unix_nano);
  time_field(w, histogram_point::kTime, p.time_unix_nano);
  if (p.count != 0) w.fixed64_field(histogram_point::kCount, p.count);
  w.double_field(histogram_point::kSum, p.sum);  // optional double: always present
  packed_field(w, histogram_point::kBucketCounts, p.bucket_counts);
  packed_field(w, histogram_point::kExplicitBounds, p.explicit_bounds);
  otlp::key_values(w, histogram_point::kAttributes, p.attributes);
  optional_double_field(w, histogram_point::kMin, p.min);
  optional_double_field(w, histogram_point::kMax, p.max);
  w.end_message(mark);
}

void append_metric(pb::Writer& w, const MetricData& m) {
  w.reserve(metric_head_bound(m));
  const auto mark = w.begin_message(scope_metrics::kMetrics, 2);
  if (!m.name.empty()) string_field(w, metric::kName, m.name);
  if (!m.description.empty()) string_field(w, metric::kDescription, m.description);
  if (!m.unit.empty()) string_field(w, metric::kUnit, m.unit);
  switch (m.kind) {
    case MetricKind::kGauge: {
      const auto data_mark = w.begin_message(metric::kGauge, 2);
      for (const NumberPoint& p : m.number_points) append_number_point(w, p);
      w.end_message(data_mark);
      break;
    }
    case MetricKind::kSum: {
      const auto data_mark = w.begin_message(metric::kSum, 2);
      for (const NumberPoint& p : m.number_points) append_number_point(w, p);
      w.reserve(kAggregationTailBound);
      w.varint_field(aggregation::kTemporality, static_cast<std::uint64_t>(m.temporality));
      if (m.monotonic) w.varint_field(aggregation::kIsMonotonic, 1);
      w.end_message(data_mark);
      break;
    }
    case MetricKind::kHistogram: {
      const auto data_mark = w.begin_message(metric::kHistogram, 2);
      for (const HistogramPoint& p : m.histogram_points) append_histogram_point(w, p);
      w.reserve(kAggregationTailBound);
      w.varint_field(aggregation::kTemporality, static_cast<std::uint64_t>(m.temporality));
      w.end_message(data_mark);
      break;
    }
  }
  w.end_message(mark);
}

// ---- OTLP/JSON ---------------------------------------------------------------------------------

void append_time_member(json::JsonObject& o, std::string_view key, std::int64_t unix_nano) {
  if (const std::uint64_t t = time_of(unix_nano); t != 0) json::append_quoted_uint(o.key(key), t);
}

// `"attributes":[...]`, left out when there are none.
void append_attributes_member(json::JsonObject& o, const std::vector<KeyValue>& attributes) {
  if (attributes.empty()) return;
  std::string& out = o.key("attributes");
  out.push_back('[');
  bool first = true;
  for (const KeyValue& kv : attributes) {
    if (!first) out.push_back(',');
    first = false;
    otlp::append_key_value_json(out, kv.key, kv.value);
  }
  out.push_back(']');
}

void append_number_point_json(std::string& out, const NumberPoint& p) {
  json::JsonObject o(out);
  append_time_member(o, "startTimeUnixNano", p.start_time_unix_nano);
  append_time_member(o, "timeUnixNano", p.time_unix_nano);
  if (const auto* as_int = std::get_if<std::int64_t>(&p.value)) {
    json::append_quoted_int(o.key("asInt"), *as_int);
  } else {
    json::append_double(o.key("asDouble"), std::get<double>(p.value));
  }
  append_attributes_member(o, p.attributes);
  o.close();
}

void append_histogram_point_json(std::string& out, const HistogramPoint& p) {
  json::JsonObject o(out);
  append_time_member(o, "startTimeUnixNano", p.start_time_unix_nano);
  append_time_member(o, "timeUnixNano", p.time_unix_nano);
  if (p.count != 0) json::append_quoted_uint(o.key("count"), p.count);
  json::append_double(o.key("sum"), p.sum);
  if (!p.bucket_counts.empty()) {
    std::string& a = o.key("bucketCounts");
    a.push_back('[');
    for (std::size_t i = 0; i < p.bucket_counts.size(); ++i) {
      if (i != 0) a.push_back(',');
      json::append_quoted_uint(a, p.bucket_counts[i]);
    }
    a.push_back(']');
  }
  if (!p.explicit_bounds.empty()) {
    std::string& a = o.key("explicitBounds");
    a.push_back('[');
    for (std::size_t i = 0; i < p.explicit_bounds.size(); ++i) {
      if (i != 0) a.push_back(',');
      json::append_double(a, p.explicit_bounds[i]);
    }
    a.push_back(']');
  }
  append_attributes_member(o, p.attributes);
  if (p.min.has_value()) json::append_double(o.key("min"), *p.min);
  if (p.max.has_value()) json::append_double(o.key("max"), *p.max);
  o.close();
}

template <class Point, class AppendPoint>
void append_data_points_json(json::JsonObject& o, const std::vector<Point>& points,
                             AppendPoint append_point) {
  if (points.empty()) return;
  std::string& out = o.key("dataPoints");
  out.push_back('[');
  bool first = true;
  for (const Point& p : points) {
    if (!first) out.push_back(',');
    first = false;
    append_point(out, p);
  }
  out.push_back(']');
}

void append_metric_json(std::string& out, const MetricData& m) {
  json::JsonObject o(out);
  if (!m.name.empty()) json::append_string(o.key("name"), m.name);
  if (!m.description.empty()) json::append_string(o.key("description"), m.description);
  if (!m.unit.empty()) json::append_string(o.key("unit"), m.unit);
  switch (m.kind) {
    case MetricKind::kGauge: {
      json::JsonObject data(o.key("gauge"));
      append_data_points_json(data, m.number_points, append_number_point_json);
      data.close();
      break;
    }
    case MetricKind::kSum: {
      json::JsonObject data(o.key("sum"));
      append_data_points_json(data, m.number_points, append_number_point_json);
      json::append_uint(data.key("aggregationTemporality"),
                        static_cast<std::uint32_t>(m.temporality));
      if (m.monotonic) json::append_raw(data.key("isMonotonic"), "true");
      data.close();
      break;
    }
    case MetricKind::kHistogram: {
      json::JsonObject data(o.key("histogram"));
      append_data_points_json(data, m.histogram_points, append_histogram_point_json);
      json::append_uint(data.key("aggregationTemporality"),
                        static_cast<std::uint32_t>(m.temporality));
      data.close();
      break;
    }
  }
  o.close();
}

}  // namespace

void append_otlp_metrics_proto(std::string& out, std::span<const MetricData> metrics,
                               const Resource& resource) {
  pb::Writer w(out);
  w.reserve(2 * kMessageOverhead + otlp::resource_bound(resource));
  const auto rm_mark = w.begin_message(request::kResourceMetrics, 3);  // up to 2 MiB
  otlp::resource_field(w, resource_metrics::kResource, resource);
  for (std::size_t i = 0; i < metrics.size();) {
    const MetricData& first = metrics[i];
    w.reserve(kMessageOverhead + otlp::scope_bound(first.scope_name, first.scope_version));
    const auto sm_mark = w.begin_message(resource_metrics::kScopeMetrics, 3);
    otlp::scope_field(w, scope_metrics::kScope, first.scope_name, first.scope_version);
    for (; i < metrics.size() && same_scope(metrics[i], first); ++i) append_metric(w, metrics[i]);
    w.end_message(sm_mark);
  }
  w.end_message(rm_mark);
  w.finish();
}

void append_otlp_metrics_json(std::string& out, std::span<const MetricData> metrics,
                              const Resource& resource) {
  std::size_t points = 0;
  for (const MetricData& m : metrics) points += m.number_points.size() + m.histogram_points.size();
  out.reserve(out.size() + 256 + 64 * resource.attributes.size() + 192 * metrics.size() +
              160 * points);
  json::append_raw(out, "{\"resourceMetrics\":[{\"resource\":{");
  if (!resource.attributes.empty()) otlp::append_attributes_json(out, resource.attributes, 0);
  out.push_back('}');
  if (!metrics.empty()) {
    json::append_raw(out, ",\"scopeMetrics\":[");
    for (std::size_t i = 0; i < metrics.size();) {
      const MetricData& first = metrics[i];
      if (i != 0) out.push_back(',');
      json::append_raw(out, "{\"scope\":");
      otlp::append_scope_json(out, first.scope_name, first.scope_version);
      json::append_raw(out, ",\"metrics\":[");
      for (bool first_metric = true; i < metrics.size() && same_scope(metrics[i], first); ++i) {
        if (!first_metric) out.push_back(',');
        first_metric = false;
        append_metric_json(out, metrics[i]);
      }
      json::append_raw(out, "]}");
    }
    out.push_back(']');
  }
  json::append_raw(out, "}]}");
}

}  // namespace nemo::lens::detail
