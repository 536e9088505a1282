// The step analysis of `lens report` (tools/lens/report/step_breakdown.hpp) and the spill that
// feeds it (span_spill.hpp): exact figures for a DDP-like step, spans cut to their parents, and a
// property test against an independent computation that walks the step instant by instant; the
// spill gives every trace back whole, in memory and through temporary files.
#include "report/step_breakdown.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <span>
#include <vector>

#include "report/span_spill.hpp"

namespace nemo::lens::cli {
namespace {

// Names of the tests: 0 the step, 1 forward_backward, 2 optimizer, 3 all_reduce (group
// communication), 4 a nested step-group span, 5 data loading.
const std::vector<NameKind> kKinds = {{0, true},  {1, false}, {2, false},
                                      {3, false}, {0, true},  {4, false}};
constexpr std::uint32_t kStep = 0, kFwdBwd = 1, kOptimizer = 2, kAllReduce = 3, kInner = 4,
                        kData = 5;

SpanFacts span(std::uint64_t id, std::uint64_t parent, std::uint32_t name, std::uint64_t start,
               std::uint64_t end, std::int64_t thread = 1) {
  SpanFacts s;
  s.span_id = id;
  s.parent_span_id = parent;
  s.name_id = name;
  s.start_ns = start;
  s.end_ns = end;
  s.thread_id = thread;
  return s;
}

std::vector<StepResult> analyze(std::vector<SpanFacts> spans, TraceCounts* counts = nullptr) {
  StepAnalyzer analyzer(kKinds);
  std::vector<StepResult> steps;
  analyzer.analyze(spans, [&](const StepResult& r) { steps.push_back(r); });
  if (counts != nullptr) *counts = analyzer.counts();
  return steps;
}

std::map<std::uint32_t, std::uint64_t> as_map(const IdTimes& times) {
  return {times.begin(), times.end()};
}

const OverlapTimes* find(const std::vector<OverlapTimes>& rows, std::uint32_t id) {
  for (const OverlapTimes& o : rows) {
    if (o.id == id) return &o;
  }
  return nullptr;
}

TEST(StepAnalyzer, CommunicationOnAnotherThreadIsOverlappedAndPartlyExposed) {
  // step [0,100) on thread 1: forward_backward [0,70), optimizer [80,95); two all-reduces on
  // thread 2, [30,60) and [60,85): hidden behind forward_backward until 70, exposed in [70,80)
  // while the step's thread waited in no span, hidden behind the optimizer in [80,85).
  const auto steps = analyze({span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 0, 70),
                              span(3, 1, kOptimizer, 80, 95), span(4, 1, kAllReduce, 30, 60, 2),
                              span(5, 1, kAllReduce, 60, 85, 2)});
  ASSERT_EQ(steps.size(), 1u);
  const StepResult& s = steps[0];
  EXPECT_EQ(s.duration_ns, 100u);
  EXPECT_EQ(as_map(s.own_by_name),
            (std::map<std::uint32_t, std::uint64_t>{{kStep, 15}, {kFwdBwd, 70}, {kOptimizer, 15}}));
  ASSERT_EQ(s.overlap_by_name.size(), 1u);
  EXPECT_EQ(s.overlap_by_name[0].id, kAllReduce);
  EXPECT_EQ(s.overlap_by_name[0].spans, 2u);
  EXPECT_EQ(s.overlap_by_name[0].overlapped_ns, 55u);
  EXPECT_EQ(s.overlap_by_name[0].exposed_ns, 10u);
  const OverlapTimes* group = find(s.overlap_by_group, 3);
  ASSERT_NE(group, nullptr);
  EXPECT_EQ(group->overlapped_ns, 55u);
  EXPECT_EQ(group->exposed_ns, 10u);
  EXPECT_EQ(s.overlapped, (std::vector<Interval>{{30, 85}}));
  EXPECT_EQ(s.exposed, (std::vector<Interval>{{70, 80}}));
  EXPECT_EQ(as_map(s.within_by_name)[kAllReduce], 55u);
}

TEST(StepAnalyzer, WaitingInsideASpanOfTheSameGroupIsExposed) {
  // The step's thread waits for the all-reduce inside a span of group communication: exposed.
  const auto steps = analyze({span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 0, 50),
                              span(3, 1, kAllReduce, 50, 90), span(4, 1, kAllReduce, 20, 80, 7)});
  ASSERT_EQ(steps.size(), 1u);
  const OverlapTimes* ar = find(steps[0].overlap_by_name, kAllReduce);
  ASSERT_NE(ar, nullptr);
  EXPECT_EQ(ar->overlapped_ns, 60u);  // [20,80)
  EXPECT_EQ(ar->exposed_ns, 30u);     // [50,80): the thread's own all_reduce
  EXPECT_EQ(as_map(steps[0].within_by_name)[kAllReduce], 70u);  // [20,90) as a union
}

