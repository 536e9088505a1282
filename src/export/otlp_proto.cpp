// The OTLP protobuf encoding of a batch of spans (opentelemetry-proto's
// collector/trace/v1 ExportTraceServiceRequest), written by hand straight from SpanData. The
// tests decode it with the distribution's protobuf library and .proto files written from the
// specification. Field numbers are those of opentelemetry-proto v1.
#include <algorithm>
#include <cstdint>
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

void append_string_field(std::string& out, std::uint32_t field, std::string_view s);

// One AnyValue's oneof field, written into an open AnyValue message.
struct AnyValueWriter {
  std::string& out;

  void operator()(bool v) const { pb::append_varint_field(out, any_value::kBool, v ? 1 : 0); }
  void operator()(std::int64_t v) const {
    pb::append_varint_field(out, any_value::kInt, static_cast<std::uint64_t>(v));
  }
  void operator()(double v) const { pb::append_double_field(out, any_value::kDouble, v); }
  void operator()(const std::string& v) const {
    append_string_field(out, any_value::kString, v);
  }
  void operator()(const std::vector<bool>& v) const { array(v); }
  void operator()(const std::vector<std::int64_t>& v) const { array(v); }
  void operator()(const std::vector<double>& v) const { array(v); }
  void operator()(const std::vector<std::string>& v) const { array(v); }

  template <class Vector>
  void array(const Vector& v) const {
    const std::size_t array_mark = pb::begin_message(out, any_value::kArray);
    for (const auto& element : v) {
      const std::size_t mark = pb::begin_message(out, array_value::kValues);
      (*this)(element);
      pb::end_message(out, mark);
    }
    pb::end_message(out, array_mark);
  }
};

void append_key_value(std::string& out, std::uint32_t field, std::string_view key,
                      const AttributeValue& value) {
  const std::size_t mark = pb::begin_message(out, field);
  append_string_field(out, key_value::kKey, key);
  const std::size_t value_mark = pb::begin_message(out, key_value::kValue);
  std::visit(AnyValueWriter{out}, value);
  pb::end_message(out, value_mark);
  pb::end_message(out, mark);
}

void append_attributes(std::string& out, std::uint32_t field,
                       const std::vector<KeyValue>& attributes) {
  for (const KeyValue& kv : attributes) append_key_value(out, field, kv.key, kv.value);
}

// A proto3 string field: valid UTF-8, repaired with U+FFFD where it is not.
void append_string_field(std::string& out, std::uint32_t field, std::string_view s) {
  for (unsigned char c : s) {
    if (c >= 0x80) {
      pb::append_bytes_field(out, field, valid_utf8(s));  // rare: only non-ASCII strings
      return;
    }
  }
  pb::append_bytes_field(out, field, s);
}

bool has_attribute(const std::vector<KeyValue>& attributes, std::string_view key) {
  return std::any_of(attributes.begin(), attributes.end(),
                     [key](const KeyValue& kv) { return kv.key == key; });
}

