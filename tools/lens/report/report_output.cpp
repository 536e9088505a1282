#include "report/report_output.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
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

const char* measure_json(StragglerMeasure m) {
  switch (m) {
    case StragglerMeasure::kArrival:
      return "arrival";
    case StragglerMeasure::kStepTime:
      return "step_time";
    case StragglerMeasure::kGpuBusy:
      return "gpu_busy";
  }
  return "";
}

// A duration that may be negative (lateness: a rank that waited more than the median rank).
std::string signed_duration(double ns) {
  return ns < 0 ? "-" + format_duration(-ns) : format_duration(ns);
}

// `part` of `whole` in percent with a sign ("+30.0%"); "" without a whole.
std::string excess_percent(double part, double whole) {
  if (whole <= 0) return "";
  return (part < 0 ? "" : "+") + printf_string("%.1f", part / whole * 100) + "%";
}

double ratio(std::uint64_t part, std::uint64_t whole) {
  return whole == 0 ? 0 : static_cast<double>(part) / static_cast<double>(whole);
}

// The rows of a per-rank table to list: every one when they are at most `limit`; else the `limit`
// furthest out (`distance`, the larger the further), the flagged ones first, and the table opens
// with the spread across all of them (`summarised`).
struct Listing {
  std::vector<std::size_t> rows;
  bool summarised = false;
};

Listing list_rows(std::size_t n, std::size_t limit, const std::function<bool(std::size_t)>& flagged,
                  const std::function<double(std::size_t)>& distance) {
  Listing l;
  for (std::size_t i = 0; i < n; ++i) l.rows.push_back(i);
  if (n <= limit) return l;
  l.summarised = true;
  std::stable_sort(l.rows.begin(), l.rows.end(), [&](std::size_t a, std::size_t b) {
    if (flagged(a) != flagged(b)) return flagged(a);
    return distance(a) > distance(b);
  });
  l.rows.resize(limit);
  return l;
}

// Four rows of a table: the min, p50, p95 and max across ranks of each numeric column
// (`columns[c]`: its values over the ranks, shown with `formats[c]`), after `label_cells` (the
// statistic's name goes in the first cell).
void add_spread(TextTable& t, std::vector<std::string> label_cells,
                std::vector<std::vector<double>> columns,
                const std::vector<std::function<std::string(double)>>& formats,
                std::size_t trailing_cells) {
  for (std::vector<double>& c : columns) std::sort(c.begin(), c.end());
  auto quantile = [](const std::vector<double>& sorted, double q) {
    if (sorted.empty()) return 0.0;
    const double at = q * static_cast<double>(sorted.size() - 1);
    const auto lo = static_cast<std::size_t>(at);
    const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
    return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
  };
  for (const auto& [label, q] : {std::pair{"min", 0.0}, std::pair{"p50", 0.5},
                                 std::pair{"p95", 0.95}, std::pair{"max", 1.0}}) {
    std::vector<std::string> cells = label_cells;
    cells[0] = label;
    for (std::size_t c = 0; c < columns.size(); ++c) {
      cells.push_back(formats[c](quantile(columns[c], q)));
    }
    cells.resize(cells.size() + trailing_cells);
    t.add(std::move(cells));
  }
}

std::string count_text(double v) { return printf_string("%.0f", v); }
std::string duration_text(double v) { return format_duration(v); }

// The heading's note of a table that lists only some ranks.
std::string listing_note(const Listing& l, std::size_t ranks) {
  if (!l.summarised) return "";
  return "; " + std::to_string(ranks) + " ranks: min, p50, p95 and max across them, then the " +
         std::to_string(l.rows.size()) +
         " furthest out, flagged ones first; --ranks all lists every rank";
}

// Step time per rank: every rank of a small job; the spread and the ranks furthest from the
// median of a large one.
std::string rank_steps_text(const Report& r, std::size_t limit) {
  std::string out = "\nStep time per rank (top-level spans of group step";
  if (r.step_count == 0) return out + ")\n  no spans of group step\n";
  std::vector<TextTable::Column> columns = {{"rank", false}, {"name", false}, {"count", true},
                                            {"p50", true},   {"p95", true},   {"max", true},
                                            {"", false}};
  if (r.ranks.size() <= limit) {
    TextTable t = indented_table(columns);
    for (const RankRow& rank : r.ranks) {
      if (rank.steps.empty()) t.add({rank_label(rank.rank), "-", "0", "-", "-", "-", ""});
      for (const RankStepRow& s : rank.steps) {
        t.add({rank_label(rank.rank), s.name, std::to_string(s.count), format_duration(s.p50_ns),
               format_duration(s.p95_ns), format_duration(static_cast<double>(s.max_ns)),
               s.straggler ? "straggler" : ""});
      }
    }
    return out + ")\n" + t.str();
  }
  std::string tables;
  std::string note;
  for (const StepNameRow& name : r.step_names) {
    std::vector<std::pair<const RankRow*, const RankStepRow*>> rows;
    for (const RankRow& rank : r.ranks) {
      for (const RankStepRow& s : rank.steps) {
        if (s.name == name.name) rows.push_back({&rank, &s});
      }
    }
    const Listing l = list_rows(
        rows.size(), limit, [&](std::size_t i) { return rows[i].second->straggler; },
        [&](std::size_t i) { return std::fabs(rows[i].second->p50_ns - name.median_ns); });
    TextTable t = indented_table(columns);
    if (l.summarised) {
      std::vector<std::vector<double>> values(4);
      for (const auto& [rank, s] : rows) {
        values[0].push_back(static_cast<double>(s->count));
        values[1].push_back(s->p50_ns);
        values[2].push_back(s->p95_ns);
        values[3].push_back(static_cast<double>(s->max_ns));
      }
      add_spread(t, {"", name.name}, std::move(values),
                 {count_text, duration_text, duration_text, duration_text}, 1);
      note = listing_note(l, rows.size());
    }
    for (const std::size_t i : l.rows) {
      const RankStepRow& s = *rows[i].second;
      t.add({rank_label(rows[i].first->rank), s.name, std::to_string(s.count),
             format_duration(s.p50_ns), format_duration(s.p95_ns),
             format_duration(static_cast<double>(s.max_ns)), s.straggler ? "straggler" : ""});
    }
    tables += t.str();
  }
  return out + note + ")\n" + tables;
}

