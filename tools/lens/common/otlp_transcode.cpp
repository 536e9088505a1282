// OTLP request bodies to OTLP/JSON lines for `lens collect`: a hand-written protobuf decoder that
// writes JSON as it goes (see otlp_transcode.hpp for the encoding), and a JSON validator that
// copies a body's tokens without the whitespace between them.
#include "common/otlp_transcode.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <string_view>
#include <system_error>
#include <utility>

#include "export/json_writer.hpp"

namespace lens_cli {
namespace {

namespace json = nemo::lens::detail::json;
using Byte = unsigned char;

// ---- protobuf -> JSON ----------------------------------------------------------------------

constexpr int kMaxDepth = 32;  // nested messages, the request's elements being depth 1

constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kFixed64 = 1;
constexpr std::uint32_t kLen = 2;
constexpr std::uint32_t kFixed32 = 5;

constexpr std::size_t kTraceIdSize = 16;
constexpr std::size_t kSpanIdSize = 8;

// Message names, as errors spell them.
constexpr const char* kRequestName = "ExportTraceServiceRequest";
constexpr const char* kResourceSpansName = "ResourceSpans";
constexpr const char* kResourceName = "Resource";
constexpr const char* kScopeSpansName = "ScopeSpans";
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

// What differs between the three requests above the signal's own items.
struct SignalShape {
  const char* request;          // message names, as errors spell them
  const char* resource_group;   // ResourceSpans
  const char* scope_group;      // ScopeSpans
  std::string_view root_key;    // "resourceSpans"
  std::string_view scopes_key;  // "scopeSpans"
  std::string_view items_key;   // "spans"
};

constexpr SignalShape kTraceShape{kRequestName,    kResourceSpansName, kScopeSpansName,
                                  "resourceSpans", "scopeSpans",       "spans"};
constexpr SignalShape kMetricShape{"ExportMetricsServiceRequest",
                                   "ResourceMetrics",
                                   "ScopeMetrics",
                                   "resourceMetrics",
                                   "scopeMetrics",
                                   "metrics"};
constexpr SignalShape kLogShape{"ExportLogsServiceRequest",
                                "ResourceLogs",
                                "ScopeLogs",
                                "resourceLogs",
                                "scopeLogs",
                                "logRecords"};

const SignalShape& shape_of(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return kMetricShape;
    case Signal::kLogs:
      return kLogShape;
    case Signal::kTraces:
      break;
  }
  return kTraceShape;
}

// One decoded field: its number, wire type and payload.
struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t value = 0;     // varint, fixed64 or fixed32 payload
  const Byte* data = nullptr;  // length-delimited payload
  std::size_t size = 0;
  const Byte* tag = nullptr;  // where the field starts

  std::string_view text() const { return {reinterpret_cast<const char*>(data), size}; }
  std::span<const std::uint8_t> bytes() const { return {data, size}; }
};

// Where the occurrences of one repeated field lie in its message: from the first one's tag to
// the end of the last one (other fields may sit in between).
struct Repeated {
  const Byte* first = nullptr;
  const Byte* end = nullptr;

  void note(const Field& f, const Byte* after) {
    if (first == nullptr) first = f.tag;
    end = after;
  }
  bool empty() const { return first == nullptr; }
};

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

std::uint64_t load_le(const Byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void append_base64(std::string& out, std::span<const std::uint8_t> in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.push_back('"');
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t v =
        (std::uint32_t{in[i]} << 16) | (std::uint32_t{in[i + 1]} << 8) | in[i + 2];
    const char quad[4] = {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63],
                          kAlphabet[v & 63]};
    out.append(quad, 4);
  }
  if (const std::size_t rest = in.size() - i; rest != 0) {
    std::uint32_t v = std::uint32_t{in[i]} << 16;
    if (rest == 2) v |= std::uint32_t{in[i + 1]} << 8;
    const char quad[4] = {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63],
                          rest == 2 ? kAlphabet[(v >> 6) & 63] : '=', '='};
    out.append(quad, 4);
  }
  out.push_back('"');
}

// Decodes one request and writes its JSON to `out` as it goes. Each message function checks its
// fields, then writes them in the library's order; repeated fields are re-walked from their
// first to their last occurrence. On failure `error` is set and `out` holds a partial line that
// the caller truncates.
class ProtobufToJson {
 public:
  ProtobufToJson(std::string_view input, std::string& out)
      : base_(reinterpret_cast<const Byte*>(input.data())), out_(out) {}

  std::string error;
  std::uint64_t spans = 0;
  std::uint64_t points = 0;
  std::uint64_t records = 0;

  bool request(Signal signal, const Byte* p, const Byte* end) {
    signal_ = signal;
    const SignalShape& shape = shape_of(signal);
    out_.push_back('{');
    json::append_key(out_, shape.root_key);
    out_.push_back('[');
    bool first = true;
    while (p < end) {
      Field f;
      if (!next(p, end, f, shape.request)) return false;
      if (f.number != 1) continue;
      if (!expect(f, kLen, shape.request)) return false;
      if (!first) out_.push_back(',');
      first = false;
      if (!resource_group(f, 1)) return false;
    }
    json::append_raw(out_, "]}");
    return true;
  }

 private:
  const Byte* base_;
  std::string& out_;
  Signal signal_ = Signal::kTraces;

  std::size_t offset(const Byte* at) const { return static_cast<std::size_t>(at - base_); }

  // The error paths: out of line, so that the decoding loops stay small.
  [[gnu::cold, gnu::noinline]] bool fail(std::string message, const Byte* at) {
    error = std::move(message);
    error += " at byte ";
    error += std::to_string(offset(at));
    return false;
  }

  static std::string field_of(const Field& f, const char* message) {
    return "field " + std::to_string(f.number) + " of " + message;
  }

