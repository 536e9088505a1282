// The cross-rank analysis of `lens report` (tools/lens/report/stragglers.hpp): the rule (median
// and MAD with a floor and the standard error of each rank's excess), who arrived last at each
// collective and who waited for whom (with the arithmetic of each case in its comments),
// overlapping waits counted once, steps matched by iteration or by order, roles, and the heat
// map's cells.
#include "report/stragglers.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

namespace nemo::lens::cli {
namespace {

constexpr std::uint64_t kMs = 1'000'000;

// Name ids: 0 the step, 1 forward_backward, 2 an all-reduce (communication), 3 a loss span.
const std::vector<std::string> kNames = {"train_step", "forward_backward", "allreduce", "loss"};
const std::vector<std::string> kGroups = {"step", "forward_backward", "communication"};
const std::vector<NameKind> kKinds = {
    {0, true, false}, {1, false, false}, {2, false, true}, {1, false, false}};
constexpr std::uint32_t kStep = 0, kFwd = 1, kAllReduce = 2, kLoss = 3;

// A step of `rank` at `start_ms` lasting `duration_ms`, whose collectives arrive at `arrivals`
// (ms) and end at `end_ms`; its own time is forward_backward until the first arrival and the
// all-reduce after it.
StepResult step(std::uint64_t span_id, std::optional<std::int64_t> iteration,
                std::uint64_t start_ms, std::uint64_t duration_ms,
                const std::vector<std::uint64_t>& arrivals, std::uint64_t end_ms,
                bool loss = false) {
  StepResult s;
  s.span_id = span_id;
  s.name_id = kStep;
  s.iteration = iteration;
  s.start_ns = start_ms * kMs;
  s.duration_ns = duration_ms * kMs;
  const std::uint64_t first = arrivals.empty() ? start_ms + duration_ms : arrivals.front();
  s.own_by_name = {{kFwd, (first - start_ms) * kMs},
                   {kAllReduce, (start_ms + duration_ms - first) * kMs}};
  s.within_by_name = {{kStep, s.duration_ns}, {kFwd, (first - start_ms) * kMs}};
  if (!arrivals.empty()) s.within_by_name.push_back({kAllReduce, 1});
  if (loss) s.within_by_name.push_back({kLoss, 1});
  for (const std::uint64_t a : arrivals)
    s.collectives.push_back({kAllReduce, a * kMs, end_ms * kMs});
  return s;
}

std::vector<StepNameFindings> finish(const StragglerAnalysis& a, double floor_pct = 5) {
  StragglerOptions options;
  options.floor_pct = floor_pct;
  return a.finish({kNames, kGroups, kKinds}, options);
}

TEST(RobustOutliers, MedianMadAndTheFloor) {
  // MAD 0: the floor decides, strictly.
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 1, 1, 1, 10}, 5),
            (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 1, 1, 1, 10}, 9), (std::vector<bool>(5, false)));
  // Median 3, MAD median(2, 1, 0, 1, 97) = 1: the bound is 3.5 x 1.4826 = 5.19 above 3.
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 2, 3, 4, 100}, 0),
            (std::vector<bool>{false, false, false, false, true}));
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 2, 3, 4, 8.1}, 0),
            (std::vector<bool>{false, false, false, false, false}));  // 5.1 is inside
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 2, 3, 4, 8.2}, 0),
            (std::vector<bool>{false, false, false, false, true}));  // 5.2 is out
  // Below the median is never out; two values say nothing of which is odd.
  EXPECT_EQ(robust_outliers(std::vector<double>{10, 10, 10, -100}, 0),
            (std::vector<bool>(4, false)));
  EXPECT_EQ(robust_outliers(std::vector<double>{1, 100}, 0), (std::vector<bool>(2, false)));
}

