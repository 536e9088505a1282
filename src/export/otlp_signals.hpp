// The OTLP encodings of metrics and logs (ExportMetricsServiceRequest, ExportLogsServiceRequest)
// of the data model in nemo/lens/telemetry_data.hpp. Internal.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "nemo/lens/exporter.hpp"
#include "nemo/lens/telemetry_data.hpp"

namespace nemo::lens::detail {

using nemo::lens::HistogramPoint;
using nemo::lens::LogRecordData;
using nemo::lens::MetricData;
using nemo::lens::MetricKind;
using nemo::lens::NumberPoint;
using nemo::lens::Temporality;

/// Appends one ExportMetricsServiceRequest (protobuf): one ResourceMetrics with `resource`, one
/// ScopeMetrics per run of consecutive metrics with the same scope. Invalid UTF-8 is repaired.
///
/// Fields are written in field-number order, and proto3 defaults are left out, so the bytes are
/// exactly what libprotobuf would serialize for the same message:
/// - ResourceMetrics: resource (always; its attributes, none when empty), then scope_metrics
///   (none when `metrics` is empty). ScopeMetrics: scope (always; name and version each left out
///   when empty), metrics. No schema_url.
/// - Metric: name, description, unit (each left out when empty), then by `kind` one of
///   gauge {data_points}, sum {data_points, aggregation_temporality, is_monotonic (only when
///   true)}, histogram {data_points, aggregation_temporality}. The data message is written even
///   without points (the oneof stays set). `monotonic` and `temporality` are ignored where the
///   kind has no such field.
/// - NumberDataPoint: start_time_unix_nano and time_unix_nano (fixed64; left out when 0, so a
///   gauge's 0 start time is absent), then as_double (double) or as_int (sfixed64), always written
///   (0 included: a oneof member), then attributes. No exemplars, flags 0.
/// - HistogramDataPoint: start and time as above, count (fixed64, left out when 0), sum (always:
///   an optional double with presence), bucket_counts (packed fixed64) and explicit_bounds (packed
///   double), each left out when empty, attributes, min and max (only when set).
/// - Negative timestamps are written as 0 (that is, left out).
void append_otlp_metrics_proto(std::string& out, std::span<const MetricData> metrics,
                               const Resource& resource);
/// The same request as OTLP/JSON on one line, without a trailing newline (the encoding rules of
/// append_otlp_json: lowerCamelCase keys, 64-bit integers as decimal strings, ids as hex).
///
/// A key is present exactly when the protobuf has the field, in the same (field-number) order, so
/// the JSON equals libprotobuf's JSON printing of the protobuf (with enums as integers):
///   {"resourceMetrics":[{"resource":{"attributes":[...]},"scopeMetrics":[{"scope":{"name":"n",
///    "version":"v"},"metrics":[{"name":"m","description":"d","unit":"ms","sum":{"dataPoints":[
///    {"startTimeUnixNano":"1","timeUnixNano":"2","asInt":"42","attributes":[...]}],
///    "aggregationTemporality":2,"isMonotonic":true}}]}]}]}
/// - Strings (timeUnixNano, startTimeUnixNano, count, asInt, bucketCounts' elements): the 64-bit
///   integers. Numbers: aggregationTemporality (1 delta, 2 cumulative), asDouble, sum, min, max,
///   explicitBounds' elements (shortest round-trip form, ".0" when integral; NaN and the
///   infinities as "NaN", "Infinity", "-Infinity").
/// - Left out as in the protobuf: empty attributes, names and strings, zero times and counts,
///   "isMonotonic" when false, unset min/max, empty bucketCounts/explicitBounds, "scopeMetrics"
///   when there are no metrics. An empty resource is {}, an empty scope {}.
/// - AnyValues as append_otlp_json writes them (an empty array is {"arrayValue":{"values":[]}}).
void append_otlp_metrics_json(std::string& out, std::span<const MetricData> metrics,
                              const Resource& resource);

/// Appends one ExportLogsServiceRequest (protobuf): one ResourceLogs, one ScopeLogs per run of
/// consecutive records with the same scope. Invalid UTF-8 is repaired.
///
/// As append_otlp_metrics_proto: field-number order, proto3 defaults left out (what libprotobuf
/// would serialize). ResourceLogs: resource (always), scope_logs (none without records).
/// ScopeLogs: scope (always; name left out when empty, never a version), log_records.
/// LogRecord, each field only when not at its default:
///   time_unix_nano (fixed64, not 0), severity_number (varint, not 0), severity_text (not empty),
///   body (an AnyValue with string_value; left out entirely when `body` is empty), attributes,
///   dropped_attributes_count (not 0), flags (fixed32 = trace_flags, not 0), trace_id and span_id
///   (16 and 8 bytes, each left out when all zero), observed_time_unix_nano (fixed64, not 0).
///   No event_name. Negative times are written as 0 (left out).
void append_otlp_logs_proto(std::string& out, std::span<const LogRecordData> records,
                            const Resource& resource);
/// The same request as OTLP/JSON on one line, without a trailing newline: a key exactly where the
/// protobuf has the field, in the same order (libprotobuf's JSON printing of it, with enums as
/// integers, except that ids are hex):
///   {"resourceLogs":[{"resource":{"attributes":[...]},"scopeLogs":[{"scope":{"name":"nemo.lens"},
///    "logRecords":[{"timeUnixNano":"1","severityNumber":9,"severityText":"INFO",
///    "body":{"stringValue":"..."},"attributes":[...],"droppedAttributesCount":1,"flags":1,
///    "traceId":"<32 hex>","spanId":"<16 hex>","observedTimeUnixNano":"2"}]}]}]}
void append_otlp_logs_json(std::string& out, std::span<const LogRecordData> records,
                           const Resource& resource);

}  // namespace nemo::lens::detail
