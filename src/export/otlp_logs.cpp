// The OTLP encodings of log records: opentelemetry-proto's collector/logs/v1
// ExportLogsServiceRequest in protobuf and in the OTLP specification's JSON Protobuf Encoding,
// written by hand straight from LogRecordData (see otlp_signals.hpp for what each emits). The tests
// decode both with the distribution's protobuf library and .proto files written from the
// specification (tests/otlp_signals_proto_test.cpp). Field numbers are those of
// opentelemetry-proto v1.
//
// Both encodings write the fields in field-number order and a field exactly when the other has it:
// the protobuf is what libprotobuf would serialize for the same message, and the JSON what its
// JSON printer would print, except that ids are hex (OTLP/JSON) instead of base64.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "export/json_writer.hpp"
#include "export/otlp_common.hpp"
#include "export/otlp_signals.hpp"
#include "export/protobuf_wire.hpp"

namespace nemo::lens::detail {

namespace {

// Field numbers, by message (logs/v1, collector/logs/v1).
namespace request {
constexpr std::uint32_t kResourceLogs = 1;
}
namespace resource_logs {
constexpr std::uint32_t kResource = 1, kScopeLogs = 2;
}
namespace scope_logs {
constexpr std::uint32_t kScope = 1, kLogRecords = 2;
}
namespace log_record {
constexpr std::uint32_t kTime = 1, kSeverityNumber = 2, kSeverityText = 3, kBody = 5,
                        kAttributes = 6, kDroppedAttributes = 7, kFlags = 8, kTraceId = 9,
                        kSpanId = 10, kObservedTime = 11;
}

using otlp::kMessageOverhead;
using otlp::string_bound;
using otlp::string_field;
using otlp::time_of;

// ---- Protobuf ----------------------------------------------------------------------------------

// An upper bound of what append_record() writes: two times (9 bytes each), the severity number
// (11), flags (5), the ids (18 + 10), the body's two tags and lengths, and the strings.
std::size_t record_bound(const LogRecordData& r) {
  return 2 * kMessageOverhead + 64 + string_bound(r.severity_text) + string_bound(r.body) +
         otlp::attributes_bound(r.attributes);
}

void append_record(pb::Writer& w, const LogRecordData& r) {
  w.reserve(record_bound(r));
  const auto mark = w.begin_message(scope_logs::kLogRecords, 2);
  if (const std::uint64_t t = time_of(r.time_unix_nano); t != 0) {
    w.fixed64_field(log_record::kTime, t);
  }
  if (r.severity_number != 0) {
    // An enum: int32 on the wire, sign-extended to 64 bits like any negative int32.
    w.varint_field(log_record::kSeverityNumber,
                   static_cast<std::uint64_t>(static_cast<std::int64_t>(r.severity_number)));
  }
  if (!r.severity_text.empty()) string_field(w, log_record::kSeverityText, r.severity_text);
  if (!r.body.empty()) {
    const auto body_mark = w.begin_message(log_record::kBody, 2);
    string_field(w, otlp::any_value::kString, r.body);
    w.end_message(body_mark);
  }
  otlp::key_values(w, log_record::kAttributes, r.attributes);
  if (r.dropped_attributes_count != 0) {
    w.varint_field(log_record::kDroppedAttributes, r.dropped_attributes_count);
  }
  if (r.trace_flags != 0) w.fixed32_field(log_record::kFlags, r.trace_flags);
  if (r.trace_id.is_valid()) w.bytes_field(log_record::kTraceId, otlp::bytes_of(r.trace_id.bytes));
  if (r.span_id.is_valid()) w.bytes_field(log_record::kSpanId, otlp::bytes_of(r.span_id.bytes));
  if (const std::uint64_t t = time_of(r.observed_time_unix_nano); t != 0) {
    w.fixed64_field(log_record::kObservedTime, t);
  }
  w.end_message(mark);
}

// ---- OTLP/JSON ---------------------------------------------------------------------------------

void append_record_json(std::string& out, const LogRecordData& r) {
  json::JsonObject o(out);
  if (const std::uint64_t t = time_of(r.time_unix_nano); t != 0) {
    json::append_quoted_uint(o.key("timeUnixNano"), t);
  }
  if (r.severity_number != 0) json::append_int(o.key("severityNumber"), r.severity_number);
  if (!r.severity_text.empty()) json::append_string(o.key("severityText"), r.severity_text);
  if (!r.body.empty()) {
    std::string& body = o.key("body");
    json::append_raw(body, "{\"stringValue\":");
    json::append_string(body, r.body);
    body.push_back('}');
  }
  if (!r.attributes.empty()) {
    std::string& a = o.key("attributes");
    a.push_back('[');
    bool first = true;
    for (const KeyValue& kv : r.attributes) {
      if (!first) a.push_back(',');
      first = false;
      otlp::append_key_value_json(a, kv.key, kv.value);
    }
    a.push_back(']');
  }
  if (r.dropped_attributes_count != 0) {
    json::append_uint(o.key("droppedAttributesCount"), r.dropped_attributes_count);
  }
  if (r.trace_flags != 0) json::append_uint(o.key("flags"), r.trace_flags);
  if (r.trace_id.is_valid()) json::append_hex(o.key("traceId"), r.trace_id.bytes);
  if (r.span_id.is_valid()) json::append_hex(o.key("spanId"), r.span_id.bytes);
  if (const std::uint64_t t = time_of(r.observed_time_unix_nano); t != 0) {
    json::append_quoted_uint(o.key("observedTimeUnixNano"), t);
  }
  o.close();
}

}  // namespace

void append_otlp_logs_proto(std::string& out, std::span<const LogRecordData> records,
                            const Resource& resource) {
  pb::Writer w(out);
  w.reserve(2 * kMessageOverhead + otlp::resource_bound(resource));
  const auto rl_mark = w.begin_message(request::kResourceLogs, 3);  // up to 2 MiB
  otlp::resource_field(w, resource_logs::kResource, resource);
  for (std::size_t i = 0; i < records.size();) {
    const std::string& scope_name = records[i].scope_name;
    w.reserve(kMessageOverhead + otlp::scope_bound(scope_name, {}));
    const auto sl_mark = w.begin_message(resource_logs::kScopeLogs, 3);
    otlp::scope_field(w, scope_logs::kScope, scope_name, {});
    for (; i < records.size() && records[i].scope_name == scope_name; ++i) {
      append_record(w, records[i]);
    }
    w.end_message(sl_mark);
  }
  w.end_message(rl_mark);
  w.finish();
}

void append_otlp_logs_json(std::string& out, std::span<const LogRecordData> records,
                           const Resource& resource) {
  out.reserve(out.size() + 256 + 64 * resource.attributes.size() + 320 * records.size());
  json::append_raw(out, "{\"resourceLogs\":[{\"resource\":{");
  if (!resource.attributes.empty()) otlp::append_attributes_json(out, resource.attributes, 0);
  out.push_back('}');
  if (!records.empty()) {
    json::append_raw(out, ",\"scopeLogs\":[");
    for (std::size_t i = 0; i < records.size();) {
      const std::string& scope_name = records[i].scope_name;
      if (i != 0) out.push_back(',');
      json::append_raw(out, "{\"scope\":");
      otlp::append_scope_json(out, scope_name, {});
      json::append_raw(out, ",\"logRecords\":[");
      for (bool first = true; i < records.size() && records[i].scope_name == scope_name; ++i) {
        if (!first) out.push_back(',');
        first = false;
        append_record_json(out, records[i]);
      }
      json::append_raw(out, "]}");
    }
    out.push_back(']');
  }
  json::append_raw(out, "}]}");
}

}  // namespace nemo::lens::detail