// GPU time per step, per rank and step name (only in a report with GPU times).
std::string gpu_steps_text(const Report& r, std::size_t limit) {
  if (r.gpu.steps == 0) return "\nGPU time per step: no top-level step span had GPU times\n";
  std::string out =
      "\nGPU time per step (busy: GPU activity of the step and its spans; idle: the rest of the "
      "step, to its last GPU activity; exposed comm: communication on the GPU while no other GPU "
      "work ran";
  std::vector<std::pair<const RankRow*, const RankGpuRow*>> rows;
  for (const RankRow& rank : r.ranks) {
    for (const RankGpuRow& g : rank.gpu_steps) rows.push_back({&rank, &g});
  }
  TextTable t = indented_table({{"rank", false},
                                {"name", false},
                                {"steps", true},
                                {"busy p50", true},
                                {"busy", true},
                                {"idle", true},
                                {"exposed comm", true},
                                {"", false}});
  auto add = [&](const RankRow& rank, const RankGpuRow& g) {
    t.add({rank_label(rank.rank), g.name, std::to_string(g.count), format_duration(g.busy_p50_ns),
           format_duration(static_cast<double>(g.busy_ns)),
           format_duration(static_cast<double>(g.idle_ns)),
           format_duration(static_cast<double>(g.exposed_comm_ns)),
           g.straggler ? "straggler" : ""});
  };
  if (rows.size() <= limit) {
    for (const auto& [rank, g] : rows) add(*rank, *g);
    return out + ")\n" + t.str();
  }
  std::vector<double> busy;
  for (const auto& [rank, g] : rows) busy.push_back(g->busy_p50_ns);
  const double median = median_of(busy);
  const Listing l = list_rows(
      rows.size(), limit, [&](std::size_t i) { return rows[i].second->straggler; },
      [&](std::size_t i) { return std::fabs(rows[i].second->busy_p50_ns - median); });
  std::vector<std::vector<double>> values(5);
  for (const auto& [rank, g] : rows) {
    values[0].push_back(static_cast<double>(g->count));
    values[1].push_back(g->busy_p50_ns);
    values[2].push_back(static_cast<double>(g->busy_ns));
    values[3].push_back(static_cast<double>(g->idle_ns));
    values[4].push_back(static_cast<double>(g->exposed_comm_ns));
  }
  add_spread(t, {"", rows.front().second->name}, std::move(values),
             {count_text, duration_text, duration_text, duration_text, duration_text}, 1);
  for (const std::size_t i : l.rows) add(*rows[i].first, *rows[i].second);
  return out + listing_note(l, rows.size()) + ")\n" + t.str();
}

