#include "report/report_builder.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>
#include <utility>

namespace nemo::lens::cli {

// ---- TimelineSampler ----

namespace {

// The order of two steps in one cell: the earlier wins (then the shorter, then the intervals,
// then the GPU times), so that a cell keeps the same step whatever the order they came in.
bool earlier(const TimelineStep& a, const TimelineStep& b) {
  auto less = [](const Interval& x, const Interval& y) {
    return std::tie(x.start_ns, x.end_ns) < std::tie(y.start_ns, y.end_ns);
  };
  if (a.start_ns != b.start_ns) return a.start_ns < b.start_ns;
  if (a.duration_ns != b.duration_ns) return a.duration_ns < b.duration_ns;
  if (a.overlapped != b.overlapped) {
    return std::lexicographical_compare(a.overlapped.begin(), a.overlapped.end(),
                                        b.overlapped.begin(), b.overlapped.end(), less);
  }
  if (a.exposed != b.exposed) {
    return std::lexicographical_compare(a.exposed.begin(), a.exposed.end(), b.exposed.begin(),
                                        b.exposed.end(), less);
  }
  const TimelineGpu &x = a.gpu, &y = b.gpu;
  if (std::tie(x.timed, x.busy_ns, x.idle_ns, x.exposed_comm_ns) !=
      std::tie(y.timed, y.busy_ns, y.idle_ns, y.exposed_comm_ns)) {
    return std::tie(x.timed, x.busy_ns, x.idle_ns, x.exposed_comm_ns) <
           std::tie(y.timed, y.busy_ns, y.idle_ns, y.exposed_comm_ns);
  }
  return std::lexicographical_compare(
      x.boxes.begin(), x.boxes.end(), y.boxes.begin(), y.boxes.end(),
      [&](const GpuBox& p, const GpuBox& q) {
        return less(p.interval, q.interval) ||
               (p.interval == q.interval && p.group_id < q.group_id);
      });
}

void keep_earliest(std::map<std::uint64_t, TimelineStep>& cells, std::uint64_t cell,
                   TimelineStep step) {
  auto [it, inserted] = cells.try_emplace(cell, std::move(step));
  if (!inserted && earlier(step, it->second)) it->second = std::move(step);
}

// At most kMaxTimelineIntervals of `intervals` (sorted, disjoint), for a step of `duration_ns`.
std::vector<Interval> thin_intervals(std::vector<Interval> intervals, std::uint64_t duration_ns) {
  if (intervals.size() <= kMaxTimelineIntervals) return intervals;
  const std::uint64_t gap = duration_ns / 500;
  std::size_t out = 0;
  for (const Interval& i : intervals) {
    if (out > 0 && i.start_ns - intervals[out - 1].end_ns <= gap) {
      intervals[out - 1].end_ns = i.end_ns;
    } else {
      intervals[out++] = i;
    }
  }
  intervals.resize(out);
  if (intervals.size() > kMaxTimelineIntervals) {
    std::stable_sort(intervals.begin(), intervals.end(), [](const Interval& x, const Interval& y) {
      return x.end_ns - x.start_ns > y.end_ns - y.start_ns;
    });
    intervals.resize(kMaxTimelineIntervals);
    std::sort(intervals.begin(), intervals.end(),
              [](const Interval& x, const Interval& y) { return x.start_ns < y.start_ns; });
  }
  return intervals;
}

// At most kMaxTimelineIntervals of a step's GPU boxes: each group's thinned as above, then the
// longest kept, by start.
std::vector<GpuBox> thin_boxes(const std::vector<GpuBox>& boxes, std::uint64_t duration_ns) {
  if (boxes.size() <= kMaxTimelineIntervals) return boxes;
  std::map<std::uint32_t, std::vector<Interval>> by_group;
  for (const GpuBox& b : boxes) by_group[b.group_id].push_back(b.interval);
  std::vector<GpuBox> out;
  for (auto& [group, list] : by_group) {
    for (const Interval& i : thin_intervals(std::move(list), duration_ns))
      out.push_back({i, group});
  }
  auto by_start = [](const GpuBox& a, const GpuBox& b) {
    return std::tie(a.interval.start_ns, a.interval.end_ns, a.group_id) <
           std::tie(b.interval.start_ns, b.interval.end_ns, b.group_id);
  };
  std::sort(out.begin(), out.end(), by_start);
  if (out.size() > kMaxTimelineIntervals) {
    std::stable_sort(out.begin(), out.end(), [](const GpuBox& a, const GpuBox& b) {
      return a.interval.end_ns - a.interval.start_ns > b.interval.end_ns - b.interval.start_ns;
    });
    out.resize(kMaxTimelineIntervals);
    std::sort(out.begin(), out.end(), by_start);
  }
  return out;
}

}  // namespace

void TimelineSampler::add(TimelineStep step) {
  ++seen_;
  const std::uint64_t cell = step.start_ns / cell_ns_;
  keep_earliest(kept_, cell, std::move(step));
  while (kept_.size() > limit_ && cell_ns_ <= UINT64_MAX / 2) {
    cell_ns_ *= 2;
    std::map<std::uint64_t, TimelineStep> wider;
    for (auto& [narrow, kept] : kept_) keep_earliest(wider, narrow / 2, std::move(kept));
    kept_ = std::move(wider);
  }
}

std::vector<TimelineStep> TimelineSampler::steps() const {
  std::vector<TimelineStep> out;
  out.reserve(kept_.size());
  for (const auto& [cell, step] : kept_) out.push_back(step);
  return out;  // cells in order, one step each: by start
}

// ---- ReportBuilder ----

namespace {

// The order truncated rows are kept in: the least kMaxTruncatedRows whatever the input order.
bool truncated_before(const TruncatedRow& a, const TruncatedRow& b) {
  const std::int64_t ra = a.rank.value_or(INT64_MAX), rb = b.rank.value_or(INT64_MAX);
  return std::tie(ra, a.group, a.name, a.duration_ns) <
         std::tie(rb, b.group, b.name, b.duration_ns);
}

// The q-quantile of `sorted` (numpy's linear interpolation); 0 for none.
double quantile_of(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const double at = q * static_cast<double>(sorted.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(at));
  const std::size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (at - static_cast<double>(lo));
}

// How far out a flagged rank is, for the order of the list: its largest excess over the median
// of its role, as a share of the role's median step.
double severity(const RankFigures& r, const StepNameFindings& f) {
  const RoleFindings& role = f.roles[r.role];
  double worst = 0;
  for (const StragglerMeasure m : r.flagged_by) {
    double value = 0, median = 0;
    switch (m) {
      case StragglerMeasure::kArrival:
        value = r.late_ns;
        median = role.median_late_ns;
        break;
      case StragglerMeasure::kStepTime:
        value = r.step_p50_ns;
        median = role.median_step_ns;
        break;
      case StragglerMeasure::kGpuBusy:
        value = r.gpu_busy_p50_ns;
        median = role.median_gpu_busy_ns;
        break;
    }
    worst = std::max(worst, (value - median) / std::max(role.median_step_ns, 1.0));
  }
  return worst;
}

}  // namespace

// The figures of one run: everything ReportBuilder collects, but the input's files and
// malformed lines, and the spill its spans go to.
class ReportBuilder::Run {
 public:
  Run(std::string run_id, SpanSpill& spill) : run_id_(std::move(run_id)), spill_(spill) {}