void append_span(std::string& out, const SpanData& s) {
  const std::size_t mark = pb::begin_message(out, scope_spans::kSpans);
  pb::append_bytes_field(out, span::kTraceId, bytes_of(s.context.trace_id.bytes));
  pb::append_bytes_field(out, span::kSpanId, bytes_of(s.context.span_id.bytes));
  if (!s.context.trace_state.empty()) {
    append_string_field(out, span::kTraceState, s.context.trace_state);
  }
  if (s.parent_span_id.is_valid()) {
    pb::append_bytes_field(out, span::kParentSpanId, bytes_of(s.parent_span_id.bytes));
  }
  append_string_field(out, span::kName, s.name);
  pb::append_varint_field(out, span::kKind, static_cast<std::uint64_t>(s.kind));
  pb::append_fixed64_field(out, span::kStartTime, time_of(s.start_time_unix_nano));
  pb::append_fixed64_field(out, span::kEndTime, time_of(s.end_time_unix_nano));
  append_attributes(out, span::kAttributes, s.attributes);
  if (!s.group.empty() && !has_attribute(s.attributes, kGroupKey)) {
    append_key_value(out, span::kAttributes, kGroupKey, AttributeValue(s.group));
  }
  if (s.thread_id != 0 && !has_attribute(s.attributes, kThreadIdKey)) {
    append_key_value(out, span::kAttributes, kThreadIdKey, AttributeValue(s.thread_id));
  }
  if (s.dropped_attributes_count != 0) {
    pb::append_varint_field(out, span::kDroppedAttributes, s.dropped_attributes_count);
  }
  for (const SpanEvent& e : s.events) {
    const std::size_t event_mark = pb::begin_message(out, span::kEvents);
    pb::append_fixed64_field(out, event::kTime, time_of(e.time_unix_nano));
    append_string_field(out, event::kName, e.name);
    append_attributes(out, event::kAttributes, e.attributes);
    if (e.dropped_attributes_count != 0) {
      pb::append_varint_field(out, event::kDroppedAttributes, e.dropped_attributes_count);
    }
    pb::end_message(out, event_mark);
  }
  if (s.dropped_events_count != 0) {
    pb::append_varint_field(out, span::kDroppedEvents, s.dropped_events_count);
  }
  for (const SpanLink& l : s.links) {
    const std::size_t link_mark = pb::begin_message(out, span::kLinks);
    pb::append_bytes_field(out, link::kTraceId, bytes_of(l.context.trace_id.bytes));
    pb::append_bytes_field(out, link::kSpanId, bytes_of(l.context.span_id.bytes));
    if (!l.context.trace_state.empty()) {
      append_string_field(out, link::kTraceState, l.context.trace_state);
    }
    append_attributes(out, link::kAttributes, l.attributes);
    if (l.dropped_attributes_count != 0) {
      pb::append_varint_field(out, link::kDroppedAttributes, l.dropped_attributes_count);
    }
    pb::append_fixed32_field(out, link::kFlags, flags_of(l.context.trace_flags, l.context.is_remote));
    pb::end_message(out, link_mark);
  }
  if (s.dropped_links_count != 0) {
    pb::append_varint_field(out, span::kDroppedLinks, s.dropped_links_count);
  }
  const std::size_t status_mark = pb::begin_message(out, span::kStatus);
  if (!s.status_message.empty()) append_string_field(out, status::kMessage, s.status_message);
  if (s.status_code != StatusCode::kUnset) {
    pb::append_varint_field(out, status::kCode, static_cast<std::uint64_t>(s.status_code));
  }
  pb::end_message(out, status_mark);
  pb::append_fixed32_field(out, span::kFlags, flags_of(s.context.trace_flags, s.parent_is_remote));
  pb::end_message(out, mark);
}

}  // namespace

void append_otlp_proto(std::string& out, std::span<const SpanData* const> spans,
                       const Resource& resource) {
  out.reserve(out.size() + 128 + 48 * resource.attributes.size() + 320 * spans.size());
  const std::size_t rs_mark = pb::begin_message(out, request::kResourceSpans);
  const std::size_t resource_mark = pb::begin_message(out, resource_spans::kResource);
  append_attributes(out, resource::kAttributes, resource.attributes);
  pb::end_message(out, resource_mark);
  const std::size_t ss_mark = pb::begin_message(out, resource_spans::kScopeSpans);
  const std::size_t scope_mark = pb::begin_message(out, scope_spans::kScope);
  pb::append_bytes_field(out, scope::kName, kInstrumentationScope);
  pb::append_bytes_field(out, scope::kVersion, NEMO_LENS_VERSION_STRING);
  pb::end_message(out, scope_mark);
  for (const SpanData* s : spans) {
    if (s != nullptr) append_span(out, *s);
  }
  pb::end_message(out, ss_mark);
  pb::end_message(out, rs_mark);
}

}  // namespace nemo::lens::detail
