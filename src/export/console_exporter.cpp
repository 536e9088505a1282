// ConsoleSpanExporter: one compact JSON object per span per line, for people and for jq.
//
//   {"name":"train_step","group":"STEP","trace_id":"4bf9...","span_id":"00f0...",
//    "parent_span_id":"...","kind":"internal","start_unix_nano":...,"end_unix_nano":...,
//    "duration_ns":...,"status":{"code":"error","message":"..."},"attributes":{"iteration":3},
//    "events":[...],"links":[...],"thread_id":4711,"resource":{"service.name":"nemo","dl.rank":0}}
//
// parent_span_id is left out for root spans, events/links when empty, the dropped counts when 0,
// status.message when empty, "truncated" unless true. Integers (times included) are JSON numbers.
#include <cstdio>
#include <exception>
#include <string>
#include <string_view>

#include "export/exporters.hpp"
#include "export/json_writer.hpp"
#include "nemo/lens/semconv.hpp"

namespace nemo::lens::detail {

namespace {

std::string_view kind_name(SpanKind kind) noexcept {
  switch (kind) {
    case SpanKind::kInternal:
      return "internal";
    case SpanKind::kServer:
      return "server";
    case SpanKind::kClient:
      return "client";
    case SpanKind::kProducer:
      return "producer";
    case SpanKind::kConsumer:
      return "consumer";
  }
  return "unspecified";
}

std::string_view status_name(StatusCode code) noexcept {
  switch (code) {
    case StatusCode::kUnset:
      return "unset";
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kError:
      return "error";
  }
  return "unset";
}

// `"attributes":{"key":value,...}`.
void append_attribute_object(std::string& out, const std::vector<KeyValue>& attributes) {
  json::append_raw(out, "\"attributes\":{");
  bool first = true;
  for (const KeyValue& kv : attributes) {
    if (!first) out.push_back(',');
    first = false;
    json::append_string(out, kv.key);
    out.push_back(':');
    json::append_plain_value(out, kv.value);
  }
  out.push_back('}');
}

void append_count(std::string& out, std::string_view key, std::uint32_t count) {
  if (count == 0) return;
  out.push_back(',');
  json::append_key(out, key);
  json::append_uint(out, count);
}

// `"resource":{...}` with only the keys that identify the process, to keep lines short.
void append_resource(std::string& out, const Resource& resource) {
  json::append_raw(out, "\"resource\":{");
  bool first = true;
  for (std::string_view key :
       {semconv::kServiceName, semconv::kServiceInstanceId, semconv::kDlRank}) {
    const AttributeValue* value = resource.attribute(key);
    if (value == nullptr) continue;
    if (!first) out.push_back(',');
    first = false;
    json::append_key(out, key);
    json::append_plain_value(out, *value);
  }
  out.push_back('}');
}

void append_line(std::string& out, const SpanData& span, std::string_view resource_json) {
  json::append_raw(out, "{\"name\":");
  json::append_string(out, span.name);
  json::append_raw(out, ",\"group\":");
  json::append_string(out, span.group);
  json::append_raw(out, ",\"trace_id\":");
  json::append_hex(out, span.context.trace_id.bytes);
  json::append_raw(out, ",\"span_id\":");
  json::append_hex(out, span.context.span_id.bytes);
  if (span.parent_span_id.is_valid()) {
    json::append_raw(out, ",\"parent_span_id\":");
    json::append_hex(out, span.parent_span_id.bytes);
  }
  json::append_raw(out, ",\"kind\":\"");
  json::append_raw(out, kind_name(span.kind));
  json::append_raw(out, "\",\"start_unix_nano\":");
  json::append_int(out, span.start_time_unix_nano);
  json::append_raw(out, ",\"end_unix_nano\":");
  json::append_int(out, span.end_time_unix_nano);
  json::append_raw(out, ",\"duration_ns\":");
  json::append_int(out, span.end_time_unix_nano - span.start_time_unix_nano);
  json::append_raw(out, ",\"status\":{\"code\":\"");
  json::append_raw(out, status_name(span.status_code));
  out.push_back('"');
  if (!span.status_message.empty()) {
    json::append_raw(out, ",\"message\":");
    json::append_string(out, span.status_message);
  }
  json::append_raw(out, "},");
  append_attribute_object(out, span.attributes);

  if (!span.events.empty()) {
    json::append_raw(out, ",\"events\":[");
    bool first = true;
    for (const SpanEvent& event : span.events) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"name\":");
      json::append_string(out, event.name);
      json::append_raw(out, ",\"time_unix_nano\":");
      json::append_int(out, event.time_unix_nano);
      out.push_back(',');
      append_attribute_object(out, event.attributes);
      append_count(out, "dropped_attributes_count", event.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (!span.links.empty()) {
    json::append_raw(out, ",\"links\":[");
    bool first = true;
    for (const SpanLink& link : span.links) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"trace_id\":");
      json::append_hex(out, link.context.trace_id.bytes);
      json::append_raw(out, ",\"span_id\":");
      json::append_hex(out, link.context.span_id.bytes);
      if (!link.context.trace_state.empty()) {
        json::append_raw(out, ",\"trace_state\":");
        json::append_string(out, link.context.trace_state);
      }
      out.push_back(',');
      append_attribute_object(out, link.attributes);
      append_count(out, "dropped_attributes_count", link.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  append_count(out, "dropped_attributes_count", span.dropped_attributes_count);
  append_count(out, "dropped_events_count", span.dropped_events_count);
  append_count(out, "dropped_links_count", span.dropped_links_count);
  if (span.truncated) json::append_raw(out, ",\"truncated\":true");
  json::append_raw(out, ",\"thread_id\":");
  json::append_int(out, span.thread_id);
  out.push_back(',');
  json::append_raw(out, resource_json);
  json::append_raw(out, "}\n");
}

}  // namespace

ExportResult ConsoleSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                               const Resource& resource,
                                               std::chrono::steady_clock::time_point) noexcept {
  if (out_ == nullptr) return ExportResult::kFailure;
  try {
    // The resource part is the same on every line: encode it once per batch.
    resource_json_.clear();
    append_resource(resource_json_, resource);
    buffer_.clear();
    buffer_.reserve(spans.size() * (384 + resource_json_.size()));
    for (const SpanData* span : spans) {
      if (span != nullptr) append_line(buffer_, *span, resource_json_);
    }
  } catch (const std::exception&) {
    return ExportResult::kFailure;  // out of memory
  }
  if (buffer_.empty()) return ExportResult::kSuccess;
  const std::size_t written = std::fwrite(buffer_.data(), 1, buffer_.size(), out_);
  const bool flushed = std::fflush(out_) == 0;
  if (written != buffer_.size() || !flushed) {
    std::clearerr(out_);  // let the next batch try again
    return ExportResult::kFailure;
  }
  return ExportResult::kSuccess;
}

bool ConsoleSpanExporter::force_flush(std::chrono::steady_clock::time_point) noexcept {
  return out_ == nullptr || std::fflush(out_) == 0;
}

}  // namespace nemo::lens::detail
