// What `lens report` computes from the spans it reads, one run (nemo.run.id) at a time: time per
// span group and name, where each top-level step's time went (on the step's own thread, and what
// ran beside it on other threads and processes: step_breakdown.hpp), the step time of every rank,
// who held the others back at the collectives and the stragglers (stragglers.hpp), the steps the
// flight recorder captured detail of, truncated spans and malformed lines (and the metrics of the
// metrics lines, report_metrics.hpp). Every figure depends only on the set of spans read, never on
// their order: durations go into DurationSketch summaries as they come, and the steps are analysed
// at the end, trace by trace, from the spans kept in a SpanSpill (temporary files once they are
// many: memory grows with the largest trace of a rank, not with the input). docs/report.md has the
// rules and the limits.
//
//   ReportBuilder builder;
//   reader.read(file, [&](const ParsedRequest& r) { builder.add(r); },
//               [&](const MalformedLine& m) { builder.add_malformed(m); });
//   const std::vector<Report> runs = builder.finish({.straggler_threshold_pct = 5}, counts);
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/span_reader.hpp"
#include "report/report_metrics.hpp"
#include "report/report_sketch.hpp"
#include "report/span_spill.hpp"
#include "report/step_breakdown.hpp"
#include "report/stragglers.hpp"

namespace nemo::lens::cli {

/// The group name reported for spans without a nemo.span.group attribute (or an empty one).
inline constexpr std::string_view kNoGroup = "(none)";
/// The group whose spans are steps.
inline constexpr std::string_view kStepGroup = "step";
/// The group whose GPU time is communication (exposed communication on the GPU).
inline constexpr std::string_view kCommunicationGroup = "communication";

/// A span's gpu.* attributes as the step analysis keeps them.
inline GpuFacts gpu_facts_of(const SpanGpu& g) {
  return {g.busy_ns.has_value(), g.kernels.has_value(),  g.has_interval(),    g.busy_ns.value_or(0),
          g.kernels.value_or(0), g.start_ns.value_or(0), g.end_ns.value_or(0)};
}

/// The GPU time of a step on the timeline (StepGpu, its boxes thinned to kMaxTimelineIntervals).
struct TimelineGpu {
  bool timed = false;  // the step had GPU times; the rest is 0 and empty otherwise
  std::uint64_t busy_ns = 0;
  std::uint64_t idle_ns = 0;
  std::uint64_t exposed_comm_ns = 0;
  std::vector<GpuBox> boxes;  // group ids index Report::group_names
  bool operator==(const TimelineGpu&) const = default;
};

/// One step drawn on the timeline: its start (Unix ns) and duration, and the spans beside it (of
/// other threads or processes): the union of their intervals within the step and its exposed
/// parts (step_breakdown.hpp), each thinned to at most kMaxTimelineIntervals.
struct TimelineStep {
  std::uint64_t start_ns = 0;
  std::uint64_t duration_ns = 0;
  std::vector<Interval> overlapped;
  std::vector<Interval> exposed;
  TimelineGpu gpu{};  // initialized here, so that {start, duration, {}, {}} needs no gpu
  bool operator==(const TimelineStep&) const = default;
};

/// Intervals kept per step and kind for the timeline: gaps under 1/500 of the step are closed
/// first (below a pixel on the page), then the longest are kept.
inline constexpr std::size_t kMaxTimelineIntervals = 64;

/// Keeps at most `limit` steps spread over time, the same ones whatever the order they are added
/// in: time is cut into cells of one width (1 ns, doubled while more than `limit` cells hold a
/// step), and each cell keeps its earliest step.
class TimelineSampler {
 public:
  TimelineSampler() = default;
  explicit TimelineSampler(std::size_t limit) : limit_(limit) {}
  void add(TimelineStep step);
  /// The kept steps by start.
  std::vector<TimelineStep> steps() const;
  /// Steps offered, kept or not.
  std::uint64_t seen() const { return seen_; }