  const std::string& run_id() const { return run_id_; }

  /// The rank's state, made on first use with `slot` as its SpanFacts::rank.
  std::int64_t slot_of(std::int64_t rank, const SpanResource& resource, std::int64_t new_slot,
                       bool* made) {
    auto [it, inserted] = ranks_.try_emplace(rank);
    RankState& state = it->second;
    if (inserted) state.slot = new_slot;
    *made = inserted;
    if (!resource.instance_id.empty() &&
        (state.instance_id.empty() || resource.instance_id < state.instance_id)) {
      state.instance_id = resource.instance_id;
    }
    return state.slot;
  }

  void add_metrics(const ParsedRequest& request) { metrics_.add(request, run_id_); }
  void add_log(const LogEntry& log, const SpanResource& resource);
  void add_span(std::int64_t slot, std::int64_t rank, const SpanRecord& span);
  /// The steps of one trace of `rank` (its spans and side records, as the spill gives them back).
  void analyze(std::span<SpanFacts> trace, std::int64_t rank);
  Report finish(const ReportOptions& options) const;

 private:
  std::uint32_t name_id(const SpanRecord& span);
  void add_step(std::int64_t rank, const StepResult& step);

  struct Overlap {
    std::uint64_t spans = 0;
    std::uint64_t overlapped_ns = 0;
    std::uint64_t exposed_ns = 0;
    void add(const OverlapTimes& t) {
      spans += t.spans;
      overlapped_ns += t.overlapped_ns;
      exposed_ns += t.exposed_ns;
    }
  };

  struct NameStats {
    std::string name;
    DurationSketch durations;
    std::uint64_t gpu_spans = 0;
    std::uint64_t gpu_busy_ns = 0;
    std::uint64_t gpu_kernels = 0;
    std::uint64_t gpu_in_step_ns = 0;
    std::uint64_t gpu_interval_ns = 0;
    std::uint64_t gpu_interval_busy_ns = 0;
    std::uint64_t in_step_ns = 0;
    std::uint64_t in_step_self_ns = 0;
    Overlap overlap;
  };

