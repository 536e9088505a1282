// The OTLP protobuf encoding of a batch of spans (opentelemetry-proto's
// collector/trace/v1 ExportTraceServiceRequest), written by hand straight from SpanData. The
// tests decode it with the distribution's protobuf library and .proto files written from the
// specification. Field numbers are those of opentelemetry-proto v1.
#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/otlp.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/version.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

// Field numbers, by message.
namespace request { constexpr std::uint32_t kResourceSpans = 1; }
namespace resource_spans {
constexpr std::uint32_t kResource = 1, kScopeSpans = 2;
}
namespace resource { constexpr std::uint32_t kAttributes = 1; }
namespace scope_spans {
constexpr std::uint32_t kScope = 1, kSpans = 2;
}
namespace scope {
constexpr std::uint32_t kName = 1, kVersion = 2;
}
namespace span {
constexpr std::uint32_t kTraceId = 1, kSpanId = 2, kTraceState = 3, kParentSpanId = 4, kName = 5,
                        kKind = 6, kStartTime = 7, kEndTime = 8, kAttributes = 9,
                        kDroppedAttributes = 10, kEvents = 11, kDroppedEvents = 12, kLinks = 13,
                        kDroppedLinks = 14, kStatus = 15, kFlags = 16;
}
namespace event {
constexpr std::uint32_t kTime = 1, kName = 2, kAttributes = 3, kDroppedAttributes = 4;
}
namespace link {
constexpr std::uint32_t kTraceId = 1, kSpanId = 2, kTraceState = 3, kAttributes = 4,
                        kDroppedAttributes = 5, kFlags = 6;
}
namespace status {
constexpr std::uint32_t kMessage = 2, kCode = 3;
}
namespace key_value {
constexpr std::uint32_t kKey = 1, kValue = 2;
}
namespace any_value {
constexpr std::uint32_t kString = 1, kBool = 2, kInt = 3, kDouble = 4, kArray = 5;
}
namespace array_value { constexpr std::uint32_t kValues = 1; }

constexpr std::uint32_t kContextHasIsRemote = 0x100;
constexpr std::uint32_t kContextIsRemote = 0x200;
constexpr std::string_view kGroupKey = "nemo.span.group";
constexpr std::string_view kThreadIdKey = "thread.id";

// Room for a nested message's tag and the worst-case growth of its length (end_message may need
// up to 4 bytes more than begin_message set aside).
constexpr std::size_t kMessageOverhead = 8;

std::uint32_t flags_of(std::uint8_t trace_flags, bool is_remote) {
  return trace_flags | kContextHasIsRemote | (is_remote ? kContextIsRemote : 0U);
}

std::uint64_t time_of(std::int64_t unix_nano) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(unix_nano, 0));
}

template <std::size_t N>
std::string_view bytes_of(const std::array<std::uint8_t, N>& a) {
  return {reinterpret_cast<const char*>(a.data()), N};
}

// The most a string field can take: repairing invalid UTF-8 triples a string at most (one byte
// becomes U+FFFD's three), plus tag and length.
std::size_t string_bound(std::string_view s) { return 3 * s.size() + 16; }

struct ValueBound {
  std::size_t operator()(bool) const { return 16; }
  std::size_t operator()(std::int64_t) const { return 16; }
  std::size_t operator()(double) const { return 16; }
  std::size_t operator()(const std::string& v) const { return string_bound(v); }
  template <class Vector>
  std::size_t operator()(const Vector& v) const {
    std::size_t n = kMessageOverhead;
    for (const auto& element : v) n += kMessageOverhead + (*this)(element);
    return n;
  }
};

std::size_t attributes_bound(const std::vector<KeyValue>& attributes) {
  std::size_t n = 0;
  for (const KeyValue& kv : attributes) {
    n += 2 * kMessageOverhead + string_bound(kv.key) + std::visit(ValueBound{}, kv.value);
  }
  return n;
}

