// One OTLP JSON line read with nlohmann/json's SAX interface straight into span records and
// their resources (ParsedRequest), without building the document: trace requests are read, logs
// requests are recognised and skipped, and a metrics request's resourceMetrics is captured whole
// for metric_lines.
#pragma once

#include <string>
#include <string_view>

#include "common/reader/otlp_values.hpp"
#include "common/span_reader.hpp"

namespace nemo::lens::cli::reader {

// Reads `line` into `out` (ReaderOptions::details: attributes, events, status too); when
// `metrics`, moves the line's resourceMetrics array into `resource_metrics` (null when absent).
// Returns why the line is malformed, empty when it is not.
std::string read_span_line(std::string_view line, ParsedRequest& out, bool details, bool metrics,
                           ojson& resource_metrics);

}  // namespace nemo::lens::cli::reader