// The collectives matched across ranks: per rank, how late it arrived, how long it waited and
// what it made the others wait.
std::string waits_text(const Report& r, std::size_t limit) {
  bool any = false;
  for (const StepNameFindings& f : r.findings) any = any || f.matched_collectives > 0;
  if (!any) return "";
  std::string out =
      "\nWaits at the collectives (communication spans matched across ranks by step, name and "
      "order; last: collectives it arrived last into; late: how much less than the median rank "
      "it waited, per step; waited: its own wait per step; caused: what each other rank waited "
      "for it per step, and the share of their step time";
  std::string tables;
  std::string note;
  for (const StepNameFindings& f : r.findings) {
    if (f.matched_collectives == 0) continue;
    tables += "  " + escape_control(f.name) + ": " + std::to_string(f.matched_collectives) +
              " collectives matched by " + (f.by_iteration ? "iteration" : "order of the steps");
    if (f.roles.size() > 1) {
      tables += "; " + std::to_string(f.roles.size()) +
                " roles (ranks that run other spans), each compared within itself";
    }
    tables += "\n";
    std::vector<const RankFigures*> rows;
    for (const RankFigures& x : f.ranks) {
      if (x.matched_steps > 0) rows.push_back(&x);
    }
    const Listing l = list_rows(
        rows.size(), limit, [&](std::size_t i) { return rows[i]->straggler(); },
        [&](std::size_t i) { return rows[i]->late_ns; });
    std::vector<TextTable::Column> columns = {{"rank", false}, {"name", false}};
    if (f.roles.size() > 1) columns.push_back({"role", true});
    for (const char* c : {"steps", "last", "late", "waited", "share", "caused", "share"}) {
      columns.push_back({c, true});
    }
    columns.push_back({"", false});
    TextTable t = indented_table(columns);
    if (l.summarised) {
      std::vector<std::vector<double>> values(7);
      for (const RankFigures* x : rows) {
        values[0].push_back(static_cast<double>(x->matched_steps));
        values[1].push_back(static_cast<double>(x->last_count));
        values[2].push_back(x->late_ns);
        values[3].push_back(static_cast<double>(x->waited_ns) / x->matched_steps);
        values[4].push_back(ratio(x->waited_ns, x->matched_step_ns));
        values[5].push_back(x->caused_waits == 0 ? 0.0
                                                 : static_cast<double>(x->caused_ns) /
                                                       static_cast<double>(x->caused_waits));
        values[6].push_back(ratio(x->caused_ns, x->others_step_ns));
      }
      std::vector<std::string> labels = {"", f.name};
      if (f.roles.size() > 1) labels.push_back("");
      add_spread(
          t, labels, std::move(values),
          {count_text, count_text, signed_duration, duration_text, percent, duration_text, percent},
          1);
      note = listing_note(l, rows.size());
    }
    for (const std::size_t i : l.rows) {
      const RankFigures& x = *rows[i];
      std::vector<std::string> cells = {rank_label(x.rank), f.name};
      if (f.roles.size() > 1) cells.push_back(std::to_string(x.role + 1));
      const double caused =
          x.caused_waits == 0 ? 0.0 : static_cast<double>(x.caused_ns) / x.caused_waits;
      cells.insert(
          cells.end(),
          {std::to_string(x.matched_steps),
           std::to_string(x.last_count) + "/" + std::to_string(x.collectives),
           signed_duration(x.late_ns),
           format_duration(static_cast<double>(x.waited_ns) / x.matched_steps),
           percent(ratio(x.waited_ns, x.matched_step_ns)), format_duration(caused),
           percent(ratio(x.caused_ns, x.others_step_ns)), x.straggler() ? "straggler" : ""});
      t.add(std::move(cells));
    }
    tables += t.str();
  }
  return out + note + ")\n" + tables;
}

// One flagged rank in words: what flagged it, where its time went instead, and what it cost.
std::string straggler_text(const StragglerRow& s, bool gpu) {
  const RankFigures& x = s.figures;
  const RoleFindings& role = s.role;
  std::vector<std::string> parts;
  auto has = [&](StragglerMeasure m) {
    return std::find(x.flagged_by.begin(), x.flagged_by.end(), m) != x.flagged_by.end();
  };
  if (has(StragglerMeasure::kArrival)) {
    parts.push_back(format_duration(x.late_ns) + " late per step at the collectives");
  }
  if (has(StragglerMeasure::kStepTime)) {
    parts.push_back("median step " + format_duration(x.step_p50_ns) + ", " +
                    excess_percent(x.step_p50_ns - role.median_step_ns, role.median_step_ns) +
                    " over the median rank's " + format_duration(role.median_step_ns));
  }
  if (has(StragglerMeasure::kGpuBusy)) {
    parts.push_back(
        "median GPU busy per step " + format_duration(x.gpu_busy_p50_ns) + ", " +
        excess_percent(x.gpu_busy_p50_ns - role.median_gpu_busy_ns, role.median_gpu_busy_ns) +
        " over the median rank's " + format_duration(role.median_gpu_busy_ns));
  }
  // Where its time went instead: the groups it spent most above the median rank in (not the
  // communication group: that is where the others wait).
  auto slower = [&](const std::vector<GroupPerStep>& groups, const char* what) {
    std::vector<std::string> out;
    const GroupPerStep* first = nullptr;
    for (const GroupPerStep& g : groups) {
      const double excess = g.ns - g.median_ns;
      if (g.group == kCommunicationGroup || excess <= 0) continue;
      if (first != nullptr && excess * 3 < first->ns - first->median_ns) break;
      if (first == nullptr) first = &g;
      std::string text = escape_control(g.group) + " +" + format_duration(excess) + " per step";
      if (g.median_ns > 0) text += " (" + excess_percent(excess, g.median_ns) + ")";
      out.push_back(std::move(text));
      if (out.size() == 2) break;
    }
    if (out.empty()) return;
    std::string joined;
    for (const std::string& o : out) joined += (joined.empty() ? "" : ", ") + o;
    parts.push_back(what + joined + " over the median rank");
  };
  slower(x.groups, "");
  if (gpu) slower(x.gpu_groups, "GPU busy: ");
  if (!x.last_into.empty() && x.last_into.front().last > 0) {
    const LastInto& l = x.last_into.front();
    parts.push_back("last into " + escape_control(l.name) + " in " + std::to_string(l.last) +
                    " of " + std::to_string(l.of));
  }
  if (x.caused_ns > 0) {
    const std::uint64_t others = role.ranks - 1;
    parts.push_back(
        "the other " + plural(others, "rank", "ranks") + " waited " +
        format_duration(static_cast<double>(x.caused_ns) / static_cast<double>(x.caused_waits)) +
        " per step for it, " + percent(ratio(x.caused_ns, x.others_step_ns)) +
        " of their step time");
  }
  std::string out = "  rank " + rank_label(x.rank) + ", " + escape_control(s.name) + " (" +
                    plural(role.ranks, "rank", "ranks") + " compared): ";
  for (std::size_t i = 0; i < parts.size(); ++i) out += (i ? "; " : "") + parts[i];
  return out + "\n";
}