TEST(StepAnalyzer, SpansAreCutToTheirParentsAndTheStep) {
  // A child on the step's thread that outlives its parent counts only inside it; a span on
  // another thread that outlives the step only inside the step.
  const auto steps = analyze({span(1, 0, kStep, 100, 200), span(2, 1, kFwdBwd, 100, 150),
                              span(3, 2, kData, 140, 180), span(4, 1, kAllReduce, 190, 400, 3)});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(as_map(steps[0].own_by_name),
            (std::map<std::uint32_t, std::uint64_t>{{kStep, 50}, {kFwdBwd, 40}, {kData, 10}}));
  EXPECT_EQ(steps[0].overlap_by_name[0].overlapped_ns, 10u);
  EXPECT_EQ(steps[0].overlap_by_name[0].exposed_ns, 10u);
}

TEST(StepAnalyzer, NestedStepsAreNotTopLevelAndSpansWithoutThreadsStayOnTheStepsThread) {
  TraceCounts counts;
  const auto steps = analyze({span(1, 0, kStep, 0, 100, kNoThread), span(2, 1, kInner, 10, 20, 5),
                              span(3, 2, kData, 12, 15), span(4, 9, kStep, 200, 210)},
                             &counts);
  ASSERT_EQ(steps.size(), 2u);  // 1, and 4 (its parent 9 is not there: it counts as a root)
  EXPECT_EQ(as_map(steps[0].own_by_name),
            (std::map<std::uint32_t, std::uint64_t>{{kStep, 90}, {kInner, 7}, {kData, 3}}));
  EXPECT_TRUE(steps[0].overlap_by_name.empty());
  EXPECT_EQ(counts.missing_parents, 1u);
}

TEST(StepAnalyzer, ASpanThatAnotherOfItsThreadStartsInsideRanBesideIt) {
  // Two spans of one thread open at once (asyncio tasks): the one the other started inside was
  // not the thread's current span then, so it ran beside; every instant is still given once.
  const auto steps =
      analyze({span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 10, 60), span(3, 1, kData, 40, 90)});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(as_map(steps[0].own_by_name),
            (std::map<std::uint32_t, std::uint64_t>{{kStep, 50}, {kData, 50}}));
  ASSERT_EQ(steps[0].overlap_by_name.size(), 1u);
  EXPECT_EQ(steps[0].overlap_by_name[0].id, kFwdBwd);
  EXPECT_EQ(steps[0].overlap_by_name[0].overlapped_ns, 50u);
  EXPECT_EQ(steps[0].overlap_by_name[0].exposed_ns, 30u);  // [10,40): the thread in the step only
}

TEST(StepAnalyzer, ADdpHookAllReduceStartedOnTheStepsThreadRunsBesideIt) {
  // A bucket's all-reduce span starts in the backward's hook on the step's thread [20,75) and
  // ends when gloo's thread is done; the backward goes on meanwhile (an op [30,40) starts inside
  // it), so the all-reduce ran beside. The last bucket [65,80) has nothing start inside it: the
  // thread waited in it (cut to its microbatch, [65,70)).
  const auto steps = analyze({span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 0, 70),
                              span(3, 2, kAllReduce, 20, 75), span(4, 2, kData, 30, 40),
                              span(5, 2, kAllReduce, 65, 80), span(6, 1, kOptimizer, 80, 95)});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(as_map(steps[0].own_by_name),
            (std::map<std::uint32_t, std::uint64_t>{
                {kStep, 15}, {kFwdBwd, 55}, {kData, 10}, {kAllReduce, 5}, {kOptimizer, 15}}));
  ASSERT_EQ(steps[0].overlap_by_name.size(), 1u);
  EXPECT_EQ(steps[0].overlap_by_name[0].id, kAllReduce);
  EXPECT_EQ(steps[0].overlap_by_name[0].spans, 1u);
  EXPECT_EQ(steps[0].overlap_by_name[0].overlapped_ns, 55u);
  EXPECT_EQ(steps[0].overlap_by_name[0].exposed_ns, 10u);  // [65,70) in the last bucket, [70,75)
}