// An upper bound of the bytes append_span() writes for `s`.
std::size_t span_bound(const SpanData& s) {
  std::size_t n = 160 + string_bound(s.name) + string_bound(s.context.trace_state) +
                  string_bound(s.status_message) + attributes_bound(s.attributes) +
                  2 * kMessageOverhead + string_bound(kGroupKey) + string_bound(s.group) +
                  2 * kMessageOverhead + string_bound(kThreadIdKey) + 16;
  for (const SpanEvent& e : s.events) {
    n += kMessageOverhead + 32 + string_bound(e.name) + attributes_bound(e.attributes);
  }
  for (const SpanLink& l : s.links) {
    n += kMessageOverhead + 64 + string_bound(l.context.trace_state) + attributes_bound(l.attributes);
  }
  return n;
}

// A proto3 string field: valid UTF-8, repaired with U+FFFD where it is not.
void string_field(pb::Writer& w, std::uint32_t field, std::string_view s) {
  // ASCII eight bytes at a time; anything else is checked (and, where invalid, repaired).
  std::size_t i = 0;
  std::uint64_t high = 0;
  for (; i + 8 <= s.size(); i += 8) {
    std::uint64_t word = 0;
    std::memcpy(&word, s.data() + i, 8);
    high |= word;
  }
  for (; i < s.size(); ++i) high |= static_cast<unsigned char>(s[i]);
  if ((high & 0x8080808080808080ULL) != 0) {
    w.bytes_field(field, valid_utf8(s));  // rare: only non-ASCII strings
    return;
  }
  w.bytes_field(field, s);
}

// One AnyValue's oneof field, written into an open AnyValue message.
struct AnyValueWriter {
  pb::Writer& w;

  void operator()(bool v) const { w.varint_field(any_value::kBool, v ? 1 : 0); }
  void operator()(std::int64_t v) const {
    w.varint_field(any_value::kInt, static_cast<std::uint64_t>(v));
  }
  void operator()(double v) const { w.double_field(any_value::kDouble, v); }
  void operator()(const std::string& v) const { string_field(w, any_value::kString, v); }
  void operator()(const std::vector<bool>& v) const { array(v); }
  void operator()(const std::vector<std::int64_t>& v) const { array(v); }
  void operator()(const std::vector<double>& v) const { array(v); }
  void operator()(const std::vector<std::string>& v) const { array(v); }

  template <class Vector>
  void array(const Vector& v) const {
    const auto array_mark = w.begin_message(any_value::kArray, 2);
    for (const auto& element : v) {
      const auto mark = w.begin_message(array_value::kValues);
      (*this)(element);
      w.end_message(mark);
    }
    w.end_message(array_mark);
  }
};

void attribute(pb::Writer& w, std::uint32_t field, std::string_view key, const AttributeValue& value) {
  const auto mark = w.begin_message(field);
  string_field(w, key_value::kKey, key);
  const auto value_mark = w.begin_message(key_value::kValue);
  std::visit(AnyValueWriter{w}, value);
  w.end_message(value_mark);
  w.end_message(mark);
}

// The same for the two attributes the encoder adds, with `write_value` writing the AnyValue's
// field (no AttributeValue is built for them).
template <class WriteValue>
void added_attribute(pb::Writer& w, std::string_view key, WriteValue write_value) {
  const auto mark = w.begin_message(span::kAttributes);
  string_field(w, key_value::kKey, key);
  const auto value_mark = w.begin_message(key_value::kValue);
  write_value();
  w.end_message(value_mark);
  w.end_message(mark);
}

void attributes(pb::Writer& w, std::uint32_t field, const std::vector<KeyValue>& kvs) {
  for (const KeyValue& kv : kvs) attribute(w, field, kv.key, kv.value);
}

bool has_attribute(const std::vector<KeyValue>& kvs, std::string_view key) {
  return std::any_of(kvs.begin(), kvs.end(), [key](const KeyValue& kv) { return kv.key == key; });
}