std::string stragglers_text(const Report& r, std::size_t limit) {
  const std::string rule =
      "compared within the ranks that run the same spans: lateness at the "
      "collectives, median step time" +
      std::string(r.has_gpu ? " or median GPU busy per step" : "") + " more than " +
      printf_string("%g", kStragglerMads) + " MADs, as many standard errors of its excess and " +
      printf_string("%g", r.straggler_threshold_pct) + "% of the median step above the median rank";
  if (r.stragglers.empty()) return "\nStragglers (" + rule + "): none\n";
  std::string out = "\nStragglers (" + rule + ")\n";
  const std::size_t shown = std::min(limit, r.stragglers.size());
  for (std::size_t i = 0; i < shown; ++i) out += straggler_text(r.stragglers[i], r.has_gpu);
  if (shown < r.stragglers.size()) {
    out += "  and " + std::to_string(r.stragglers.size() - shown) +
           " more (--ranks all lists every one)\n";
  }
  return out;
}

// A step's duration against its rank's median step: "33.0x" ("-" without a median).
std::string times_median(const CapturedStepRow& c) {
  return c.median_ns > 0 ? printf_string("%.1fx", static_cast<double>(c.duration_ns) / c.median_ns)
                         : std::string("-");
}

std::string joined(const std::vector<std::string>& parts, const char* separator) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : separator) + p;
  return out;
}

// The rows of report.captured.steps, one range per step (name and iteration; a step without an
// iteration alone).
std::vector<std::pair<std::size_t, std::size_t>> captured_groups(const CapturedSummary& c) {
  std::vector<std::pair<std::size_t, std::size_t>> out;
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    const CapturedStepRow& x = c.steps[i];
    if (!out.empty()) {
      const CapturedStepRow& first = c.steps[out.back().first];
      if (x.iteration && first.iteration == x.iteration && first.name == x.name) {
        out.back().second = i + 1;
        continue;
      }
    }
    out.push_back({i, i + 1});
  }
  return out;
}