TEST(StepAnalyzer, DuplicatesAndCyclesAreCountedNotAnalysed) {
  TraceCounts counts;
  const auto steps =
      analyze({span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 0, 50), span(2, 1, kFwdBwd, 0, 50),
               span(7, 8, kStep, 0, 10), span(8, 7, kData, 0, 10)},
              &counts);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(counts.duplicates, 1u);
  EXPECT_EQ(counts.cycles, 2u);
}

// ---- the property test: the analysis against a walk through the step instant by instant ----

struct Oracle {
  std::vector<SpanFacts> spans;  // unique ids

  const SpanFacts* by_id(std::uint64_t id) const {
    for (const SpanFacts& s : spans) {
      if (s.span_id == id) return &s;
    }
    return nullptr;
  }
  // The path from the top of `s`'s ancestry to `s` (ancestors first).
  std::vector<const SpanFacts*> path(const SpanFacts& s) const {
    std::vector<const SpanFacts*> p{&s};
    while (const SpanFacts* parent = by_id(p.back()->parent_span_id)) p.push_back(parent);
    std::reverse(p.begin(), p.end());
    return p;
  }
};

TEST(StepAnalyzer, MatchesAnInstantByInstantWalkOnRandomTraces) {
  std::mt19937_64 rng(20261204);
  for (int trial = 0; trial < 300; ++trial) {
    Oracle o;
    const int n = 2 + static_cast<int>(rng() % 25);
    std::set<std::uint64_t> ids;
    for (int i = 0; i < n; ++i) {
      std::uint64_t id;
      do id = 1 + rng() % 1000;
      while (!ids.insert(id).second);
      SpanFacts s;
      s.span_id = id;
      // A parent among the spans made so far, none, or one that is not there.
      const std::uint64_t pick = rng() % 10;
      s.parent_span_id = i == 0 || pick == 0 ? 0 : pick == 1 ? 5000 : o.spans[rng() % i].span_id;
      s.name_id = static_cast<std::uint32_t>(rng() % kKinds.size());
      const std::uint64_t a = rng() % 120, b = rng() % 120;
      s.start_ns = std::min(a, b);
      s.end_ns = std::max(a, b);
      const int t = static_cast<int>(rng() % 5);
      s.thread_id = t == 0 ? kNoThread : t;
      o.spans.push_back(s);
    }
    std::vector<SpanFacts> shuffled = o.spans;
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    std::vector<StepResult> got = analyze(shuffled);
    std::sort(got.begin(), got.end(),
              [](const StepResult& a, const StepResult& b) { return a.span_id < b.span_id; });

    // Top-level steps: of the step group, no step-group ancestor, by id.
    std::vector<const SpanFacts*> tops;
    for (const SpanFacts& s : o.spans) {
      if (!kKinds[s.name_id].is_step) continue;
      const auto p = o.path(s);
      if (std::none_of(p.begin(), p.end() - 1,
                       [](const SpanFacts* x) { return kKinds[x->name_id].is_step; })) {
        tops.push_back(&s);
      }
    }
    std::sort(tops.begin(), tops.end(),
              [](const SpanFacts* a, const SpanFacts* b) { return a->span_id < b->span_id; });
    ASSERT_EQ(got.size(), tops.size()) << "trial " << trial;

    for (std::size_t k = 0; k < tops.size(); ++k) {
      const SpanFacts& step = *tops[k];
      // The step's descendants, each with its path from the step (the step first).
      struct Member {
        const SpanFacts* span;
        std::vector<const SpanFacts*> chain;
        bool own;
      };
      std::vector<Member> members;
      for (const SpanFacts& s : o.spans) {
        auto p = o.path(s);
        auto at = std::find(p.begin(), p.end(), &step);
        if (at == p.end()) continue;
        std::vector<const SpanFacts*> chain(at, p.end());
        // Threads: a span without one ran where its parent did; own while every span of the
        // chain ran on the step's thread (all of them, when the step has none).
        bool own = true;
        std::int64_t thread = step.thread_id;
        for (const SpanFacts* x : chain) {
          if (x->thread_id != kNoThread) thread = x->thread_id;
          if (step.thread_id != kNoThread && thread != step.thread_id) own = false;
        }
        members.push_back({&s, chain, own});
      }
      // A member of the step's thread inside which another one, not its descendant, started ran
      // beside; so do its descendants.
      std::set<const SpanFacts*> beside;
      for (const Member& x : members) {
        if (!x.own || x.span == &step) continue;
        for (const Member& y : members) {
          if (!y.own || y.span == &step || y.span == x.span) continue;
          const bool inside =
              x.span->start_ns < y.span->start_ns && y.span->start_ns < x.span->end_ns;
          if (inside && std::find(y.chain.begin(), y.chain.end(), x.span) == y.chain.end()) {
            beside.insert(x.span);
          }
        }
      }
      for (Member& m : members) {
        if (std::any_of(m.chain.begin(), m.chain.end(),
                        [&](const SpanFacts* x) { return beside.count(x) > 0; })) {
          m.own = false;
        }
      }
      std::map<std::uint32_t, std::uint64_t> own_ns, within_ns, overlapped_ns, exposed_ns;
      for (std::uint64_t t = step.start_ns; t < step.end_ns; ++t) {
        auto open_at = [&](const Member& m) {
          if (m.own) {
            return std::all_of(m.chain.begin(), m.chain.end(), [&](const SpanFacts* x) {
              return x->start_ns <= t && t < x->end_ns;
            });
          }
          return m.span->start_ns <= t && t < m.span->end_ns;
        };
        const Member* innermost = nullptr;
        std::set<std::uint32_t> names_open;
        std::set<std::uint32_t> beside_open;
        for (const Member& m : members) {
          if (!open_at(m)) continue;
          names_open.insert(m.span->name_id);
          if (!m.own) {
            beside_open.insert(m.span->name_id);
            continue;
          }
          auto rank = [](const Member& x) {
            return std::tuple(x.chain.size(), x.span->start_ns, x.span->span_id);
          };
          if (innermost == nullptr || rank(m) > rank(*innermost)) innermost = &m;
        }
        ASSERT_NE(innermost, nullptr);
        ++own_ns[innermost->span->name_id];
        for (std::uint32_t name : names_open) ++within_ns[name];
        for (std::uint32_t name : beside_open) {
          ++overlapped_ns[name];
          if (innermost->span == &step ||
              kKinds[innermost->span->name_id].group_id == kKinds[name].group_id) {
            ++exposed_ns[name];
          }
        }
      }
      const StepResult& r = got[k];
      ASSERT_EQ(r.span_id, step.span_id);
      EXPECT_EQ(r.name_id, step.name_id);
      EXPECT_EQ(as_map(r.own_by_name), own_ns) << "trial " << trial;
      EXPECT_EQ(as_map(r.within_by_name), within_ns) << "trial " << trial;
      std::map<std::uint32_t, std::uint64_t> got_overlapped, got_exposed;
      for (const OverlapTimes& ov : r.overlap_by_name) {
        got_overlapped[ov.id] = ov.overlapped_ns;
        got_exposed[ov.id] = ov.exposed_ns;
      }
      std::erase_if(exposed_ns, [](const auto& kv) { return kv.second == 0; });
      std::erase_if(got_exposed, [](const auto& kv) { return kv.second == 0; });
      EXPECT_EQ(got_overlapped, overlapped_ns) << "trial " << trial;
      EXPECT_EQ(got_exposed, exposed_ns) << "trial " << trial;
      std::uint64_t own_sum = 0;
      for (const auto& [id, ns] : r.own_by_name) own_sum += ns;
      EXPECT_EQ(own_sum, r.duration_ns);
    }
  }
}

