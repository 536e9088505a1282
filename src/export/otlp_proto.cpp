// The OTLP protobuf encoding of a batch of spans (opentelemetry-proto's
// collector/trace/v1 ExportTraceServiceRequest), written by hand straight from SpanData. The
// tests decode it with the distribution's protobuf library and .proto files written from the
// specification. Field numbers are those of opentelemetry-proto v1.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/otlp.hpp"
#include "export/otlp_common.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/version.hpp"

namespace nemo::lens::detail {

namespace {

// Field numbers, by message.
namespace request {
constexpr std::uint32_t kResourceSpans = 1;
}
namespace resource_spans {
constexpr std::uint32_t kResource = 1, kScopeSpans = 2;
}
namespace scope_spans {
constexpr std::uint32_t kScope = 1, kSpans = 2;
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
namespace key_value = otlp::key_value;
namespace any_value = otlp::any_value;
using otlp::attributes_bound;
using otlp::bytes_of;
using otlp::has_attribute;
using otlp::kMessageOverhead;
using otlp::string_bound;
using otlp::string_field;
using otlp::time_of;

constexpr std::uint32_t kContextHasIsRemote = 0x100;
constexpr std::uint32_t kContextIsRemote = 0x200;
constexpr std::string_view kGroupKey = semconv::kNemoSpanGroup;
constexpr std::string_view kThreadIdKey = semconv::kThreadId;

std::uint32_t flags_of(std::uint8_t trace_flags, bool is_remote) {
  return trace_flags | kContextHasIsRemote | (is_remote ? kContextIsRemote : 0U);
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
    n += kMessageOverhead + 64 + string_bound(l.context.trace_state) +
         attributes_bound(l.attributes);
  }
  return n;
}

// One of the two span attributes the encoder adds (as otlp::key_value_field), with `write_value`
// writing the AnyValue's field (no AttributeValue is built for them).
template <class WriteValue>
void added_attribute(pb::Writer& w, std::string_view key, WriteValue write_value) {
  const auto mark = w.begin_message(span::kAttributes);
  string_field(w, key_value::kKey, key);
  const auto value_mark = w.begin_message(key_value::kValue);
  write_value();
  w.end_message(value_mark);
  w.end_message(mark);
}

void append_span(pb::Writer& w, const SpanData& s) {
  w.reserve(span_bound(s));
  const auto mark = w.begin_message(scope_spans::kSpans, 2);  // 128 B .. 16 KiB
  w.bytes_field(span::kTraceId, bytes_of(s.context.trace_id.bytes));
  w.bytes_field(span::kSpanId, bytes_of(s.context.span_id.bytes));
  if (!s.context.trace_state.empty()) string_field(w, span::kTraceState, s.context.trace_state);
  if (s.parent_span_id.is_valid())
    w.bytes_field(span::kParentSpanId, bytes_of(s.parent_span_id.bytes));
  string_field(w, span::kName, s.name);
  w.varint_field(span::kKind, static_cast<std::uint64_t>(s.kind));
  w.fixed64_field(span::kStartTime, time_of(s.start_time_unix_nano));
  w.fixed64_field(span::kEndTime, time_of(s.end_time_unix_nano));
  otlp::key_values(w, span::kAttributes, s.attributes);
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
    otlp::key_values(w, event::kAttributes, e.attributes);
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
    otlp::key_values(w, link::kAttributes, l.attributes);
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
  otlp::resource_field(w, resource_spans::kResource, resource);
  const auto ss_mark = w.begin_message(resource_spans::kScopeSpans, 3);
  otlp::scope_field(w, scope_spans::kScope, kInstrumentationScope, NEMO_LENS_VERSION_STRING);
  for (const SpanData* s : spans) {
    if (s != nullptr) append_span(w, *s);
  }
  w.end_message(ss_mark);
  w.end_message(rs_mark);
  w.finish();
}

}  // namespace nemo::lens::detail
