// What `lens report` computes from the spans it streams: time per span group and name, the step
// time of every rank, stragglers, truncated spans and malformed lines (and the metrics of the
// metrics lines, report_metrics.hpp). Memory grows with the number of distinct (group, name)
// pairs, ranks and step names, never with the number of spans: durations go into DurationSketch
// summaries, and the parent/child relation needed to find the top-level step spans and the time
// inside them is kept only for spans whose parent has not been seen yet, as per-parent
// aggregates (docs/report.md has the rules and the limits).
//
//   ReportBuilder builder;
//   reader.read(file, [&](const ParsedRequest& r) { builder.add(r); },
//               [&](const MalformedLine& m) { builder.add_malformed(m); });
//   const Report report = builder.finish({.straggler_threshold_pct = 20});
#pragma once

#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/span_reader.hpp"
#include "report/report_metrics.hpp"
#include "report/report_sketch.hpp"

namespace nemo::lens::cli {

/// The group name reported for spans without a nemo.span.group attribute (or an empty one).
inline constexpr std::string_view kNoGroup = "(none)";
/// The group whose spans are steps.
inline constexpr std::string_view kStepGroup = "step";

/// One step drawn on the timeline: its start (Unix ns) and duration.
struct TimelineStep {
  std::uint64_t start_ns = 0;
  std::uint64_t duration_ns = 0;
};

/// Keeps an evenly thinned subset of at most `limit` steps in memory bounded by `limit`: every
/// step until the limit, then every 2nd, 4th, ... step in arrival order.
class TimelineSampler {
 public:
  TimelineSampler() = default;
  explicit TimelineSampler(std::size_t limit) : limit_(limit) {}
  void add(const TimelineStep& step);
  void merge(const TimelineSampler& other);
  const std::vector<TimelineStep>& steps() const { return kept_; }
  /// Steps offered, kept or not.
  std::uint64_t seen() const { return seen_; }

 private:
  std::size_t limit_ = 1000;
  std::uint64_t stride_ = 1;
  std::uint64_t seen_ = 0;
  std::vector<TimelineStep> kept_;
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
  std::uint64_t in_step_ns = 0;       // time of these spans inside top-level step spans
  std::uint64_t in_step_self_ns = 0;  // the same, self time (minus direct children)
};

/// Self time inside top-level step spans, summed per group.
struct GroupRow {
  std::string group;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  std::uint64_t in_step_ns = 0;
  std::uint64_t in_step_self_ns = 0;
};

/// The distribution of one rank's top-level step spans of one name.
struct RankStepRow {
  std::string name;
  std::uint64_t count = 0;
  std::uint64_t total_ns = 0;
  double p50_ns = 0;
  double p95_ns = 0;
  std::uint64_t max_ns = 0;
  bool straggler = false;
};

struct RankRow {
  std::optional<std::int64_t> rank;  // dl.rank; empty when the resource has none
  std::string instance_id;           // the first service.instance.id seen
  std::uint64_t spans = 0;
  std::vector<RankStepRow> steps;      // most frequent name first
  std::vector<TimelineStep> timeline;  // thinned (see ReportOptions::timeline_*)
  std::uint64_t timeline_steps = 0;    // top-level step spans of every name
};

/// A rank whose median step time exceeds the median across ranks by more than the threshold.
struct StragglerRow {
  std::optional<std::int64_t> rank;
  std::string name;
  double p50_ns = 0;
  double median_ns = 0;   // the median of the ranks' medians for this step name
  double excess_pct = 0;  // (p50 / median - 1) * 100
};

/// The median across ranks of one step name.
struct StepNameRow {
  std::string name;
  std::uint64_t ranks = 0;
  double median_ns = 0;
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
  double straggler_threshold_pct = 20;
  std::size_t timeline_per_rank = 1000;  // at most this many steps per rank on the timeline
  std::size_t timeline_total = 200000;   // and this many in all (but at least 50 per rank)
};

/// Counters of the bounded parent/child bookkeeping (0 in the usual case).
struct AncestryCounts {
  std::uint64_t evicted = 0;       // pending parents given up because of the limit
  std::uint64_t unresolved = 0;    // pending parents never seen (resolved as roots at the end)
  std::uint64_t peak_pending = 0;  // the most pending parents held at once
};

/// A log record kept for the HTML page's markers.
struct LogRow {
  std::optional<std::int64_t> rank;  // dl.rank of the record's resource
  std::uint64_t time_ns = 0;
  int severity_number = 0;
  std::string severity_text;
  std::string body;
};

struct Report {
  std::vector<std::string> files;
  ReaderCounts input;
  std::vector<std::string> run_ids;  // distinct nemo.run.id values (at most 16)
  std::uint64_t step_total_ns = 0;   // summed durations of top-level step spans
  std::uint64_t step_count = 0;
  std::vector<NameRow> names;           // by total time, descending
  std::vector<GroupRow> groups;         // by in-step self time, descending
  std::vector<RankRow> ranks;           // by rank; unknown last
  std::vector<StepNameRow> step_names;  // every top-level step name, by name
  std::vector<StragglerRow> stragglers;
  double straggler_threshold_pct = 0;
  std::uint64_t timeline_origin_ns = 0;  // the earliest step start on the timeline
  std::uint64_t truncated_count = 0;
  std::vector<TruncatedRow> truncated;  // the first kMaxTruncatedRows
  std::vector<MalformedRow> malformed;  // the first kMaxMalformedRows
  AncestryCounts ancestry;
  std::vector<MetricRow> metrics;  // the metrics of the input's metrics lines (report_metrics.hpp)
  std::uint64_t log_count = 0;     // log records read (of the --run run)
  std::vector<LogRow> logs;        // the first kMaxLogRows, by time
};

/// Aggregates requests into a Report. Not thread-safe.
class ReportBuilder {
 public:
  static constexpr std::size_t kMaxTruncatedRows = 1000;
  static constexpr std::size_t kMaxMalformedRows = 100;
  static constexpr std::size_t kMaxRunIds = 16;
  /// Log records kept for the HTML page (the rest are counted): the first ones read, except that
  /// records of severity WARN or above replace lower ones once the list is full.
  static constexpr std::size_t kMaxLogRows = 2000;
  /// Pending parents kept before the oldest is given up (resolved as a root).
  static constexpr std::size_t kMaxPendingParents = 100000;
  /// Recently seen spans remembered so that a child arriving after its parent is still placed.
  static constexpr std::size_t kRecentSpans = 65536;