// ---- the spill ----

TEST(SpanSpill, GivesEveryTraceBackWholeInMemoryAndThroughFiles) {
  // 1000 spans stay in memory; 40,000 go to files read back whole; with at most 100 in memory,
  // the files (about 600 spans each) are split again, twice.
  for (const auto& [count, in_memory] :
       {std::pair<std::size_t, std::size_t>{1000, SpanSpill::kInMemory},
        {40000, SpanSpill::kInMemory},
        {40000, 100}}) {
    SpanSpill spill(in_memory);
    std::multiset<std::tuple<std::int64_t, std::uint64_t, std::uint64_t>> sent, got;
    for (std::size_t i = 0; i < count; ++i) {
      SpanFacts f = span(i + 1, 0, kData, i, i + 1);
      f.rank = static_cast<std::int64_t>(i % 3);
      f.trace_key = (i * 7919) % 101;
      spill.add(f);
      sent.insert({f.rank, f.trace_key, f.span_id});
    }
    EXPECT_EQ(spill.spilled(), count > in_memory);
    std::set<std::pair<std::int64_t, std::uint64_t>> traces;
    spill.for_each_trace([&](std::span<SpanFacts> trace) {
      ASSERT_FALSE(trace.empty());
      EXPECT_TRUE(traces.insert({trace[0].rank, trace[0].trace_key}).second)
          << "a trace came back in two parts";
      for (const SpanFacts& f : trace) {
        EXPECT_EQ(f.rank, trace[0].rank);
        EXPECT_EQ(f.trace_key, trace[0].trace_key);
        got.insert({f.rank, f.trace_key, f.span_id});
      }
    });
    EXPECT_EQ(got, sent);
    EXPECT_EQ(traces.size(), 303u);  // 3 ranks x 101 trace keys, every pair made
  }
}

