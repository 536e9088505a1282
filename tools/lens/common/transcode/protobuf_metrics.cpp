// The messages of an ExportMetricsServiceRequest below its scope groups: Metric, its five kinds
// of data, their data points, buckets, quantiles and exemplars.
#include <string>

#include "common/transcode/protobuf_to_json.hpp"

namespace lens_cli::transcode {

bool ProtobufToJson::metric(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::string_view name, description, unit;
  Field data;
  bool has_data = false;
  Repeated metadata;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kMetricName)) return false;
    switch (f.number) {
      case 1:
        if (!expect(f, kLen, kMetricName)) return false;
        name = f.text();
        break;
      case 2:
        if (!expect(f, kLen, kMetricName)) return false;
        description = f.text();
        break;
      case 3:
        if (!expect(f, kLen, kMetricName)) return false;
        unit = f.text();
        break;
      case 5:
      case 7:
      case 9:
      case 10:
      case 11:  // the data oneof: the last member present wins
        if (!expect(f, kLen, kMetricName)) return false;
        if (has_data && !check_only([&] { return metric_data(data, depth + 1); })) return false;
        data = f;
        has_data = true;
        break;
      case 12:
        if (!expect(f, kLen, kMetricName)) return false;
        metadata.note(f, p);
        break;
      default:
        break;
    }
  }
  Object o{out_};
  string_member(o, "name", name);
  string_member(o, "description", description);
  string_member(o, "unit", unit);
  if (has_data) {
    switch (data.number) {
      case 5:
        o.key("gauge");
        break;
      case 7:
        o.key("sum");
        break;
      case 9:
        o.key("histogram");
        break;
      case 10:
        o.key("exponentialHistogram");
        break;
      default:
        o.key("summary");
        break;
    }
    if (!metric_data(data, depth + 1)) return false;
  }
  if (!metadata.empty()) {
    o.key("metadata");
    if (!key_values(metadata, 12, kMetricName, depth + 1)) return false;
  }
  o.close();
  return true;
}

bool ProtobufToJson::metric_data(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const char* message = kGaugeName;
  bool temporal = false, monotonic_field = false;
  switch (m.number) {
    case 7:
      message = kSumName;
      temporal = monotonic_field = true;
      break;
    case 9:
      message = kHistogramName;
      temporal = true;
      break;
    case 10:
      message = kExponentialHistogramName;
      temporal = true;
      break;
    case 11:
      message = kSummaryName;
      break;
    default:
      break;
  }
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  Repeated data_points;
  std::uint64_t temporality = 0, monotonic = 0;
  while (p < end) {
    Field f;
    if (!next(p, end, f, message)) return false;
    if (f.number == 1) {
      if (!expect(f, kLen, message)) return false;
      data_points.note(f, p);
    } else if (f.number == 2 && temporal) {
      if (!expect(f, kVarint, message)) return false;
      temporality = f.value;
    } else if (f.number == 3 && monotonic_field) {
      if (!expect(f, kVarint, message)) return false;
      monotonic = f.value;
    }
  }
  Object o{out_};
  if (!messages_member(o, "dataPoints", data_points, 1, message, [&](const Field& f) {
        switch (m.number) {
          case 9:
            return histogram_point(f, depth + 1);
          case 10:
            return exponential_point(f, depth + 1);
          case 11:
            return summary_point(f, depth + 1);
          default:
            return number_point(f, depth + 1);
        }
      })) {
    return false;
  }
  if (static_cast<std::uint32_t>(temporality) != 0) {
    o.key("aggregationTemporality");
    append_enum(temporality);
  }
  if (monotonic != 0) {
    o.key("isMonotonic");
    json::append_raw(out_, "true");
  }
  o.close();
  return true;
}