// Stop 59's CI: 4 ranks, three of them within 0.4 ms of each other (MAD 0.2 ms), one 1.3 ms above
// their median in a balanced job, past the bound of max(3.5 x 1.4826 x 0.215, 1.0) = 1.12 ms. The
// standard error of its excess over the median widens the bound: hypot(its own, the median's),
// the median's being sqrt(pi / 2) x median(errors) / sqrt(4).
TEST(RobustOutliers, TheStandardErrorOfARanksExcessWidensItsBound) {
  const std::vector<double> late = {-0.03, 1.03, -0.46, -0.45};  // median -0.24, rank 1 +1.27
  EXPECT_EQ(robust_outliers(late, 1.0), (std::vector<bool>{false, true, false, false}));
  // Errors of 0.3 each: the median's 1.2533 x 0.3 / 2 = 0.188, the excess's hypot(0.3, 0.188)
  // = 0.354, 3.5 x 0.354 = 1.239: 1.27 is out. At 0.33 each, 3.5 x 0.389 = 1.363: it is not.
  EXPECT_EQ(robust_outliers(late, 1.0, std::vector<double>(4, 0.3)),
            (std::vector<bool>{false, true, false, false}));
  EXPECT_EQ(robust_outliers(late, 1.0, std::vector<double>(4, 0.33)),
            (std::vector<bool>(4, false)));
  // A rank's own error widens its bound alone: 0.4 for rank 1 (the median's 1.2533 x 0.1 / 2 =
  // 0.063, 3.5 x hypot(0.4, 0.063) = 1.417) keeps it in; 0.4 for rank 0 leaves rank 1 out.
  EXPECT_EQ(robust_outliers(late, 1.0, std::vector<double>{0.1, 0.4, 0.1, 0.1}),
            (std::vector<bool>(4, false)));
  EXPECT_EQ(robust_outliers(late, 1.0, std::vector<double>{0.4, 0.1, 0.1, 0.1}),
            (std::vector<bool>{false, true, false, false}));
}