TEST(SpanSpill, OneTraceLargerThanMemoryComesBackWhole) {
  SpanSpill spill(100);
  for (std::uint64_t i = 0; i < 5000; ++i) spill.add(span(i + 1, 0, kData, i, i + 1));
  std::size_t calls = 0, spans = 0;
  spill.for_each_trace([&](std::span<SpanFacts> trace) {
    ++calls;
    spans += trace.size();
  });
  EXPECT_EQ(calls, 1u);
  EXPECT_EQ(spans, 5000u);
}

// ---- GPU time (docs/report.md#gpu-time) ----

// The same names, all_reduce's group 3 being communication.
const std::vector<NameKind> kGpuKinds = {{0, true},        {1, false}, {2, false},
                                         {3, false, true}, {0, true},  {4, false}};

SpanFacts gpu(const SpanFacts& span, std::uint64_t start, std::uint64_t end, std::uint64_t busy,
              std::uint64_t kernels = 1) {
  return gpu_facts(span, {true, true, true, busy, kernels, start, end});
}

std::vector<StepResult> analyze_gpu(std::vector<SpanFacts> facts, TraceCounts* counts = nullptr) {
  StepAnalyzer analyzer(kGpuKinds);
  std::vector<StepResult> steps;
  analyzer.analyze(facts, [&](const StepResult& r) { steps.push_back(r); });
  if (counts != nullptr) *counts = analyzer.counts();
  return steps;
}

TEST(StepGpu, TheStepsBusyTimeIdleTimeAndExposedCommunication) {
  // The step [0,100) carries gpu.busy 55. Leaves: forward_backward's GPU interval [5,40],
  // the all-reduce's (another thread) [35,60], the optimizer's [72,80].
  //   idle = [0, max(100, 80)] - 55 = 100 - 55 = 45
  //   exposed communication = [35,60] - ([5,40] + [72,80]) = [40,60] = 20
  const SpanFacts step = span(1, 0, kStep, 0, 100), fb = span(2, 1, kFwdBwd, 0, 60),
                  ar = span(3, 1, kAllReduce, 40, 75, 2), opt = span(4, 1, kOptimizer, 70, 90),
                  data = span(5, 1, kData, 60, 70);
  TraceCounts counts;
  const auto steps = analyze_gpu({gpu(opt, 72, 80, 6), step, fb, ar, opt, data,
                                  gpu(step, 5, 80, 55), gpu(fb, 5, 40, 30), gpu(ar, 35, 60, 20)},
                                 &counts);
  ASSERT_EQ(steps.size(), 1u);
  const StepGpu& g = steps[0].gpu;
  EXPECT_TRUE(g.timed);
  EXPECT_EQ(g.busy_ns, 55u);
  EXPECT_EQ(g.idle_ns, 45u);
  EXPECT_EQ(g.exposed_comm_ns, 20u);
  EXPECT_EQ(g.boxes, (std::vector<GpuBox>{{{5, 40}, 1}, {{35, 60}, 3}, {{72, 80}, 2}}));
  EXPECT_EQ(counts.duplicates, 0u);  // the GPU records are not second copies of their spans
  // The CPU figures are those of the same spans without GPU records.
  const auto plain = analyze_gpu({step, fb, ar, opt, data});
  EXPECT_EQ(as_map(steps[0].own_by_name), as_map(plain[0].own_by_name));
  EXPECT_EQ(steps[0].exposed, plain[0].exposed);
  EXPECT_FALSE(plain[0].gpu.timed);
  EXPECT_EQ(plain[0].gpu.busy_ns, 0u);
}

