// Who holds a synchronous job back. In a job whose ranks meet at collectives (DDP, FSDP, tensor
// or pipeline parallelism) every rank's step lasts as long as the slowest rank's: the others wait
// inside the collective, so step time per rank cannot name the slow one. This analysis matches
// the top-level steps of one run across its ranks (by their `iteration` attribute, else their
// order) and, within a step, the collectives (outermost spans of the communication group) by
// name and order. A rank's arrival is its collective span's start; the last rank to arrive is that
// collective's straggler, and every other rank waited from its arrival to the last arrival (never
// beyond its span). Per rank: how late it was (how much less than the median rank it waited),
// what it made the others wait, its own time per group against the median rank's (and its GPU
// busy time per group), and a robust rule (median and MAD) that flags the ranks that are out.
// Ranks whose steps hold different span names (pipeline stages, a rank that evaluates) are in
// different roles and are compared only within their role. docs/report.md#stragglers has the
// rule with the demo's figures.
//
//   StragglerAnalysis analysis;
//   analysis.add_step(rank, step);                   // every top-level step of the run
//   std::vector<StepNameFindings> found = analysis.finish(tables, {.floor_pct = 5});
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "report/step_breakdown.hpp"

namespace nemo::lens::cli {

/// The rank key of spans whose resource has no dl.rank.
inline constexpr std::int64_t kNoRank = INT64_MIN;

/// What flagged a straggler.
enum class StragglerMeasure : std::uint8_t {
  kArrival,   // late at the collectives: it waited less than the median rank of its role
  kStepTime,  // its median step time
  kGpuBusy,   // its median GPU busy time per step
};

/// The rule's width: a rank is out when its figure is more than this many scaled MADs
/// (1.4826 x the median absolute deviation, the standard deviation of normal noise) above the
/// median rank's, the modified z-score of Iglewicz and Hoaglin.
inline constexpr double kStragglerMads = 3.5;

/// Which of `values` are out: more than max(kStragglerMads x 1.4826 x MAD, `floor`,
/// kStragglerMads x the standard error of the value's excess) above their median (the mean of the
/// two middle ones for an even count). `standard_errors`, one per value (any other count: none),
/// are each value's own noise; the excess's error is hypot(standard_errors[i], the median's), the
/// median's being sqrt(pi / 2) x median(standard_errors) / sqrt(n). So a rank whose figure moves
/// a lot from step to step must be further out, and with a few ranks, where the MAD can be near 0
/// by chance, a rank is not named for a few steps' worth of noise. Needs at least 3 values (with
/// 2, each is as far from their median as the other); fewer flag none.
std::vector<bool> robust_outliers(std::span<const double> values, double floor,
                                  std::span<const double> standard_errors = {});

/// The median of `values` (sorted in place): the middle one, or the mean of the two middle ones;
/// 0 for none.
double median_of(std::vector<double>& values);

/// The mean of `values` (sorted in place) without its floor(n / 10) lowest and highest; 0 for
/// none.
double trimmed_mean(std::vector<double>& values);

/// The standard error of trimmed_mean(`values`) (sorted in place), Tukey and McLaughlin's: the
/// standard deviation of `values` winsorized at the same count g = floor(n / 10), over
/// (1 - 2g / n) x sqrt(n). 0 for fewer than 2 values.
double trimmed_mean_standard_error(std::vector<double>& values);

/// The standard error of median_of(`values`) (sorted in place) for noise of any scale:
/// sqrt(pi / 2) x 1.4826 x MAD / sqrt(n), the normal case's with the MAD standing in for the
/// standard deviation, so that a few outlying steps do not widen it. 0 for fewer than 2 values.
double median_standard_error(std::vector<double>& values);

/// One group's time per step on a rank, beside the median over the ranks of its role.
struct GroupPerStep {
  std::string group;
  double ns = 0;
  double median_ns = 0;
};

/// How often a rank arrived last into the collectives of one name.
struct LastInto {
  std::string name;
  std::uint64_t last = 0;  // instances it was the last to arrive into
  std::uint64_t of = 0;    // instances it was in
};

/// One rank's figures for one top-level step name.
struct RankFigures {
  std::optional<std::int64_t> rank;  // dl.rank; empty when the resource has none
  std::uint32_t role = 0;            // index into StepNameFindings::roles
  std::uint64_t steps = 0;
  double step_p50_ns = 0;       // exact
  std::uint64_t gpu_steps = 0;  // steps with GPU times
  double gpu_busy_p50_ns = 0;
  // At the collectives (all 0 when none of its steps' collectives matched another rank's):
  std::uint64_t matched_steps = 0;    // its steps matched with another rank's, with collectives
  std::uint64_t matched_step_ns = 0;  // their time
  std::uint64_t collectives = 0;      // collective instances it was in
  std::uint64_t last_count = 0;       // of which it arrived last
  std::vector<LastInto> last_into;    // per collective name, most often last first
  std::uint64_t waited_ns = 0;        // its waits (in each step their union), summed
  std::uint64_t caused_ns = 0;        // the others' waits for it (it arrived last), summed
  std::uint64_t caused_waits = 0;     // (step, other rank) pairs in its matched steps
  std::uint64_t others_step_ns = 0;   // those other ranks' step time in those steps
  /// How late it arrives, per step: (the median wait of its role's ranks in a step − its wait),
  /// averaged over its matched steps but the tenth highest and the tenth lowest (trimmed_mean()),
  /// so that a one-off hiccup does not make a straggler and a rank late in most steps stands out
  /// of noise even when it is not late in every one. 0 without matched steps.
  double late_ns = 0;
  // The standard errors of late_ns, step_p50_ns and gpu_busy_p50_ns over the rank's steps
  // (trimmed_mean_standard_error(), median_standard_error()): the rule's guard against noise.
  double late_se_ns = 0;
  double step_p50_se_ns = 0;
  double gpu_busy_p50_se_ns = 0;
  std::vector<GroupPerStep> groups;          // own time per step per group (on the step's thread)
  std::vector<GroupPerStep> gpu_groups;      // GPU busy per step per group (leaf GPU-timed spans)
  std::vector<StragglerMeasure> flagged_by;  // empty: not a straggler
  bool straggler() const { return !flagged_by.empty(); }
};

/// The ranks of one step name that run the same spans.
struct RoleFindings {
  std::vector<std::string> names;  // "group/name" of the spans in most of their steps, sorted
  std::uint64_t ranks = 0;
  double median_step_ns = 0;      // the median over its ranks of their median step time
  double median_late_ns = 0;      // of their lateness (the ranks with matched steps)
  double median_gpu_busy_ns = 0;  // of their median GPU busy per step (the ranks with GPU times)
  double floor_ns = 0;            // the least excess the rule names: floor_pct of median_step_ns
};

/// A rank x step matrix for the HTML page's heat map: one row per rank, the steps (by key)
/// binned into at most a few hundred columns, each cell the mean over its steps.
struct Heatmap {
  std::vector<std::optional<std::int64_t>> ranks;  // by rank
  std::uint64_t steps = 0;                         // distinct step keys
  std::uint64_t per_column = 1;                    // step keys per column (the last may have fewer)
  std::vector<std::vector<std::optional<double>>> step_ns;  // [row][column]
  std::vector<std::vector<std::optional<double>>> late_ns;  // empty: no collective matched
};

/// Everything found for one top-level step name of a run.
struct StepNameFindings {
  std::string name;
  bool by_iteration = false;              // steps matched by their iteration attribute
  std::uint64_t matched_collectives = 0;  // collective instances matched across ranks
  std::vector<RoleFindings> roles;
  std::vector<RankFigures> ranks;  // by rank, the rank without dl.rank last
  Heatmap heatmap;
};

struct StragglerOptions {
  /// A rank is named only when its excess is above this share of its role's median step time
  /// (percent): a floor under the MAD rule, so that a job of nearly equal ranks names none.
  double floor_pct = 5;
  /// Whether to fill StepNameFindings::heatmap (the HTML page draws it).
  bool heatmap = true;
  /// The heat map's columns: at most this many, and at most max_heatmap_cells / rows.
  std::size_t max_heatmap_columns = 400;
  std::size_t max_heatmap_cells = 400000;
};

/// The names the analysis reports: per name id its span name, group and kind.
struct NameTables {
  const std::vector<std::string>& names;        // by name id
  const std::vector<std::string>& group_names;  // by group id
  const std::vector<NameKind>& kinds;           // by name id
};

/// Collects the top-level steps of one run, then matches them across ranks. Not thread-safe.
class StragglerAnalysis {
 public:
  /// `rank`: the report's rank key (kNoRank without dl.rank).
  void add_step(std::int64_t rank, const StepResult& step);

