// What `lens collect` does with a request body (traces, metrics or logs): OTLP protobuf (or
// OTLP/JSON) in, one line of OTLP/JSON out, in the shape the library's own file exporter writes,
// so `lens report` and `jq` read the receiver's output and the exporter's the same way.
//
//   std::string line;
//   const lens_cli::TranscodeResult r = lens_cli::protobuf_to_json(body, line);
//   if (!r.ok) return reply_400(r.error);  // `line` is left as it was
//   line += '\n';                          // r.spans spans received
//   lens_cli::protobuf_to_json(body, line, lens_cli::Signal::kMetrics);  // r.points data points
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace lens_cli {

/// The OTLP signal a request carries: ExportTraceServiceRequest, ExportMetricsServiceRequest or
/// ExportLogsServiceRequest.
enum class Signal : std::uint8_t { kTraces, kMetrics, kLogs };

/// The outcome of one transcoding call.
struct TranscodeResult {
  /// True when the input was accepted and its JSON appended.
  bool ok = false;
  /// Why the input was refused (empty when ok), naming the field or byte offset at fault.
  std::string error;
  /// The number of spans in a trace request (0 for the other signals, and when refused).
  std::uint64_t spans = 0;
  /// The number of data points (of every kind) in a metrics request.
  std::uint64_t points = 0;
  /// The number of log records in a logs request.
  std::uint64_t records = 0;
  /// protobuf_to_json of a trace request: the first reason the JSON Lines reader (lens report,
  /// lens convert) would skip the line although it decodes (a span without a traceId or spanId,
  /// or with ids of zeros, or ending before it starts), e.g. "span 3: no spanId"; empty when it
  /// reads. lens collect refuses such a request.
  std::string unreadable;
};

/// Decodes an OTLP ExportTraceServiceRequest in protobuf binary form and appends it to `out` as
/// one line of OTLP/JSON, without a trailing newline. On failure `out` is left unchanged and the
/// result names the problem ("truncated varint at byte 17", "field 1 of Span has wire type 0,
/// expected 2 at byte 40"). Never throws (running out of memory is reported as an error too).
///
/// The JSON is the OTLP JSON encoding as src/export/otlp_json.cpp writes it, so a request the
/// library encoded comes out byte for byte as its JSON exporter would have written it:
/// - lowerCamelCase keys in field-number order (the library's order within a span); trace and
///   span ids (traceId, spanId, parentSpanId, links' ids) lower-case hex; bytesValue base64;
///   fixed64 times and int64 values decimal strings; enums and 32-bit integers JSON numbers;
///   doubles in the shortest round-trip form; strings escaped with invalid UTF-8 replaced by
///   U+FFFD.
/// - Always written, as the library does: resourceSpans, each element's resource (with
///   attributes, possibly []) and scopeSpans, each scope group's spans; a span's flags, name,
///   kind, both times, attributes and status.code; an event's timeUnixNano, name and attributes;
///   a link's flags and attributes; an arrayValue's or kvlistValue's values. Everything else is
///   omitted at its proto3 default (empty ids and strings, zero counts, no scope).
/// - Accepted: fields in any order, several resource and scope groups, unknown fields of any
///   valid wire type (skipped). A repeated non-repeated field: the last scalar wins, and for a
///   message field (resource, scope, status, a KeyValue's value, an AnyValue's array or kvlist)
///   the last occurrence wins whole, instead of protobuf's merge; earlier ones are still checked.
///   OTLP's trace messages have no repeated scalar fields, so packing never arises.
/// - Refused: truncated input, lengths past the end of the enclosing message, wire types 3/4
///   (groups) and 6/7, field number 0, varints longer than 10 bytes, a known field with the wrong
///   wire type, messages nested more than 32 deep, ids neither 0 nor 16 (trace) / 8 (span) bytes.
///
/// Single pass over the input (each message's repeated fields are re-walked once to group them);
/// allocates nothing but `out`'s growth.
///
/// Metrics and logs (`signal`) use the messages of opentelemetry/proto/metrics/v1 and logs/v1
/// and the rules libprotobuf's JSON printer follows, which the library's metrics and logs
/// writers (src/export/otlp_metrics.cpp, otlp_logs.cpp) follow too:
/// - Keys in field-number order; a field is written when present: a message field, a oneof
///   member (Metric's gauge/sum/histogram/exponentialHistogram/summary, the last one wins;
///   asDouble/asInt) or a proto3 `optional` field (a histogram's sum, min, max) that occurs, even
///   at 0; another scalar when not 0 (a double: when its bits are not all 0) nor empty; a
///   repeated field when not empty. Except the request's resourceMetrics / resourceLogs, always
///   written (possibly []) so that every line names its signal. The common messages (KeyValue,
///   AnyValue and its arrays, InstrumentationScope) are written as in spans.
/// - fixed64, sfixed64 and uint64 values (times, counts, asInt, bucketCounts) are decimal
///   strings; doubles (asDouble, sum, explicitBounds, ...) JSON numbers or "NaN", "Infinity",
///   "-Infinity"; sint32 (scale, offset) zigzag-decoded numbers; enums (aggregationTemporality,
///   severityNumber) numbers; exemplars' and log records' ids hex (8 or 16 bytes, or empty).
/// - Repeated scalars (bucketCounts, explicitBounds, Buckets.bucketCounts) are accepted packed
///   and unpacked, mixed; a packed fixed64/double run must be a multiple of 8 bytes long.
/// - Spans, data points (of every kind) and log records are counted in the result.
TranscodeResult protobuf_to_json(std::string_view bytes, std::string& out,
                                 Signal signal = Signal::kTraces);

/// Checks an OTLP/JSON ExportTraceServiceRequest body and appends it to `out` on one line (no
/// trailing newline) with the whitespace between tokens removed, counting its spans. Every token
/// is copied as written (strings keep their escapes, numbers their digits), so the line reads
/// back as exactly the body's value, but for what OTLP/JSON has no spelling for (docs/otlp.md,
/// "What lens collect keeps"): an escaped lone surrogate becomes \ufffd; in doubleValue and
/// asDouble, null becomes "NaN" and a number beyond a double "Infinity" or "-Infinity"; an
/// intValue or asInt that is no int64 written as digits (1e+300, 2.5) becomes a doubleValue or
/// asDouble of the same token. So the line is JSON that strict readers parse.
/// - The body must be RFC 8259 JSON (valid UTF-8, well-formed escapes, no other number beyond a
///   double's range; a leading UTF-8 BOM is skipped) whose value is an object.
///   When present, resourceSpans, each element's scopeSpans and each of those elements' spans
///   must be arrays (or null), and the elements of the first two objects. Nesting deeper than
///   128 is refused. Errors name the byte offset ("invalid JSON: expected ':' at byte 12").
/// - On failure `out` is left unchanged. Never throws, as protobuf_to_json. One pass; allocates
///   nothing but `out`'s growth.
/// - Metrics: resourceMetrics, scopeMetrics and metrics must be arrays (or null) of objects; a
///   metric's gauge, sum, histogram, exponentialHistogram and summary objects (or null), and
///   their dataPoints arrays (or null), whose elements are counted. Logs: resourceLogs,
///   scopeLogs and logRecords as resourceSpans, scopeSpans and spans; log records are counted.
TranscodeResult json_to_json(std::string_view body, std::string& out,
                             Signal signal = Signal::kTraces);

/// "traces", "metrics" or "logs".
const char* signal_name(Signal signal);

}  // namespace lens_cli
