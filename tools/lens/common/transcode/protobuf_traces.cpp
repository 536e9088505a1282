// The messages of an ExportTraceServiceRequest below its scope groups: Span, its events and
// links, Status.
#include <string>

#include "common/transcode/protobuf_to_json.hpp"

namespace lens_cli::transcode {

bool ProtobufToJson::span(const Field& m, int depth) {
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

  // What the JSON Lines reader (lens report, lens convert) requires of a span, beyond what this
  // decoder checks: both ids, not all zeros, and an end not before the start.
  if (unreadable.empty()) {
    auto zero = [](const Field& id) {
      for (const Byte b : id.bytes()) {
        if (b != 0) return false;
      }
      return true;
    };
    const std::string at = "span " + std::to_string(spans) + ": ";
    if (trace_id.size == 0) {
      unreadable = at + "no traceId";
    } else if (zero(trace_id)) {
      unreadable = at + "traceId is all zeros";
    } else if (span_id.size == 0) {
      unreadable = at + "no spanId";
    } else if (zero(span_id)) {
      unreadable = at + "spanId is all zeros";
    } else if (end_time < start) {
      unreadable = at + "endTimeUnixNano is before startTimeUnixNano";
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

bool ProtobufToJson::event(const Field& m, int depth) {
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

bool ProtobufToJson::link(const Field& m, int depth) {
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

bool ProtobufToJson::status(const Field& m, int depth) {
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

}  // namespace lens_cli::transcode
