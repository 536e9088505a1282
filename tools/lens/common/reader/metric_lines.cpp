#include "common/reader/metric_lines.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nemo/lens/semconv.hpp"

namespace nemo::lens::cli::reader {

namespace {

// An integer field of a data point: a decimal string (as OTLP/JSON writes 64-bit integers) or a
// JSON integer.
template <class T>
std::optional<T> integer_value(const ojson& v) {
  if (v.is_string()) return parse_decimal<T>(v.get_ref<const std::string&>());
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  }
  return std::nullopt;
}

// A double field: a JSON number, or a string ("NaN", "Infinity", "-Infinity", or a decimal
// number, as proto3 JSON readers accept).
std::optional<double> double_value(const ojson& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  return parse_decimal<double>(s);
}

// The members of an object, null and absent alike; `what` names it in errors.
class Members {
 public:
  Members(const ojson& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  const ojson* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  // The array member `key` (empty when absent or null), or an error.
  bool array(const char* key, const ojson*& out, std::string& error) const {
    out = find(key);
    if (out != nullptr && !out->is_array()) {
      error = prefix_ + key + " is not an array";
      return false;
    }
    return true;
  }

  template <class T>
  bool integer(const char* key, T& out, std::string& error) const {
    const ojson* v = find(key);
    if (v == nullptr) return true;
    auto n = integer_value<T>(*v);
    if (!n) {
      error = prefix_ + key + " " + shown(*v) + " is not a decimal integer";
      return false;
    }
    out = *n;
    return true;
  }

  bool number(const char* key, std::optional<double>& out, std::string& error) const {
    const ojson* v = find(key);
    if (v == nullptr) return true;
    out = double_value(*v);
    if (!out) {
      error = prefix_ + key + " " + shown(*v) + " is not a number";
      return false;
    }
    return true;
  }

  const std::string& prefix() const { return prefix_; }

  static std::string shown(const ojson& v) {
    if (v.is_string()) return "'" + excerpt(v.get_ref<const std::string&>()) + "'";
    return excerpt(v.dump());
  }

 private:
  const ojson& object_;
  std::string prefix_;
};

// A resource's dl.rank (else nv.dl.rank), service.instance.id and nemo.run.id.
std::string read_metric_resource(const ojson* resource, SpanResource& out) {
  if (resource == nullptr) return {};
  if (!resource->is_object()) return "resourceMetrics: resource is not an object";
  const ojson* attributes = nullptr;
  std::string error;
  if (!Members(*resource, "resourceMetrics: resource.").array("attributes", attributes, error)) {
    return error;
  }
  if (attributes == nullptr) return {};
  for (const ojson& kv : *attributes) {
    if (!kv.is_object()) return "resourceMetrics: an element of attributes is not an object";
    auto key = kv.find("key");
    auto value = kv.find("value");
    if (key == kv.end() || !key->is_string()) return "resourceMetrics: an attribute has no key";
    if (value == kv.end() || !value->is_object()) continue;
    const std::string& k = key->get_ref<const std::string&>();
    auto string_value = value->find("stringValue");
    const bool is_string = string_value != value->end() && string_value->is_string();
    if (k == semconv::kDlRank || (k == semconv::kNvDlRank && !out.rank)) {
      if (auto i = value->find("intValue"); i != value->end()) {
        if (auto n = integer_value<std::int64_t>(*i)) out.rank = *n;
      } else if (is_string) {
        if (auto n = parse_decimal<std::int64_t>(string_value->get_ref<const std::string&>())) {
          out.rank = *n;
        }
      }
    } else if (k == semconv::kServiceInstanceId && is_string) {
      out.instance_id = string_value->get<std::string>();
    } else if (k == semconv::kNemoRunId && is_string) {
      out.run_id = string_value->get<std::string>();
    }
  }
  return {};
}

// A data point's attributes as its series key: "k=v" sorted by key, joined by ", ".
std::string read_series(const ojson* attributes, const std::string& prefix, std::string& error) {
  if (attributes == nullptr) return {};
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const ojson& kv : *attributes) {
    if (!kv.is_object()) {
      error = prefix + "an element of attributes is not an object";
      return {};
    }
    auto key = kv.find("key");
    if (key == kv.end() || !key->is_string()) {
      error = prefix + "an attribute has no key";
      return {};
    }
    ojson plain;
    auto value = kv.find("value");
    if (value != kv.end() && !value->is_null()) {
      if (std::string e = plain_value(*value, plain, 0); !e.empty()) {
        error = prefix + "attribute '" + excerpt(key->get_ref<const std::string&>()) + "': " + e;
        return {};
      }
    }
    pairs.emplace_back(key->get<std::string>(),
                       plain.is_string()
                           ? plain.get<std::string>()
                           : plain.dump(-1, ' ', false, ojson::error_handler_t::replace));
  }
  std::sort(pairs.begin(), pairs.end());
  std::string series;
  for (const auto& [k, v] : pairs) {
    if (!series.empty()) series += ", ";
    series += k + "=" + v;
  }
  return series;
}

// The bucket counts of an array (absent or null: none); `what` names it in errors.
std::string read_counts(const ojson* counts, const std::string& what,
                        std::vector<std::uint64_t>& out) {
  if (counts == nullptr) return {};
  if (!counts->is_array()) return what + " is not an array";
  for (const ojson& c : *counts) {
    auto n = integer_value<std::uint64_t>(c);
    if (!n) return what + " holds " + Members::shown(c) + ", not a decimal integer";
    out.push_back(*n);
  }
  return {};
}

// The buckets of an exponential histogram point: scale, zeroCount, zeroThreshold, positive and
// negative ({offset, bucketCounts}). Any 32-bit scale and offset is read: what the report can use
// of them is the aggregation's concern (report_metrics.hpp), so that nothing lens collect accepts
// makes a line unreadable.
std::string read_exponential(const Members& m, const std::string& prefix, MetricPoint& out) {
  std::string error;
  std::optional<double> zero_threshold;
  if (!m.integer("scale", out.scale, error) || !m.integer("zeroCount", out.zero_count, error) ||
      !m.number("zeroThreshold", zero_threshold, error)) {
    return error;
  }
  out.zero_threshold = zero_threshold.value_or(0);
  for (auto [key, side] : {std::pair{"positive", &out.positive}, {"negative", &out.negative}}) {
    const ojson* buckets = m.find(key);
    if (buckets == nullptr) continue;
    if (!buckets->is_object()) return prefix + key + " is not an object";
    const Members b(*buckets, prefix + key + ".");
    if (!b.integer("offset", side->offset, error)) return error;
    if (std::string e =
            read_counts(b.find("bucketCounts"), b.prefix() + "bucketCounts", side->counts);
        !e.empty()) {
      return e;
    }
  }
  return {};
}

std::string read_point(const ojson& p, MetricType type, const std::string& prefix,
                       MetricPoint& out) {
  if (!p.is_object()) return prefix + "is not an object";
  const Members m(p, prefix);
  std::string error;
  const ojson* attributes = nullptr;
  if (!m.array("attributes", attributes, error)) return error;
  out.series = read_series(attributes, prefix, error);
  if (!error.empty()) return error;
  std::uint32_t flags = 0;
  if (!m.integer("startTimeUnixNano", out.start_ns, error) ||
      !m.integer("timeUnixNano", out.time_ns, error) || !m.integer("flags", flags, error)) {
    return error;
  }
  if (type == MetricType::kGauge || type == MetricType::kSum) {
    if (m.find("asInt") != nullptr) {
      if (!m.integer("asInt", out.int_value, error)) return error;
      out.is_int = true;
      out.has_value = true;
      out.value = static_cast<double>(out.int_value);
    }
    if (m.find("asDouble") != nullptr) {
      std::optional<double> d;
      if (!m.number("asDouble", d, error)) return error;
      out.is_int = false;
      out.has_value = true;
      out.value = *d;
    }
    if ((flags & 1) != 0) out.has_value = false;  // FLAG_NO_RECORDED_VALUE
    return {};
  }
  if (!m.integer("count", out.count, error) || !m.number("sum", out.sum, error) ||
      !m.number("min", out.min, error) || !m.number("max", out.max, error)) {
    return error;
  }
  if (type == MetricType::kExponentialHistogram) return read_exponential(m, prefix, out);
  if (type != MetricType::kHistogram) return {};
  const ojson* counts = nullptr;
  const ojson* bounds = nullptr;
  if (!m.array("bucketCounts", counts, error) || !m.array("explicitBounds", bounds, error)) {
    return error;
  }
  if (counts != nullptr) {
    for (const ojson& c : *counts) {
      auto n = integer_value<std::uint64_t>(c);
      if (!n) return prefix + "bucketCounts holds " + Members::shown(c) + ", not a decimal integer";
      out.bucket_counts.push_back(*n);
    }
  }
  if (bounds != nullptr) {
    for (const ojson& b : *bounds) {
      auto d = double_value(b);
      if (!d) return prefix + "explicitBounds holds " + Members::shown(b) + ", not a number";
      out.explicit_bounds.push_back(*d);
    }
  }
  if (!out.bucket_counts.empty() && out.bucket_counts.size() != out.explicit_bounds.size() + 1) {
    return prefix + std::to_string(out.bucket_counts.size()) + " bucketCounts for " +
           std::to_string(out.explicit_bounds.size()) + " explicitBounds (expected one more)";
  }
  if (out.bucket_counts.empty()) out.explicit_bounds.clear();
  return {};
}

// The metric numbered `number` (from 1, in the line) into `out`.
std::string read_metric(const ojson& metric, std::size_t number, std::size_t resource,
                        MetricRecord& out, std::size_t& points) {
  if (!metric.is_object()) {
    return "an element of resourceMetrics[].scopeMetrics[].metrics is not an object";
  }
  out.resource = resource;
  auto name = metric.find("name");
  if (name == metric.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return "metric " + std::to_string(number) + ": no name";
  }
  out.name = name->get<std::string>();
  const std::string prefix = "metric '" + excerpt(out.name) + "': ";
  if (auto unit = metric.find("unit"); unit != metric.end() && !unit->is_null()) {
    if (!unit->is_string()) return prefix + "unit is not a string";
    out.unit = unit->get<std::string>();
  }
  static constexpr std::pair<const char*, MetricType> kTypes[] = {
      {"gauge", MetricType::kGauge},
      {"sum", MetricType::kSum},
      {"histogram", MetricType::kHistogram},
      {"exponentialHistogram", MetricType::kExponentialHistogram},
      {"summary", MetricType::kSummary}};
  const ojson* data = nullptr;
  const char* data_key = nullptr;
  for (const auto& [key, type] : kTypes) {
    auto it = metric.find(key);
    if (it == metric.end() || it->is_null()) continue;
    if (!it->is_object()) return prefix + key + " is not an object";
    data = &*it;
    data_key = key;
    out.type = type;
  }
  if (data == nullptr) return {};  // no data: nothing to report
  const Members m(*data, prefix + data_key + ".");
  std::string error;
  if (auto t = m.find("aggregationTemporality")) {
    if (t->is_string()) {  // the enum's name, as proto3 JSON allows
      const std::string& text = t->get_ref<const std::string&>();
      out.temporality = text == "AGGREGATION_TEMPORALITY_DELTA"        ? 1
                        : text == "AGGREGATION_TEMPORALITY_CUMULATIVE" ? 2
                                                                       : 0;
    } else if (!m.integer("aggregationTemporality", out.temporality, error)) {
      return error;
    }
  }
  if (auto monotonic = m.find("isMonotonic")) {
    if (!monotonic->is_boolean()) return m.prefix() + "isMonotonic is not a boolean";
    out.monotonic = monotonic->get<bool>();
  }
  const ojson* data_points = nullptr;
  if (!m.array("dataPoints", data_points, error)) return error;
  if (data_points == nullptr) return {};
  out.points.resize(data_points->size());
  for (std::size_t i = 0; i < data_points->size(); ++i) {
    const std::string point_prefix = prefix + "dataPoints[" + std::to_string(i) + "]: ";
    if (std::string e = read_point((*data_points)[i], out.type, point_prefix, out.points[i]);
        !e.empty()) {
      return e;
    }
  }
  points += out.points.size();
  return {};
}

}  // namespace