bool ProtobufToJson::number_point(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  ++points;
  // Expected wire type per field number 1..8 (1 is reserved: skipped whatever its type).
  static constexpr std::uint32_t kWire[9] = {0,    0,        kFixed64, kFixed64, kFixed64,
                                             kLen, kFixed64, kLen,     kVarint};
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t start = 0, time = 0, value = 0, flags = 0;
  std::uint32_t value_field = 0;  // 4 (asDouble) or 6 (asInt): the oneof's last member
  Repeated attributes, exemplars;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kNumberPointName)) return false;
    if (f.number > 8 || f.number == 1) continue;
    if (!expect(f, kWire[f.number], kNumberPointName)) return false;
    switch (f.number) {
      case 2:
        start = f.value;
        break;
      case 3:
        time = f.value;
        break;
      case 4:
      case 6:
        value = f.value;
        value_field = f.number;
        break;
      case 5:
        exemplars.note(f, p);
        break;
      case 7:
        attributes.note(f, p);
        break;
      default:  // 8
        flags = f.value;
        break;
    }
  }
  Object o{out_};
  fixed64_member(o, "startTimeUnixNano", start);
  fixed64_member(o, "timeUnixNano", time);
  double_member(o, "asDouble", value_field == 4, value);
  if (!exemplars_member(o, exemplars, 5, kNumberPointName, depth + 1)) return false;
  if (value_field == 6) {
    o.key("asInt");
    json::append_quoted_int(out_, static_cast<std::int64_t>(value));
  }
  if (!attributes_member(o, "attributes", attributes, 7, kNumberPointName, depth + 1)) {
    return false;
  }
  append_count(o, "flags", flags);
  o.close();
  return true;
}

bool ProtobufToJson::exemplars_member(Object& o, const Repeated& exemplars, std::uint32_t number,
                                      const char* message, int depth) {
  return messages_member(o, "exemplars", exemplars, number, message,
                         [&](const Field& f) { return exemplar(f, depth); });
}

bool ProtobufToJson::histogram_point(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  ++points;
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t start = 0, time = 0, count = 0, sum = 0, min = 0, max = 0, flags = 0;
  bool has_sum = false, has_min = false, has_max = false;
  Repeated attributes, exemplars, bucket_counts, bounds;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kHistogramPointName)) return false;
    switch (f.number) {
      case 2:
      case 3:
      case 4:
      case 5:
      case 11:
      case 12:
        if (!expect(f, kFixed64, kHistogramPointName)) return false;
        if (f.number == 2) start = f.value;
        if (f.number == 3) time = f.value;
        if (f.number == 4) count = f.value;
        if (f.number == 5) {
          sum = f.value;
          has_sum = true;
        }
        if (f.number == 11) {
          min = f.value;
          has_min = true;
        }
        if (f.number == 12) {
          max = f.value;
          has_max = true;
        }
        break;
      case 6:
      case 7:
        if (!check_repeated_scalar(f, kFixed64, kHistogramPointName)) return false;
        (f.number == 6 ? bucket_counts : bounds).note(f, p);
        break;
      case 8:
      case 9:
        if (!expect(f, kLen, kHistogramPointName)) return false;
        (f.number == 8 ? exemplars : attributes).note(f, p);
        break;
      case 10:
        if (!expect(f, kVarint, kHistogramPointName)) return false;
        flags = f.value;
        break;
      default:
        break;
    }
  }
  Object o{out_};
  fixed64_member(o, "startTimeUnixNano", start);
  fixed64_member(o, "timeUnixNano", time);
  fixed64_member(o, "count", count);
  double_member(o, "sum", has_sum, sum);
  if (!bucket_counts.empty()) {
    o.key("bucketCounts");
    if (!repeated_scalar(bucket_counts, 6, true, kHistogramPointName,
                         [&](std::uint64_t v) { json::append_quoted_uint(out_, v); })) {
      return false;
    }
  }
  if (!bounds.empty()) {
    o.key("explicitBounds");
    if (!repeated_scalar(bounds, 7, true, kHistogramPointName,
                         [&](std::uint64_t v) { json::append_double(out_, as_double(v)); })) {
      return false;
    }
  }
  if (!exemplars_member(o, exemplars, 8, kHistogramPointName, depth + 1)) return false;
  if (!attributes_member(o, "attributes", attributes, 9, kHistogramPointName, depth + 1)) {
    return false;
  }
  append_count(o, "flags", flags);
  double_member(o, "min", has_min, min);
  double_member(o, "max", has_max, max);
  o.close();
  return true;
}