 private:
  std::size_t limit_ = 1000;
  std::uint64_t cell_ns_ = 1;
  std::uint64_t seen_ = 0;
  std::map<std::uint64_t, TimelineStep> kept_;  // by cell
};

/// Statistics of one (group, name) pair over every rank.
struct NameRow {
  std::string group;  // kNoGroup when absent
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  double mean_ns = 0;
  double p50_ns = 0;
  double p95_ns = 0;
  std::uint64_t max_ns = 0;
  std::uint64_t in_step_ns = 0;       // the union of these spans' intervals within each step
  std::uint64_t in_step_self_ns = 0;  // time on the step's own thread with one of these innermost
  std::uint64_t gpu_spans = 0;        // spans with gpu.* attributes (0: no GPU figure)
  std::uint64_t gpu_busy_ns = 0;      // their gpu.busy added up
  std::uint64_t gpu_kernels = 0;      // their gpu.kernels added up
  std::uint64_t gpu_in_step_ns = 0;   // their GPU busy within the steps (StepResult), <= step time
  std::uint64_t gpu_interval_ns = 0;  // the lengths of their GPU intervals (spans with gpu.busy)
  std::uint64_t gpu_interval_busy_ns = 0;  // those spans' gpu.busy, each at most its interval
};

/// Spans of the top-level steps that ran beside them, on other threads or processes: per group
/// (name empty) or per group and name.
struct OverlapRow {
  std::string group;
  std::string name;
  std::uint64_t spans = 0;
  std::uint64_t overlapped_ns = 0;  // summed over the steps: the union of their intervals within
  std::uint64_t exposed_ns = 0;     // of which the step's thread was in this group or in no span
};

/// Time inside top-level step spans, per group.
struct GroupRow {
  std::string group;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  std::uint64_t in_step_ns = 0;       // the union of the group's intervals within each step
  std::uint64_t in_step_self_ns = 0;  // on the steps' own threads: sums to the step time
};

/// The distribution of one rank's top-level step spans of one name.
struct RankStepRow {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  double p50_ns = 0;
  double p95_ns = 0;
  std::uint64_t max_ns = 0;
  bool straggler = false;  // flagged (stragglers.hpp), on any measure
};

/// One rank's GPU time per step, over its top-level step spans of one name that had GPU times.
struct RankGpuRow {
  std::string name;
  std::uint64_t count = 0;  // steps with GPU times
  std::uint64_t busy_ns = 0;
  double busy_p50_ns = 0;
  std::uint64_t idle_ns = 0;
  std::uint64_t exposed_comm_ns = 0;
  bool straggler = false;  // flagged (stragglers.hpp), on any measure
};

struct RankRow {
  std::optional<std::int64_t> rank;  // dl.rank; empty when the resource has none
  std::string instance_id;           // the first service.instance.id seen
  std::uint64_t spans = 0;
  std::vector<RankStepRow> steps;      // most frequent name first
  std::vector<RankGpuRow> gpu_steps;   // the same names, those with GPU times only
  std::vector<TimelineStep> timeline;  // thinned (see ReportOptions::timeline_*)
  std::uint64_t timeline_steps = 0;    // top-level step spans of every name
};

/// A flagged rank: its figures for one top-level step name, and the role it was compared in.
struct StragglerRow {
  std::string name;     // the top-level step name
  RankFigures figures;  // flagged_by says which measures flagged it
  RoleFindings role;
};

/// One top-level step name across the ranks that have it: the spread of their median step times.
struct StepNameRow {
  std::string name;
  std::uint64_t ranks = 0;
  double median_ns = 0;  // the median of the ranks' medians (p50)
  double min_ns = 0;     // the least rank median
  double p95_ns = 0;     // the 95th percentile of the rank medians
  double max_ns = 0;     // the largest
};

/// A captured step's time per group (name empty) or per group and name.
struct CapturedTime {
  std::string group;
  std::string name;
  std::uint64_t spans = 0;       // the step's spans of it, captured or exported
  std::uint64_t own_ns = 0;      // on the step's own thread, where it was the innermost span
  std::uint64_t within_ns = 0;   // the union of its spans' intervals within the step
  std::uint64_t longest_ns = 0;  // its longest span (names only)
};

/// A top-level step that held spans the flight recorder captured (docs/flight-recorder.md): the
/// detail exported only for the steps that went wrong, against the rank's median step.
struct CapturedStepRow {
  std::optional<std::int64_t> rank;
  std::string name;  // the step span's
  std::optional<std::int64_t> iteration;
  std::uint64_t start_ns = 0;  // Unix ns
  std::uint64_t duration_ns = 0;
  double median_ns = 0;                   // the rank's median top-level step of this name
  std::vector<std::string> reasons;       // its captures' lens.capture.reason, distinct, sorted
  std::vector<std::int64_t> capture_ids;  // their lens.capture.id, distinct, sorted
  std::uint64_t captured_spans = 0;
  std::uint64_t spans = 0;  // every span of the step, the step included
  /// The union of its spans of the communication group, on any thread: where a rank waits for
  /// the others at the collectives.
  std::uint64_t communication_ns = 0;
  std::vector<CapturedTime> groups;  // by own time, descending
  std::vector<CapturedTime> names;   // by own time, descending
  std::vector<StepBox> boxes;        // name ids index Report::captured_names
  std::uint64_t boxes_dropped = 0;
};

/// What the flight recorder's captures brought (Report::captured).
struct CapturedSummary {
  std::uint64_t spans = 0;                                       // spans with lens.capture.reason
  std::vector<std::pair<std::string, std::uint64_t>> by_reason;  // by reason
  std::uint64_t outside_steps = 0;                               // of them, in no top-level step
  /// Every top-level step holding captured spans, by step name, then iteration (then start),
  /// then the least time in communication first (then the longest): the rank the others waited
  /// for leads its iteration. At most kMaxCapturedSteps, the longest.
  std::vector<CapturedStepRow> steps;
  std::uint64_t steps_total = 0;                               // kept or not
  std::vector<std::pair<std::string, std::string>> box_names;  // (group, name) by StepBox::name_id
};

struct TruncatedRow {
  std::optional<std::int64_t> rank;
  std::string group;
  std::string name;
  std::uint64_t duration_ns = 0;
};

struct MalformedRow {
  std::string file;
  std::uint64_t line = 0;
  std::string error;
};

struct ReportOptions {
  /// The rule's floor, in percent of the role's median step time (stragglers.hpp).
  double straggler_threshold_pct = 5;
  bool heatmaps = false;                 // fill StepNameFindings::heatmap (for the HTML page)
  std::size_t timeline_per_rank = 1000;  // at most this many steps per rank on the timeline
  std::size_t timeline_total = 200000;   // and this many in all (but at least 50 per rank)
};

/// Counters of the parent links (0 in the usual case).
struct AncestryCounts {
  std::uint64_t unresolved = 0;  // distinct parents never seen (their children count as roots)
  std::uint64_t duplicates = 0;  // spans whose id another span of their trace had (one analysed)
  std::uint64_t cycles = 0;      // spans in a parent cycle (under no root, in no step)
  bool spilled = false;          // the spans went through temporary files
};

/// A log record kept for the HTML page's markers.
struct LogRow {
  std::optional<std::int64_t> rank;  // dl.rank of the record's resource
  std::uint64_t time_ns = 0;
  int severity_number = 0;
  std::string severity_text;
  std::string body;
};

/// The GPU times over the whole input (only in a report whose spans carried any).
struct GpuSummary {
  std::uint64_t spans = 0;  // GPU-timed spans read
  std::uint64_t steps = 0;  // top-level step spans with GPU times
  std::uint64_t busy_ns = 0;
  std::uint64_t idle_ns = 0;
  std::uint64_t exposed_comm_ns = 0;
};

/// One run's report (spans, metrics and logs of one nemo.run.id; or of none).
struct Report {
  std::vector<std::string> files;
  ReaderCounts input;                // the whole input's
  std::vector<std::string> run_ids;  // this run's nemo.run.id (empty for spans without one)
  std::uint64_t spans = 0;           // this run's spans
  std::uint64_t step_total_ns = 0;   // summed durations of top-level step spans
  std::uint64_t step_count = 0;
  std::vector<NameRow> names;              // by total time, descending
  std::vector<GroupRow> groups;            // by in-step self time, descending
  std::vector<OverlapRow> overlap_groups;  // by overlapped time, descending
  std::vector<OverlapRow> overlap_names;   // by overlapped time, descending
  std::vector<RankRow> ranks;              // by rank; unknown last
  std::vector<StepNameRow> step_names;     // every top-level step name, by name
  std::vector<StepNameFindings> findings;  // per step name: collectives, roles, rank figures
  std::vector<StragglerRow> stragglers;    // the flagged ranks, the furthest out first
  double straggler_threshold_pct = 0;
  std::uint64_t timeline_origin_ns = 0;  // the earliest step start on the timeline
  std::uint64_t truncated_count = 0;
  std::vector<TruncatedRow> truncated;  // the first kMaxTruncatedRows
  std::vector<MalformedRow> malformed;  // the first kMaxMalformedRows (of the whole input)
  AncestryCounts ancestry;
  std::vector<MetricRow> metrics;  // the metrics of the input's metrics lines (report_metrics.hpp)
  std::uint64_t log_count = 0;     // log records read (of the --run run)
  std::vector<LogRow> logs;        // the first kMaxLogRows, by time
  /// Some span carried gpu.* attributes: the report shows GPU time (otherwise nothing of it).
  bool has_gpu = false;
  GpuSummary gpu;
  CapturedSummary captured;              // the flight recorder's spans (none in most reports)
  std::vector<std::string> group_names;  // by group id, for TimelineGpu::boxes
};

/// Aggregates requests into one Report per run. Not thread-safe.
class ReportBuilder {
 public:
  static constexpr std::size_t kMaxTruncatedRows = 1000;
  static constexpr std::size_t kMaxMalformedRows = 100;
  /// Log records kept for the HTML page (the rest are counted): the first ones read, except that
  /// records of severity WARN or above replace lower ones once the list is full.
  static constexpr std::size_t kMaxLogRows = 2000;
  /// Captured steps kept in a report (the longest; the rest are counted).
  static constexpr std::size_t kMaxCapturedSteps = 10000;
  ReportBuilder();
  /// Keeps only the spans, metrics and logs whose resource has nemo.run.id `run_id` (empty: all).
  explicit ReportBuilder(std::string run_id);
  ~ReportBuilder();
  ReportBuilder(const ReportBuilder&) = delete;
  ReportBuilder& operator=(const ReportBuilder&) = delete;

