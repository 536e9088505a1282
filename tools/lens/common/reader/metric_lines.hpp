// The metrics of one OTLP JSON line, read from its resourceMetrics array as span_lines captured
// it: metric records with their data points, and their resources; likewise its log records from
// its resourceLogs array.
#pragma once

#include <string>

#include "common/reader/otlp_values.hpp"
#include "common/span_reader.hpp"

namespace nemo::lens::cli::reader {

// Reads the metrics of a captured resourceMetrics array into `out`; the error that makes the
// line malformed, empty when valid.
std::string read_metrics(const ojson& resource_metrics, ParsedRequest& out);

// Reads the log records of a captured resourceLogs array into `out` (and their resources),
// skipping records and fields of an unexpected shape.
void read_logs(const ojson& resource_logs, ParsedRequest& out);

}  // namespace nemo::lens::cli::reader