// The steps the flight recorder captured detail of: per step, its ranks (the least time in
// communication first: the one the others waited for), then where the first one's time went.
std::string captured_text(const Report& r, const TextOptions& options) {
  const CapturedSummary& c = r.captured;
  if (c.spans == 0) return "";
  std::vector<std::string> reasons;
  for (const auto& [reason, n] : c.by_reason) reasons.push_back(reason + " " + std::to_string(n));
  std::string out =
      "\nCaptured steps (the flight recorder's detail, exported only for these steps; " +
      plural(c.spans, "captured span", "captured spans") + ": " +
      escape_control(joined(reasons, ", ")) + ")\n";
  if (c.outside_steps > 0) {
    out += "  " + plural(c.outside_steps, "captured span is", "captured spans are") +
           " in no top-level step\n";
  }
  const auto groups = captured_groups(c);
  const std::size_t shown = options.top == 0 ? groups.size() : std::min(options.top, groups.size());
  const std::size_t name_rows = options.top == 0 ? SIZE_MAX : 10;
  for (std::size_t g = 0; g < shown; ++g) {
    const auto [begin, end] = groups[g];
    const CapturedStepRow& lead = c.steps[begin];
    std::uint64_t lo = UINT64_MAX, hi = 0;
    std::vector<std::string> step_reasons;
    for (std::size_t i = begin; i < end; ++i) {
      lo = std::min(lo, c.steps[i].duration_ns);
      hi = std::max(hi, c.steps[i].duration_ns);
      step_reasons.insert(step_reasons.end(), c.steps[i].reasons.begin(), c.steps[i].reasons.end());
    }
    std::sort(step_reasons.begin(), step_reasons.end());
    step_reasons.erase(std::unique(step_reasons.begin(), step_reasons.end()), step_reasons.end());
    out += "  " + escape_control(lead.name) +
           (lead.iteration ? " iteration " + std::to_string(*lead.iteration) : std::string()) +
           ": " +
           (end - begin == 1 ? "rank " + rank_label(lead.rank)
                             : plural(end - begin, "rank", "ranks")) +
           " (" + escape_control(joined(step_reasons, ", ")) + "), " +
           (lo == hi ? format_duration(static_cast<double>(lo))
                     : format_duration(static_cast<double>(lo)) + " to " +
                           format_duration(static_cast<double>(hi))) +
           "\n";
    TextTable t({{"rank", false},
                 {"reason", false},
                 {"step", true},
                 {"median", true},
                 {"x median", true},
                 {"spans", true},
                 {"captured", true},
                 {"communication", true},
                 {"most own time", false}},
                4);
    const std::size_t rows = std::min(end - begin, options.rank_rows);
    for (std::size_t i = begin; i < begin + rows; ++i) {
      const CapturedStepRow& x = c.steps[i];
      const CapturedTime* most = x.names.empty() ? nullptr : &x.names.front();
      t.add({rank_label(x.rank), joined(x.reasons, ","),
             format_duration(static_cast<double>(x.duration_ns)),
             x.median_ns > 0 ? format_duration(x.median_ns) : "-", times_median(x),
             std::to_string(x.spans), std::to_string(x.captured_spans),
             format_duration(static_cast<double>(x.communication_ns)),
             most != nullptr ? most->name + " " + format_duration(static_cast<double>(most->own_ns))
                             : "-"});
    }
    out += t.str();
    if (rows < end - begin) {
      out += "    (" + std::to_string(rows) + " of " + std::to_string(end - begin) +
             " ranks, the least time in communication first; --ranks all lists every one)\n";
    }
    // Where the lead rank's step went.
    out += "    where rank " + rank_label(lead.rank) + "'s step went" +
           (end - begin > 1 ? " (the least in communication: the others waited for it)"
                            : std::string()) +
           ": own, the innermost span on the step's thread (adds up to the step); within, the "
           "union of the spans; longest, the longest span\n";
    TextTable groups_table(
        {{"group", false}, {"spans", true}, {"own", true}, {"share", true}, {"within", true}}, 6);
    for (const CapturedTime& x : lead.groups) {
      groups_table.add({x.group, std::to_string(x.spans),
                        format_duration(static_cast<double>(x.own_ns)),
                        share_text(x.own_ns, lead.duration_ns),
                        format_duration(static_cast<double>(x.within_ns))});
    }
    out += groups_table.str();
    TextTable names_table({{"group", false},
                           {"name", false},
                           {"spans", true},
                           {"own", true},
                           {"share", true},
                           {"within", true},
                           {"longest", true}},
                          6);
    const std::size_t names_shown = std::min(name_rows, lead.names.size());
    for (std::size_t i = 0; i < names_shown; ++i) {
      const CapturedTime& x = lead.names[i];
      names_table.add({x.group, x.name, std::to_string(x.spans),
                       format_duration(static_cast<double>(x.own_ns)),
                       share_text(x.own_ns, lead.duration_ns),
                       format_duration(static_cast<double>(x.within_ns)),
                       format_duration(static_cast<double>(x.longest_ns))});
    }
    out += names_table.str();
    if (names_shown < lead.names.size()) {
      out += "      (" + std::to_string(names_shown) + " of " + std::to_string(lead.names.size()) +
             " names; --top 0 shows all)\n";
    }
  }
  if (shown < groups.size()) {
    out += "  and " + std::to_string(groups.size() - shown) +
           " more captured steps (--top 0 or --json lists every one)\n";
  }
  if (c.steps_total > c.steps.size()) {
    out += "  (" + std::to_string(c.steps.size()) + " of " + std::to_string(c.steps_total) +
           " captured steps kept, the longest)\n";
  }
  return out;
}

// The first line of a report: the input and this run.
std::string input_line(const Report& r, std::uint64_t spans, std::size_t ranks) {
  std::string lines_detail = std::to_string(r.input.malformed) + " malformed";
  if (r.input.metric_lines > 0) {
    lines_detail += ", " + std::to_string(r.input.metric_lines) + " of metrics";
  }
  if (r.input.log_lines > 0) lines_detail += ", " + std::to_string(r.input.log_lines) + " of logs";
  return "lens report: " + plural(r.files.size(), "file", "files") + ", " +
         plural(r.input.lines, "line", "lines") + " (" + lines_detail + "), " +
         plural(spans, "span", "spans") + ", " + plural(ranks, "rank", "ranks");
}

// One run's tables, from the name table to the metrics.
std::string report_body(const Report& r, const TextOptions& options) {
  std::string out;
  // Per group and name.
  const std::size_t top = options.top;
  const std::size_t shown = top == 0 ? r.names.size() : std::min(top, r.names.size());
  const char* gpu_note =
      "gpu busy: their GPU busy time added up, gpu step%: the part within the steps as a share "
      "of the step time, gpu util: busy within their GPU intervals";
  out += "\nTime by span group and name";
  if (r.step_total_ns > 0) {
    out += " (share of the " + format_duration(static_cast<double>(r.step_total_ns)) +
           " spent in " + plural(r.step_count, "top-level step span", "top-level step spans") +
           "; step%: within the steps, self%: on the steps' own threads" +
           (r.has_gpu ? std::string("; ") + gpu_note : std::string()) + ")";
  } else if (r.has_gpu) {
    out += std::string(" (") + gpu_note + ")";
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
      columns.push_back({"gpu step%", true});
      columns.push_back({"gpu util", true});
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
        const bool timed = n.gpu_spans > 0;
        cells.push_back(timed ? format_duration(static_cast<double>(n.gpu_busy_ns)) : "-");
        cells.push_back(timed ? share_text(n.gpu_in_step_ns, r.step_total_ns) : "-");
        cells.push_back(timed && n.gpu_interval_ns > 0
                            ? percent(ratio(n.gpu_interval_busy_ns, n.gpu_interval_ns))
                            : "-");
      }
      t.add(std::move(cells));
    }
    out += t.str();
    if (shown < r.names.size()) {
      out += "  (" + std::to_string(shown) + " of " + std::to_string(r.names.size()) +
             " rows; --top 0 shows all)\n";
    }
    if (r.captured.spans > 0) {
      out += "  (with the " + plural(r.captured.spans, "span", "spans") +
             " the flight recorder captured, which only the captured steps have: see Captured "
             "steps)\n";
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

  out += rank_steps_text(r, options.rank_rows);
  if (r.has_gpu) out += gpu_steps_text(r, options.rank_rows);
  out += waits_text(r, options.rank_rows);
  out += stragglers_text(r, options.rank_rows);
  out += captured_text(r, options);

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
  return out;
}