  [[gnu::cold, gnu::noinline]] bool bad_field(const Field& f, const char* message,
                                              std::uint64_t length, const Byte* end) {
    switch (f.wire) {
      case kFixed64:
      case kFixed32:
        return fail("truncated " + std::string(f.wire == kFixed64 ? "fixed64 " : "fixed32 ") +
                        field_of(f, message),
                    f.tag);
      case kLen: {
        const Byte* const data = f.data;  // just past the length
        const Byte* length_at = data - 1;
        while (length_at > f.tag + 1 && (length_at[-1] & 0x80) != 0) --length_at;
        return fail(field_of(f, message) + " has length " + std::to_string(length) +
                        " but its message has " +
                        std::to_string(static_cast<std::size_t>(end - data)) + " bytes left",
                    length_at);
      }
      case 3:
      case 4:
        return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) +
                        " (group), which OTLP does not use",
                    f.tag);
      default:
        return fail(field_of(f, message) + " has invalid wire type " + std::to_string(f.wire),
                    f.tag);
    }
  }

  [[gnu::cold, gnu::noinline]] bool bad_tag(std::uint64_t tag, const char* message,
                                            const Byte* at) {
    return fail("invalid field number " + std::to_string(tag >> 3) + " in " + message, at);
  }

  [[gnu::cold, gnu::noinline]] bool bad_wire(const Field& f, std::uint32_t wire,
                                             const char* message) {
    return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) + ", expected " +
                    std::to_string(wire),
                f.tag);
  }

  [[gnu::cold, gnu::noinline]] bool bad_id(const Field& f, std::size_t size, const char* what) {
    return fail(std::string(what) + " is " + std::to_string(f.size) + " bytes long, expected " +
                    std::to_string(size) + " (or 0)",
                f.tag);
  }

  [[gnu::cold, gnu::noinline]] bool too_deep(const Field& m) {
    return fail("messages nested deeper than " + std::to_string(kMaxDepth), m.tag);
  }

  // Varints of more than one byte, and the errors.
  [[gnu::noinline]] bool long_varint(const Byte*& p, const Byte* end, std::uint64_t& v) {
    const Byte* const start = p;
    std::uint64_t result = 0;
    for (int i = 0; i < 10; ++i) {
      if (p == end) return fail("truncated varint", start);
      const Byte b = *p++;
      result |= std::uint64_t{static_cast<Byte>(b & 0x7F)} << (7 * i);  // bits past 64 dropped
      if (b < 0x80) {
        v = result;
        return true;
      }
    }
    return fail("varint longer than 10 bytes", start);
  }

  bool varint(const Byte*& p, const Byte* end, std::uint64_t& v) {
    if (p < end && *p < 0x80) [[likely]] {
      v = *p++;
      return true;
    }
    return long_varint(p, end, v);
  }

  // Reads the field at `p` (p < end) and moves `p` past it.
  bool next(const Byte*& p, const Byte* end, Field& f, const char* message) {
    f.tag = p;
    std::uint64_t tag = 0;
    if (!varint(p, end, tag)) return false;
    if (tag > 0xFFFFFFFFU || (tag >> 3) == 0) [[unlikely]] {
      return bad_tag(tag, message, f.tag);
    }
    f.number = static_cast<std::uint32_t>(tag >> 3);
    f.wire = static_cast<std::uint32_t>(tag & 7);
    switch (f.wire) {
      case kVarint:
        return varint(p, end, f.value);
      case kFixed64:
        if (end - p < 8) [[unlikely]] {
          return bad_field(f, message, 0, end);
        }
        f.value = load_le(p, 8);
        p += 8;
        return true;
      case kFixed32:
        if (end - p < 4) [[unlikely]] {
          return bad_field(f, message, 0, end);
        }
        f.value = load_le(p, 4);
        p += 4;
        return true;
      case kLen: {
        std::uint64_t n = 0;
        if (!varint(p, end, n)) return false;
        f.data = p;
        if (n > static_cast<std::size_t>(end - p)) [[unlikely]] {
          return bad_field(f, message, n, end);
        }
        f.size = static_cast<std::size_t>(n);
        p += f.size;
        return true;
      }
      default:
        return bad_field(f, message, 0, end);
    }
  }

  bool expect(const Field& f, std::uint32_t wire, const char* message) {
    if (f.wire == wire) [[likely]] {
      return true;
    }
    return bad_wire(f, wire, message);
  }

  bool check_id(const Field& f, std::size_t size, const char* what) {
    if (f.size == 0 || f.size == size) [[likely]] {
      return true;
    }
    return bad_id(f, size, what);
  }

  // Runs `emit` for a superseded occurrence only to check it, discarding its output.
  template <class Emit>
  bool check_only(Emit&& emit) {
    const std::size_t mark = out_.size();
    const std::uint64_t counts[3] = {spans, points, records};
    const bool ok = emit();
    out_.resize(mark);
    spans = counts[0];
    points = counts[1];
    records = counts[2];
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

  bool resource_group(const Field& m, int depth) {
    const SignalShape& shape = shape_of(signal_);
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Field resource_field;
    bool has_resource = false;
    Repeated scopes;
    std::string_view schema_url;
    while (p < end) {
      Field f;
      if (!next(p, end, f, shape.resource_group)) return false;
      switch (f.number) {
        case 1:
          if (!expect(f, kLen, shape.resource_group)) return false;
          if (has_resource && !check_only([&] { return resource(resource_field, depth + 1); })) {
            return false;
          }
          resource_field = f;
          has_resource = true;
          break;
        case 2:
          if (!expect(f, kLen, shape.resource_group)) return false;
          scopes.note(f, p);
          break;
        case 3:
          if (!expect(f, kLen, shape.resource_group)) return false;
          schema_url = f.text();
          break;
        default:
          break;
      }
    }
    // Spans: the resource (possibly {"attributes":[]}) and the scope groups always, as the
    // library's span writer does; metrics and logs: what is present.
    const bool traces = signal_ == Signal::kTraces;
    Object o{out_};
    if (has_resource || traces) {
      o.key("resource");
      if (has_resource) {
        if (!resource(resource_field, depth + 1)) return false;
      } else {
        json::append_raw(out_, "{\"attributes\":[]}");
      }
    }
    if (traces || !scopes.empty()) {
      o.key(shape.scopes_key);
      out_.push_back('[');
      if (!each(scopes, 2, shape.resource_group,
                [&](const Field& f) { return scope_group(f, depth + 1); })) {
        return false;
      }
      out_.push_back(']');
    }
    if (!schema_url.empty()) {
      o.key("schemaUrl");
      json::append_string(out_, schema_url);
    }
    o.close();
    return true;
  }

  bool resource(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Repeated attributes;
    std::uint64_t dropped = 0;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kResourceName)) return false;
      if (f.number == 1) {
        if (!expect(f, kLen, kResourceName)) return false;
        attributes.note(f, p);
      } else if (f.number == 2) {
        if (!expect(f, kVarint, kResourceName)) return false;
        dropped = f.value;
      }
    }
    Object o{out_};
    if (signal_ == Signal::kTraces || !attributes.empty()) {  // spans: always, possibly []
      o.key("attributes");
      if (!key_values(attributes, 1, kResourceName, depth + 1)) return false;
    }
    append_count(o, "droppedAttributesCount", dropped);
    o.close();
    return true;
  }

  bool scope_group(const Field& m, int depth) {
    const SignalShape& shape = shape_of(signal_);
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Field scope_field;
    bool has_scope = false;
    Repeated items;
    std::string_view schema_url;
    while (p < end) {
      Field f;
      if (!next(p, end, f, shape.scope_group)) return false;
      switch (f.number) {
        case 1:
          if (!expect(f, kLen, shape.scope_group)) return false;
          if (has_scope && !check_only([&] { return scope(scope_field, depth + 1); })) {
            return false;
          }
          scope_field = f;
          has_scope = true;
          break;
        case 2:
          if (!expect(f, kLen, shape.scope_group)) return false;
          items.note(f, p);
          break;
        case 3:
          if (!expect(f, kLen, shape.scope_group)) return false;
          schema_url = f.text();
          break;
        default:
          break;
      }
    }
    Object o{out_};
    if (has_scope) {
      o.key("scope");
      if (!scope(scope_field, depth + 1)) return false;
    }
    if (signal_ == Signal::kTraces || !items.empty()) {  // spans: always, possibly []
      o.key(shape.items_key);
      out_.push_back('[');
      if (!each(items, 2, shape.scope_group, [&](const Field& f) {
            switch (signal_) {
              case Signal::kMetrics:
                return metric(f, depth + 1);
              case Signal::kLogs:
                return log_record(f, depth + 1);
              case Signal::kTraces:
                break;
            }
            return span(f, depth + 1);
          })) {
        return false;
      }
      out_.push_back(']');
    }
    if (!schema_url.empty()) {
      o.key("schemaUrl");
      json::append_string(out_, schema_url);
    }
    o.close();
    return true;
  }

  bool scope(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    std::string_view name;
    std::string_view version;
    Repeated attributes;
    std::uint64_t dropped = 0;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kScopeName)) return false;
      switch (f.number) {
        case 1:
          if (!expect(f, kLen, kScopeName)) return false;
          name = f.text();
          break;
        case 2:
          if (!expect(f, kLen, kScopeName)) return false;
          version = f.text();
          break;
        case 3:
          if (!expect(f, kLen, kScopeName)) return false;
          attributes.note(f, p);
          break;
        case 4:
          if (!expect(f, kVarint, kScopeName)) return false;
          dropped = f.value;
          break;
        default:
          break;
      }
    }
    Object o{out_};
    if (!name.empty()) {
      o.key("name");
      json::append_string(out_, name);
    }
    if (!version.empty()) {
      o.key("version");
      json::append_string(out_, version);
    }
    if (!attributes.empty()) {
      o.key("attributes");
      if (!key_values(attributes, 3, kScopeName, depth + 1)) return false;
    }
    append_count(o, "droppedAttributesCount", dropped);
    o.close();
    return true;
  }

  bool span(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    ++spans;
    // Expected wire type per field number 1..16.
    static constexpr std::uint32_t kWire[17] = {0,       kLen,     kLen,     kLen, kLen,    kLen,
                                                kVarint, kFixed64, kFixed64, kLen, kVarint, kLen,
                                                kVarint, kLen,     kVarint,  kLen, kFixed32};
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Field trace_id, span_id, parent_span_id, status_field;
    bool has_status = false;
    std::string_view trace_state, name;
    std::uint64_t kind = 0, start = 0, end_time = 0, flags = 0;
    std::uint64_t dropped_attributes = 0, dropped_events = 0, dropped_links = 0;
    Repeated attributes, events, links;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kSpanName)) return false;
      if (f.number > 16) continue;
      if (!expect(f, kWire[f.number], kSpanName)) return false;
      switch (f.number) {
        case 1:
          if (!check_id(f, kTraceIdSize, "Span.trace_id")) return false;
          trace_id = f;
          break;
        case 2:
          if (!check_id(f, kSpanIdSize, "Span.span_id")) return false;
          span_id = f;
          break;
        case 3:
          trace_state = f.text();
          break;
        case 4:
          if (!check_id(f, kSpanIdSize, "Span.parent_span_id")) return false;
          parent_span_id = f;
          break;
        case 5:
          name = f.text();
          break;
        case 6:
          kind = f.value;
          break;
        case 7:
          start = f.value;
          break;
        case 8:
          end_time = f.value;
          break;
        case 9:
          attributes.note(f, p);
          break;
        case 10:
          dropped_attributes = f.value;
          break;
        case 11:
          events.note(f, p);
          break;
        case 12:
          dropped_events = f.value;
          break;
        case 13:
          links.note(f, p);
          break;
        case 14:
          dropped_links = f.value;
          break;
        case 15:
          if (has_status && !check_only([&] { return status(status_field, depth + 1); })) {
            return false;
          }
          status_field = f;
          has_status = true;
          break;
        case 16:
          flags = f.value;
          break;
        default:
          break;
      }
    }

    Object o{out_};
    if (trace_id.size != 0) {
      o.key("traceId");
      json::append_hex(out_, trace_id.bytes());
    }
    if (span_id.size != 0) {
      o.key("spanId");
      json::append_hex(out_, span_id.bytes());
    }
    if (!trace_state.empty()) {
      o.key("traceState");
      json::append_string(out_, trace_state);
    }
    if (parent_span_id.size != 0) {
      o.key("parentSpanId");
      json::append_hex(out_, parent_span_id.bytes());
    }
    o.key("flags");
    json::append_uint(out_, flags);
    o.key("name");
    json::append_string(out_, name);
    o.key("kind");
    append_enum(kind);
    o.key("startTimeUnixNano");
    json::append_quoted_uint(out_, start);
    o.key("endTimeUnixNano");
    json::append_quoted_uint(out_, end_time);
    o.key("attributes");
    if (!key_values(attributes, 9, kSpanName, depth + 1)) return false;
    append_count(o, "droppedAttributesCount", dropped_attributes);
    if (!events.empty()) {
      o.key("events");
      out_.push_back('[');
      if (!each(events, 11, kSpanName, [&](const Field& f) { return event(f, depth + 1); })) {
        return false;
      }
      out_.push_back(']');
    }
    append_count(o, "droppedEventsCount", dropped_events);
    if (!links.empty()) {
      o.key("links");
      out_.push_back('[');
      if (!each(links, 13, kSpanName, [&](const Field& f) { return link(f, depth + 1); })) {
        return false;
      }
      out_.push_back(']');
    }
    append_count(o, "droppedLinksCount", dropped_links);
    o.key("status");
    if (has_status) {
      if (!status(status_field, depth + 1)) return false;
    } else {
      json::append_raw(out_, "{\"code\":0}");
    }
    o.close();
    return true;
  }

  bool event(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    std::uint64_t time = 0, dropped = 0;
    std::string_view name;
    Repeated attributes;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kEventName)) return false;
      switch (f.number) {
        case 1:
          if (!expect(f, kFixed64, kEventName)) return false;
          time = f.value;
          break;
        case 2:
          if (!expect(f, kLen, kEventName)) return false;
          name = f.text();
          break;
        case 3:
          if (!expect(f, kLen, kEventName)) return false;
          attributes.note(f, p);
          break;
        case 4:
          if (!expect(f, kVarint, kEventName)) return false;
          dropped = f.value;
          break;
        default:
          break;
      }
    }
    Object o{out_};
    o.key("timeUnixNano");
    json::append_quoted_uint(out_, time);
    o.key("name");
    json::append_string(out_, name);
    o.key("attributes");
    if (!key_values(attributes, 3, kEventName, depth + 1)) return false;
    append_count(o, "droppedAttributesCount", dropped);
    o.close();
    return true;
  }

  bool link(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Field trace_id, span_id;
    std::string_view trace_state;
    Repeated attributes;
    std::uint64_t dropped = 0, flags = 0;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kLinkName)) return false;
      switch (f.number) {
        case 1:
          if (!expect(f, kLen, kLinkName) || !check_id(f, kTraceIdSize, "Span.Link.trace_id")) {
            return false;
          }
          trace_id = f;
          break;
        case 2:
          if (!expect(f, kLen, kLinkName) || !check_id(f, kSpanIdSize, "Span.Link.span_id")) {
            return false;
          }
          span_id = f;
          break;
        case 3:
          if (!expect(f, kLen, kLinkName)) return false;
          trace_state = f.text();
          break;
        case 4:
          if (!expect(f, kLen, kLinkName)) return false;
          attributes.note(f, p);
          break;
        case 5:
          if (!expect(f, kVarint, kLinkName)) return false;
          dropped = f.value;
          break;
        case 6:
          if (!expect(f, kFixed32, kLinkName)) return false;
          flags = f.value;
          break;
        default:
          break;
      }
    }
    Object o{out_};
    if (trace_id.size != 0) {
      o.key("traceId");
      json::append_hex(out_, trace_id.bytes());
    }
    if (span_id.size != 0) {
      o.key("spanId");
      json::append_hex(out_, span_id.bytes());
    }
    if (!trace_state.empty()) {
      o.key("traceState");
      json::append_string(out_, trace_state);
    }
    o.key("flags");
    json::append_uint(out_, flags);
    o.key("attributes");
    if (!key_values(attributes, 4, kLinkName, depth + 1)) return false;
    append_count(o, "droppedAttributesCount", dropped);
    o.close();
    return true;
  }

  bool status(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    std::string_view message;
    std::uint64_t code = 0;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kStatusName)) return false;
      if (f.number == 2) {
        if (!expect(f, kLen, kStatusName)) return false;
        message = f.text();
      } else if (f.number == 3) {
        if (!expect(f, kVarint, kStatusName)) return false;
        code = f.value;
      }
    }
    json::append_raw(out_, "{\"code\":");
    append_enum(code);
    if (!message.empty()) {
      json::append_raw(out_, ",\"message\":");
      json::append_string(out_, message);
    }
    out_.push_back('}');
    return true;
  }

  // ---- metrics ----

  // A double carried in a fixed64 payload.
  static double as_double(std::uint64_t bits) {
    double d = 0;
    static_assert(sizeof d == sizeof bits);
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

  // A sint32's varint: zigzag-decoded from its low 32 bits.
  static std::int32_t zigzag32(std::uint64_t varint_value) {
    const auto n = static_cast<std::uint32_t>(varint_value);
    return static_cast<std::int32_t>((n >> 1) ^ (~(n & 1) + 1));
  }

  [[gnu::cold, gnu::noinline]] bool bad_repeated_wire(const Field& f, std::uint32_t element_wire,
                                                      const char* message) {
    return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) + ", expected " +
                    std::to_string(element_wire) + " (or 2, packed)",
                f.tag);
  }

  [[gnu::cold, gnu::noinline]] bool bad_packed_size(const Field& f, const char* message) {
    return fail("packed " + field_of(f, message) + " is " + std::to_string(f.size) +
                    " bytes long, not a multiple of 8",
                f.tag);
  }

  // Checks one occurrence of a repeated scalar field whose elements have wire type
  // `element_wire` (kFixed64 or kVarint): unpacked, or packed in a length-delimited run.
  bool check_repeated_scalar(const Field& f, std::uint32_t element_wire, const char* message) {
    if (f.wire == element_wire) return true;
    if (f.wire != kLen) return bad_repeated_wire(f, element_wire, message);
    if (element_wire == kFixed64) return f.size % 8 == 0 || bad_packed_size(f, message);
    const Byte* p = f.data;
    const Byte* const end = p + f.size;
    std::uint64_t ignored = 0;
    while (p < end) {
      if (!varint(p, end, ignored)) return false;
    }
    return true;
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

  // Metrics and logs follow libprotobuf's JSON printer: a field is written when present (a
  // message or a oneof member or an optional field that occurs, a scalar that is not 0 or
  // empty, a repeated field that is not empty), in field-number order.

  bool metric(const Field& m, int depth) {
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

  // Gauge, Sum, Histogram, ExponentialHistogram or Summary (the Metric field number of `m`).
  bool metric_data(const Field& m, int depth) {
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

  bool number_point(const Field& m, int depth) {
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

  bool exemplars_member(Object& o, const Repeated& exemplars, std::uint32_t number,
                        const char* message, int depth) {
    return messages_member(o, "exemplars", exemplars, number, message,
                           [&](const Field& f) { return exemplar(f, depth); });
  }

  bool histogram_point(const Field& m, int depth) {
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

  bool exponential_point(const Field& m, int depth) {
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

  bool buckets(const Field& m, int depth) {
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

  bool summary_point(const Field& m, int depth) {
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

  bool quantile(const Field& m, int depth) {
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

  bool exemplar(const Field& m, int depth) {
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

  // ---- logs ----

  bool log_record(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    ++records;
    // Expected wire type per field number 1..12 (4 is reserved: skipped whatever its type).
    static constexpr std::uint32_t kWire[13] = {
        0, kFixed64, kVarint, kLen, 0, kLen, kLen, kVarint, kFixed32, kLen, kLen, kFixed64, kLen};
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    std::uint64_t time = 0, observed = 0, severity = 0, dropped = 0, flags = 0;
    std::string_view severity_text, event_name;
    Field body, trace_id, span_id;
    bool has_body = false;
    Repeated attributes;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kLogRecordName)) return false;
      if (f.number > 12 || f.number == 4) continue;
      if (!expect(f, kWire[f.number], kLogRecordName)) return false;
      switch (f.number) {
        case 1:
          time = f.value;
          break;
        case 2:
          severity = f.value;
          break;
        case 3:
          severity_text = f.text();
          break;
        case 5:
          if (has_body && !check_only([&] { return any_value(body, depth + 1); })) return false;
          body = f;
          has_body = true;
          break;
        case 6:
          attributes.note(f, p);
          break;
        case 7:
          dropped = f.value;
          break;
        case 8:
          flags = f.value;
          break;
        case 9:
          if (!check_id(f, kTraceIdSize, "LogRecord.trace_id")) return false;
          trace_id = f;
          break;
        case 10:
          if (!check_id(f, kSpanIdSize, "LogRecord.span_id")) return false;
          span_id = f;
          break;
        case 11:
          observed = f.value;
          break;
        default:  // 12
          event_name = f.text();
          break;
      }
    }
    Object o{out_};
    fixed64_member(o, "timeUnixNano", time);
    if (static_cast<std::uint32_t>(severity) != 0) {
      o.key("severityNumber");
      append_enum(severity);
    }
    string_member(o, "severityText", severity_text);
    if (has_body) {
      o.key("body");
      if (!any_value(body, depth + 1)) return false;
    }
    if (!attributes_member(o, "attributes", attributes, 6, kLogRecordName, depth + 1)) {
      return false;
    }
    append_count(o, "droppedAttributesCount", dropped);
    append_count(o, "flags", flags);
    if (trace_id.size != 0) {
      o.key("traceId");
      json::append_hex(out_, trace_id.bytes());
    }
    if (span_id.size != 0) {
      o.key("spanId");
      json::append_hex(out_, span_id.bytes());
    }
    fixed64_member(o, "observedTimeUnixNano", observed);
    string_member(o, "eventName", event_name);
    o.close();
    return true;
  }

  bool key_value(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    std::string_view key;
    Field value;
    bool has_value = false;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kKeyValueName)) return false;
      if (f.number == 1) {
        if (!expect(f, kLen, kKeyValueName)) return false;
        key = f.text();
      } else if (f.number == 2) {
        if (!expect(f, kLen, kKeyValueName)) return false;
        if (has_value && !check_only([&] { return any_value(value, depth + 1); })) return false;
        value = f;
        has_value = true;
      }
    }
    json::append_raw(out_, "{\"key\":");
    json::append_string(out_, key);
    if (has_value) {
      json::append_raw(out_, ",\"value\":");
      if (!any_value(value, depth + 1)) return false;
    }
    out_.push_back('}');
    return true;
  }

  // The AnyValue member `f` (its wire type already checked), as the value of its JSON object.
  bool any_member(const Field& f, int depth) {
    switch (f.number) {
      case 1:
        json::append_raw(out_, "{\"stringValue\":");
        json::append_string(out_, f.text());
        break;
      case 2:
        json::append_raw(out_, f.value != 0 ? std::string_view("{\"boolValue\":true")
                                            : std::string_view("{\"boolValue\":false"));
        break;
      case 3:
        json::append_raw(out_, "{\"intValue\":");
        json::append_quoted_int(out_, static_cast<std::int64_t>(f.value));
        break;
      case 4: {
        double d = 0;
        static_assert(sizeof d == sizeof f.value);
        std::memcpy(&d, &f.value, sizeof d);
        json::append_raw(out_, "{\"doubleValue\":");
        json::append_double(out_, d);
        break;
      }
      case 5:
        json::append_raw(out_, "{\"arrayValue\":");
        if (!array_value(f, depth + 1)) return false;
        break;
      case 6:
        json::append_raw(out_, "{\"kvlistValue\":");
        if (!key_value_list(f, depth + 1)) return false;
        break;
      case 7:
        json::append_raw(out_, "{\"bytesValue\":");
        append_base64(out_, f.bytes());
        break;
      default:
        break;
    }
    out_.push_back('}');
    return true;
  }

  bool any_value(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    static constexpr std::uint32_t kWire[8] = {0,        kLen, kVarint, kVarint,
                                               kFixed64, kLen, kLen,    kLen};
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    Field member;  // the oneof: the last member present wins
    bool has_member = false;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kAnyValueName)) return false;
      if (f.number > 7) continue;
      if (!expect(f, kWire[f.number], kAnyValueName)) return false;
      if (has_member && (member.number == 5 || member.number == 6) &&
          !check_only([&] { return any_member(member, depth); })) {
        return false;
      }
      member = f;
      has_member = true;
    }
    if (!has_member) {
      json::append_raw(out_, "{}");
      return true;
    }
    return any_member(member, depth);
  }

  bool array_value(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    json::append_raw(out_, "{\"values\":[");
    bool first = true;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kArrayValueName)) return false;
      if (f.number != 1) continue;
      if (!expect(f, kLen, kArrayValueName)) return false;
      if (!first) out_.push_back(',');
      first = false;
      if (!any_value(f, depth + 1)) return false;
    }
    json::append_raw(out_, "]}");
    return true;
  }

  bool key_value_list(const Field& m, int depth) {
    if (depth > kMaxDepth) return too_deep(m);
    const Byte* p = m.data;
    const Byte* const end = p + m.size;
    json::append_raw(out_, "{\"values\":[");
    bool first = true;
    while (p < end) {
      Field f;
      if (!next(p, end, f, kKeyValueListName)) return false;
      if (f.number != 1) continue;
      if (!expect(f, kLen, kKeyValueListName)) return false;
      if (!first) out_.push_back(',');
      first = false;
      if (!key_value(f, depth + 1)) return false;
    }
    json::append_raw(out_, "]}");
    return true;
  }
};