bool ProtobufToJson::exponential_point(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  ++points;
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t start = 0, time = 0, count = 0, sum = 0, scale = 0, zero_count = 0;
  std::uint64_t flags = 0, min = 0, max = 0, zero_threshold = 0;
  bool has_sum = false, has_min = false, has_max = false;
  Field positive, negative;
  bool has_positive = false, has_negative = false;
  Repeated attributes, exemplars;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kExponentialPointName)) return false;
    switch (f.number) {
      case 1:
      case 11:
        if (!expect(f, kLen, kExponentialPointName)) return false;
        (f.number == 1 ? attributes : exemplars).note(f, p);
        break;
      case 2:
      case 3:
      case 4:
      case 5:
      case 7:
      case 12:
      case 13:
      case 14:
        if (!expect(f, kFixed64, kExponentialPointName)) return false;
        if (f.number == 2) start = f.value;
        if (f.number == 3) time = f.value;
        if (f.number == 4) count = f.value;
        if (f.number == 5) {
          sum = f.value;
          has_sum = true;
        }
        if (f.number == 7) zero_count = f.value;
        if (f.number == 12) {
          min = f.value;
          has_min = true;
        }
        if (f.number == 13) {
          max = f.value;
          has_max = true;
        }
        if (f.number == 14) zero_threshold = f.value;
        break;
      case 6:
      case 10:
        if (!expect(f, kVarint, kExponentialPointName)) return false;
        (f.number == 6 ? scale : flags) = f.value;
        break;
      case 8:
      case 9: {
        if (!expect(f, kLen, kExponentialPointName)) return false;
        Field& slot = f.number == 8 ? positive : negative;
        bool& has = f.number == 8 ? has_positive : has_negative;
        if (has && !check_only([&] { return buckets(slot, depth + 1); })) return false;
        slot = f;
        has = true;
        break;
      }
      default:
        break;
    }
  }
  Object o{out_};
  if (!attributes_member(o, "attributes", attributes, 1, kExponentialPointName, depth + 1)) {
    return false;
  }
  fixed64_member(o, "startTimeUnixNano", start);
  fixed64_member(o, "timeUnixNano", time);
  fixed64_member(o, "count", count);
  double_member(o, "sum", has_sum, sum);
  if (zigzag32(scale) != 0) {
    o.key("scale");
    json::append_int(out_, zigzag32(scale));
  }
  fixed64_member(o, "zeroCount", zero_count);
  if (has_positive) {
    o.key("positive");
    if (!buckets(positive, depth + 1)) return false;
  }
  if (has_negative) {
    o.key("negative");
    if (!buckets(negative, depth + 1)) return false;
  }
  append_count(o, "flags", flags);
  if (!exemplars_member(o, exemplars, 11, kExponentialPointName, depth + 1)) return false;
  double_member(o, "min", has_min, min);
  double_member(o, "max", has_max, max);
  implicit_double_member(o, "zeroThreshold", zero_threshold);
  o.close();
  return true;
}

bool ProtobufToJson::buckets(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t offset = 0;
  Repeated counts;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kBucketsName)) return false;
    if (f.number == 1) {
      if (!expect(f, kVarint, kBucketsName)) return false;
      offset = f.value;
    } else if (f.number == 2) {
      if (!check_repeated_scalar(f, kVarint, kBucketsName)) return false;
      counts.note(f, p);
    }
  }
  Object o{out_};
  if (zigzag32(offset) != 0) {
    o.key("offset");
    json::append_int(out_, zigzag32(offset));
  }
  if (!counts.empty()) {
    o.key("bucketCounts");
    if (!repeated_scalar(counts, 2, false, kBucketsName,
                         [&](std::uint64_t v) { json::append_quoted_uint(out_, v); })) {
      return false;
    }
  }
  o.close();
  return true;
}

