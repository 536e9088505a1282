// lens report: where the time went, from OTLP JSON Lines files.
#include <algorithm>
#include <charconv>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "common/input_args.hpp"
#include "common/span_reader.hpp"
#include "report/html_report.hpp"
#include "report/report_builder.hpp"
#include "report/report_output.hpp"

namespace nemo::lens::cli {
namespace {

constexpr std::string_view kHelp =
    R"help(usage: lens report FILE... [--json] [--straggler-threshold PCT] [--top N]
                   [--ranks N|all] [--html OUT.html] [--run RUN_ID]

Reads OTLP JSON Lines (what `lens collect` and the file exporter write; several files, e.g. one
per rank, are read as one job; - is standard input) and prints where the time went, run by run
(nemo.run.id; --run picks one):
  - per span group (nemo.span.group, "(none)" when absent) and span name: count, total, mean,
    p50, p95, max, and the share of the step time spent in those spans (step%: their time
    inside top-level step spans; self%: the same minus their children's time);
  - the step time split by group (self time inside top-level step spans);
  - per rank (dl.rank): count, p50, p95 and max of its top-level step spans (spans of group
    step with no ancestor of group step on that rank);
  - the waits at the collectives: communication spans matched across ranks by step (its
    iteration attribute, else its order), name and order; per rank, how often it arrived last,
    how late it was and what it made the others wait;
  - stragglers: among the ranks that run the same spans, those whose lateness at the
    collectives, median step time or median GPU busy per step is out of line (median and MAD)
    and costs more than PCT percent of the median step; with the group they were slow in;
  - GPU time, when spans carry gpu.* attributes (GPU timing): gpu busy per group and name, its
    share of the step time and its utilisation, and per rank the steps' GPU busy, idle and
    exposed communication time;
  - truncated spans (nemo.span.truncated) and malformed lines, which are skipped;
  - metrics (lines of OTLP metrics, as `lens collect --metrics-out` writes), per metric name and
    rank (dl.rank, else service.instance.id): a sum's last cumulative value (or its deltas
    added up), a gauge's last value, a histogram's count, sum, mean, and p50, p95 and max
    estimated from its buckets; and every series over time (--json: timeseries);
  - log records (lines of OTLP logs), marked on the HTML page's timeline (--json: logs).
Percentiles are exact up to 256 values, then within 1 %. The files are streamed: memory grows
with the number of distinct groups, names, ranks and metric series, not with the number of
spans or points.

options:
  --json                     print one JSON object on one line instead (an array of them, one
                             per run, when the input holds several runs; docs/report.md)
  --straggler-threshold PCT  the least a straggler costs: its excess must be above PCT percent
                             of the median step time (default 5), besides 3.5 MADs
  --top N                    the per-name table keeps the N rows with the most time (default 20
                             for the text and the HTML page, all in --json unless given; 0: all)
  --ranks N|all              the per-rank tables list every rank of a run of at most N ranks,
                             else the spread across ranks and the N furthest out (default 8)
  --html OUT.html            also write a self-contained HTML page: step timeline per rank (a
                             rank x step heat map for many ranks), a chart per metric on its time
                             axis, the step broken down by group, stragglers and the tables
  --run RUN_ID               only the spans and metrics of that run (resource nemo.run.id)
  -h, --help                 show this help and exit

exit status: 0 on success (malformed lines included: they are reported, not fatal), 2 for a bad
command line or a file that cannot be read or written.
)help";

constexpr FlagSpec kFlags[] = {{"--json", false}, {"--straggler-threshold", true},
                               {"--top", true},   {"--ranks", true},
                               {"--html", true},  {"--run", true}};

int run_report(std::span<const std::string_view> args) {
  const InputArgs in = split_input_args(args, kFlags);
  const ParsedFlags flags = parse_flags(in.flag_args, kFlags);
  if (in.files.empty()) throw UsageError("no input FILE given");
  ReportOptions options;
  if (auto t = flags.value("--straggler-threshold")) {
    options.straggler_threshold_pct = non_negative_number(*t, "--straggler-threshold");
  }
  const int top = flags.int_value_or("--top", 20);
  if (top < 0) {
    throw UsageError("invalid value '" + std::to_string(top) + "' for --top: expected N >= 0");
  }
  TextOptions text;
  text.top = static_cast<std::size_t>(top);
  if (auto ranks = flags.value("--ranks")) {
    if (*ranks == "all") {
      text.rank_rows = kAllRanks;
    } else {
      std::size_t n = 0;
      const char* end = ranks->data() + ranks->size();
      const auto [ptr, ec] = std::from_chars(ranks->data(), end, n);
      if (ranks->empty() || ec != std::errc() || ptr != end || n < 1) {
        throw UsageError("invalid value '" + *ranks + "' for --ranks: expected N >= 1 or 'all'");
      }
      text.rank_rows = n;
    }
  }
  const std::optional<std::string> html_path = flags.value("--html");
  options.heatmaps = html_path.has_value();
  if (html_path && html_path->empty()) throw UsageError("--html requires a file name");
  const std::string run = flags.value("--run").value_or("");
  if (flags.has("--run") && run.empty()) throw UsageError("--run requires a run id");

  try {
    std::vector<InputFile> files;  // all opened first: a missing one fails before any work
    files.reserve(in.files.size());
    for (const std::string& path : in.files) files.emplace_back(path);

    SpanLineReader reader({.metrics = true, .logs = true});
    ReportBuilder builder(run);
    for (InputFile& file : files) {
      builder.add_file(file.path());
      reader.read(
          file, [&](const ParsedRequest& request) { builder.add(request); },
          [&](const MalformedLine& line) { builder.add_malformed(line); });
    }
    const std::vector<Report> reports = builder.finish(options, reader.counts());
    if (html_path) {
      // The page embeds the series: at most about kHtmlSeriesPoints points over all of them
      // (but 64 per series), so that a job of many ranks still opens at once.
      constexpr std::size_t kHtmlSeriesPoints = 200000;
      std::size_t series = 0;
      for (const Report& report : reports) {
        for (const MetricRow& m : report.metrics) series += m.timeseries.size();
      }
      JsonOptions page;
      page.top = static_cast<std::size_t>(top);
      page.max_series_points =
          series == 0 ? 0 : std::max<std::size_t>(64, kHtmlSeriesPoints / series);
      page.heatmaps = true;
      page.step_boxes = true;
      write_text_file(*html_path, html_report(runs_json(reports, page)));
    }
    if (flags.has("--json")) {
      JsonOptions json;
      if (flags.has("--top")) json.top = static_cast<std::size_t>(top);
      std::cout << dump_json(runs_json(reports, json)) << '\n';
    } else {
      std::cout << runs_text(reports, text);
    }
    const Report& report = reports.front();
    if (report.input.malformed > 0) {
      std::cout.flush();
      std::cerr << "lens report: skipped " << report.input.malformed << " malformed line"
                << (report.input.malformed == 1 ? "" : "s") << " (listed in the report)\n";
    }
    return 0;
  } catch (const FileError& e) {
    std::cerr << "lens report: " << e.what() << '\n';
    return 2;
  }
}

}  // namespace

const Command& report_command() {
  static constexpr Command kCommand{
      "report", "summarise spans: time per group and name, step time per rank, stragglers", kHelp,
      run_report};
  return kCommand;
}

}  // namespace nemo::lens::cli
