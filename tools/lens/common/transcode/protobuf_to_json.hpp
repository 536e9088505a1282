// OTLP protobuf to OTLP/JSON: one member function per message, each of which checks the
// message's fields with the wire reader, then writes them as JSON in the library's order.
// The messages every signal shares (the request, resource and scope levels, KeyValue, AnyValue)
// are in protobuf_common.cpp; each signal's own in protobuf_traces.cpp, protobuf_metrics.cpp and
// protobuf_logs.cpp.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "common/otlp_transcode.hpp"
#include "common/transcode/request_shape.hpp"
#include "common/transcode/wire_reader.hpp"
#include "export/json_writer.hpp"

namespace lens_cli::transcode {

namespace json = nemo::lens::detail::json;

// Message names, as errors spell them.
constexpr const char* kResourceName = "Resource";
constexpr const char* kScopeName = "InstrumentationScope";
constexpr const char* kSpanName = "Span";
constexpr const char* kEventName = "Span.Event";
constexpr const char* kLinkName = "Span.Link";
constexpr const char* kStatusName = "Status";
constexpr const char* kKeyValueName = "KeyValue";
constexpr const char* kAnyValueName = "AnyValue";
constexpr const char* kArrayValueName = "ArrayValue";
constexpr const char* kKeyValueListName = "KeyValueList";
constexpr const char* kMetricName = "Metric";
constexpr const char* kGaugeName = "Gauge";
constexpr const char* kSumName = "Sum";
constexpr const char* kHistogramName = "Histogram";
constexpr const char* kExponentialHistogramName = "ExponentialHistogram";
constexpr const char* kSummaryName = "Summary";
constexpr const char* kNumberPointName = "NumberDataPoint";
constexpr const char* kHistogramPointName = "HistogramDataPoint";
constexpr const char* kExponentialPointName = "ExponentialHistogramDataPoint";
constexpr const char* kBucketsName = "ExponentialHistogramDataPoint.Buckets";
constexpr const char* kSummaryPointName = "SummaryDataPoint";
constexpr const char* kQuantileName = "SummaryDataPoint.ValueAtQuantile";
constexpr const char* kExemplarName = "Exemplar";
constexpr const char* kLogRecordName = "LogRecord";

// Opens a JSON object at its first key, so that keys after optional ones get their comma right.
struct Object {
  std::string& out;
  bool open = false;

  void key(std::string_view k) {
    out.push_back(open ? ',' : '{');
    open = true;
    json::append_key(out, k);
  }
  void close() {
    if (!open) out.push_back('{');
    out.push_back('}');
  }
};

// bytesValue: `in` as a quoted base64 string.
void append_base64(std::string& out, std::span<const std::uint8_t> in);

// Decodes one request and writes its JSON to `out` as it goes. Each message function checks its
// fields, then writes them in the library's order; repeated fields are re-walked from their
// first to their last occurrence. On failure `error` is set and `out` holds a partial line that
// the caller truncates.
class ProtobufToJson : public WireReader {
 public:
  ProtobufToJson(std::string_view input, std::string& out) : WireReader(input), out_(out) {}

  std::uint64_t spans = 0;
  std::uint64_t points = 0;
  std::uint64_t records = 0;
  // Traces: the first reason lens report would not read the line (TranscodeResult::unreadable).
  std::string unreadable;

  bool request(Signal signal, const Byte* p, const Byte* end);

 private:
  std::string& out_;
  Signal signal_ = Signal::kTraces;

  // ---- writing JSON ----

  // Runs `emit` for a superseded occurrence only to check it, discarding its output.
  template <class Emit>
  bool check_only(Emit&& emit) {
    const std::size_t mark = out_.size();
    const std::uint64_t counts[3] = {spans, points, records};
    const std::size_t unreadable_size = unreadable.size();
    const bool ok = emit();
    out_.resize(mark);
    spans = counts[0];
    points = counts[1];
    records = counts[2];
    unreadable.resize(unreadable_size);
    return ok;
  }

  // Writes the occurrences of field `number` in `r` separated by commas, each with `emit`.
  template <class Emit>
  bool each(const Repeated& r, std::uint32_t number, const char* message, Emit&& emit) {
    bool first = true;
    const Byte* p = r.first;
    while (p != nullptr && p < r.end) {
      Field f;
      if (!next(p, r.end, f, message)) return false;  // cannot fail: walked once already
      if (f.number != number) continue;
      if (!first) out_.push_back(',');
      first = false;
      if (!emit(f)) return false;
    }
    return true;
  }

  // `"attributes":[...]` (the key written by the caller) from a repeated KeyValue field.
  bool key_values(const Repeated& r, std::uint32_t number, const char* message, int depth) {
    out_.push_back('[');
    if (!each(r, number, message, [&](const Field& f) { return key_value(f, depth); })) {
      return false;
    }
    out_.push_back(']');
    return true;
  }