bool ProtobufToJson::summary_point(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  ++points;
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t start = 0, time = 0, count = 0, sum = 0, flags = 0;
  Repeated attributes, quantiles;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kSummaryPointName)) return false;
    switch (f.number) {
      case 2:
      case 3:
      case 4:
      case 5:
        if (!expect(f, kFixed64, kSummaryPointName)) return false;
        if (f.number == 2) start = f.value;
        if (f.number == 3) time = f.value;
        if (f.number == 4) count = f.value;
        if (f.number == 5) sum = f.value;
        break;
      case 6:
      case 7:
        if (!expect(f, kLen, kSummaryPointName)) return false;
        (f.number == 6 ? quantiles : attributes).note(f, p);
        break;
      case 8:
        if (!expect(f, kVarint, kSummaryPointName)) return false;
        flags = f.value;
        break;
      default:
        break;
    }
  }
  Object o{out_};
  fixed64_member(o, "startTimeUnixNano", start);
  fixed64_member(o, "timeUnixNano", time);
  fixed64_member(o, "count", count);
  implicit_double_member(o, "sum", sum);
  if (!messages_member(o, "quantileValues", quantiles, 6, kSummaryPointName,
                       [&](const Field& f) { return quantile(f, depth + 1); })) {
    return false;
  }
  if (!attributes_member(o, "attributes", attributes, 7, kSummaryPointName, depth + 1)) {
    return false;
  }
  append_count(o, "flags", flags);
  o.close();
  return true;
}

bool ProtobufToJson::quantile(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t q = 0, value = 0;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kQuantileName)) return false;
    if (f.number == 1 || f.number == 2) {
      if (!expect(f, kFixed64, kQuantileName)) return false;
      (f.number == 1 ? q : value) = f.value;
    }
  }
  Object o{out_};
  implicit_double_member(o, "quantile", q);
  implicit_double_member(o, "value", value);
  o.close();
  return true;
}

bool ProtobufToJson::exemplar(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::uint64_t time = 0, value = 0;
  std::uint32_t value_field = 0;  // 3 (asDouble) or 6 (asInt)
  Field span_id, trace_id;
  Repeated attributes;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kExemplarName)) return false;
    switch (f.number) {
      case 2:
      case 3:
      case 6:
        if (!expect(f, kFixed64, kExemplarName)) return false;
        if (f.number == 2) {
          time = f.value;
        } else {
          value = f.value;
          value_field = f.number;
        }
        break;
      case 4:
        if (!expect(f, kLen, kExemplarName) || !check_id(f, kSpanIdSize, "Exemplar.span_id")) {
          return false;
        }
        span_id = f;
        break;
      case 5:
        if (!expect(f, kLen, kExemplarName) || !check_id(f, kTraceIdSize, "Exemplar.trace_id")) {
          return false;
        }
        trace_id = f;
        break;
      case 7:
        if (!expect(f, kLen, kExemplarName)) return false;
        attributes.note(f, p);
        break;
      default:
        break;
    }
  }
  Object o{out_};
  fixed64_member(o, "timeUnixNano", time);
  double_member(o, "asDouble", value_field == 3, value);
  if (span_id.size != 0) {
    o.key("spanId");
    json::append_hex(out_, span_id.bytes());
  }
  if (trace_id.size != 0) {
    o.key("traceId");
    json::append_hex(out_, trace_id.bytes());
  }
  if (value_field == 6) {
    o.key("asInt");
    json::append_quoted_int(out_, static_cast<std::int64_t>(value));
  }
  if (!attributes_member(o, "filteredAttributes", attributes, 7, kExemplarName, depth + 1)) {
    return false;
  }
  o.close();
  return true;
}

}  // namespace lens_cli::transcode