// ---- JSON -> JSON --------------------------------------------------------------------------

constexpr int kMaxJsonDepth = 128;

// Where a value sits in the request, for the shape checks and the item count.
enum class Role : std::uint8_t {
  kOther,
  kRoot,           // the body's object
  kResourceList,   // its resourceSpans (resourceMetrics, resourceLogs) array
  kResourceGroup,  // an element of that
  kScopeList,      // scopeSpans
  kScopeGroup,
  kItems,       // spans or logRecords, whose elements are counted
  kMetricList,  // metrics
  kMetric,      // an element of that
  kMetricData,  // a metric's gauge, sum, histogram, exponentialHistogram or summary
  kDataPoints,  // its dataPoints, whose elements are counted
};

// What a value must be where it appears.
enum class Shape : std::uint8_t { kAny, kObject, kArrayOrNull, kObjectOrNull };

// The members of a Metric's data oneof, as OTLP/JSON spells them.
constexpr std::string_view kMetricDataKeys[] = {"gauge", "sum", "histogram", "exponentialHistogram",
                                                "summary"};

// The bytes a JSON string holds as they are: printable ASCII except '"' and '\'.
constexpr std::array<bool, 256> kPlainStringBytes = [] {
  std::array<bool, 256> plain{};
  for (std::size_t c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}();

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// True when a JSON number token is beyond the range of a double (readers such as nlohmann/json
// refuse those); numbers that underflow to zero are fine.
bool overflows_double(std::string_view number) {
  double ignored = 0;
  const auto r = std::from_chars(number.data(), number.data() + number.size(), ignored);
  if (r.ec != std::errc::result_out_of_range) return false;
  // Out of range one way or the other: the decimal exponent of the first significant digit says
  // which.
  std::size_t i = number.starts_with('-') ? 1 : 0;
  const std::size_t int_start = i;
  while (i < number.size() && number[i] >= '0' && number[i] <= '9') ++i;
  const auto int_digits = static_cast<long long>(i - int_start);
  long long magnitude = 0;
  if (number[int_start] != '0') {
    magnitude = int_digits - 1;
  } else {
    long long zeros = 0;
    if (i < number.size() && number[i] == '.') {
      ++i;
      while (i < number.size() && number[i] == '0') {
        ++zeros;
        ++i;
      }
    }
    magnitude = -(zeros + 1);
  }
  const std::size_t e = number.find_first_of("eE");
  if (e != std::string_view::npos) {
    std::size_t j = e + 1;
    const bool negative = j < number.size() && number[j] == '-';
    if (j < number.size() && (number[j] == '-' || number[j] == '+')) ++j;
    long long exponent = 0;
    for (; j < number.size(); ++j)
      exponent = std::min(exponent * 10 + (number[j] - '0'), 1LL << 40);
    magnitude += negative ? -exponent : exponent;
  }
  return magnitude > 0;
}

// Validates a body as JSON (RFC 8259: grammar, UTF-8, escapes, surrogate pairs) by recursive
// descent and copies each token as written, without the whitespace between tokens, checking the
// request's shape on the way.
class JsonCompactor {
 public:
  JsonCompactor(std::string_view body, std::string& out, Signal signal)
      : begin_(body.data()),
        p_(begin_),
        end_(begin_ + body.size()),
        out_(out),
        signal_(signal),
        shape_(shape_of(signal)) {}

  std::string error;
  std::uint64_t items = 0;  // spans, data points or log records

  bool body() {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;  // a UTF-8 BOM
    skip_space();
    if (p_ == end_) return invalid("empty body");
    if (*p_ != '{') {
      const char c = *p_;
      const bool value_start = c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') ||
                               c == 't' || c == 'f' || c == 'n';
      return value_start ? fail("the body is not a JSON object") : unexpected();
    }
    if (!value(Role::kRoot, 0)) return false;
    skip_space();
    return p_ == end_ || unexpected();
  }

 private:
  const char* const begin_;
  const char* p_;
  const char* const end_;
  std::string& out_;
  const Signal signal_;
  const SignalShape& shape_;
  std::string_view data_key_;  // the metric data member being read (for its error messages)

  bool fail(std::string message) {
    error = std::move(message);
    return false;
  }
  bool invalid(std::string_view what, const char* at) {
    return fail("invalid JSON: " + std::string(what) + " at byte " +
                std::to_string(static_cast<std::size_t>(at - begin_)));
  }
  bool invalid(std::string_view what) { return invalid(what, p_); }
  bool unexpected() {
    if (p_ == end_) return invalid("unexpected end");
    const auto c = static_cast<unsigned char>(*p_);
    static constexpr char kHex[] = "0123456789abcdef";
    const std::string shown = c > 0x20 && c < 0x7F
                                  ? std::string{'\'', *p_, '\''}
                                  : std::string{'0', 'x', kHex[c >> 4], kHex[c & 15]};
    return invalid("unexpected " + shown);
  }

  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  // The role of the member `key` (as written) of an object of role `object`.
  Role child_role(Role object, std::string_view key) {
    switch (object) {
      case Role::kRoot:
        return key_is(key, shape_.root_key) ? Role::kResourceList : Role::kOther;
      case Role::kResourceGroup:
        return key_is(key, shape_.scopes_key) ? Role::kScopeList : Role::kOther;
      case Role::kScopeGroup:
        if (!key_is(key, shape_.items_key)) return Role::kOther;
        return signal_ == Signal::kMetrics ? Role::kMetricList : Role::kItems;
      case Role::kMetric:
        for (const std::string_view data : kMetricDataKeys) {
          if (key_is(key, data)) {
            data_key_ = data;
            return Role::kMetricData;
          }
        }
        return Role::kOther;
      case Role::kMetricData:
        return key_is(key, "dataPoints") ? Role::kDataPoints : Role::kOther;
      default:
        return Role::kOther;
    }
  }

  // Whether the key as written (between its quotes) reads `name`, escapes included.
  static bool key_is(std::string_view raw, std::string_view name) {
    if (raw.find('\\') == std::string_view::npos) return raw == name;
    std::size_t n = 0;
    for (std::size_t i = 0; i < raw.size(); ++i, ++n) {
      char c = raw[i];
      if (c == '\\') {
        if (raw[i + 1] != 'u') return false;  // \" \\ \/ \b ... never spell a letter of a name
        int v = 0;
        for (std::size_t k = i + 2; k < i + 6; ++k) v = v * 16 + hex_value(raw[k]);
        c = static_cast<char>(v);
        if (v >= 0x80) return false;
        i += 5;
      }
      if (n >= name.size() || name[n] != c) return false;
    }
    return n == name.size();
  }

  std::string shape_error(Role role) const {
    const std::string resources(shape_.root_key);
    const std::string scopes = resources + "[]." + std::string(shape_.scopes_key);
    const std::string list = scopes + "[]." + std::string(shape_.items_key);
    switch (role) {
      case Role::kResourceGroup:
        return "an element of " + resources + " is not an object";
      case Role::kScopeGroup:
        return "an element of " + scopes + " is not an object";
      case Role::kMetric:
        return "an element of " + list + " is not an object";
      case Role::kResourceList:
        return resources + " is not an array";
      case Role::kScopeList:
        return scopes + " is not an array";
      case Role::kMetricData:
        return list + "[]." + std::string(data_key_) + " is not an object";
      case Role::kDataPoints:
        return list + "[]." + std::string(data_key_) + ".dataPoints is not an array";
      default:
        return list + " is not an array";
    }
  }

  static Shape shape_for(Role role) {
    switch (role) {
      case Role::kOther:
        return Shape::kAny;
      case Role::kRoot:
      case Role::kResourceGroup:
      case Role::kScopeGroup:
      case Role::kMetric:
        return Shape::kObject;
      case Role::kMetricData:
        return Shape::kObjectOrNull;
      default:
        return Shape::kArrayOrNull;
    }
  }

  // The value at p_ (after any whitespace); `depth` is that of the container holding it.
  bool value(Role role, int depth) {
    if (p_ == end_) return unexpected();
    const char c = *p_;
    const Shape shape = shape_for(role);
    if ((shape == Shape::kObject && c != '{') ||
        (shape == Shape::kArrayOrNull && c != '[' && c != 'n') ||
        (shape == Shape::kObjectOrNull && c != '{' && c != 'n')) {
      return fail(shape_error(role));
    }
    switch (c) {
      case '{':
        return object(role, depth + 1);
      case '[':
        return array(role, depth + 1);
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        return literal("null");
      default:
        return (c == '-' || (c >= '0' && c <= '9')) ? number() : unexpected();
    }
  }

  bool object(Role role, int depth) {
    if (depth > kMaxJsonDepth)
      return fail("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    ++p_;
    out_.push_back('{');
    skip_space();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      out_.push_back('}');
      return true;
    }
    for (;;) {
      if (p_ == end_ || *p_ != '"') return p_ == end_ ? unexpected() : invalid("expected a key");
      const char* const key_start = p_;
      if (!string()) return false;
      const std::string_view key(key_start + 1, static_cast<std::size_t>(p_ - key_start - 2));
      skip_space();
      if (p_ == end_ || *p_ != ':') return p_ == end_ ? unexpected() : invalid("expected ':'");
      ++p_;
      out_.push_back(':');
      skip_space();
      const Role child = role == Role::kOther ? Role::kOther : child_role(role, key);
      if (!value(child, depth)) return false;
      skip_space();
      if (p_ == end_) return unexpected();
      if (*p_ == '}') {
        ++p_;
        out_.push_back('}');
        return true;
      }
      if (*p_ != ',') return invalid("expected ',' or '}'");
      ++p_;
      out_.push_back(',');
      skip_space();
    }
  }

  bool array(Role role, int depth) {
    if (depth > kMaxJsonDepth)
      return fail("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    ++p_;
    out_.push_back('[');
    skip_space();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      out_.push_back(']');
      return true;
    }
    Role child = Role::kOther;
    if (role == Role::kResourceList) {
      child = Role::kResourceGroup;
    } else if (role == Role::kScopeList) {
      child = Role::kScopeGroup;
    } else if (role == Role::kMetricList) {
      child = Role::kMetric;
    }
    const bool counted = role == Role::kItems || role == Role::kDataPoints;
    for (;;) {
      if (counted) ++items;
      if (!value(child, depth)) return false;
      skip_space();
      if (p_ == end_) return unexpected();
      if (*p_ == ']') {
        ++p_;
        out_.push_back(']');
        return true;
      }
      if (*p_ != ',') return invalid("expected ',' or ']'");
      ++p_;
      out_.push_back(',');
      skip_space();
    }
  }

  bool string() {
    const char* const start = p_++;
    for (;;) {
      while (p_ != end_ && kPlainStringBytes[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ == end_) return invalid("unterminated string", start);
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') break;
      if (c == '\\') {
        if (!escape()) return false;
      } else if (c < 0x20) {
        return invalid("control character in a string");
      } else {
        const auto* const u = reinterpret_cast<const unsigned char*>(p_);
        const nemo::lens::detail::Utf8Step step =
            nemo::lens::detail::utf8_step(u, reinterpret_cast<const unsigned char*>(end_));
        if (!step.valid) return invalid("invalid UTF-8 in a string");
        p_ += step.length;
      }
    }
    ++p_;
    out_.append(start, static_cast<std::size_t>(p_ - start));
    return true;
  }

  // \uXXXX at p_: its code unit, or -1.
  int code_unit() const {
    if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') return -1;
    int v = 0;
    for (int i = 2; i < 6; ++i) {
      const int d = hex_value(p_[i]);
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  bool escape() {
    if (end_ - p_ < 2) return invalid("unterminated string");
    switch (p_[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        p_ += 2;
        return true;
      case 'u':
        break;
      default:
        return invalid("invalid escape");
    }
    const int unit = code_unit();
    if (unit < 0) return invalid("invalid \\u escape");
    if (unit >= 0xDC00 && unit <= 0xDFFF) return invalid("unpaired surrogate escape");
    if (unit >= 0xD800 && unit <= 0xDBFF) {
      const char* const high = p_;
      p_ += 6;
      const int low = code_unit();
      if (low < 0xDC00 || low > 0xDFFF) return invalid("unpaired surrogate escape", high);
    }
    p_ += 6;
    return true;
  }

  bool digits() {
    const char* const start = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ != start;
  }

  bool number() {
    const char* const start = p_;
    if (*p_ == '-') ++p_;
    const char* const int_start = p_;
    if (p_ != end_ && *p_ == '0') {
      ++p_;
    } else if (!digits()) {
      return invalid("invalid number", start);
    }
    const bool long_integer = p_ - int_start > 308;
    bool exponent = false;
    if (p_ != end_ && *p_ == '.') {
      ++p_;
      if (!digits()) return invalid("invalid number", start);
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      exponent = true;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) return invalid("invalid number", start);
    }
    const std::string_view text(start, static_cast<std::size_t>(p_ - start));
    if ((exponent || long_integer) && overflows_double(text)) {
      return invalid("number out of range", start);
    }
    out_.append(text);
    return true;
  }

  bool literal(std::string_view word) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0) {
      return unexpected();
    }
    p_ += word.size();
    out_.append(word);
    return true;
  }
};

}  // namespace

namespace {

TranscodeResult refused(std::string error) {
  TranscodeResult r;
  r.error = std::move(error);
  return r;
}

TranscodeResult accepted(Signal signal, std::uint64_t items) {
  TranscodeResult r;
  r.ok = true;
  switch (signal) {
    case Signal::kTraces:
      r.spans = items;
      break;
    case Signal::kMetrics:
      r.points = items;
      break;
    case Signal::kLogs:
      r.records = items;
      break;
  }
  return r;
}

}  // namespace

const char* signal_name(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return "metrics";
    case Signal::kLogs:
      return "logs";
    case Signal::kTraces:
      break;
  }
  return "traces";
}

TranscodeResult protobuf_to_json(std::string_view bytes, std::string& out, Signal signal) {
  const std::size_t mark = out.size();
  try {
    // OTLP/JSON of a typical request is 1.5-3 times its protobuf size (lens' spans: 2.7).
    out.reserve(mark + 3 * bytes.size() + 32);
    ProtobufToJson transcoder(bytes, out);
    const auto* p = reinterpret_cast<const Byte*>(bytes.data());
    if (!transcoder.request(signal, p, p + bytes.size())) {
      out.resize(mark);
      return refused(std::move(transcoder.error));
    }
    return accepted(signal, transcoder.spans + transcoder.points + transcoder.records);
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
    out.resize(mark);
    return refused(std::string("out of memory: ") + e.what());
  }
}

TranscodeResult json_to_json(std::string_view body, std::string& out, Signal signal) {
  const std::size_t mark = out.size();
  try {
    out.reserve(mark + body.size());
    JsonCompactor compactor(body, out, signal);
    if (!compactor.body()) {
      out.resize(mark);
      return refused(std::move(compactor.error));
    }
    return accepted(signal, compactor.items);
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
    out.resize(mark);
    return refused(std::string("out of memory: ") + e.what());
  }
}

}  // namespace lens_cli