TEST(StepGpu, WithoutTheStepsBusyTimeTheUnionOfItsSpansIntervals) {
  // The step [0,100) has no GPU times. forward_backward [10,50] holds a GPU-timed child
  // [10,30] (so it is no leaf); the all-reduce's [40,120] runs past the step; the optimizer was
  // GPU-timed with no activity (kernels 0, no interval).
  //   busy = [10,50] + [10,30] + [40,120] = [10,120] = 110
  //   idle = [0, max(100, 120)] - 110 = 120 - 110 = 10
  //   exposed communication = [40,120] - [10,30] = 80 (forward_backward is not a leaf)
  const SpanFacts step = span(1, 0, kStep, 0, 100), fb = span(2, 1, kFwdBwd, 0, 60),
                  inner = span(3, 2, kData, 10, 30), ar = span(4, 1, kAllReduce, 40, 75, 2),
                  opt = span(5, 1, kOptimizer, 70, 90);
  const auto steps =
      analyze_gpu({step, fb, inner, ar, opt, gpu(fb, 10, 50, 35), gpu(inner, 10, 30, 20),
                   gpu(ar, 40, 120, 80), gpu_facts(opt, {false, true, false, 0, 0, 0, 0})});
  ASSERT_EQ(steps.size(), 1u);
  const StepGpu& g = steps[0].gpu;
  EXPECT_TRUE(g.timed);
  EXPECT_EQ(g.busy_ns, 110u);
  EXPECT_EQ(g.idle_ns, 10u);
  EXPECT_EQ(g.exposed_comm_ns, 80u);
  EXPECT_EQ(g.boxes, (std::vector<GpuBox>{{{10, 30}, 4}, {{40, 120}, 3}}));
}

TEST(StepGpu, IntervalsStartNoEarlierThanTheStepAndIdleIsNeverNegative) {
  // A GPU interval from before the step [100,200) is cut at 100; the step's gpu.busy 150 is
  // more than its window [100,200]: idle 0, not negative.
  const SpanFacts step = span(1, 0, kStep, 100, 200), fb = span(2, 1, kFwdBwd, 100, 150);
  const auto steps = analyze_gpu({step, fb, gpu(step, 90, 180, 150), gpu(fb, 90, 180, 80)});
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].gpu.busy_ns, 150u);
  EXPECT_EQ(steps[0].gpu.idle_ns, 0u);
  EXPECT_EQ(steps[0].gpu.boxes, (std::vector<GpuBox>{{{100, 180}, 1}}));
}

TEST(StepGpu, TheLeavesOfATraceAreTheGpuTimedSpansWithoutGpuTimedDescendants) {
  // 1 (GPU) -> 2 (none) -> 3 (GPU); 1 -> 4 (GPU); 1 -> 5 (none); 6 (GPU) -> 7 (GPU) -> 6: a
  // cycle, neither a leaf; 8 (GPU) whose parent 9 is not there. Leaves: 3, 4, 8.
  std::vector<SpanFacts> facts = {span(1, 0, kStep, 0, 100), span(2, 1, kFwdBwd, 0, 50),
                                  span(3, 2, kData, 0, 40),  span(4, 1, kOptimizer, 60, 90),
                                  span(5, 1, kData, 90, 95), span(6, 7, kData, 0, 1),
                                  span(7, 6, kData, 0, 1),   span(8, 9, kData, 200, 300)};
  for (const std::uint64_t id : {1, 3, 4, 6, 7, 8}) {
    facts.push_back(gpu(facts[id - 1], 10 * id, 10 * id + 5, 5, id));
  }
  std::shuffle(facts.begin(), facts.end(), std::mt19937_64(7));
  std::vector<std::pair<std::uint64_t, std::uint64_t>> leaves;  // (span id, kernels)
  for_each_gpu_leaf(facts, [&](const SpanFacts& s, const GpuFacts& g) {
    leaves.emplace_back(s.span_id, g.kernels);
    EXPECT_EQ(g.start_ns, 10 * s.span_id);
  });
  EXPECT_EQ(leaves, (std::vector<std::pair<std::uint64_t, std::uint64_t>>{{3, 3}, {4, 4}, {8, 8}}));
}