// Checked against the textbook formulas by hand: the comments hold the arithmetic.
TEST(StandardErrors, OfTheTrimmedMeanAndOfTheMedian) {
  std::vector<double> one = {3};
  EXPECT_EQ(trimmed_mean_standard_error(one), 0.0);
  EXPECT_EQ(median_standard_error(one), 0.0);
  // Under 10 values nothing is winsorized: the sample standard deviation over sqrt(n).
  // {1, 2, 3, 4}: mean 2.5, squares 2.25 + 0.25 + 0.25 + 2.25 = 5, sd sqrt(5 / 3), / 2.
  std::vector<double> four = {4, 1, 3, 2};
  EXPECT_DOUBLE_EQ(trimmed_mean_standard_error(four), std::sqrt(5.0 / 3) / 2);
  // 10 values, g = 1: 0 and 100 become 1 and 8, so {1, 1, 2, 3, 4, 5, 6, 7, 8, 8}: mean 4.5,
  // squares 2 x 12.25 + 6.25 + 2.25 + 0.25 + 0.25 + 2.25 + 6.25 + 2 x 12.25 = 66.5;
  // sd sqrt(66.5 / 9), over (1 - 2 / 10) x sqrt(10).
  std::vector<double> ten = {100, 0, 1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_DOUBLE_EQ(trimmed_mean_standard_error(ten), std::sqrt(66.5 / 9) / (0.8 * std::sqrt(10.0)));
  // The median's: {1, 2, 3, 4, 100} has median 3 and MAD median(2, 1, 0, 1, 97) = 1, so
  // sqrt(pi / 2) x 1.4826 / sqrt(5); the outlying 100 counts no more than a 5 would.
  std::vector<double> five = {100, 1, 2, 3, 4};
  EXPECT_NEAR(median_standard_error(five), std::sqrt(std::acos(-1.0) / 2) * 1.4826 / std::sqrt(5.0),
              1e-12);
  std::vector<double> same = {7, 7, 7, 7};
  EXPECT_EQ(median_standard_error(same), 0.0);  // no noise: no guard beyond the MAD and the floor
}

TEST(TrimmedMean, LeavesOutTheTenthAtEachEnd) {
  std::vector<double> none;
  EXPECT_EQ(trimmed_mean(none), 0.0);
  std::vector<double> few = {3, 1, 2};  // under 10 values: all of them
  EXPECT_DOUBLE_EQ(trimmed_mean(few), 2.0);
  // 20 values: the 2 lowest and the 2 highest are left out (a 1000 ms hiccup among them).
  std::vector<double> steps = {1000, -50, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3};
  EXPECT_DOUBLE_EQ(trimmed_mean(steps), (1.0 * 7 + 2.0 * 8 + 3.0 * 1) / 16);  // -50, 1, 3, 1000 out
}

TEST(StragglerAnalysis, WhoArrivedLastAndWhoWaitedForWhom) {
  // Two steps of 50 ms on three ranks, one all-reduce each, ending at 35 and 95 ms.
  //   step 1: arrivals r0 10, r1 30, r2 20: r1 last; r0 waits 20, r2 10; r1 caused 30.
  //           median wait 10: late r0 -10, r1 +10, r2 0.
  //   step 2: arrivals r0 70, r1 70, r2 90: r2 last; r0 and r1 wait 20; r2 caused 40.
  //           median wait 20: late r0 0, r1 0, r2 +20.
  StragglerAnalysis a;
  a.add_step(0, step(1, 1, 0, 50, {10}, 35));
  a.add_step(1, step(2, 1, 0, 50, {30}, 35));
  a.add_step(2, step(3, 1, 0, 50, {20}, 35));
  a.add_step(0, step(4, 2, 60, 50, {70}, 95));
  a.add_step(1, step(5, 2, 60, 50, {70}, 95));
  a.add_step(2, step(6, 2, 60, 50, {90}, 95));
  const auto found = finish(a);
  ASSERT_EQ(found.size(), 1u);
  const StepNameFindings& f = found[0];
  EXPECT_EQ(f.name, "train_step");
  EXPECT_TRUE(f.by_iteration);
  EXPECT_EQ(f.matched_collectives, 2u);
  ASSERT_EQ(f.ranks.size(), 3u);
  const RankFigures &r0 = f.ranks[0], &r1 = f.ranks[1], &r2 = f.ranks[2];
  EXPECT_EQ(r0.waited_ns, 40 * kMs);
  EXPECT_EQ(r1.waited_ns, 20 * kMs);
  EXPECT_EQ(r2.waited_ns, 10 * kMs);
  EXPECT_EQ(r0.caused_ns, 0u);
  EXPECT_EQ(r1.caused_ns, 30 * kMs);
  EXPECT_EQ(r2.caused_ns, 40 * kMs);
  EXPECT_EQ(r2.last_count, 1u);
  EXPECT_EQ(r2.collectives, 2u);
  ASSERT_EQ(r2.last_into.size(), 1u);
  EXPECT_EQ(r2.last_into[0].name, "allreduce");
  EXPECT_EQ(r2.last_into[0].last, 1u);
  EXPECT_EQ(r2.last_into[0].of, 2u);
  // Lateness: the mean over a rank's steps (of -10 and 0: -5; too few steps to trim).
  EXPECT_DOUBLE_EQ(r0.late_ns, -5.0 * kMs);
  EXPECT_DOUBLE_EQ(r1.late_ns, 5.0 * kMs);
  EXPECT_DOUBLE_EQ(r2.late_ns, 10.0 * kMs);
  // What it cost the others: 2 others in each of 2 steps, each step 50 ms long.
  EXPECT_EQ(r2.caused_waits, 4u);
  EXPECT_EQ(r2.others_step_ns, 200 * kMs);
  EXPECT_EQ(r0.matched_steps, 2u);
  EXPECT_EQ(r0.matched_step_ns, 100 * kMs);
  // Nobody is 5 % of 50 ms (2.5 ms) out of line with a MAD this wide.
  for (const RankFigures& r : f.ranks) EXPECT_FALSE(r.straggler()) << *r.rank;
}

TEST(StragglerAnalysis, OverlappingWaitsCountOnceAndGoToTheEarlierWait) {
  // One step, two all-reduces (DDP buckets). r0 arrives at 10 and 15; r1 last into the first at
  // 30, r2 last into the second at 40; both end at 45. r0's waits [10,30) and [15,40) overlap:
  // their union is [10,40), 30 ms, of which [10,30) goes to r1 (the wait that began first) and
  // [30,40) to r2. r1 waits [30,40) for r2 (10); r2 waits [20,30) for r1 (10).
  StragglerAnalysis a;
  a.add_step(0, step(1, 7, 0, 50, {10, 15}, 45));
  a.add_step(1, step(2, 7, 0, 50, {30, 30}, 45));
  a.add_step(2, step(3, 7, 0, 50, {20, 40}, 45));
  const auto found = finish(a);
  ASSERT_EQ(found.size(), 1u);
  const auto& r = found[0].ranks;
  EXPECT_EQ(found[0].matched_collectives, 2u);
  EXPECT_EQ(r[0].waited_ns, 30 * kMs);
  EXPECT_EQ(r[1].waited_ns, 10 * kMs);
  EXPECT_EQ(r[2].waited_ns, 10 * kMs);
  EXPECT_EQ(r[1].caused_ns, (20 + 10) * kMs);  // r0's [10,30), r2's [20,30)
  EXPECT_EQ(r[2].caused_ns, (10 + 10) * kMs);  // r0's [30,40), r1's [30,40)
  EXPECT_EQ(r[0].caused_ns + r[1].caused_ns + r[2].caused_ns,
            r[0].waited_ns + r[1].waited_ns + r[2].waited_ns);
}

TEST(StragglerAnalysis, AWaitNeverOutlastsItsSpan) {
  // r0's all-reduce span ends at 15 although the last rank arrives at 30: it waited 5.
  StragglerAnalysis a;
  StepResult early = step(1, 1, 0, 50, {10}, 15);
  a.add_step(0, early);
  a.add_step(1, step(2, 1, 0, 50, {30}, 35));
  a.add_step(2, step(3, 1, 0, 50, {12}, 35));
  const auto r = finish(a)[0].ranks;
  EXPECT_EQ(r[0].waited_ns, 5 * kMs);
  EXPECT_EQ(r[2].waited_ns, 18 * kMs);
  EXPECT_EQ(r[1].caused_ns, 23 * kMs);
}

TEST(StragglerAnalysis, StepsAreMatchedByIterationElseByOrder) {
  // Steps at 0, 100 and 200 ms, 50 long; ranks 0 and 2 arrive 10 ms in, rank 1 30 ms in, and
  // every all-reduce ends 40 ms in. Rank 1's first step is missing.
  auto run = [](bool iterations, std::int64_t repeat = 0) {
    StragglerAnalysis a;
    std::uint64_t id = 1;
    for (std::int64_t rank = 0; rank < 3; ++rank) {
      for (std::int64_t it = 1; it <= 3; ++it) {
        if (rank == 1 && it == 1) continue;
        const auto t = static_cast<std::uint64_t>(it - 1) * 100;
        const std::optional<std::int64_t> key =
            iterations ? std::optional(rank == 0 && it == 3 && repeat ? repeat : it) : std::nullopt;
        a.add_step(rank, step(id++, key, t, 50, {t + (rank == 1 ? 30 : 10)}, t + 40));
      }
    }
    return finish(a)[0];
  };
  // By iteration: rank 1 meets the others in iterations 2 and 3, last by 20 ms each time: it
  // made 2 ranks wait 20 ms in 2 steps.
  const StepNameFindings by_iteration = run(true);
  EXPECT_TRUE(by_iteration.by_iteration);
  EXPECT_EQ(by_iteration.ranks[1].last_count, 2u);
  EXPECT_EQ(by_iteration.ranks[1].caused_ns, 2 * 2 * 20 * kMs);
  // By order, its first step (at 100) meets the others' first (at 0): it arrives at 130, after
  // their all-reduces ended at 40, so each waited its whole span from 10, 30 ms; the same in
  // the second; the third step has no rank 1.
  const StepNameFindings by_order = run(false);
  EXPECT_FALSE(by_order.by_iteration);
  EXPECT_EQ(by_order.ranks[1].last_count, 2u);
  EXPECT_EQ(by_order.ranks[1].caused_ns, 2 * 2 * 30 * kMs);
  EXPECT_FALSE(run(true, 2).by_iteration);  // rank 0 repeats iteration 2: the order decides
}

TEST(StragglerAnalysis, RanksThatRunOtherSpansAreARoleOfTheirOwn) {
  // Ranks 0-3 one role; ranks 4-6 have a loss span in every step: another role, each with its
  // own all-reduce. Rank 4 is 30 ms late in its role; rank 2 is late in the first. Each is
  // found against its own role only.
  StragglerAnalysis a;
  std::uint64_t id = 1;
  for (std::int64_t it = 1; it <= 5; ++it) {
    const std::uint64_t t = static_cast<std::uint64_t>(it) * 200;
    for (std::int64_t rank = 0; rank < 4; ++rank) {
      a.add_step(rank, step(id++, it, t, 100, {t + (rank == 2 ? 60 : 40)}, t + 70));
    }
    for (std::int64_t rank = 4; rank < 7; ++rank) {
      a.add_step(rank, step(id++, it, t, 150, {t + (rank == 4 ? 110 : 80)}, t + 120, true));
    }
  }
  const StepNameFindings f = finish(a)[0];
  ASSERT_EQ(f.roles.size(), 2u);
  EXPECT_EQ(f.roles[0].ranks, 4u);
  EXPECT_EQ(f.roles[1].ranks, 3u);
  EXPECT_EQ(f.roles[1].names, (std::vector<std::string>{
                                  "communication/allreduce", "forward_backward/forward_backward",
                                  "forward_backward/loss", "step/train_step"}));
  EXPECT_DOUBLE_EQ(f.roles[1].median_step_ns, 150.0 * kMs);
  std::vector<std::int64_t> flagged;
  for (const RankFigures& r : f.ranks) {
    if (r.straggler()) flagged.push_back(*r.rank);
  }
  EXPECT_EQ(flagged, (std::vector<std::int64_t>{2, 4}));
  EXPECT_EQ(f.ranks[4].flagged_by, std::vector<StragglerMeasure>{StragglerMeasure::kArrival});
  // Rank 4 made ranks 5 and 6 wait 30 ms a step; rank 2 ranks 0, 1 and 3 20 ms.
  EXPECT_EQ(f.ranks[4].caused_ns, 5 * 2 * 30 * kMs);
  EXPECT_EQ(f.ranks[2].caused_ns, 5 * 3 * 20 * kMs);
  EXPECT_EQ(f.ranks[2].caused_waits, 5u * 3);
  // Rank 2's own time per step: forward_backward 60 ms against the median rank's 40.
  ASSERT_FALSE(f.ranks[2].groups.empty());
  EXPECT_EQ(f.ranks[2].groups[0].group, "forward_backward");
  EXPECT_DOUBLE_EQ(f.ranks[2].groups[0].ns, 60.0 * kMs);
  EXPECT_DOUBLE_EQ(f.ranks[2].groups[0].median_ns, 40.0 * kMs);
}

TEST(StragglerAnalysis, TheHeatMapHasARowPerRankAndBinsTheSteps) {
  // 2 ranks x 5 steps of 10 + step ms; at most 2 columns: 3 steps, then 2.
  StragglerAnalysis a;
  std::uint64_t id = 1;
  for (std::int64_t rank = 0; rank < 2; ++rank) {
    for (std::uint64_t it = 1; it <= 5; ++it) {
      a.add_step(rank, step(id++, static_cast<std::int64_t>(it), it * 100, 10 + it, {}, 0));
    }
  }
  StragglerOptions options;
  options.max_heatmap_columns = 2;
  const StepNameFindings f = a.finish({kNames, kGroups, kKinds}, options)[0];
  const Heatmap& h = f.heatmap;
  EXPECT_EQ(h.ranks, (std::vector<std::optional<std::int64_t>>{0, 1}));
  EXPECT_EQ(h.steps, 5u);
  EXPECT_EQ(h.per_column, 3u);
  ASSERT_EQ(h.step_ns.size(), 2u);
  ASSERT_EQ(h.step_ns[0].size(), 2u);
  EXPECT_DOUBLE_EQ(*h.step_ns[0][0], 12.0 * kMs);  // mean of 11, 12, 13
  EXPECT_DOUBLE_EQ(*h.step_ns[0][1], 14.5 * kMs);  // mean of 14, 15
  EXPECT_TRUE(h.late_ns.empty());                  // no collectives
  options.heatmap = false;                         // only the HTML page draws it
  EXPECT_TRUE(a.finish({kNames, kGroups, kKinds}, options)[0].heatmap.ranks.empty());
}

}  // namespace
}  // namespace nemo::lens::cli