  void add_file(const std::string& path) { files_.push_back(path); }
  /// Throws FileError when the spans cannot be kept (a temporary file, span_spill.hpp).
  void add(const ParsedRequest& request);
  void add_malformed(const MalformedLine& line);
  /// One report per run: the runs by nemo.run.id, the spans without one last; one empty report
  /// when nothing was read. The builder is left empty of pending state. `input` is the reader's
  /// counts. Throws FileError when the kept spans cannot be read back.
  std::vector<Report> finish(const ReportOptions& options, const ReaderCounts& input);

 private:
  class Run;  // one run's figures (report_builder.cpp)
  Run& run(const std::string& run_id);

  std::string run_filter_;  // --run: the only nemo.run.id reported (empty: every one)
  std::vector<std::string> files_;
  std::vector<MalformedRow> malformed_;
  SpanSpill spill_;  // every run's spans; SpanFacts::rank is an index into slots_
  std::map<std::string, std::unique_ptr<Run>> runs_;
  /// The (run, rank) each SpanFacts::rank value stands for.
  struct Slot {
    Run* run;
    std::int64_t rank;  // dl.rank, or kNoRank
  };
  std::vector<Slot> slots_;
  std::vector<Run*> resource_runs_;  // per resource of the request being added
};

}  // namespace nemo::lens::cli
