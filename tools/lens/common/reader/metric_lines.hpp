// The metrics of one OTLP JSON line, read from its resourceMetrics array as span_lines captured
// it: metric records with their data points, and their resources.
#pragma once

#include <string>

#include "common/reader/otlp_values.hpp"
#include "common/span_reader.hpp"

namespace nemo::lens::cli::reader {

// Reads the metrics of a captured resourceMetrics array into `out`; the error that makes the
// line malformed, empty when valid.
std::string read_metrics(const ojson& resource_metrics, ParsedRequest& out);

}  // namespace nemo::lens::cli::reader