  void append_count(Object& o, std::string_view key, std::uint64_t varint_value) {
    const auto count = static_cast<std::uint32_t>(varint_value);  // uint32: low 32 bits
    if (count == 0) return;
    o.key(key);
    json::append_uint(out_, count);
  }

  // An int32 enum: the varint's low 32 bits, as a signed number.
  void append_enum(std::uint64_t varint_value) {
    json::append_int(out_, static_cast<std::int32_t>(static_cast<std::uint32_t>(varint_value)));
  }

  void string_member(Object& o, std::string_view key, std::string_view value) {
    if (value.empty()) return;
    o.key(key);
    json::append_string(out_, value);
  }

  void fixed64_member(Object& o, std::string_view key, std::uint64_t value) {
    if (value == 0) return;
    o.key(key);
    json::append_quoted_uint(out_, value);
  }

  // A double with explicit presence (proto3 optional, a oneof member): written when present.
  void double_member(Object& o, std::string_view key, bool present, std::uint64_t bits) {
    if (!present) return;
    o.key(key);
    json::append_double(out_, as_double(bits));
  }

  // A plain proto3 double: written unless its bits are all 0 (so -0.0 is written, as protobuf
  // serializes it).
  void implicit_double_member(Object& o, std::string_view key, std::uint64_t bits) {
    double_member(o, key, bits != 0, bits);
  }

  // A repeated message field, when it occurs.
  template <class Emit>
  bool messages_member(Object& o, std::string_view key, const Repeated& r, std::uint32_t number,
                       const char* message, Emit&& emit) {
    if (r.empty()) return true;
    o.key(key);
    out_.push_back('[');
    if (!each(r, number, message, emit)) return false;
    out_.push_back(']');
    return true;
  }

  bool attributes_member(Object& o, std::string_view key, const Repeated& r, std::uint32_t number,
                         const char* message, int depth) {
    if (r.empty()) return true;
    o.key(key);
    return key_values(r, number, message, depth);
  }

  // Writes the elements of the repeated scalar field `number` (checked by
  // check_repeated_scalar) as a JSON array, each with `emit(value)`. `fixed`: 8-byte elements
  // (fixed64, double), else varints.
  template <class Emit>
  bool repeated_scalar(const Repeated& r, std::uint32_t number, bool fixed, const char* message,
                       Emit&& emit) {
    out_.push_back('[');
    bool first = true;
    auto element = [&](std::uint64_t v) {
      if (!first) out_.push_back(',');
      first = false;
      emit(v);
    };
    const Byte* p = r.first;
    while (p != nullptr && p < r.end) {
      Field f;
      if (!next(p, r.end, f, message)) return false;
      if (f.number != number) continue;
      if (f.wire != kLen) {
        element(f.value);
        continue;
      }
      const Byte* q = f.data;
      const Byte* const end = q + f.size;
      while (q < end) {
        std::uint64_t v = 0;
        if (fixed) {
          v = load_le(q, 8);
          q += 8;
        } else if (!varint(q, end, v)) {
          return false;
        }
        element(v);
      }
    }
    out_.push_back(']');
    return true;
  }

  // ---- the messages every signal shares (protobuf_common.cpp) ----

  bool resource_group(const Field& m, int depth);
  bool resource(const Field& m, int depth);
  bool scope_group(const Field& m, int depth);
  bool scope(const Field& m, int depth);
  bool key_value(const Field& m, int depth);

  // The AnyValue member `f` (its wire type already checked), as the value of its JSON object.
  bool any_member(const Field& f, int depth);
  bool any_value(const Field& m, int depth);
  bool array_value(const Field& m, int depth);
  bool key_value_list(const Field& m, int depth);

  // ---- spans (protobuf_traces.cpp) ----

  bool span(const Field& m, int depth);
  bool event(const Field& m, int depth);
  bool link(const Field& m, int depth);
  bool status(const Field& m, int depth);

  // ---- metrics (protobuf_metrics.cpp) ----

  // Metrics and logs follow libprotobuf's JSON printer: a field is written when present (a
  // message or a oneof member or an optional field that occurs, a scalar that is not 0 or
  // empty, a repeated field that is not empty), in field-number order.
  bool metric(const Field& m, int depth);

  // Gauge, Sum, Histogram, ExponentialHistogram or Summary (the Metric field number of `m`).
  bool metric_data(const Field& m, int depth);
  bool number_point(const Field& m, int depth);
  bool exemplars_member(Object& o, const Repeated& exemplars, std::uint32_t number,
                        const char* message, int depth);
  bool histogram_point(const Field& m, int depth);
  bool exponential_point(const Field& m, int depth);
  bool buckets(const Field& m, int depth);
  bool summary_point(const Field& m, int depth);
  bool quantile(const Field& m, int depth);
  bool exemplar(const Field& m, int depth);

  // ---- logs (protobuf_logs.cpp) ----

  bool log_record(const Field& m, int depth);
};

}  // namespace lens_cli::transcode