TEST(StepGpu, GpuRecordsComeBackWithTheirTraceThroughTheSpill) {
  SpanSpill spill(4);  // files from the fifth record on
  for (std::uint64_t t = 0; t < 20; ++t) {
    SpanFacts step = span(1, 0, kStep, 1000 * t, 1000 * t + 100);
    SpanFacts fb = span(2, 1, kFwdBwd, 1000 * t, 1000 * t + 60);
    step.trace_key = fb.trace_key = t + 1;
    spill.add(gpu_facts(fb, {true, true, true, t, 3, 1000 * t + 5, 1000 * t + 45}));
    spill.add(step);
    spill.add(fb);
  }
  ASSERT_TRUE(spill.spilled());
  StepAnalyzer analyzer(kGpuKinds);
  std::set<std::uint64_t> seen;
  spill.for_each_trace([&](std::span<SpanFacts> trace) {
    analyzer.analyze(trace, [&](const StepResult& r) {
      const std::uint64_t t = r.start_ns / 1000;
      seen.insert(t);
      // busy: the union [5,45] = 40 (the step has no gpu.busy); idle 100 - 40 = 60.
      EXPECT_EQ(r.gpu.busy_ns, 40u);
      EXPECT_EQ(r.gpu.idle_ns, 60u);
      EXPECT_EQ(r.gpu.boxes, (std::vector<GpuBox>{{{1000 * t + 5, 1000 * t + 45}, 1}}));
    });
  });
  EXPECT_EQ(seen.size(), 20u);
}

// Names of the capture tests: 0 the step, 1 forward_backward, 2 an all-reduce (communication),
// 3 a layer.
const std::vector<NameKind> kCaptureKinds = {
    {0, true, false}, {1, false, false}, {2, false, true}, {3, false, false}};

SpanFacts captured(SpanFacts s, std::int64_t capture_id, std::uint32_t reason) {
  return capture_facts(s, {capture_id, reason});
}

