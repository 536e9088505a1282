// The OTLP/JSON encoding of a batch of spans (opentelemetry-proto's ExportTraceServiceRequest in
// the OTLP specification's JSON Protobuf Encoding). See append_otlp_json in exporters.hpp for the
// shape and the fields left out.
#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/exporters.hpp"
#include "export/json_writer.hpp"
#include "export/otlp_common.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/version.hpp"

namespace nemo::lens::detail {

namespace {

// Span.flags / Link.flags bits above the W3C trace flags (trace.proto's SpanFlags).
constexpr std::uint32_t kContextHasIsRemote = 0x100;
constexpr std::uint32_t kContextIsRemote = 0x200;

static_assert(kInstrumentationScope == "nemo.lens", "the scope name is spelled out below");

// The span attributes the encoder adds from SpanData fields that OTLP has no slot for.
constexpr std::string_view kGroupKey = semconv::kNemoSpanGroup;
constexpr std::string_view kThreadIdKey = semconv::kThreadId;
static_assert(kGroupKey == "nemo.span.group" && kThreadIdKey == "thread.id",
              "the keys are spelled out below");

std::uint32_t flags_of(std::uint8_t trace_flags, bool is_remote) {
  return trace_flags | kContextHasIsRemote | (is_remote ? kContextIsRemote : 0U);
}

using otlp::append_attributes_json;
using otlp::append_key_value_json;
using otlp::append_time_json;
using otlp::has_attribute;

void append_span(std::string& out, const SpanData& span) {
  json::append_raw(out, "{\"traceId\":");
  json::append_hex(out, span.context.trace_id.bytes);
  json::append_raw(out, ",\"spanId\":");
  json::append_hex(out, span.context.span_id.bytes);
  if (!span.context.trace_state.empty()) {
    json::append_raw(out, ",\"traceState\":");
    json::append_string(out, span.context.trace_state);
  }
  if (span.parent_span_id.is_valid()) {
    json::append_raw(out, ",\"parentSpanId\":");
    json::append_hex(out, span.parent_span_id.bytes);
  }
  json::append_raw(out, ",\"flags\":");
  json::append_uint(out, flags_of(span.context.trace_flags, span.parent_is_remote));
  json::append_raw(out, ",\"name\":");
  json::append_string(out, span.name);
  json::append_raw(out, ",\"kind\":");
  json::append_uint(out, static_cast<std::uint32_t>(span.kind));
  json::append_raw(out, ",\"startTimeUnixNano\":");
  append_time_json(out, span.start_time_unix_nano);
  json::append_raw(out, ",\"endTimeUnixNano\":");
  append_time_json(out, span.end_time_unix_nano);

  // The span's own attributes, then the group and thread id unless it already carries those keys
  // (keys must stay unique; an explicit attribute wins).
  json::append_raw(out, ",\"attributes\":[");
  bool first = true;
  for (const KeyValue& kv : span.attributes) {
    if (!first) out.push_back(',');
    first = false;
    append_key_value_json(out, kv.key, kv.value);
  }
  if (!span.group.empty() && !has_attribute(span.attributes, kGroupKey)) {
    if (!first) out.push_back(',');
    first = false;
    json::append_raw(out, "{\"key\":\"nemo.span.group\",\"value\":{\"stringValue\":");
    json::append_string(out, span.group);
    json::append_raw(out, "}}");
  }
  if (span.thread_id != 0 && !has_attribute(span.attributes, kThreadIdKey)) {
    if (!first) out.push_back(',');
    json::append_raw(out, "{\"key\":\"thread.id\",\"value\":{\"intValue\":");
    json::append_quoted_int(out, span.thread_id);
    json::append_raw(out, "}}");
  }
  out.push_back(']');
  if (span.dropped_attributes_count != 0) {
    json::append_raw(out, ",\"droppedAttributesCount\":");
    json::append_uint(out, span.dropped_attributes_count);
  }

  if (!span.events.empty()) {
    json::append_raw(out, ",\"events\":[");
    first = true;
    for (const SpanEvent& event : span.events) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"timeUnixNano\":");
      append_time_json(out, event.time_unix_nano);
      json::append_raw(out, ",\"name\":");
      json::append_string(out, event.name);
      out.push_back(',');
      append_attributes_json(out, event.attributes, event.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (span.dropped_events_count != 0) {
    json::append_raw(out, ",\"droppedEventsCount\":");
    json::append_uint(out, span.dropped_events_count);
  }

  if (!span.links.empty()) {
    json::append_raw(out, ",\"links\":[");
    first = true;
    for (const SpanLink& link : span.links) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"traceId\":");
      json::append_hex(out, link.context.trace_id.bytes);
      json::append_raw(out, ",\"spanId\":");
      json::append_hex(out, link.context.span_id.bytes);
      if (!link.context.trace_state.empty()) {
        json::append_raw(out, ",\"traceState\":");
        json::append_string(out, link.context.trace_state);
      }
      json::append_raw(out, ",\"flags\":");
      json::append_uint(out, flags_of(link.context.trace_flags, link.context.is_remote));
      out.push_back(',');
      append_attributes_json(out, link.attributes, link.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (span.dropped_links_count != 0) {
    json::append_raw(out, ",\"droppedLinksCount\":");
    json::append_uint(out, span.dropped_links_count);
  }

  json::append_raw(out, ",\"status\":{\"code\":");
  json::append_uint(out, static_cast<std::uint32_t>(span.status_code));
  if (!span.status_message.empty()) {
    json::append_raw(out, ",\"message\":");
    json::append_string(out, span.status_message);
  }
  json::append_raw(out, "}}");
}

}  // namespace

void append_otlp_json(std::string& out, std::span<const SpanData* const> spans,
                      const Resource& resource) {
  // A typical span with a handful of attributes encodes to 400-600 bytes; reserving once avoids
  // most regrowth on the first batch (exporters reuse their buffer afterwards).
  out.reserve(out.size() + 256 + 64 * resource.attributes.size() + 512 * spans.size());
  json::append_raw(out, "{\"resourceSpans\":[{\"resource\":{");
  append_attributes_json(out, resource.attributes, 0);
  json::append_raw(
      out,
      "},\"scopeSpans\":[{\"scope\":{\"name\":\"nemo.lens\",\"version\":\"" NEMO_LENS_VERSION_STRING
      "\"},\"spans\":[");
  bool first = true;
  for (const SpanData* span : spans) {
    if (span == nullptr) continue;
    if (!first) out.push_back(',');
    first = false;
    append_span(out, *span);
  }
  json::append_raw(out, "]}]}]}");
}

}  // namespace nemo::lens::detail