void append_span(pb::Writer& w, const SpanData& s) {
  w.reserve(span_bound(s));
  const auto mark = w.begin_message(scope_spans::kSpans, 2);  // 128 B .. 16 KiB
  w.bytes_field(span::kTraceId, bytes_of(s.context.trace_id.bytes));
  w.bytes_field(span::kSpanId, bytes_of(s.context.span_id.bytes));
  if (!s.context.trace_state.empty()) string_field(w, span::kTraceState, s.context.trace_state);
  if (s.parent_span_id.is_valid()) w.bytes_field(span::kParentSpanId, bytes_of(s.parent_span_id.bytes));
  string_field(w, span::kName, s.name);
  w.varint_field(span::kKind, static_cast<std::uint64_t>(s.kind));
  w.fixed64_field(span::kStartTime, time_of(s.start_time_unix_nano));
  w.fixed64_field(span::kEndTime, time_of(s.end_time_unix_nano));
  attributes(w, span::kAttributes, s.attributes);
  if (!s.group.empty() && !has_attribute(s.attributes, kGroupKey)) {
    added_attribute(w, kGroupKey, [&] { string_field(w, any_value::kString, s.group); });
  }
  if (s.thread_id != 0 && !has_attribute(s.attributes, kThreadIdKey)) {
    added_attribute(w, kThreadIdKey, [&] {
      w.varint_field(any_value::kInt, static_cast<std::uint64_t>(s.thread_id));
    });
  }
  if (s.dropped_attributes_count != 0) {
    w.varint_field(span::kDroppedAttributes, s.dropped_attributes_count);
  }
  for (const SpanEvent& e : s.events) {
    const auto event_mark = w.begin_message(span::kEvents);
    w.fixed64_field(event::kTime, time_of(e.time_unix_nano));
    string_field(w, event::kName, e.name);
    attributes(w, event::kAttributes, e.attributes);
    if (e.dropped_attributes_count != 0) {
      w.varint_field(event::kDroppedAttributes, e.dropped_attributes_count);
    }
    w.end_message(event_mark);
  }
  if (s.dropped_events_count != 0) w.varint_field(span::kDroppedEvents, s.dropped_events_count);
  for (const SpanLink& l : s.links) {
    const auto link_mark = w.begin_message(span::kLinks);
    w.bytes_field(link::kTraceId, bytes_of(l.context.trace_id.bytes));
    w.bytes_field(link::kSpanId, bytes_of(l.context.span_id.bytes));
    if (!l.context.trace_state.empty()) string_field(w, link::kTraceState, l.context.trace_state);
    attributes(w, link::kAttributes, l.attributes);
    if (l.dropped_attributes_count != 0) {
      w.varint_field(link::kDroppedAttributes, l.dropped_attributes_count);
    }
    w.fixed32_field(link::kFlags, flags_of(l.context.trace_flags, l.context.is_remote));
    w.end_message(link_mark);
  }
  if (s.dropped_links_count != 0) w.varint_field(span::kDroppedLinks, s.dropped_links_count);
  const auto status_mark = w.begin_message(span::kStatus);
  if (!s.status_message.empty()) string_field(w, status::kMessage, s.status_message);
  if (s.status_code != StatusCode::kUnset) {
    w.varint_field(status::kCode, static_cast<std::uint64_t>(s.status_code));
  }
  w.end_message(status_mark);
  w.fixed32_field(span::kFlags, flags_of(s.context.trace_flags, s.parent_is_remote));
  w.end_message(mark);
}

}  // namespace

void append_otlp_proto(std::string& out, std::span<const SpanData* const> spans,
                       const Resource& resource) {
  pb::Writer w(out);
  w.reserve(256 + attributes_bound(resource.attributes) + 256 * spans.size());
  const auto rs_mark = w.begin_message(request::kResourceSpans, 3);  // up to 2 MiB
  const auto resource_mark = w.begin_message(resource_spans::kResource, 2);
  attributes(w, resource::kAttributes, resource.attributes);
  w.end_message(resource_mark);
  const auto ss_mark = w.begin_message(resource_spans::kScopeSpans, 3);
  const auto scope_mark = w.begin_message(scope_spans::kScope);
  string_field(w, scope::kName, kInstrumentationScope);
  string_field(w, scope::kVersion, NEMO_LENS_VERSION_STRING);
  w.end_message(scope_mark);
  for (const SpanData* s : spans) {
    if (s != nullptr) append_span(w, *s);
  }
  w.end_message(ss_mark);
  w.end_message(rs_mark);
  w.finish();
}

}  // namespace nemo::lens::detail