// What follows every run: the malformed lines of the input.
std::string malformed_text(const Report& r) {
  if (r.input.malformed == 0) return "\nMalformed lines: none\n";
  std::string out = "\nMalformed lines (" + std::to_string(r.input.malformed) + ", skipped" +
                    (r.malformed.size() < r.input.malformed
                         ? "; the first " + std::to_string(r.malformed.size()) + " listed"
                         : std::string()) +
                    ")\n";
  for (const MalformedRow& m : r.malformed) {
    out += "  " + escape_control(m.file) + ":" + std::to_string(m.line) + ": " +
           escape_control(m.error) + "\n";
  }
  return out;
}

std::string cycles_note(const Report& r) {
  if (r.ancestry.cycles == 0) return "";
  return "\nnote: " + plural(r.ancestry.cycles, "span", "spans") +
         " in a cycle of parent ids (under no root) left out of the step analysis\n";
}

std::string run_label(const Report& r) {
  return r.run_ids.empty() ? std::string("(no nemo.run.id)") : escape_control(r.run_ids.front());
}

ojson group_times_json(const std::vector<GroupPerStep>& groups) {
  ojson out = ojson::array();
  for (const GroupPerStep& g : groups) {
    out.push_back({{"group", g.group},
                   {"ns_per_step", rounded(g.ns)},
                   {"median_ns_per_step", rounded(g.median_ns)},
                   {"excess_ns_per_step", std::llround(g.ns - g.median_ns)}});
  }
  return out;
}

// A rank's median GPU busy per step and its standard error (null without GPU times).
void gpu_busy_fields(ojson& row, const RankFigures& x) {
  row["gpu_busy_p50_ns"] = x.gpu_steps ? ojson(rounded(x.gpu_busy_p50_ns)) : ojson(nullptr);
  row["gpu_busy_p50_se_ns"] = x.gpu_steps ? ojson(rounded(x.gpu_busy_p50_se_ns)) : ojson(nullptr);
}

// A rank's figures at the collectives (the fields of a straggler and of `collectives.ranks`).
void wait_fields(ojson& row, const RankFigures& x) {
  row["matched_steps"] = x.matched_steps;
  row["collectives"] = x.collectives;
  row["last_count"] = x.last_count;
  ojson last = ojson::array();
  for (const LastInto& l : x.last_into) {
    last.push_back({{"name", l.name}, {"last", l.last}, {"of", l.of}});
  }
  row["last_into"] = std::move(last);
  row["late_ns"] = std::llround(x.late_ns);
  row["late_se_ns"] = std::llround(x.late_se_ns);
  row["waited_ns"] = x.waited_ns;
  row["waited_share"] = round_to(ratio(x.waited_ns, x.matched_step_ns), 1e6);
  row["wait_caused_ns"] = x.caused_ns;
  row["wait_caused_per_step_ns"] =
      x.caused_waits == 0 ? 0 : rounded(static_cast<double>(x.caused_ns) / x.caused_waits);
  row["wait_caused_share"] = round_to(ratio(x.caused_ns, x.others_step_ns), 1e6);
}

ojson findings_json(const Report& r) {
  ojson out = ojson::array();
  for (const StepNameFindings& f : r.findings) {
    ojson roles = ojson::array();
    for (const RoleFindings& role : f.roles) {
      roles.push_back({{"ranks", role.ranks},
                       {"names", role.names},
                       {"median_step_ns", rounded(role.median_step_ns)},
                       {"median_late_ns", std::llround(role.median_late_ns)},
                       {"floor_ns", rounded(role.floor_ns)}});
      if (r.has_gpu) roles.back()["median_gpu_busy_ns"] = rounded(role.median_gpu_busy_ns);
    }
    ojson ranks = ojson::array();
    for (const RankFigures& x : f.ranks) {
      ojson row = {{"rank", rank_json(x.rank)},
                   {"role", x.role},
                   {"steps", x.steps},
                   {"step_p50_ns", rounded(x.step_p50_ns)},
                   {"step_p50_se_ns", rounded(x.step_p50_se_ns)}};
      if (r.has_gpu) gpu_busy_fields(row, x);
      wait_fields(row, x);
      row["straggler"] = x.straggler();
      ranks.push_back(std::move(row));
    }
    out.push_back({{"name", f.name},
                   {"matched_by", f.by_iteration ? "iteration" : "order"},
                   {"matched_collectives", f.matched_collectives},
                   {"roles", std::move(roles)},
                   {"ranks", std::move(ranks)}});
  }
  return out;
}