  ReportBuilder();
  /// Keeps only the spans, metrics and logs whose resource has nemo.run.id `run_id` (empty: all);
  /// the report still lists every run id it saw.
  explicit ReportBuilder(std::string run_id);

  void add_file(const std::string& path) { files_.push_back(path); }
  void add(const ParsedRequest& request);
  void add_malformed(const MalformedLine& line);
  /// The report; the builder is left empty of pending state. `input` is the reader's counts.
  Report finish(const ReportOptions& options, const ReaderCounts& input);

 private:
  using RankKey = std::int64_t;  // dl.rank, or kUnknownRank
  static constexpr RankKey kUnknownRank = INT64_MIN;
  std::string run_filter_;  // --run: the only nemo.run.id reported (empty: every one)

  void add_log(const LogEntry& log, const SpanResource& resource);

  struct PendingKey {
    RankKey rank;
    std::uint64_t span_id;
    bool operator==(const PendingKey&) const = default;
  };
  struct PendingKeyHash {
    std::size_t operator()(const PendingKey& k) const noexcept {
      return std::hash<std::uint64_t>()(
          k.span_id ^ (static_cast<std::uint64_t>(k.rank) * 0x9E3779B97F4A7C15ull));
    }
  };

  // Step spans not yet known to have no step ancestor, aggregated per name.
  struct StepCandidates {
    std::uint32_t name_id;
    DurationSketch durations;
    TimelineSampler timeline;
  };

  // What the descendants of a span not yet seen contribute, waiting for it.
  struct Pending {
    std::vector<std::pair<std::uint32_t, std::uint64_t>> total;  // name id -> ns
    std::vector<std::pair<std::uint32_t, std::uint64_t>> self;   // name id -> ns
    std::vector<StepCandidates> candidates;
    std::uint64_t children_ns = 0;  // summed durations of the direct children
    std::list<PendingKey>::iterator age;
  };

  struct NameStats {
    std::string group;
    std::string name;
    bool is_step = false;
    DurationSketch durations;
    std::uint64_t in_step_ns = 0;
    std::uint64_t in_step_self_ns = 0;
  };

  struct RankState {
    std::string instance_id;
    std::uint64_t spans = 0;
    std::map<std::uint32_t, DurationSketch> steps;  // top-level step spans per name id
    TimelineSampler timeline;
  };

  struct Recent {
    bool is_step;
    std::uint64_t parent;
  };

  std::uint32_t name_id(const SpanRecord& span);
  void add_span(RankKey rank, const SpanRecord& span);
  Pending take_pending(const PendingKey& key);
  Pending& pending_for(const PendingKey& key);
  void merge_into(Pending& into, Pending&& from);
  // The span's descendants in `p` lie inside a step span: count them, drop their candidates.
  void resolve_inside_step(Pending& p);
  // The chain above `p` ends without a step span: its candidates are top-level steps.
  void resolve_as_root(RankKey rank, Pending& p);
  void remember(const PendingKey& key, const Recent& value);

  std::vector<std::string> files_;
  std::unordered_map<std::string, std::uint32_t> name_ids_;  // "group\x1fname" -> index
  std::string key_buffer_;
  std::vector<NameStats> names_;
  std::map<RankKey, RankState> ranks_;
  std::unordered_map<PendingKey, Pending, PendingKeyHash> pending_;
  std::list<PendingKey> pending_age_;  // oldest first
  std::unordered_map<PendingKey, Recent, PendingKeyHash> recent_;
  std::vector<PendingKey> recent_ring_;
  std::size_t recent_next_ = 0;
  std::uint64_t step_total_ns_ = 0;
  std::uint64_t step_count_ = 0;
  std::vector<std::string> run_ids_;
  std::uint64_t truncated_count_ = 0;
  std::vector<TruncatedRow> truncated_;
  std::vector<MalformedRow> malformed_;
  AncestryCounts ancestry_;
  MetricAggregator metrics_;
  std::uint64_t log_count_ = 0;
  std::vector<LogRow> logs_;
  std::size_t logs_below_warn_ = 0;  // of logs_, the ones a warning may replace
};

}  // namespace nemo::lens::cli
