#include "report/report_output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "common/text_table.hpp"

namespace nemo::lens::cli {
namespace {

using ojson = nlohmann::ordered_json;

std::string printf_string(const char* format, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, format, v);
  return buf;
}

// `value` (in the unit) with four significant digits.
std::string four_digits(double value, const char* unit) {
  const char* format = value < 9.9995   ? "%.3f"
                       : value < 99.995 ? "%.2f"
                       : value < 999.95 ? "%.1f"
                                        : "%.0f";
  return printf_string(format, value) + unit;
}

std::string percent(double fraction) { return printf_string("%.1f", fraction * 100) + "%"; }

std::string rank_label(const std::optional<std::int64_t>& rank) {
  return rank ? std::to_string(*rank) : std::string("?");
}

std::string share_text(std::uint64_t ns, std::uint64_t step_total_ns) {
  return step_total_ns == 0 ? std::string("-")
                            : percent(static_cast<double>(ns) / static_cast<double>(step_total_ns));
}

// The report's tables sit two spaces in from its headings.
TextTable indented_table(std::vector<TextTable::Column> columns) {
  return TextTable(std::move(columns), 2);
}

std::string plural(std::uint64_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

std::uint64_t rounded(double ns) { return static_cast<std::uint64_t>(std::llround(ns)); }

double round_to(double v, double scale) { return std::round(v * scale) / scale; }

ojson rank_json(const std::optional<std::int64_t>& rank) {
  return rank ? ojson(*rank) : ojson(nullptr);
}

ojson share_json(std::uint64_t ns, std::uint64_t step_total_ns) {
  if (step_total_ns == 0) return nullptr;
  return round_to(static_cast<double>(ns) / static_cast<double>(step_total_ns), 1e6);
}

// A metric's value for people: integers (up to 10^15) in full, other numbers with six
// significant digits.
std::string metric_number(double v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  if (v == std::floor(v) && std::fabs(v) < 1e15) return printf_string("%.0f", v);
  return printf_string("%.6g", v);
}

std::string metric_number(const std::optional<double>& v) {
  return v ? metric_number(*v) : std::string("-");
}

std::string metric_rank_label(const MetricRow& m) {
  if (m.rank) return std::to_string(*m.rank);
  return m.instance_id.empty() ? std::string("?") : m.instance_id;
}

bool is_distribution(const MetricRow& m) {
  return m.type != MetricType::kGauge && m.type != MetricType::kSum;
}

std::string metrics_text(const std::vector<MetricRow>& metrics) {
  std::string out;
  TextTable values = indented_table({{"metric", false},
                                     {"rank", false},
                                     {"kind", false},
                                     {"unit", false},
                                     {"series", false},
                                     {"value", true}});
  TextTable distributions = indented_table({{"metric", false},
                                            {"rank", false},
                                            {"kind", false},
                                            {"unit", false},
                                            {"count", true},
                                            {"sum", true},
                                            {"mean", true},
                                            {"p50", true},
                                            {"p95", true},
                                            {"max", true}});
  bool have_values = false, have_distributions = false;
  for (const MetricRow& m : metrics) {
    const std::string kind = m.type == MetricType::kSum && m.temporality == "delta"
                                 ? "sum (delta)"
                                 : metric_type_name(m.type);
    if (m.type == MetricType::kGauge && !m.by_series.empty()) {
      // A gauge's series are not added up: one line each.
      have_values = true;
      for (const SeriesValue& v : m.by_series) {
        values.add({m.name, metric_rank_label(m), kind, m.unit, v.attributes,
                    v.is_int ? std::to_string(v.int_value) : metric_number(v.value)});
      }
    } else if (!is_distribution(m)) {
      have_values = true;
      values.add({m.name, metric_rank_label(m), kind, m.unit,
                  m.series > 1 ? std::to_string(m.series) + " series, added" : m.attributes,
                  !m.has_value ? std::string("-")
                  : m.is_int   ? std::to_string(m.int_value)
                               : metric_number(m.value)});
    } else {
      have_distributions = true;
      distributions.add({m.name, metric_rank_label(m), kind, m.unit, std::to_string(m.count),
                         metric_number(m.sum), metric_number(m.mean), metric_number(m.p50),
                         metric_number(m.p95), metric_number(m.max)});
    }
  }
  if (have_values) {
    out +=
        "\nMetrics: sums and gauges (a sum's last cumulative value, or its deltas added up, over "
        "its series; a gauge's last value per series)\n";
    out += values.str();
  }
  if (have_distributions) {
    out +=
        "\nMetrics: histograms (p50, p95 and max estimated from the buckets, explicit or "
        "exponential, when not recorded)\n";
    out += distributions.str();
  }
  return out;
}

ojson optional_json(const std::optional<double>& v) { return v ? ojson(*v) : ojson(nullptr); }

// Up to `max_points` of `points` (0: all), evenly spaced, the first and the last kept.
std::vector<std::size_t> thinned_indices(std::size_t n, std::size_t max_points) {
  std::vector<std::size_t> out;
  if (max_points == 0 || n <= max_points) {
    for (std::size_t i = 0; i < n; ++i) out.push_back(i);
    return out;
  }
  const std::size_t k = std::max<std::size_t>(max_points, 2);
  for (std::size_t i = 0; i < k; ++i) out.push_back(i * (n - 1) / (k - 1));
  return out;
}

// A series over time: [time, value] per point (gauges and sums), [time, count, sum, p50, p95]
// per interval (histograms and summaries).
ojson timeseries_json(const MetricRow& m, std::size_t max_points) {
  ojson out = ojson::array();
  const bool distribution = is_distribution(m);
  for (const TimeSeries& series : m.timeseries) {
    ojson points = ojson::array();
    for (const std::size_t i : thinned_indices(series.points.size(), max_points)) {
      const SeriesPoint& p = series.points[i];
      if (distribution) {
        points.push_back(
            {p.time_ns, p.count, optional_json(p.sum), optional_json(p.p50), optional_json(p.p95)});
      } else {
        points.push_back({p.time_ns, p.is_int ? ojson(p.int_value) : ojson(p.value)});
      }
    }
    out.push_back({{"attributes", series.attributes},
                   {"run_id", series.run_id},
                   {"points", std::move(points)}});
  }
  return out;
}

ojson metrics_json(const std::vector<MetricRow>& metrics, std::size_t max_points) {
  ojson rows = ojson::array();
  for (const MetricRow& m : metrics) {
    ojson row = {{"name", m.name},
                 {"unit", m.unit},
                 {"type", metric_type_name(m.type)},
                 {"rank", rank_json(m.rank)},
                 {"instance_id", m.instance_id},
                 {"temporality", m.temporality.empty() ? ojson(nullptr) : ojson(m.temporality)},
                 {"monotonic", m.monotonic},
                 {"series", m.series},
                 {"points", m.points}};
    if (!is_distribution(m)) {
      row["value"] = !m.has_value ? ojson(nullptr) : m.is_int ? ojson(m.int_value) : ojson(m.value);
    }
    if (m.type == MetricType::kGauge) {
      ojson by_series = ojson::array();
      for (const SeriesValue& v : m.by_series) {
        by_series.push_back({{"attributes", v.attributes},
                             {"value", v.is_int ? ojson(v.int_value) : ojson(v.value)}});
      }
      row["by_series"] = std::move(by_series);
    }
    if (is_distribution(m)) {
      row["count"] = m.count;
      row["sum"] = optional_json(m.sum);
      row["mean"] = optional_json(m.mean);
      row["p50"] = optional_json(m.p50);
      row["p95"] = optional_json(m.p95);
      row["max"] = optional_json(m.max);
    }
    row["timeseries"] = timeseries_json(m, max_points);
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace

std::string format_duration(double ns) {
  if (ns < 999.5) return printf_string("%.0f", ns) + "ns";
  if (ns < 999950) return four_digits(ns / 1e3, "us");
  if (ns < 999950000) return four_digits(ns / 1e6, "ms");
  return four_digits(ns / 1e9, "s");
}

namespace {

// The spans that ran beside the steps, in words per group, then per name.
std::string overlap_text(const Report& r) {
  std::string out =
      "\nBeside the steps (their spans on other threads or processes; exposed: while the step's "
      "own thread was in no span of another group)\n";
  if (r.overlap_groups.empty())
    return out + "  none: every span of the steps ran on their own threads\n";
  auto time_and_share = [&](std::uint64_t ns) {
    return format_duration(static_cast<double>(ns)) + " (" + share_text(ns, r.step_total_ns) + ")";
  };
  for (const OverlapRow& g : r.overlap_groups) {
    out += "  " + escape_control(g.group) + ": " + time_and_share(g.overlapped_ns) +
           " overlapped with the steps, of which " + time_and_share(g.exposed_ns) + " exposed\n";
  }
  TextTable t = indented_table({{"group", false},
                                {"name", false},
                                {"spans", true},
                                {"overlapped", true},
                                {"share", true},
                                {"exposed", true},
                                {"share", true}});
  for (const OverlapRow& n : r.overlap_names) {
    t.add({n.group, n.name, std::to_string(n.spans),
           format_duration(static_cast<double>(n.overlapped_ns)),
           share_text(n.overlapped_ns, r.step_total_ns),
           format_duration(static_cast<double>(n.exposed_ns)),
           share_text(n.exposed_ns, r.step_total_ns)});
  }
  return out + "\n" + t.str();
}

ojson overlap_json(const std::vector<OverlapRow>& rows, const Report& r, bool names) {
  ojson out = ojson::array();
  for (const OverlapRow& o : rows) {
    ojson row = {{"group", o.group}};
    if (names) row["name"] = o.name;
    row["spans"] = o.spans;
    row["overlapped_ns"] = o.overlapped_ns;
    row["exposed_ns"] = o.exposed_ns;
    row["overlapped_share"] = share_json(o.overlapped_ns, r.step_total_ns);
    row["exposed_share"] = share_json(o.exposed_ns, r.step_total_ns);
    out.push_back(std::move(row));
  }
  return out;
}

ojson intervals_json(const std::vector<Interval>& intervals, std::uint64_t origin) {
  ojson out = ojson::array();
  for (const Interval& i : intervals) {
    out.push_back({i.start_ns - origin, i.end_ns - i.start_ns});
  }
  return out;
}

// GPU boxes as [offset, duration, group].
ojson gpu_boxes_json(const std::vector<GpuBox>& boxes, const Report& r) {
  ojson out = ojson::array();
  for (const GpuBox& b : boxes) {
    out.push_back({b.interval.start_ns - r.timeline_origin_ns,
                   b.interval.end_ns - b.interval.start_ns,
                   b.group_id < r.group_names.size() ? r.group_names[b.group_id] : std::string()});
  }
  return out;
}

const char* measure_text(StragglerMeasure m) {
  return m == StragglerMeasure::kGpuBusy ? "gpu busy" : "step time";
}

const char* measure_json(StragglerMeasure m) {
  return m == StragglerMeasure::kGpuBusy ? "gpu_busy" : "step_time";
}

// GPU time per step, per rank and step name (only in a report with GPU times).
std::string gpu_steps_text(const Report& r) {
  if (r.gpu.steps == 0) return "\nGPU time per step: no top-level step span had GPU times\n";
  std::string out =
      "\nGPU time per step (busy: GPU activity of the step and its spans; idle: the rest of the "
      "step, to its last GPU activity; exposed comm: communication on the GPU while no other GPU "
      "work ran)\n";
  TextTable t = indented_table({{"rank", false},
                                {"name", false},
                                {"steps", true},
                                {"busy p50", true},
                                {"busy", true},
                                {"idle", true},
                                {"exposed comm", true},
                                {"", false}});
  for (const RankRow& rank : r.ranks) {
    for (const RankGpuRow& g : rank.gpu_steps) {
      t.add({rank_label(rank.rank), g.name, std::to_string(g.count), format_duration(g.busy_p50_ns),
             format_duration(static_cast<double>(g.busy_ns)),
             format_duration(static_cast<double>(g.idle_ns)),
             format_duration(static_cast<double>(g.exposed_comm_ns)),
             g.straggler ? "straggler" : ""});
    }
  }
  return out + t.str();
}

}  // namespace

std::string report_text(const Report& r, std::size_t top) {
  std::string lines_detail = std::to_string(r.input.malformed) + " malformed";
  if (r.input.metric_lines > 0) {
    lines_detail += ", " + std::to_string(r.input.metric_lines) + " of metrics";
  }
  if (r.input.log_lines > 0) lines_detail += ", " + std::to_string(r.input.log_lines) + " of logs";
  std::string out = "lens report: " + plural(r.files.size(), "file", "files") + ", " +
                    plural(r.input.lines, "line", "lines") + " (" + lines_detail + "), " +
                    plural(r.input.spans, "span", "spans") + ", " +
                    plural(r.ranks.size(), "rank", "ranks") + "\n";
  if (!r.run_ids.empty()) {
    out += (r.run_ids.size() == 1 ? "run: " : "runs: ");
    for (std::size_t i = 0; i < r.run_ids.size(); ++i) {
      out += (i ? ", " : "") + escape_control(r.run_ids[i]);
    }
    out += '\n';
  }

  // Per group and name.
  const std::size_t shown = top == 0 ? r.names.size() : std::min(top, r.names.size());
  out += "\nTime by span group and name";
  if (r.step_total_ns > 0) {
    out += " (share of the " + format_duration(static_cast<double>(r.step_total_ns)) +
           " spent in " + plural(r.step_count, "top-level step span", "top-level step spans") +
           "; step%: within the steps, self%: on the steps' own threads" +
           (r.has_gpu ? "; gpu busy: their GPU busy time added up, gpu%: its share of total" : "") +
           ")";
  } else if (r.has_gpu) {
    out += " (gpu busy: their GPU busy time added up, gpu%: its share of total)";
  }
  out += '\n';
  if (r.names.empty()) {
    out += "  no spans\n";
  } else {
    std::vector<TextTable::Column> columns = {
        {"group", false}, {"name", false}, {"count", true}, {"total", true}, {"mean", true},
        {"p50", true},    {"p95", true},   {"max", true},   {"step%", true}, {"self%", true}};
    if (r.has_gpu) {
      columns.push_back({"gpu busy", true});
      columns.push_back({"gpu%", true});
    }
    TextTable t = indented_table(std::move(columns));
    for (std::size_t i = 0; i < shown; ++i) {
      const NameRow& n = r.names[i];
      std::vector<std::string> cells = {n.group,
                                        n.name,
                                        std::to_string(n.count),
                                        format_duration(static_cast<double>(n.total_ns)),
                                        format_duration(n.mean_ns),
                                        format_duration(n.p50_ns),
                                        format_duration(n.p95_ns),
                                        format_duration(static_cast<double>(n.max_ns)),
                                        share_text(n.in_step_ns, r.step_total_ns),
                                        share_text(n.in_step_self_ns, r.step_total_ns)};
      if (r.has_gpu) {
        cells.push_back(n.gpu_spans == 0 ? "-"
                                         : format_duration(static_cast<double>(n.gpu_busy_ns)));
        cells.push_back(n.gpu_spans == 0 ? "-" : share_text(n.gpu_busy_ns, n.total_ns));
      }
      t.add(std::move(cells));
    }
    out += t.str();
    if (shown < r.names.size()) {
      out += "  (" + std::to_string(shown) + " of " + std::to_string(r.names.size()) +
             " rows; --top 0 shows all)\n";
    }
  }

  // The step, broken down by group.
  if (r.step_total_ns > 0) {
    out += "\nStep time by group (on the steps' own threads: the innermost span at each instant)\n";
    TextTable t = indented_table({{"group", false}, {"self", true}, {"share", true}});
    for (const GroupRow& g : r.groups) {
      if (g.in_step_self_ns == 0) continue;
      t.add({g.group, format_duration(static_cast<double>(g.in_step_self_ns)),
             share_text(g.in_step_self_ns, r.step_total_ns)});
    }
    out += t.str();
    out += overlap_text(r);
  }

  // Per rank.
  out += "\nStep time per rank (top-level spans of group step)\n";
  if (r.step_count == 0) {
    out += "  no spans of group step\n";
  } else {
    TextTable t = indented_table({{"rank", false},
                                  {"name", false},
                                  {"count", true},
                                  {"p50", true},
                                  {"p95", true},
                                  {"max", true},
                                  {"", false}});
    for (const RankRow& rank : r.ranks) {
      if (rank.steps.empty()) {
        t.add({rank_label(rank.rank), "-", "0", "-", "-", "-", ""});
      }
      for (const RankStepRow& s : rank.steps) {
        t.add({rank_label(rank.rank), s.name, std::to_string(s.count), format_duration(s.p50_ns),
               format_duration(s.p95_ns), format_duration(static_cast<double>(s.max_ns)),
               s.straggler ? "straggler" : ""});
      }
    }
    out += t.str();
  }
  if (r.has_gpu) out += gpu_steps_text(r);

  // Stragglers.
  const std::string rule = std::string(r.has_gpu ? "median step time, or median GPU busy per step, "
                                                 : "median step time ") +
                           "more than " + printf_string("%g", r.straggler_threshold_pct) +
                           "% above the median across ranks";
  if (r.stragglers.empty()) {
    out += "\nStragglers (" + rule + "): none\n";
  } else {
    out += "\nStragglers (" + rule + ")\n";
    std::vector<TextTable::Column> columns = {{"rank", false}, {"name", false}};
    if (r.has_gpu) columns.push_back({"measure", false});
    columns.insert(columns.end(), {{"median", true}, {"across ranks", true}, {"excess", true}});
    TextTable t = indented_table(std::move(columns));
    for (const StragglerRow& s : r.stragglers) {
      std::vector<std::string> cells = {rank_label(s.rank), s.name};
      if (r.has_gpu) cells.push_back(measure_text(s.measure));
      cells.insert(cells.end(), {format_duration(s.p50_ns), format_duration(s.median_ns),
                                 "+" + printf_string("%.1f", s.excess_pct) + "%"});
      t.add(std::move(cells));
    }
    out += t.str();
  }

  // Truncated spans.
  if (r.truncated_count == 0) {
    out += "\nTruncated spans: none\n";
  } else {
    out += "\nTruncated spans (" + std::to_string(r.truncated_count) +
           (r.truncated.size() < r.truncated_count
                ? ", the first " + std::to_string(r.truncated.size()) + " listed"
                : std::string()) +
           ")\n";
    TextTable t =
        indented_table({{"rank", false}, {"group", false}, {"name", false}, {"duration", true}});
    for (const TruncatedRow& s : r.truncated) {
      t.add({rank_label(s.rank), s.group, s.name,
             format_duration(static_cast<double>(s.duration_ns))});
    }
    out += t.str();
  }

  out += metrics_text(r.metrics);

  // Malformed lines.
  if (r.input.malformed == 0) {
    out += "\nMalformed lines: none\n";
  } else {
    out += "\nMalformed lines (" + std::to_string(r.input.malformed) + ", skipped" +
           (r.malformed.size() < r.input.malformed
                ? "; the first " + std::to_string(r.malformed.size()) + " listed"
                : std::string()) +
           ")\n";
    for (const MalformedRow& m : r.malformed) {
      out += "  " + escape_control(m.file) + ":" + std::to_string(m.line) + ": " +
             escape_control(m.error) + "\n";
    }
  }
  if (r.ancestry.cycles > 0) {
    out += "\nnote: " + plural(r.ancestry.cycles, "span", "spans") +
           " in a cycle of parent ids (under no root) left out of the step analysis\n";
  }
  return out;
}

ojson report_json(const Report& r, std::optional<std::size_t> top, std::size_t max_series_points) {
  ojson j;
  j["format"] = "lens.report";
  j["version"] = 2;
  j["files"] = r.files;
  j["input"] = {{"lines", r.input.lines},
                {"requests", r.input.requests},
                {"spans", r.input.spans},
                {"metric_lines", r.input.metric_lines},
                {"data_points", r.input.data_points},
                {"log_lines", r.input.log_lines},
                {"malformed_lines", r.input.malformed}};
  j["run_ids"] = r.run_ids;
  j["step"] = {{"group", kStepGroup}, {"count", r.step_count}, {"total_ns", r.step_total_ns}};

  ojson names = ojson::array();
  const std::size_t shown = !top || *top == 0 ? r.names.size() : std::min(*top, r.names.size());
  for (std::size_t i = 0; i < shown; ++i) {
    const NameRow& n = r.names[i];
    names.push_back({{"group", n.group},
                     {"name", n.name},
                     {"count", n.count},
                     {"total_ns", n.total_ns},
                     {"mean_ns", rounded(n.mean_ns)},
                     {"p50_ns", rounded(n.p50_ns)},
                     {"p95_ns", rounded(n.p95_ns)},
                     {"max_ns", n.max_ns},
                     {"in_step_ns", n.in_step_ns},
                     {"in_step_self_ns", n.in_step_self_ns},
                     {"step_share", share_json(n.in_step_ns, r.step_total_ns)},
                     {"self_share", share_json(n.in_step_self_ns, r.step_total_ns)}});
    if (r.has_gpu) {
      ojson& row = names.back();
      row["gpu_spans"] = n.gpu_spans;
      row["gpu_busy_ns"] = n.gpu_spans == 0 ? ojson(nullptr) : ojson(n.gpu_busy_ns);
      row["gpu_kernels"] = n.gpu_spans == 0 ? ojson(nullptr) : ojson(n.gpu_kernels);
    }
  }
  j["names"] = std::move(names);
  j["names_total"] = r.names.size();

  ojson groups = ojson::array();
  for (const GroupRow& g : r.groups) {
    groups.push_back({{"group", g.group},
                      {"count", g.count},
                      {"total_ns", g.total_ns},
                      {"in_step_ns", g.in_step_ns},
                      {"in_step_self_ns", g.in_step_self_ns},
                      {"step_share", share_json(g.in_step_ns, r.step_total_ns)},
                      {"self_share", share_json(g.in_step_self_ns, r.step_total_ns)}});
  }
  j["groups"] = std::move(groups);
  j["overlap"] = {{"groups", overlap_json(r.overlap_groups, r, false)},
                  {"names", overlap_json(r.overlap_names, r, true)}};

  ojson ranks = ojson::array();
  for (const RankRow& rank : r.ranks) {
    ojson steps = ojson::array();
    for (const RankStepRow& s : rank.steps) {
      steps.push_back({{"name", s.name},
                       {"count", s.count},
                       {"total_ns", s.total_ns},
                       {"p50_ns", rounded(s.p50_ns)},
                       {"p95_ns", rounded(s.p95_ns)},
                       {"max_ns", s.max_ns},
                       {"straggler", s.straggler}});
    }
    ojson timeline = ojson::array(), overlapped = ojson::array(), exposed = ojson::array();
    ojson gpu_busy = ojson::array(), gpu_idle = ojson::array(), gpu_exposed = ojson::array(),
          gpu_intervals = ojson::array();
    for (const TimelineStep& s : rank.timeline) {
      timeline.push_back({s.start_ns - r.timeline_origin_ns, s.duration_ns});
      overlapped.push_back(intervals_json(s.overlapped, r.timeline_origin_ns));
      exposed.push_back(intervals_json(s.exposed, r.timeline_origin_ns));
      const TimelineGpu& g = s.gpu;
      gpu_busy.push_back(g.timed ? ojson(g.busy_ns) : ojson(nullptr));
      gpu_idle.push_back(g.timed ? ojson(g.idle_ns) : ojson(nullptr));
      gpu_exposed.push_back(g.timed ? ojson(g.exposed_comm_ns) : ojson(nullptr));
      gpu_intervals.push_back(gpu_boxes_json(g.boxes, r));
    }
    ranks.push_back({{"rank", rank_json(rank.rank)},
                     {"instance_id", rank.instance_id},
                     {"spans", rank.spans},
                     {"steps", std::move(steps)},
                     {"timeline",
                      {{"steps", rank.timeline_steps},
                       {"shown", rank.timeline.size()},
                       {"offset_and_duration_ns", std::move(timeline)},
                       {"overlapped_ns", std::move(overlapped)},
                       {"exposed_ns", std::move(exposed)}}}});
    if (r.has_gpu) {
      ojson gpu_steps = ojson::array();
      for (const RankGpuRow& g : rank.gpu_steps) {
        gpu_steps.push_back({{"name", g.name},
                             {"count", g.count},
                             {"gpu_busy_ns", g.busy_ns},
                             {"gpu_busy_p50_ns", rounded(g.busy_p50_ns)},
                             {"gpu_idle_ns", g.idle_ns},
                             {"gpu_exposed_comm_ns", g.exposed_comm_ns},
                             {"straggler", g.straggler}});
      }
      ojson& row = ranks.back();
      row["gpu_steps"] = std::move(gpu_steps);
      ojson& t = row["timeline"];
      t["gpu_busy_ns"] = std::move(gpu_busy);
      t["gpu_idle_ns"] = std::move(gpu_idle);
      t["gpu_exposed_comm_ns"] = std::move(gpu_exposed);
      t["gpu_intervals_ns"] = std::move(gpu_intervals);
    }
  }
  j["ranks"] = std::move(ranks);
  j["timeline_origin_unix_ns"] = r.timeline_origin_ns;

  ojson step_names = ojson::array();
  for (const StepNameRow& s : r.step_names) {
    step_names.push_back(
        {{"name", s.name}, {"ranks", s.ranks}, {"median_ns", rounded(s.median_ns)}});
  }
  j["step_names"] = std::move(step_names);

  ojson stragglers = ojson::array();
  for (const StragglerRow& s : r.stragglers) {
    stragglers.push_back({{"rank", rank_json(s.rank)},
                          {"name", s.name},
                          {"p50_ns", rounded(s.p50_ns)},
                          {"median_ns", rounded(s.median_ns)},
                          {"excess_pct", round_to(s.excess_pct, 100)}});
    if (r.has_gpu) stragglers.back()["measure"] = measure_json(s.measure);
  }
  j["stragglers"] = {{"threshold_pct", r.straggler_threshold_pct},
                     {"ranks", std::move(stragglers)}};

  ojson truncated = ojson::array();
  for (const TruncatedRow& s : r.truncated) {
    truncated.push_back({{"rank", rank_json(s.rank)},
                         {"group", s.group},
                         {"name", s.name},
                         {"duration_ns", s.duration_ns}});
  }
  j["truncated"] = {{"count", r.truncated_count}, {"spans", std::move(truncated)}};

  ojson malformed = ojson::array();
  for (const MalformedRow& m : r.malformed) {
    malformed.push_back({{"file", m.file}, {"line", m.line}, {"error", m.error}});
  }
  j["malformed"] = {{"count", r.input.malformed}, {"lines", std::move(malformed)}};
  j["ancestry"] = {{"unresolved", r.ancestry.unresolved},
                   {"duplicates", r.ancestry.duplicates},
                   {"cycles", r.ancestry.cycles}};
  j["metrics"] = metrics_json(r.metrics, max_series_points);
  ojson logs = ojson::array();
  for (const LogRow& l : r.logs) {
    logs.push_back({{"rank", rank_json(l.rank)},
                    {"time_unix_nano", l.time_ns},
                    {"severity_number", l.severity_number},
                    {"severity_text", l.severity_text},
                    {"body", l.body}});
  }
  j["logs"] = {{"count", r.log_count}, {"records", std::move(logs)}};
  if (r.has_gpu) {
    j["gpu"] = {{"spans", r.gpu.spans},
                {"steps", r.gpu.steps},
                {"busy_ns", r.gpu.busy_ns},
                {"idle_ns", r.gpu.idle_ns},
                {"exposed_comm_ns", r.gpu.exposed_comm_ns},
                {"communication_group", kCommunicationGroup}};
  }
  return j;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace nemo::lens::cli
