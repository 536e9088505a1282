// One OTLP JSON line read with nlohmann/json's SAX interface straight into span records and
// their resources (ParsedRequest), without building the document: trace requests are read, and a
// metrics request's resourceMetrics (a logs request's resourceLogs) is captured whole for
// metric_lines, or recognised and skipped.
#pragma once

#include <string>
#include <string_view>

#include "common/reader/otlp_values.hpp"
#include "common/span_reader.hpp"

namespace nemo::lens::cli::reader {

// Reads `line` into `out` (ReaderOptions::details: attributes, events, status too); when
// `metrics`, moves the line's resourceMetrics array into `resource_metrics`, when `logs` its
// resourceLogs array into `resource_logs` (null when absent). Returns why the line is malformed,
// empty when it is not.
std::string read_span_line(std::string_view line, ParsedRequest& out, bool details, bool metrics,
                           bool logs, ojson& resource_metrics, ojson& resource_logs);

}  // namespace nemo::lens::cli::reader
