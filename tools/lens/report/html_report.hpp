// The HTML form of `lens report`: one self-contained page (inline CSS, JavaScript and SVG, no
// network, no external fonts) that embeds the JSON report and draws from it a step timeline per
// rank, the step broken down by group, the straggler table and the per-name statistics.
//
//   write_text_file("report.html", html_report(report_json(report, 20)));
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace nemo::lens::cli {

/// The page for the JSON report `data` (report_json()). When its script has run, the page holds
/// `<div id="lens-rendered" data-ranks=N data-stragglers=M ...>` and the <html> element has
/// data-lens-rendered="ok" ("error" and a visible message when rendering failed).
std::string html_report(const nlohmann::ordered_json& data);

/// Writes `text` to `path` (created or truncated). Throws FileError naming the path.
void write_text_file(const std::string& path, std::string_view text);

}  // namespace nemo::lens::cli
