// The two forms `lens report` prints a Report in: aligned text tables, and one JSON object
// (schema in docs/report.md), which the HTML report also embeds.
//
//   std::cout << runs_text(reports, {.top = 20});
//   std::cout << dump_json(runs_json(reports)) << '\n';
#pragma once

#include <cstddef>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "report/report_builder.hpp"

namespace nemo::lens::cli {

/// A duration for people, with four significant digits and a unit: "850ns", "12.30us",
/// "100.0ms", "1.500s", "1234s".
std::string format_duration(double ns);

/// What the text shows.
struct TextOptions {
  std::size_t top = 20;  // the per-name table's rows (0: all)
  /// The per-rank tables list every rank of a run with at most this many; beyond, the min, p50,
  /// p95 and max across the ranks, then this many ranks furthest out, the flagged ones first
  /// (kAllRanks: every rank).
  std::size_t rank_rows = 8;
};
inline constexpr std::size_t kAllRanks = SIZE_MAX;

/// The text report of one run.
std::string report_text(const Report& report, const TextOptions& options = {});

/// The text report of every run: one run's as report_text(); several, a first line naming them,
/// then a section per run, then the input's malformed lines once.
std::string runs_text(const std::vector<Report>& runs, const TextOptions& options = {});

/// What the JSON shows.
struct JsonOptions {
  std::optional<std::size_t> top;  // the "names" array's rows (nullopt or 0: all)
  /// Each metric series' "timeseries" points (0: all; else that many, evenly spaced, first and
  /// last kept), which keeps the HTML page of a job of many ranks small.
  std::size_t max_series_points = 0;
  bool heatmaps = false;  // the rank x step matrices the HTML page draws ("heatmaps")
  /// The spans of the captured steps, which the HTML page draws ("captured.steps[].boxes").
  bool step_boxes = false;
};

/// The JSON report of one run.
nlohmann::ordered_json report_json(const Report& report, const JsonOptions& options = {});

/// One run's JSON object; for several runs, an array of them.
nlohmann::ordered_json runs_json(const std::vector<Report>& runs, const JsonOptions& options = {});

/// `j` on one line; invalid UTF-8 (which the reader never lets through) would become U+FFFD.
std::string dump_json(const nlohmann::ordered_json& j);

}  // namespace nemo::lens::cli