std::string read_metrics(const ojson& resource_metrics, ParsedRequest& out) {
  std::size_t metric_number = 0;
  for (const ojson& rm : resource_metrics) {
    if (!rm.is_object()) return "an element of resourceMetrics is not an object";
    const Members group(rm, "resourceMetrics[].");
    std::string error;
    SpanResource& resource = out.resources.emplace_back();
    if (std::string e = read_metric_resource(group.find("resource"), resource); !e.empty()) {
      return e;
    }
    const std::size_t resource_index = out.resources.size() - 1;
    const ojson* scopes = nullptr;
    if (!group.array("scopeMetrics", scopes, error)) return error;
    if (scopes == nullptr) continue;
    for (const ojson& sm : *scopes) {
      if (!sm.is_object()) return "an element of resourceMetrics[].scopeMetrics is not an object";
      const ojson* metrics = nullptr;
      if (!Members(sm, "resourceMetrics[].scopeMetrics[].").array("metrics", metrics, error)) {
        return error;
      }
      if (metrics == nullptr) continue;
      for (const ojson& metric : *metrics) {
        ++metric_number;
        MetricRecord& record = out.metrics.emplace_back();
        if (std::string e =
                read_metric(metric, metric_number, resource_index, record, out.data_points);
            !e.empty()) {
          return e;
        }
      }
    }
  }
  return {};
}