ojson stragglers_json(const Report& r) {
  ojson out = ojson::array();
  for (const StragglerRow& s : r.stragglers) {
    const RankFigures& x = s.figures;
    ojson flagged = ojson::array();
    for (const StragglerMeasure m : x.flagged_by) flagged.push_back(measure_json(m));
    ojson row = {{"rank", rank_json(x.rank)},
                 {"name", s.name},
                 {"flagged_by", std::move(flagged)},
                 {"ranks_compared", s.role.ranks},
                 {"steps", x.steps},
                 {"step_p50_ns", rounded(x.step_p50_ns)},
                 {"step_p50_se_ns", rounded(x.step_p50_se_ns)},
                 {"median_step_ns", rounded(s.role.median_step_ns)},
                 {"median_late_ns", std::llround(s.role.median_late_ns)}};
    if (r.has_gpu) {
      gpu_busy_fields(row, x);
      row["median_gpu_busy_ns"] = rounded(s.role.median_gpu_busy_ns);
    }
    wait_fields(row, x);
    row["groups"] = group_times_json(x.groups);
    if (r.has_gpu) row["gpu_groups"] = group_times_json(x.gpu_groups);
    out.push_back(std::move(row));
  }
  return out;
}

// A heat map's cells in whole microseconds (null where a rank had no step).
ojson cells_json(const std::vector<std::vector<std::optional<double>>>& rows) {
  ojson out = ojson::array();
  for (const auto& row : rows) {
    ojson cells = ojson::array();
    for (const auto& v : row) cells.push_back(v ? ojson(std::llround(*v / 1000)) : ojson(nullptr));
    out.push_back(std::move(cells));
  }
  return out;
}

ojson heatmaps_json(const Report& r) {
  ojson out = ojson::array();
  for (const StepNameFindings& f : r.findings) {
    const Heatmap& h = f.heatmap;
    ojson ranks = ojson::array();
    for (const auto& rank : h.ranks) ranks.push_back(rank_json(rank));
    out.push_back({{"name", f.name},
                   {"ranks", std::move(ranks)},
                   {"steps", h.steps},
                   {"steps_per_column", h.per_column},
                   {"step_us", cells_json(h.step_ns)},
                   {"late_us", h.late_ns.empty() ? ojson(nullptr) : cells_json(h.late_ns)}});
  }
  return out;
}

}  // namespace

std::string report_text(const Report& r, const TextOptions& options) {
  std::string out = input_line(r, r.input.spans, r.ranks.size()) + "\n";
  if (!r.run_ids.empty()) out += "run: " + escape_control(r.run_ids.front()) + "\n";
  return out + report_body(r, options) + malformed_text(r) + cycles_note(r);
}

std::string runs_text(const std::vector<Report>& runs, const TextOptions& options) {
  if (runs.size() == 1) return report_text(runs.front(), options);
  std::size_t ranks = 0;
  for (const Report& r : runs) ranks += r.ranks.size();
  std::string out = input_line(runs.front(), runs.front().input.spans, ranks) + ", " +
                    std::to_string(runs.size()) + " runs, reported one by one (--run RUN_ID: one):";
  for (const Report& r : runs) out += " " + run_label(r);
  out += "\n";
  for (const Report& r : runs) {
    out += "\n=== run " + run_label(r) + ": " + plural(r.spans, "span", "spans") + ", " +
           plural(r.ranks.size(), "rank", "ranks") + "\n";
    out += report_body(r, options) + cycles_note(r);
  }
  return out + malformed_text(runs.front());
}