  struct GroupStats {
    std::string group;
    std::uint64_t in_step_ns = 0;
    std::uint64_t in_step_self_ns = 0;
    Overlap overlap;
  };

  struct GpuSteps {
    DurationSketch busy;
    std::uint64_t idle_ns = 0;
    std::uint64_t exposed_comm_ns = 0;
  };

  struct RankState {
    std::int64_t slot = 0;    // its spans' SpanFacts::rank
    std::string instance_id;  // the least service.instance.id seen
    std::uint64_t spans = 0;
    std::map<std::uint32_t, DurationSketch> steps;  // top-level step spans per name id
    std::map<std::uint32_t, GpuSteps> gpu_steps;    // those with GPU times, per name id
    TimelineSampler timeline;
  };

  std::string run_id_;
  SpanSpill& spill_;
  std::unordered_map<std::string, std::uint32_t> name_ids_;  // "group\x1fname" -> index
  std::unordered_map<std::string, std::uint32_t> group_ids_;
  std::string key_buffer_;
  std::vector<NameStats> names_;
  std::vector<NameKind> kinds_;  // by name id, for the step analysis
  std::vector<GroupStats> groups_;
  std::map<std::int64_t, RankState> ranks_;  // by dl.rank (kNoRank: none)
  std::unique_ptr<StepAnalyzer> analyzer_;   // made at the first trace analysed
  StragglerAnalysis stragglers_;
  std::uint64_t spans_ = 0;
  std::uint64_t step_total_ns_ = 0;
  std::uint64_t step_count_ = 0;
  std::uint64_t truncated_count_ = 0;
  std::vector<TruncatedRow> truncated_;  // the least kMaxTruncatedRows, once finished
  MetricAggregator metrics_;
  std::uint64_t log_count_ = 0;
  std::vector<LogRow> logs_;
  std::size_t logs_below_warn_ = 0;  // of logs_, the ones a warning may replace
  GpuSummary gpu_;