TEST(StepAnalyzer, CapturedSpansBringTheirCapturesAndBoxesButNoCollectives) {
  // Step 1 [0,100): forward_backward [0,60) with two captured layers [10,50) and [50,58) (capture
  // 7, reason 0); the all-reduce [60,90), exported; a captured all-reduce [92,98) (capture 8,
  // reason 1), which only this step has, so it is no collective. Step 2 [100,200) has no
  // captured span.
  std::vector<SpanFacts> facts = {span(1, 0, 0, 0, 100),    span(2, 1, 1, 0, 60),
                                  span(3, 2, 3, 10, 50),    span(4, 2, 3, 50, 58),
                                  span(5, 1, 2, 60, 90),    span(6, 1, 2, 92, 98, 3),
                                  span(11, 0, 0, 100, 200), span(12, 11, 2, 150, 190)};
  facts.push_back(captured(facts[2], 7, 0));
  facts.push_back(captured(facts[3], 7, 0));
  facts.push_back(captured(facts[5], 8, 1));
  std::mt19937_64 rng(3);
  for (int order = 0; order < 4; ++order) {  // whatever the order the records come in
    std::shuffle(facts.begin(), facts.end(), rng);
    StepAnalyzer analyzer(kCaptureKinds);
    std::map<std::uint64_t, StepResult> steps;
    analyzer.analyze(facts, [&](const StepResult& r) { steps[r.span_id] = r; });
    ASSERT_EQ(steps.size(), 2u);
    const StepResult& s = steps.at(1);
    EXPECT_EQ(s.captured_spans, 3u);
    EXPECT_EQ(s.captures, (std::vector<CaptureMark>{{7, 0}, {8, 1}}));
    EXPECT_EQ(as_map(s.spans_by_name),
              (std::map<std::uint32_t, std::uint64_t>{{0, 1}, {1, 1}, {2, 2}, {3, 2}}));
    EXPECT_EQ(as_map(s.longest_by_name),
              (std::map<std::uint32_t, std::uint64_t>{{0, 100}, {1, 60}, {2, 30}, {3, 40}}));
    EXPECT_EQ(s.boxes, (std::vector<StepBox>{{{0, 100}, 0, 0, false},
                                             {{0, 60}, 1, 1, false},
                                             {{10, 50}, 3, 2, true},
                                             {{50, 58}, 3, 2, true},
                                             {{60, 90}, 2, 1, false},
                                             {{92, 98}, 2, 1, true}}));
    EXPECT_EQ(s.boxes_dropped, 0u);
    EXPECT_EQ(s.collectives, (std::vector<Collective>{{2, 60, 90}}));
    // The captured layers are the step's own time inside forward_backward.
    EXPECT_EQ(as_map(s.own_by_name),
              (std::map<std::uint32_t, std::uint64_t>{{0, 10}, {1, 10 + 2}, {2, 30}, {3, 40 + 8}}));
    const StepResult& plain = steps.at(11);
    EXPECT_EQ(plain.captured_spans, 0u);
    EXPECT_TRUE(plain.captures.empty() && plain.boxes.empty() && plain.spans_by_name.empty() &&
                plain.longest_by_name.empty());
    EXPECT_EQ(plain.collectives, (std::vector<Collective>{{2, 150, 190}}));
  }
}

TEST(StepAnalyzer, ACapturedStepKeepsItsLongestSpansToDraw) {
  // A step of kMaxStepBoxes + 500 captured layers, the i-th lasting i ns: the longest are kept.
  std::vector<SpanFacts> facts = {span(1, 0, 0, 0, 1'000'000)};
  const std::size_t n = kMaxStepBoxes + 500;
  for (std::uint64_t i = 0; i < n; ++i) {
    facts.push_back(span(10 + i, 1, 3, 100 * i, 100 * i + i % 100));
    facts.push_back(captured(facts.back(), 1, 0));
  }
  StepAnalyzer analyzer(kCaptureKinds);
  std::vector<StepResult> steps;
  analyzer.analyze(facts, [&](const StepResult& r) { steps.push_back(r); });
  ASSERT_EQ(steps.size(), 1u);
  const StepResult& s = steps[0];
  EXPECT_EQ(s.captured_spans, n);
  ASSERT_EQ(s.boxes.size(), kMaxStepBoxes);
  EXPECT_EQ(s.boxes_dropped, n + 1 - kMaxStepBoxes);
  EXPECT_EQ(s.boxes.front(), (StepBox{{0, 1'000'000}, 0, 0, false})) << "the step, the longest";
  std::vector<std::uint64_t> lengths = {1'000'000}, kept;
  for (std::uint64_t i = 0; i < n; ++i) lengths.push_back(i % 100);
  std::sort(lengths.rbegin(), lengths.rend());
  lengths.resize(kMaxStepBoxes);
  for (const StepBox& b : s.boxes) kept.push_back(b.interval.end_ns - b.interval.start_ns);
  std::sort(kept.rbegin(), kept.rend());
  EXPECT_EQ(kept, lengths) << "the longest kept";
  EXPECT_TRUE(
      std::is_sorted(s.boxes.begin(), s.boxes.end(), [](const StepBox& a, const StepBox& b) {
        return a.interval.start_ns < b.interval.start_ns;
      }));
}

TEST(Intervals, MergeAndIntersect) {
  std::vector<Interval> a{{5, 9}, {0, 3}, {2, 4}, {9, 10}};
  merge_intervals(a);
  EXPECT_EQ(a, (std::vector<Interval>{{0, 4}, {5, 10}}));
  EXPECT_EQ(intersection_ns(a, {{3, 6}, {8, 20}}), 1u + 1u + 2u);
}

}  // namespace
}  // namespace nemo::lens::cli
