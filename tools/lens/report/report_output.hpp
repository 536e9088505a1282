// The two forms `lens report` prints a Report in: aligned text tables, and one JSON object
// (schema in docs/report.md), which the HTML report also embeds.
//
//   std::cout << report_text(report, 20);
//   std::cout << report_json(report, std::nullopt).dump() << '\n';
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "report/report_builder.hpp"

namespace nemo::lens::cli {

/// A duration for people, with four significant digits and a unit: "850ns", "12.30us",
/// "100.0ms", "1.500s", "1234s".
std::string format_duration(double ns);

/// The text report. `top` limits the per-name table to its first rows (0: all).
std::string report_text(const Report& report, std::size_t top);

/// The JSON report. `top` limits the "names" array (nullopt: all); `max_series_points` each
/// metric series' "timeseries" points (0: all; else that many, evenly spaced, first and last
/// kept), which keeps the HTML page of a job of many ranks small.
nlohmann::ordered_json report_json(const Report& report, std::optional<std::size_t> top,
                                   std::size_t max_series_points = 0);

/// `j` on one line; invalid UTF-8 (which the reader never lets through) would become U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace nemo::lens::cli