  /// Per top-level step name (in name order), the matching, the figures and the flagged ranks.
  /// Depends only on the steps added, not on their order.
  std::vector<StepNameFindings> finish(const NameTables& tables,
                                       const StragglerOptions& options) const;

 private:
  static constexpr std::uint64_t kNoGpu = UINT64_MAX;
  // One top-level step: 64 bytes (kept for every step of the run until finish()).
  struct Sample {
    std::int64_t rank = 0;
    std::int64_t iteration = 0;
    std::uint64_t span_id = 0;
    std::uint64_t start_ns = 0;
    std::uint64_t duration_ns = 0;
    std::uint64_t gpu_busy_ns = kNoGpu;
    std::uint32_t name_id = 0;
    std::uint32_t collectives_begin = 0;  // into collectives_
    std::uint32_t collectives_end = 0;
    bool has_iteration = false;
  };
  static_assert(sizeof(Sample) == 64);
  // One rank's steps of one name, added up.
  struct RankSteps {
    std::uint64_t steps = 0;
    std::map<std::uint32_t, std::uint64_t> present;   // name id -> steps holding it
    std::map<std::uint32_t, std::uint64_t> own;       // group id -> own time
    std::map<std::uint32_t, std::uint64_t> gpu_busy;  // group id -> GPU busy
  };
  // Fills f.heatmap from the samples `indices` (by rank, each rank's range in `ranges`), with
  // each sample's step key and lateness (NaN: not matched).
  void fill_heatmap(StepNameFindings& f, const std::vector<std::uint32_t>& indices,
                    const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                    const std::vector<std::int64_t>& key, const std::vector<double>& late,
                    const StragglerOptions& options) const;

  std::vector<Sample> samples_;
  std::vector<Collective> collectives_;
  std::map<std::pair<std::uint32_t, std::int64_t>, RankSteps> ranks_;  // (step name, rank)
};

}  // namespace nemo::lens::cli
