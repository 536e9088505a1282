// The message of an ExportLogsServiceRequest below its scope groups: LogRecord.
#include <string>

#include "common/transcode/protobuf_to_json.hpp"

namespace lens_cli::transcode {

bool ProtobufToJson::log_record(const Field& m, int depth) {
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

}  // namespace lens_cli::transcode