// The flight recorder's captured steps (docs/report.md#captured-steps).
ojson captured_json(const Report& r, bool boxes) {
  const CapturedSummary& c = r.captured;
  ojson by_reason = ojson::object();
  for (const auto& [reason, n] : c.by_reason) by_reason[reason] = n;
  auto times = [](const std::vector<CapturedTime>& rows, bool names) {
    ojson out = ojson::array();
    for (const CapturedTime& t : rows) {
      ojson row = {{"group", t.group}};
      if (names) row["name"] = t.name;
      row["spans"] = t.spans;
      row["own_ns"] = t.own_ns;
      row["within_ns"] = t.within_ns;
      if (names) row["longest_ns"] = t.longest_ns;
      out.push_back(std::move(row));
    }
    return out;
  };
  // The page draws the spans of the first kBoxSteps steps' first kBoxRanks ranks (the ones that
  // held the others back lead): a bounded page whatever the job's size.
  constexpr std::size_t kBoxSteps = 20, kBoxRanks = 4;
  std::vector<bool> drawn(c.steps.size(), false);
  const auto groups = captured_groups(c);
  for (std::size_t g = 0; g < std::min(groups.size(), kBoxSteps); ++g) {
    for (std::size_t i = groups[g].first;
         i < std::min(groups[g].second, groups[g].first + kBoxRanks); ++i) {
      drawn[i] = true;
    }
  }
  ojson steps = ojson::array();
  for (std::size_t i = 0; i < c.steps.size(); ++i) {
    const CapturedStepRow& x = c.steps[i];
    ojson step = {{"rank", rank_json(x.rank)},
                  {"name", x.name},
                  {"iteration", x.iteration ? ojson(*x.iteration) : ojson(nullptr)},
                  {"start_unix_ns", x.start_ns},
                  {"duration_ns", x.duration_ns},
                  {"median_ns", std::llround(x.median_ns)},
                  {"reasons", x.reasons},
                  {"capture_ids", x.capture_ids},
                  {"spans", x.spans},
                  {"captured_spans", x.captured_spans},
                  {"communication_ns", x.communication_ns},
                  {"groups", times(x.groups, false)},
                  {"names", times(x.names, true)}};
    if (boxes && drawn[i]) {
      // [offset from the step's start, duration, depth, index into "box_names", captured 0/1]
      ojson list = ojson::array();
      for (const StepBox& b : x.boxes) {
        list.push_back({b.interval.start_ns - x.start_ns, b.interval.end_ns - b.interval.start_ns,
                        b.depth, b.name_id, b.captured ? 1 : 0});
      }
      step["boxes"] = std::move(list);
      step["boxes_dropped"] = x.boxes_dropped;
    }
    steps.push_back(std::move(step));
  }
  ojson out = {{"spans", c.spans},
               {"by_reason", std::move(by_reason)},
               {"outside_steps", c.outside_steps},
               {"steps_total", c.steps_total},
               {"steps", std::move(steps)}};
  if (boxes) {
    ojson names = ojson::array();
    for (const auto& [group, name] : c.box_names) names.push_back({group, name});
    out["box_names"] = std::move(names);
  }
  return out;
}

ojson report_json(const Report& r, const JsonOptions& options) {
  ojson j;
  j["format"] = "lens.report";
  j["version"] = 3;
  j["files"] = r.files;
  j["input"] = {{"lines", r.input.lines},
                {"requests", r.input.requests},
                {"spans", r.input.spans},
                {"metric_lines", r.input.metric_lines},
                {"data_points", r.input.data_points},
                {"log_lines", r.input.log_lines},
                {"malformed_lines", r.input.malformed}};
  j["run_ids"] = r.run_ids;
  j["spans"] = r.spans;
  j["step"] = {{"group", kStepGroup}, {"count", r.step_count}, {"total_ns", r.step_total_ns}};

  ojson names = ojson::array();
  const std::optional<std::size_t> top = options.top;
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
      const bool timed = n.gpu_spans > 0;
      row["gpu_spans"] = n.gpu_spans;
      row["gpu_busy_ns"] = timed ? ojson(n.gpu_busy_ns) : ojson(nullptr);
      row["gpu_kernels"] = timed ? ojson(n.gpu_kernels) : ojson(nullptr);
      row["gpu_in_step_ns"] = timed ? ojson(n.gpu_in_step_ns) : ojson(nullptr);
      row["gpu_step_share"] = timed ? share_json(n.gpu_in_step_ns, r.step_total_ns) : nullptr;
      row["gpu_utilization"] =
          timed && n.gpu_interval_ns > 0
              ? ojson(round_to(ratio(n.gpu_interval_busy_ns, n.gpu_interval_ns), 1e6))
              : ojson(nullptr);
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
    step_names.push_back({{"name", s.name},
                          {"ranks", s.ranks},
                          {"median_ns", rounded(s.median_ns)},
                          {"min_ns", rounded(s.min_ns)},
                          {"p95_ns", rounded(s.p95_ns)},
                          {"max_ns", rounded(s.max_ns)}});
  }
  j["step_names"] = std::move(step_names);
  j["collectives"] = findings_json(r);
  j["stragglers"] = {{"threshold_pct", r.straggler_threshold_pct},
                     {"mads", kStragglerMads},
                     {"ranks", stragglers_json(r)}};
  if (options.heatmaps) j["heatmaps"] = heatmaps_json(r);

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
  j["metrics"] = metrics_json(r.metrics, options.max_series_points);
  ojson logs = ojson::array();
  for (const LogRow& l : r.logs) {
    logs.push_back({{"rank", rank_json(l.rank)},
                    {"time_unix_nano", l.time_ns},
                    {"severity_number", l.severity_number},
                    {"severity_text", l.severity_text},
                    {"body", l.body}});
  }
  j["logs"] = {{"count", r.log_count}, {"records", std::move(logs)}};
  if (r.captured.spans > 0) j["captured"] = captured_json(r, options.step_boxes);
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

ojson runs_json(const std::vector<Report>& runs, const JsonOptions& options) {
  if (runs.size() == 1) return report_json(runs.front(), options);
  ojson out = ojson::array();
  for (const Report& r : runs) out.push_back(report_json(r, options));
  return out;
}

std::string dump_json(const nlohmann::ordered_json& j) {
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

}  // namespace nemo::lens::cli