  // The flight recorder's captured spans, and the steps that hold them.
  struct CapturedStep {
    std::int64_t rank;  // the report's rank key
    StepResult step;    // its figures, the fields captured steps need
  };
  // Keeps the longest kMaxCapturedSteps of `steps` (then the earliest: the same ones whatever the
  // order they came in).
  static void keep_longest_captured(std::vector<CapturedStep>& steps) {
    if (steps.size() <= kMaxCapturedSteps) return;
    std::nth_element(steps.begin(), steps.begin() + kMaxCapturedSteps, steps.end(),
                     [](const CapturedStep& a, const CapturedStep& b) {
                       return std::tie(b.step.duration_ns, a.step.start_ns, a.rank,
                                       a.step.span_id) <
                              std::tie(a.step.duration_ns, b.step.start_ns, b.rank, b.step.span_id);
                     });
    steps.resize(kMaxCapturedSteps);
  }
  std::uint32_t reason_id(const std::string& reason);
  CapturedStepRow captured_row(const CapturedStep& c, std::vector<std::uint32_t>& box_ids,
                               CapturedSummary& out) const;
  std::vector<std::string> reasons_;  // by reason id
  std::unordered_map<std::string, std::uint32_t> reason_ids_;
  std::vector<std::uint64_t> captured_by_reason_;  // by reason id
  std::uint64_t captured_spans_ = 0;
  std::uint64_t captured_in_steps_ = 0;
  std::uint64_t captured_steps_total_ = 0;
  std::vector<CapturedStep> captured_steps_;  // the longest kMaxCapturedSteps, once finished
};

std::uint32_t ReportBuilder::Run::name_id(const SpanRecord& span) {
  const std::string_view group =
      span.has_group && !span.group.empty() ? std::string_view(span.group) : kNoGroup;
  key_buffer_.assign(group).append(1, '\x1f').append(span.name);
  if (auto it = name_ids_.find(key_buffer_); it != name_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(names_.size());
  name_ids_.emplace(key_buffer_, id);
  names_.emplace_back().name = span.name;
  auto [group_it, new_group] =
      group_ids_.try_emplace(std::string(group), static_cast<std::uint32_t>(groups_.size()));
  if (new_group) groups_.emplace_back().group = std::string(group);
  kinds_.push_back({group_it->second, group == kStepGroup, group == kCommunicationGroup});
  return id;
}

std::uint32_t ReportBuilder::Run::reason_id(const std::string& reason) {
  auto [it, inserted] =
      reason_ids_.try_emplace(reason, static_cast<std::uint32_t>(reasons_.size()));
  if (inserted) {
    reasons_.push_back(reason);
    captured_by_reason_.push_back(0);
  }
  return it->second;
}

void ReportBuilder::Run::add_log(const LogEntry& log, const SpanResource& resource) {
  ++log_count_;
  constexpr int kWarn = 13;
  LogRow row{resource.rank, log.time_ns, log.severity_number, log.severity_text, log.body};
  if (logs_.size() < kMaxLogRows) {
    if (row.severity_number < kWarn) ++logs_below_warn_;
    logs_.push_back(std::move(row));
    return;
  }
  // Full: a warning or worse takes the place of the latest record below WARN, so that errors
  // are shown even after thousands of info lines.
  if (row.severity_number < kWarn || logs_below_warn_ == 0) return;
  for (auto it = logs_.rbegin(); it != logs_.rend(); ++it) {
    if (it->severity_number < kWarn) {
      *it = std::move(row);
      --logs_below_warn_;
      return;
    }
  }
}

void ReportBuilder::Run::add_span(std::int64_t slot, std::int64_t rank, const SpanRecord& span) {
  ++spans_;
  ++ranks_.at(rank).spans;
  const std::uint32_t id = name_id(span);
  NameStats& stats = names_[id];
  const std::uint64_t duration = span.duration_ns();
  stats.durations.add(duration);
  if (span.truncated) {
    ++truncated_count_;
    truncated_.push_back({rank == kNoRank ? std::nullopt : std::optional(rank),
                          groups_[kinds_[id].group_id].group, stats.name, duration});
    if (truncated_.size() >= 2 * kMaxTruncatedRows) {  // keep the least, in bounded memory
      std::nth_element(truncated_.begin(), truncated_.begin() + kMaxTruncatedRows, truncated_.end(),
                       truncated_before);
      truncated_.resize(kMaxTruncatedRows);
    }
  }
  const SpanFacts facts{slot,
                        span.trace_key,
                        span.span_id,
                        span.parent_span_id,
                        span.start_ns,
                        span.end_ns,
                        span.gpu_kernel ? kGpuKernelThread : span.thread_id.value_or(kNoThread),
                        id};
  spill_.add(facts);
  if (span.iteration && kinds_[id].is_step) spill_.add(iteration_facts(facts, *span.iteration));
  if (!span.capture_reason.empty()) {
    ++captured_spans_;
    const std::uint32_t reason = reason_id(span.capture_reason);
    ++captured_by_reason_[reason];
    spill_.add(capture_facts(facts, {span.capture_id.value_or(0), reason}));
  }
  if (span.gpu.timed()) {
    ++stats.gpu_spans;
    stats.gpu_busy_ns += span.gpu.busy_ns.value_or(0);
    stats.gpu_kernels += span.gpu.kernels.value_or(0);
    if (span.gpu.has_interval() && span.gpu.busy_ns) {
      const std::uint64_t interval = *span.gpu.end_ns - *span.gpu.start_ns;
      stats.gpu_interval_ns += interval;
      stats.gpu_interval_busy_ns += std::min(*span.gpu.busy_ns, interval);
    }
    ++gpu_.spans;
    spill_.add(gpu_facts(facts, gpu_facts_of(span.gpu)));
  }
}

void ReportBuilder::Run::analyze(std::span<SpanFacts> trace, std::int64_t rank) {
  if (!analyzer_) analyzer_ = std::make_unique<StepAnalyzer>(kinds_);
  analyzer_->analyze(trace, [&](const StepResult& step) { add_step(rank, step); });
}

void ReportBuilder::Run::add_step(std::int64_t rank_key, const StepResult& step) {
  RankState& rank = ranks_.at(rank_key);
  rank.steps[step.name_id].add(step.duration_ns);
  step_total_ns_ += step.duration_ns;
  ++step_count_;
  stragglers_.add_step(rank_key, step);
  for (const auto& [id, ns] : step.own_by_name) {
    names_[id].in_step_self_ns += ns;
    groups_[kinds_[id].group_id].in_step_self_ns += ns;
  }
  for (const auto& [id, ns] : step.within_by_name) names_[id].in_step_ns += ns;
  for (const auto& [id, ns] : step.within_by_group) groups_[id].in_step_ns += ns;
  for (const auto& [id, ns] : step.gpu_in_step_by_name) names_[id].gpu_in_step_ns += ns;
  for (const OverlapTimes& t : step.overlap_by_name) names_[t.id].overlap.add(t);
  for (const OverlapTimes& t : step.overlap_by_group) groups_[t.id].overlap.add(t);
  TimelineGpu gpu;
  if (step.gpu.timed) {
    const StepGpu& g = step.gpu;
    GpuSteps& stats = rank.gpu_steps[step.name_id];
    stats.busy.add(g.busy_ns);
    stats.idle_ns += g.idle_ns;
    stats.exposed_comm_ns += g.exposed_comm_ns;
    ++gpu_.steps;
    gpu_.busy_ns += g.busy_ns;
    gpu_.idle_ns += g.idle_ns;
    gpu_.exposed_comm_ns += g.exposed_comm_ns;
    gpu = {true, g.busy_ns, g.idle_ns, g.exposed_comm_ns, thin_boxes(g.boxes, step.duration_ns)};
  }
  rank.timeline.add({step.start_ns, step.duration_ns,
                     thin_intervals(step.overlapped, step.duration_ns),
                     thin_intervals(step.exposed, step.duration_ns), std::move(gpu)});
  if (step.captured_spans > 0) {
    ++captured_steps_total_;
    captured_in_steps_ += step.captured_spans;
    StepResult kept;  // what captured_row() reads
    kept.rank = step.rank;
    kept.span_id = step.span_id;
    kept.name_id = step.name_id;
    kept.start_ns = step.start_ns;
    kept.duration_ns = step.duration_ns;
    kept.iteration = step.iteration;
    kept.own_by_name = step.own_by_name;
    kept.within_by_name = step.within_by_name;
    kept.within_by_group = step.within_by_group;
    kept.captured_spans = step.captured_spans;
    kept.captures = step.captures;
    kept.spans_by_name = step.spans_by_name;
    kept.longest_by_name = step.longest_by_name;
    kept.boxes = step.boxes;
    kept.boxes_dropped = step.boxes_dropped;
    captured_steps_.push_back({rank_key, std::move(kept)});
    if (captured_steps_.size() >= 2 * kMaxCapturedSteps) keep_longest_captured(captured_steps_);
  }
}

CapturedStepRow ReportBuilder::Run::captured_row(const CapturedStep& c,
                                                 std::vector<std::uint32_t>& box_ids,
                                                 CapturedSummary& out) const {
  const StepResult& s = c.step;
  CapturedStepRow row;
  if (c.rank != kNoRank) row.rank = c.rank;
  row.name = names_[s.name_id].name;
  row.iteration = s.iteration;
  row.start_ns = s.start_ns;
  row.duration_ns = s.duration_ns;
  const RankState& rank = ranks_.at(c.rank);
  if (auto it = rank.steps.find(s.name_id); it != rank.steps.end()) {
    row.median_ns = it->second.quantile(0.5);
  }
  for (const CaptureMark& m : s.captures) {
    row.reasons.push_back(reasons_[m.reason_id]);
    row.capture_ids.push_back(m.capture_id);
  }
  std::sort(row.reasons.begin(), row.reasons.end());
  row.reasons.erase(std::unique(row.reasons.begin(), row.reasons.end()), row.reasons.end());
  std::sort(row.capture_ids.begin(), row.capture_ids.end());
  row.capture_ids.erase(std::unique(row.capture_ids.begin(), row.capture_ids.end()),
                        row.capture_ids.end());
  row.captured_spans = s.captured_spans;
  // Per name, then per group: spans, own and within.
  std::map<std::uint32_t, CapturedTime> by_name, by_group;
  for (const auto& [id, n] : s.spans_by_name) {
    by_name[id].spans += n;
    by_group[kinds_[id].group_id].spans += n;
    row.spans += n;
  }
  for (const auto& [id, ns] : s.own_by_name) {
    by_name[id].own_ns += ns;
    by_group[kinds_[id].group_id].own_ns += ns;
  }
  for (const auto& [id, ns] : s.within_by_name) by_name[id].within_ns += ns;
  for (const auto& [id, ns] : s.longest_by_name) by_name[id].longest_ns = ns;
  for (const auto& [id, ns] : s.within_by_group) {
    by_group[id].within_ns += ns;
    if (groups_[id].group == kCommunicationGroup) row.communication_ns = ns;
  }
  auto by_own = [](const CapturedTime& a, const CapturedTime& b) {
    return std::tie(b.own_ns, b.within_ns, a.group, a.name) <
           std::tie(a.own_ns, a.within_ns, b.group, b.name);
  };
  for (auto& [id, t] : by_name) {
    t.group = groups_[kinds_[id].group_id].group;
    t.name = names_[id].name;
    row.names.push_back(std::move(t));
  }
  for (auto& [id, t] : by_group) {
    t.group = groups_[id].group;
    row.groups.push_back(std::move(t));
  }
  std::sort(row.names.begin(), row.names.end(), by_own);
  std::sort(row.groups.begin(), row.groups.end(), by_own);
  // The boxes' names, as indices into out.box_names.
  for (StepBox b : s.boxes) {
    std::uint32_t& index = box_ids[b.name_id];
    if (index == UINT32_MAX) {
      index = static_cast<std::uint32_t>(out.box_names.size());
      out.box_names.emplace_back(groups_[kinds_[b.name_id].group_id].group, names_[b.name_id].name);
    }
    b.name_id = index;
    row.boxes.push_back(b);
  }
  row.boxes_dropped = s.boxes_dropped;
  return row;
}

Report ReportBuilder::Run::finish(const ReportOptions& options) const {
  Report report;
  if (!run_id_.empty()) report.run_ids.push_back(run_id_);
  report.spans = spans_;
  report.step_total_ns = step_total_ns_;
  report.step_count = step_count_;
  report.straggler_threshold_pct = options.straggler_threshold_pct;
  report.truncated_count = truncated_count_;
  report.truncated = truncated_;
  if (report.truncated.size() > kMaxTruncatedRows) {
    std::nth_element(report.truncated.begin(), report.truncated.begin() + kMaxTruncatedRows,
                     report.truncated.end(), truncated_before);
    report.truncated.resize(kMaxTruncatedRows);
  }
  std::sort(report.truncated.begin(), report.truncated.end(), truncated_before);
  if (analyzer_) {
    report.ancestry.unresolved = analyzer_->counts().missing_parents;
    report.ancestry.duplicates = analyzer_->counts().duplicates;
    report.ancestry.cycles = analyzer_->counts().cycles;
  }
  report.ancestry.spilled = spill_.spilled();
  report.metrics = metrics_.finish();
  report.log_count = log_count_;
  report.logs = logs_;
  report.has_gpu = gpu_.spans > 0;
  report.gpu = gpu_;
  for (const GroupStats& g : groups_) report.group_names.push_back(g.group);
  std::stable_sort(report.logs.begin(), report.logs.end(),
                   [](const LogRow& a, const LogRow& b) { return a.time_ns < b.time_ns; });

  std::vector<GroupRow> groups(groups_.size());
  for (std::uint32_t id = 0; id < names_.size(); ++id) {
    const NameStats& s = names_[id];
    const GroupStats& group = groups_[kinds_[id].group_id];
    NameRow row;
    row.group = group.group;
    row.name = s.name;
    row.count = s.durations.count();
    row.total_ns = s.durations.sum();
    row.mean_ns = s.durations.mean();
    row.p50_ns = s.durations.quantile(0.5);
    row.p95_ns = s.durations.quantile(0.95);
    row.max_ns = s.durations.max();
    row.in_step_ns = s.in_step_ns;
    row.in_step_self_ns = s.in_step_self_ns;
    row.gpu_spans = s.gpu_spans;
    row.gpu_busy_ns = s.gpu_busy_ns;
    row.gpu_kernels = s.gpu_kernels;
    row.gpu_in_step_ns = s.gpu_in_step_ns;
    row.gpu_interval_ns = s.gpu_interval_ns;
    row.gpu_interval_busy_ns = s.gpu_interval_busy_ns;
    GroupRow& g = groups[kinds_[id].group_id];
    g.count += row.count;
    g.total_ns += row.total_ns;
    if (s.overlap.spans > 0) {
      report.overlap_names.push_back(
          {row.group, row.name, s.overlap.spans, s.overlap.overlapped_ns, s.overlap.exposed_ns});
    }
    report.names.push_back(std::move(row));
  }
  for (std::uint32_t id = 0; id < groups_.size(); ++id) {
    const GroupStats& s = groups_[id];
    GroupRow& g = groups[id];
    g.group = s.group;
    g.in_step_ns = s.in_step_ns;
    g.in_step_self_ns = s.in_step_self_ns;
    if (s.overlap.spans > 0) {
      report.overlap_groups.push_back(
          {s.group, "", s.overlap.spans, s.overlap.overlapped_ns, s.overlap.exposed_ns});
    }
  }
  std::sort(report.names.begin(), report.names.end(), [](const NameRow& a, const NameRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    if (a.group != b.group) return a.group < b.group;
    return a.name < b.name;
  });
  report.groups = std::move(groups);
  std::sort(report.groups.begin(), report.groups.end(), [](const GroupRow& a, const GroupRow& b) {
    if (a.in_step_self_ns != b.in_step_self_ns) return a.in_step_self_ns > b.in_step_self_ns;
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.group < b.group;
  });
  for (auto* rows : {&report.overlap_groups, &report.overlap_names}) {
    std::sort(rows->begin(), rows->end(), [](const OverlapRow& a, const OverlapRow& b) {
      if (a.overlapped_ns != b.overlapped_ns) return a.overlapped_ns > b.overlapped_ns;
      return std::tie(a.group, a.name) < std::tie(b.group, b.name);
    });
  }

  // Ranks in order, the one without dl.rank last.
  std::vector<std::pair<std::int64_t, const RankState*>> ordered;
  for (const auto& [rank, state] : ranks_) {
    if (rank != kNoRank) ordered.emplace_back(rank, &state);
  }
  if (auto unknown = ranks_.find(kNoRank); unknown != ranks_.end()) {
    ordered.emplace_back(kNoRank, &unknown->second);
  }
  const std::size_t rank_count = std::max<std::size_t>(ordered.size(), 1);
  const std::size_t per_rank = std::min(
      options.timeline_per_rank, std::max<std::size_t>(options.timeline_total / rank_count, 50));
  bool have_origin = false;
  for (const auto& [rank, state] : ordered) {
    RankRow row;
    if (rank != kNoRank) row.rank = rank;
    row.instance_id = state->instance_id;
    row.spans = state->spans;
    for (const auto& [id, sketch] : state->steps) {
      RankStepRow step;
      step.name = names_[id].name;
      step.count = sketch.count();
      step.total_ns = sketch.sum();
      step.p50_ns = sketch.quantile(0.5);
      step.p95_ns = sketch.quantile(0.95);
      step.max_ns = sketch.max();
      row.timeline_steps += step.count;
      row.steps.push_back(std::move(step));
    }
    std::sort(row.steps.begin(), row.steps.end(), [](const RankStepRow& a, const RankStepRow& b) {
      return a.count != b.count ? a.count > b.count : a.name < b.name;
    });
    for (const auto& [id, stats] : state->gpu_steps) {
      row.gpu_steps.push_back({names_[id].name, stats.busy.count(), stats.busy.sum(),
                               stats.busy.quantile(0.5), stats.idle_ns, stats.exposed_comm_ns});
    }
    std::sort(row.gpu_steps.begin(), row.gpu_steps.end(),
              [](const RankGpuRow& a, const RankGpuRow& b) {
                return a.count != b.count ? a.count > b.count : a.name < b.name;
              });
    std::vector<TimelineStep> kept = state->timeline.steps();  // by start
    if (kept.size() <= per_rank) {
      row.timeline = std::move(kept);
    } else {
      for (std::size_t i = 0; i < per_rank; ++i)
        row.timeline.push_back(std::move(kept[i * kept.size() / per_rank]));
    }
    if (!row.timeline.empty() &&
        (!have_origin || row.timeline.front().start_ns < report.timeline_origin_ns)) {
      report.timeline_origin_ns = row.timeline.front().start_ns;
      have_origin = true;
    }
    report.ranks.push_back(std::move(row));
  }

  // Every top-level step name: the spread of the ranks' medians.
  std::map<std::string, std::vector<double>> medians;
  for (const RankRow& r : report.ranks) {
    for (const RankStepRow& s : r.steps) medians[s.name].push_back(s.p50_ns);
  }
  for (auto& [name, values] : medians) {
    std::sort(values.begin(), values.end());
    report.step_names.push_back({name, values.size(), quantile_of(values, 0.5), values.front(),
                                 quantile_of(values, 0.95), values.back()});
  }

  // Who held the others back (stragglers.hpp), and the flagged ranks.
  std::vector<std::string> name_strings, group_strings;
  for (const NameStats& n : names_) name_strings.push_back(n.name);
  for (const GroupStats& g : groups_) group_strings.push_back(g.group);
  StragglerOptions straggler_options;
  straggler_options.floor_pct = options.straggler_threshold_pct;
  straggler_options.heatmap = options.heatmaps;
  report.findings = stragglers_.finish({name_strings, group_strings, kinds_}, straggler_options);
  std::vector<std::pair<double, StragglerRow>> flagged;
  for (const StepNameFindings& f : report.findings) {
    for (const RankFigures& figures : f.ranks) {
      if (!figures.straggler()) continue;
      flagged.push_back({severity(figures, f), {f.name, figures, f.roles[figures.role]}});
      for (RankRow& row : report.ranks) {
        if (row.rank != figures.rank) continue;
        for (RankStepRow& s : row.steps) s.straggler = s.straggler || s.name == f.name;
        for (RankGpuRow& s : row.gpu_steps) s.straggler = s.straggler || s.name == f.name;
      }
    }
  }
  std::stable_sort(flagged.begin(), flagged.end(),
                   [](const auto& a, const auto& b) { return a.first > b.first; });
  for (auto& [score, row] : flagged) report.stragglers.push_back(std::move(row));

  // The flight recorder's captured steps.
  CapturedSummary& captured = report.captured;
  captured.spans = captured_spans_;
  for (std::size_t i = 0; i < reasons_.size(); ++i) {
    captured.by_reason.emplace_back(reasons_[i], captured_by_reason_[i]);
  }
  std::sort(captured.by_reason.begin(), captured.by_reason.end());
  captured.outside_steps = captured_spans_ - std::min(captured_spans_, captured_in_steps_);
  captured.steps_total = captured_steps_total_;
  std::vector<CapturedStep> steps = captured_steps_;
  keep_longest_captured(steps);
  std::vector<std::uint32_t> box_ids(names_.size(), UINT32_MAX);
  for (const CapturedStep& c : steps) captured.steps.push_back(captured_row(c, box_ids, captured));
  std::sort(captured.steps.begin(), captured.steps.end(),
            [](const CapturedStepRow& a, const CapturedStepRow& b) {
              const std::int64_t ia = a.iteration.value_or(INT64_MAX);
              const std::int64_t ib = b.iteration.value_or(INT64_MAX);
              const std::uint64_t sa = a.iteration ? 0 : a.start_ns,
                                  sb = b.iteration ? 0 : b.start_ns;
              const std::int64_t ra = a.rank.value_or(INT64_MAX), rb = b.rank.value_or(INT64_MAX);
              return std::tie(a.name, ia, sa, a.communication_ns, b.duration_ns, ra, a.start_ns) <
                     std::tie(b.name, ib, sb, b.communication_ns, a.duration_ns, rb, b.start_ns);
            });
  return report;
}

ReportBuilder::ReportBuilder() = default;

ReportBuilder::ReportBuilder(std::string run_id) : ReportBuilder() {
  run_filter_ = std::move(run_id);
}

ReportBuilder::~ReportBuilder() = default;

ReportBuilder::Run& ReportBuilder::run(const std::string& run_id) {
  std::unique_ptr<Run>& r = runs_[run_id];
  if (!r) r = std::make_unique<Run>(run_id, spill_);
  return *r;
}

void ReportBuilder::add(const ParsedRequest& request) {
  // Each resource's run, once per request.
  resource_runs_.assign(request.resources.size(), nullptr);
  for (std::size_t i = 0; i < request.resources.size(); ++i) {
    const SpanResource& r = request.resources[i];
    if (!run_filter_.empty() && r.run_id != run_filter_) continue;
    resource_runs_[i] = &run(r.run_id);
  }
  if (!request.metrics.empty()) {
    std::vector<Run*> runs = resource_runs_;
    std::sort(runs.begin(), runs.end());
    runs.erase(std::unique(runs.begin(), runs.end()), runs.end());
    for (Run* r : runs) {
      if (r != nullptr) r->add_metrics(request);
    }
  }
  for (const LogEntry& log : request.logs) {
    if (Run* r = resource_runs_[log.resource]) r->add_log(log, request.resources[log.resource]);
  }
  for (const SpanRecord& span : request.spans()) {
    Run* r = resource_runs_[span.resource];
    if (r == nullptr) continue;
    const SpanResource& resource = request.resources[span.resource];
    const std::int64_t rank = resource.rank.value_or(kNoRank);
    bool made = false;
    const std::int64_t slot =
        r->slot_of(rank, resource, static_cast<std::int64_t>(slots_.size()), &made);
    if (made) slots_.push_back({r, rank});
    r->add_span(slot, rank, span);
  }
}

void ReportBuilder::add_malformed(const MalformedLine& line) {
  if (malformed_.size() < kMaxMalformedRows) {
    malformed_.push_back({std::string(line.file), line.line, line.error});
  }
}

std::vector<Report> ReportBuilder::finish(const ReportOptions& options, const ReaderCounts& input) {
  // The steps, trace by trace, now that every span is in; each trace is of one (run, rank).
  spill_.for_each_trace([&](std::span<SpanFacts> trace) {
    const Slot& slot = slots_[static_cast<std::size_t>(trace.front().rank)];
    slot.run->analyze(trace, slot.rank);
  });
  std::vector<Report> reports;
  auto add = [&](const Run& run) {
    reports.push_back(run.finish(options));
    reports.back().files = files_;
    reports.back().input = input;
    reports.back().malformed = malformed_;
  };
  for (const auto& [id, run] : runs_) {
    if (!id.empty()) add(*run);
  }
  if (auto unnamed = runs_.find(""); unnamed != runs_.end()) add(*unnamed->second);
  if (reports.empty()) add(Run(run_filter_, spill_));
  runs_.clear();
  slots_.clear();
  return reports;
}

}  // namespace nemo::lens::cli