void read_logs(const ojson& resource_logs, ParsedRequest& out) {
  // Lenient by design: a log line is malformed only when resourceLogs is not an array (checked
  // by span_lines), so records and fields of another shape are skipped, not fatal.
  constexpr std::size_t kMaxBody = 1000;
  auto field = [](const ojson& object, const char* key) -> const ojson* {
    auto it = object.find(key);
    return it == object.end() ? nullptr : &*it;
  };
  auto array = [&](const ojson& object, const char* key) -> const ojson* {
    const ojson* v = field(object, key);
    return v != nullptr && v->is_array() ? v : nullptr;
  };
  for (const ojson& rl : resource_logs) {
    if (!rl.is_object()) continue;
    SpanResource& resource = out.resources.emplace_back();
    if (!read_metric_resource(field(rl, "resource"), resource).empty()) resource = SpanResource{};
    const std::size_t resource_index = out.resources.size() - 1;
    const ojson* scopes = array(rl, "scopeLogs");
    if (scopes == nullptr) continue;
    for (const ojson& sl : *scopes) {
      if (!sl.is_object()) continue;
      const ojson* records = array(sl, "logRecords");
      if (records == nullptr) continue;
      for (const ojson& record : *records) {
        if (!record.is_object()) continue;
        LogEntry entry;
        entry.resource = resource_index;
        for (const char* key : {"timeUnixNano", "observedTimeUnixNano"}) {
          const ojson* t = field(record, key);
          if (t == nullptr) continue;
          if (auto n = integer_value<std::uint64_t>(*t); n && *n != 0) {
            entry.time_ns = *n;
            break;
          }
        }
        if (const ojson* n = field(record, "severityNumber")) {
          if (auto v = integer_value<std::int32_t>(*n)) entry.severity_number = *v;
        }
        if (const ojson* t = field(record, "severityText"); t != nullptr && t->is_string()) {
          entry.severity_text = t->get<std::string>();
        }
        if (const ojson* body = field(record, "body"); body != nullptr && body->is_object()) {
          ojson plain;
          if (plain_value(*body, plain, 0).empty()) {
            entry.body = plain.is_string() ? plain.get<std::string>()
                         : plain.is_null()
                             ? std::string()
                             : plain.dump(-1, ' ', false, ojson::error_handler_t::replace);
          }
        }
        if (entry.body.size() > kMaxBody) entry.body.resize(kMaxBody);
        out.logs.push_back(std::move(entry));
      }
    }
  }
}

}  // namespace nemo::lens::cli::reader
