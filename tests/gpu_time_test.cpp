// GPU time of spans (<PREFIX>_GPU_TIME, docs/gpu.md) on the CPU: the attribution's bookkeeping
// against an independent computation over random schedules, and the whole pipeline with a
// synthetic source that reports launches and activity through the interface the CUPTI source
// uses (launches on the launching thread, activity records delivered when the source is flushed,
// as CUPTI delivers its buffers). A real GPU is exercised by scripts/gpu-check.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

#include "capture_stderr.hpp"
#include "control_client.hpp"
#include "gpu/attribution.hpp"
#include "gpu/gpu_timing.hpp"
#include "gpu/kernel_names.hpp"
#include "nemo/lens/lens.hpp"
#include "tracing/engine.hpp"
#include "tracing_fixture.hpp"

namespace {

using nemo::lens::detail::GpuActivity;
using nemo::lens::detail::GpuActivityKind;
using nemo::lens::detail::GpuAttribution;
using nemo::lens::detail::GpuChain;
using nemo::lens::detail::GpuInput;
using nemo::lens::detail::GpuInputs;
using nemo::lens::detail::GpuSource;
using nemo::lens::detail::GpuTime;
using nemo::lens::detail::GpuTiming;

// ---------------------------------------------------------------------------------------------
// The bookkeeping alone.

GpuChain chain_of(std::initializer_list<std::uint64_t> spans) {
  GpuChain c;
  for (std::uint64_t s : spans) c.spans[c.size++] = s;
  return c;
}

GpuActivity kernel(std::uint64_t correlation, std::int64_t start, std::int64_t end,
                   std::uint32_t stream = 0, std::uint32_t device = 0) {
  return {correlation, GpuActivityKind::kKernel, device, stream, start, end};
}

TEST(GpuAttribution, NestedSpansCountTheirChildrensActivityOnceEach) {
  GpuAttribution a;
  a.launch(1, chain_of({10, 20}));  // in span 10, nested in 20
  a.launch(2, chain_of({20}));
  a.launch(3, chain_of({10, 20}));
  EXPECT_FALSE(a.settled(10));
  a.activity(kernel(1, 100, 200, 1));
  a.activity(kernel(3, 150, 300, 2));  // another stream, overlapping the first
  EXPECT_TRUE(a.settled(10));
  EXPECT_FALSE(a.settled(20));
  a.activity({2, GpuActivityKind::kMemcpy, 0, 3, 400, 450});
  EXPECT_TRUE(a.settled(20));
  const GpuTime inner = a.take(10);
  EXPECT_EQ(inner.busy_ns, 200);  // [100, 300)
  EXPECT_EQ(inner.kernels, 2u);
  EXPECT_EQ(inner.start_ns, 100);
  EXPECT_EQ(inner.end_ns, 300);
  EXPECT_TRUE(inner.complete);
  const GpuTime outer = a.take(20);
  EXPECT_EQ(outer.busy_ns, 250);  // [100, 300) and [400, 450)
  EXPECT_EQ(outer.kernels, 2u);   // the copy is activity, not a kernel
  EXPECT_EQ(outer.activities, 3u);
  EXPECT_EQ(outer.end_ns, 450);
  EXPECT_EQ(a.spans(), 0u);
  EXPECT_EQ(a.launches(), 0u);
}

TEST(GpuAttribution, RecordsAfterTheSpanWasTakenAreLateAndUnknownLaunchesUnattributed) {
  GpuAttribution a;
  a.launch(1, chain_of({10}));
  const GpuTime t = a.take(10);
  EXPECT_FALSE(t.complete);
  EXPECT_EQ(t.kernels, 0u);
  a.activity(kernel(1, 1000, 1010));
  EXPECT_EQ(a.late(), 1u);
  a.activity(kernel(99, 1000, 1010));
  EXPECT_EQ(a.unattributed(), 1u);
  EXPECT_TRUE(a.settled(10));  // forgotten
}

TEST(GpuAttribution, ALaunchForSpansTakenAlreadyCountsForTheOpenOnesElseLate) {
  // A launch from a thread without spans reads another thread's chain without its lock; the span
  // it read may end and be taken before the launch reaches the attribution.
  GpuAttribution a;
  EXPECT_EQ(a.take(10).activities, 0u);  // ended without launches of its own
  GpuChain inner_taken = chain_of({10, 20});
  inner_taken.kernel_spans = true;  // asked for by 10, which is gone
  a.launch(1, inner_taken);
  a.activity(kernel(1, 100, 140));
  const GpuTime outer = a.take(20);
  EXPECT_EQ(outer.kernels, 1u);
  EXPECT_EQ(outer.busy_ns, 40);
  EXPECT_TRUE(outer.children.empty());  // not 20's to export as kernel spans
  a.launch(2, chain_of({10, 20}));      // both gone: its record is late
  a.activity(kernel(2, 200, 210));
  EXPECT_EQ(a.late(), 1u);
  EXPECT_EQ(a.unattributed(), 0u);
  EXPECT_EQ(a.spans(), 0u);  // nothing left waiting for a take that will not come
  EXPECT_EQ(a.launches(), 0u);
}

TEST(GpuAttribution, LaunchesBeyondTheBoundAreCountedAndTheirRecordsUnattributed) {
  GpuAttribution a(/*max_launches=*/2);
  a.launch(1, chain_of({10}));
  a.launch(2, chain_of({10}));
  a.launch(3, chain_of({10}));  // two launches wait already
  EXPECT_EQ(a.launches_dropped(), 1u);
  EXPECT_EQ(a.launches(), 2u);
  a.activity(kernel(1, 1000, 1010));
  a.activity(kernel(2, 10, 20));
  EXPECT_TRUE(a.settled(10));
  a.activity(kernel(3, 20, 30));
  EXPECT_EQ(a.unattributed(), 1u);
  EXPECT_EQ(a.take(10).kernels, 2u);
}

// A thread's launch queue (GpuInputs: one producer, one consumer, no lock between them) against
// a plain vector of what was pushed: every input of the consumer's timing comes out once, in
// order, through block boundaries and reused blocks, while both run; another timing's are dropped.
TEST(GpuInputQueue, DeliversEveryInputOnceInOrderWhileBothSidesRun) {
  constexpr std::uint32_t kMine = 7, kStale = 8;
  constexpr std::uint64_t kInputs = 20 * GpuInputs::kBlockInputs + 13;
  GpuInputs q;
  std::vector<std::uint64_t> pushed;  // the producer's own record of what it queued for kMine
  std::atomic<bool> done{false};
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= kInputs; ++i) {
      GpuInput in;
      in.correlation = i;
      in.timing = i % 5 == 0 ? kStale : kMine;  // a former timing's, left in the queue
      in.records = static_cast<std::uint32_t>(i % 3 + 1);
      // A bound the consumer keeps up with only at times: a push that finds the queue full is
      // tried again once the consumer made room.
      while (!q.push(in, 3 * GpuInputs::kBlockInputs / 2)) std::this_thread::yield();
      if (in.timing == kMine) pushed.push_back(i);
    }
    done.store(true, std::memory_order_release);
  });
  std::vector<GpuInput> taken;
  while (!done.load(std::memory_order_acquire) || q.pending()) {
    std::lock_guard lock(q.consumer_mu);
    q.take(kMine, taken);
  }
  producer.join();
  EXPECT_FALSE(q.pending());
  std::vector<std::uint64_t> out;
  for (const GpuInput& in : taken) {
    EXPECT_EQ(in.timing, kMine);
    EXPECT_EQ(in.records, in.correlation % 3 + 1);
    out.push_back(in.correlation);
  }
  EXPECT_EQ(out, pushed);
  EXPECT_EQ(pushed.size(), kInputs - kInputs / 5);  // through 20 blocks, some reused
}

TEST(GpuInputQueue, ABoundedQueueRefusesUntilTheConsumerTakes) {
  GpuInputs q;
  GpuInput in;
  in.timing = 1;
  for (std::uint64_t i = 0; i < 300; ++i) {
    in.correlation = i;
    ASSERT_TRUE(q.push(in, 300)) << i;  // past one block: a second one is linked
  }
  EXPECT_FALSE(q.push(in, 300));
  std::vector<GpuInput> taken;
  q.take(1, taken);
  ASSERT_EQ(taken.size(), 300u);
  EXPECT_EQ(taken.back().correlation, 299u);
  EXPECT_FALSE(q.pending());
  EXPECT_TRUE(q.push(in, 300));  // room again
  EXPECT_TRUE(q.pending());
}

TEST(GpuAttribution, AnAliasedIdIsTheSameLaunch) {
  GpuAttribution a;
  a.launch(5, chain_of({10}));
  a.alias(6, 5);
  a.activity(kernel(6, 10, 30));
  EXPECT_TRUE(a.settled(10));
  EXPECT_EQ(a.take(10).busy_ns, 20);
  a.activity(kernel(6, 40, 50));  // the launch is retired: late under either id
  a.activity(kernel(5, 40, 50));
  EXPECT_EQ(a.late(), 2u);
}

TEST(GpuAttribution, AGraphLaunchsKernelsAllCount) {
  GpuAttribution a;
  a.launch(7, chain_of({10}));
  for (int i = 0; i < 5; ++i) a.activity(kernel(7, 1000 + i * 100, 1000 + i * 100 + 50));
  const GpuTime t = a.take(10);
  EXPECT_EQ(t.kernels, 5u);
  EXPECT_EQ(t.busy_ns, 250);
}

// A graph launch brings one record per kernel, copy and memset node, all with the launch's id:
// its span is settled at the last one, not the first.
TEST(GpuAttribution, AGraphLaunchIsSettledByItsLastNodesRecord) {
  GpuAttribution a;
  a.launch(7, chain_of({10}), 3);
  a.activity(kernel(7, 1000, 1050));
  a.activity(kernel(7, 1100, 1150));
  EXPECT_FALSE(a.settled(10));
  a.activity(kernel(7, 1200, 1250));
  EXPECT_TRUE(a.settled(10));
  EXPECT_EQ(a.take(10).kernels, 3u);
}

// A launch that will bring no record (it failed, or went into a capturing stream) stops holding
// its spans, under its own id or an alias; a record that comes after all still counts.
TEST(GpuAttribution, ACancelledLaunchSettlesItsSpans) {
  GpuAttribution a;
  a.launch(5, chain_of({10, 20}));
  a.alias(6, 5);
  a.launch(8, chain_of({20}));
  a.cancel(6);
  EXPECT_TRUE(a.settled(10));
  EXPECT_FALSE(a.settled(20));
  a.cancel(8);
  a.cancel(99);  // unknown: nothing
  EXPECT_TRUE(a.settled(20));
  a.activity(kernel(5, 1000, 1010));
  EXPECT_EQ(a.take(10).busy_ns, 10);
  EXPECT_EQ(a.take(20).busy_ns, 10);
}

// Records without a usable interval (CUPTI's start = end = 0, an end before the start) settle
// their launch, are counted, and add no time, kernel or bound: gpu.start is never 0.
TEST(GpuAttribution, RecordsWithZeroOrReversedTimesSettleAndAddNothing) {
  GpuAttribution a;
  a.launch(1, chain_of({10}));
  a.launch(2, chain_of({10}));
  a.launch(3, chain_of({10}));
  a.activity(kernel(1, 0, 0));
  a.activity(kernel(2, 2000, 1500));
  a.activity(kernel(4, 0, 0));  // of an unknown launch: invalid, not unattributed
  EXPECT_FALSE(a.settled(10));
  a.activity(kernel(3, 1000, 1100));
  EXPECT_TRUE(a.settled(10));
  const GpuTime t = a.take(10);
  EXPECT_EQ(t.busy_ns, 100);
  EXPECT_EQ(t.kernels, 1u);
  EXPECT_EQ(t.start_ns, 1000);
  EXPECT_EQ(t.end_ns, 1100);
  EXPECT_TRUE(t.complete);
  EXPECT_EQ(a.invalid(), 3u);
  EXPECT_EQ(a.unattributed(), 0u);
}

// Only a launch whose chain asks for kernel spans keeps its activity, for its innermost span.
TEST(GpuAttribution, KernelSpansAreKeptForTheInnermostSpanThatAskedForThem) {
  GpuAttribution a;
  GpuChain asking = chain_of({10, 20});
  asking.kernel_spans = true;
  a.launch(1, asking);
  a.launch(2, chain_of({10, 20}));
  a.activity(kernel(1, 1000, 1100));
  a.activity(kernel(2, 1200, 1300));
  a.activity(kernel(1, 0, 0));  // invalid: no kernel span
  const GpuTime inner = a.take(10);
  ASSERT_EQ(inner.children.size(), 1u);
  EXPECT_EQ(inner.children[0].correlation, 1u);
  EXPECT_EQ(inner.children[0].start_ns, 1000);
  EXPECT_TRUE(a.take(20).children.empty());
}

// Kernel spans are named by the kernel's function, demangled, without template arguments,
// parameters or return type (CUPTI gives the mangled name).
TEST(KernelNames, DemangledAndShortened) {
  using nemo::lens::detail::short_kernel_name;
  EXPECT_EQ(short_kernel_name("_Z6squarePfi"), "square");
  EXPECT_EQ(short_kernel_name("_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIf"
                              "EENS_6detail5ArrayIPcLi1EEEEEviT0_T1_"),
            "at::native::vectorized_elementwise_kernel");
  EXPECT_EQ(short_kernel_name("ampere_sgemm_128x64_nn"), "ampere_sgemm_128x64_nn");
  EXPECT_EQ(short_kernel_name("_ZN12_GLOBAL__N_16kernelEv"), "(anon)::kernel");
  EXPECT_EQ(short_kernel_name("_ZN7cutlass7Kernel2I4GemmEEvNT_6ParamsE"), "cutlass::Kernel2");
  EXPECT_EQ(short_kernel_name(""), "");
  EXPECT_EQ(short_kernel_name(std::string(500, 'k')).size(), 160u);
}

TEST(GpuAttribution, ManyIntervalsFoldWithoutLosingBusyTime) {
  GpuAttribution a;
  a.launch(1, chain_of({10}));
  const std::int64_t n = GpuAttribution::kMaxIntervals + 1000;
  for (std::int64_t i = 0; i < n; ++i) a.activity(kernel(1, 1000 + i * 10, 1000 + i * 10 + 4));
  const GpuTime t = a.take(10);
  EXPECT_EQ(t.busy_ns, n * 4);
  EXPECT_EQ(t.kernels, static_cast<std::uint64_t>(n));
}

// The union of intervals by a sweep over sorted end points: an independent computation of busy.
std::int64_t union_length(std::vector<std::pair<std::int64_t, std::int64_t>> v) {
  std::vector<std::pair<std::int64_t, int>> events;
  for (auto [lo, hi] : v) {
    if (hi <= lo) continue;
    events.push_back({lo, +1});
    events.push_back({hi, -1});
  }
  std::sort(events.begin(), events.end());
  std::int64_t total = 0, last = 0;
  int depth = 0;
  for (auto [t, d] : events) {
    if (depth > 0) total += t - last;
    depth += d;
    last = t;
  }
  return total;
}

// Random forests of spans, launches in random spans (chains up the forest), activity on random
// streams with aliases and graph launches, spans taken children first at random moments: every
// span's busy time, kernels and completeness, and the late count, against the sweep.
TEST(GpuAttribution, MatchesAnIndependentComputationOverRandomSchedules) {
  std::mt19937_64 rng(20261205);
  for (int round = 0; round < 300; ++round) {
    const int n_spans = 1 + static_cast<int>(rng() % 12);
    std::vector<int> parent(n_spans, -1);
    for (int i = 1; i < n_spans; ++i) {
      if (rng() % 4 != 0) parent[i] = static_cast<int>(rng() % i);
    }
    auto chain_for = [&](int s) {
      GpuChain c;
      for (int x = s; x >= 0 && c.size < GpuChain::kMaxSpans; x = parent[x]) {
        c.spans[c.size++] = static_cast<std::uint64_t>(x + 1);
      }
      return c;
    };
    // Ops: launch, activity, take. A span is taken after its children (post-order by index:
    // children have larger indices, so descending index order is children first).
    struct Launch {
      std::uint64_t corr;
      int span;
      int activities;
      bool aliased;
    };
    std::vector<Launch> launches;
    const int n_launches = static_cast<int>(rng() % 20);
    for (int i = 0; i < n_launches; ++i) {
      launches.push_back({static_cast<std::uint64_t>(1000 + i), static_cast<int>(rng() % n_spans),
                          static_cast<int>(rng() % 4), rng() % 3 == 0});
    }
    GpuAttribution a;
    std::vector<bool> taken(n_spans, false);
    std::vector<std::vector<std::pair<std::int64_t, std::int64_t>>> expect_iv(n_spans);
    std::vector<std::uint64_t> expect_kernels(n_spans, 0);
    std::vector<int> expect_waiting(n_spans, 0);
    std::uint64_t expect_late = 0;
    std::vector<std::pair<Launch, int>> pending;  // activities still to deliver per launch
    for (const Launch& l : launches) {
      a.launch(l.corr, chain_for(l.span));
      if (l.aliased) a.alias(l.corr + 100000, l.corr);
      const GpuChain c = chain_for(l.span);
      for (int i = 0; i < c.size; ++i) ++expect_waiting[c.spans[i] - 1];
      pending.push_back({l, l.activities});
    }
    std::vector<bool> seen(launches.size(), false);
    int next_take = n_spans - 1;
    std::vector<std::pair<int, GpuTime>> results;
    while (true) {
      const bool can_deliver =
          std::any_of(pending.begin(), pending.end(), [](const auto& p) { return p.second > 0; });
      if (!can_deliver && next_take < 0) break;
      if (can_deliver && (next_take < 0 || rng() % 3 != 0)) {
        std::size_t i = rng() % pending.size();
        while (pending[i].second == 0) i = (i + 1) % pending.size();
        const Launch& l = pending[i].first;
        --pending[i].second;
        const std::int64_t start = 1 + static_cast<std::int64_t>(rng() % 1000);  // 0: invalid
        const std::int64_t end = start + static_cast<std::int64_t>(rng() % 200);
        const bool is_kernel = rng() % 4 != 0;
        GpuActivity act{l.aliased && rng() % 2 ? l.corr + 100000 : l.corr,
                        is_kernel ? GpuActivityKind::kKernel : GpuActivityKind::kMemset,
                        static_cast<std::uint32_t>(rng() % 2),
                        static_cast<std::uint32_t>(rng() % 3),
                        start,
                        end};
        a.activity(act);
        const GpuChain c = chain_for(l.span);
        if (taken[c.spans[0] - 1]) ++expect_late;
        for (int k = 0; k < c.size; ++k) {
          const int s = static_cast<int>(c.spans[k] - 1);
          if (taken[s]) continue;
          expect_iv[s].push_back({start, end});
          if (is_kernel) ++expect_kernels[s];
          if (!seen[i]) --expect_waiting[s];
        }
        seen[i] = true;
      } else {
        const int s = next_take--;
        ASSERT_EQ(a.settled(static_cast<std::uint64_t>(s + 1)), expect_waiting[s] == 0);
        const GpuTime t = a.take(static_cast<std::uint64_t>(s + 1));
        taken[s] = true;
        ASSERT_EQ(t.busy_ns, union_length(expect_iv[s])) << "round " << round << " span " << s;
        ASSERT_EQ(t.kernels, expect_kernels[s]);
        ASSERT_EQ(t.complete, expect_waiting[s] == 0);
      }
    }
    ASSERT_EQ(a.late(), expect_late) << "round " << round;
    ASSERT_EQ(a.unattributed(), 0u);
    ASSERT_EQ(a.spans(), 0u);
  }
}

// ---------------------------------------------------------------------------------------------
// The pipeline, with a synthetic source.

// What the test does through the source: launches on the calling thread, activity completed
// now and delivered at the next flush (as CUPTI delivers its buffers).
struct SyntheticGpu {
  std::mutex mu;
  std::condition_variable flushed;  // after each flush
  GpuTiming* timing = nullptr;
  std::vector<GpuActivity> completed;
  std::string refuse;  // start() says this when not empty
  std::atomic<int> flushes{0};
  std::atomic<bool> stopped{false};

  void launch(std::uint64_t correlation) { timing->on_launch(correlation); }
  void complete(const GpuActivity& a) { complete({a}); }
  // Completed together: one flush delivers them all, or none of them.
  void complete(std::initializer_list<GpuActivity> all) {
    std::lock_guard lock(mu);
    completed.insert(completed.end(), all.begin(), all.end());
  }
  // Waits (30 s at most) until the source was flushed `n` times in all.
  bool wait_for_flushes(int n) {
    std::unique_lock lock(mu);
    return flushed.wait_for(lock, std::chrono::seconds(30), [&] { return flushes >= n; });
  }
};

class SyntheticSource : public GpuSource {
 public:
  explicit SyntheticSource(std::shared_ptr<SyntheticGpu> gpu) : gpu_(std::move(gpu)) {}
  std::string start(GpuTiming& timing) noexcept override {
    if (!gpu_->refuse.empty()) return gpu_->refuse;
    gpu_->timing = &timing;
    return "";
  }
  void flush() noexcept override {
    std::vector<GpuActivity> out;
    {
      std::lock_guard lock(gpu_->mu);
      out.swap(gpu_->completed);
      ++gpu_->flushes;
    }
    gpu_->flushed.notify_all();
    if (!gpu_->stopped) gpu_->timing->on_activities(out);
  }
  void stop() noexcept override { gpu_->stopped = true; }

 private:
  std::shared_ptr<SyntheticGpu> gpu_;
};

const nemo::lens::AttributeValue* attr(const nemo::lens::SpanData& s, const char* key) {
  return s.attribute(key);
}
std::int64_t int_attr(const nemo::lens::SpanData& s, const char* key) {
  const auto* v = attr(s, key);
  EXPECT_NE(v, nullptr) << s.name << " has no " << key;
  return v != nullptr ? std::get<std::int64_t>(*v) : -1;
}

class GpuSpans : public lens_test::Tracing {
 protected:
  void SetUp() override {
    gpu_ = std::make_shared<SyntheticGpu>();
    nemo::lens::detail::set_gpu_source_factory(
        [gpu = gpu_] { return std::make_unique<SyntheticSource>(gpu); });
  }
  void TearDown() override {
    lens_test::Tracing::TearDown();
    nemo::lens::detail::set_gpu_source_factory(nullptr);
  }
  void start_gpu(const std::string& gpu_groups, const std::string& wait_ms = "") {
    env_.set("NEMO_LENS_GPU_TIME", gpu_groups);
    if (!wait_ms.empty()) env_.set("NEMO_LENS_GPU_TIME_WAIT_MS", wait_ms);
    start("all");
    ASSERT_NE(gpu_->timing, nullptr);
  }
  std::shared_ptr<SyntheticGpu> gpu_;
};

using nemo::lens::SpanStartOptions;

nemo::lens::Span open(const char* group, const char* name) {
  SpanStartOptions o;
  o.group = group;
  return nemo::lens::start_span(name, o);
}

TEST_F(GpuSpans, NestedSpansCarryTheUnionOfTheirActivityAndKernelCounts) {
  start_gpu("step,forward_backward");
  {
    auto step = open("step", "train_step");
    gpu_->launch(1);
    {
      auto fb = open("forward_backward", "forward_backward");
      gpu_->launch(2);
      gpu_->launch(3);
      {
        auto other = open("optimizer", "not_timed");  // not GPU-timed: its launch is fb's
        gpu_->launch(4);
      }
    }
  }
  gpu_->complete(kernel(1, 1000, 1100));
  gpu_->complete(kernel(2, 1200, 1500, 1));
  gpu_->complete(kernel(3, 1300, 1600, 2));  // overlaps 2 on another stream
  gpu_->complete({4, GpuActivityKind::kMemcpy, 0, 3, 1700, 1750});
  const auto all = spans();
  const auto step = only(all, "train_step");
  const auto fb = only(all, "forward_backward");
  const auto other = only(all, "not_timed");
  EXPECT_EQ(int_attr(fb, "gpu.busy"), 450);  // [1200, 1600) + [1700, 1750)
  EXPECT_EQ(int_attr(fb, "gpu.kernels"), 2);
  EXPECT_EQ(int_attr(fb, "gpu.start"), 1200);
  EXPECT_EQ(int_attr(fb, "gpu.end"), 1750);
  EXPECT_EQ(int_attr(step, "gpu.busy"), 550);
  EXPECT_EQ(int_attr(step, "gpu.kernels"), 3);
  EXPECT_EQ(int_attr(step, "gpu.start"), 1000);
  EXPECT_EQ(attr(other, "gpu.busy"), nullptr);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_spans_timed, 2u);
  EXPECT_EQ(stats.gpu_spans_incomplete, 0u);
  EXPECT_EQ(stats.gpu_activities_late, 0u);
}

TEST_F(GpuSpans, LaunchesAndRecordsBeyondTheQueuesBoundAreDroppedAndCounted) {
  start_gpu("step");
  gpu_->timing->set_queue_bound(2);
  {
    auto step = open("step", "crowded_step");
    // Nothing takes the queue in while the span is open (no span ended, none waits): the third
    // and fourth launches find it full.
    for (std::uint64_t c = 61; c <= 64; ++c) gpu_->launch(c);
    EXPECT_EQ(handle_.stats().gpu_launches_dropped, 2u);  // counted as they are dropped
  }
  // The four records come back in one flush: the queue of records takes two.
  gpu_->complete(
      {kernel(61, 1000, 1010), kernel(62, 10, 20), kernel(63, 20, 30), kernel(64, 30, 40)});
  const auto s = only(spans(), "crowded_step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 2);  // what was tracked
  EXPECT_EQ(int_attr(s, "gpu.busy"), 20);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_launches_dropped, 2u);
  EXPECT_EQ(stats.gpu_activities_dropped, 2u);
  EXPECT_EQ(stats.gpu_activities_unattributed, 0u);  // the dropped records never got that far
  EXPECT_EQ(stats.gpu_spans_incomplete, 0u);         // the launches it tracked all came back
  EXPECT_EQ(stats.gpu_spans_timed, 1u);
}

TEST_F(GpuSpans, RecordsOfLaunchesOutsideEveryGpuTimedSpanAreCountedUnattributed) {
  start_gpu("step");
  {
    auto other = open("optimizer", "optimizer_step");  // recorded, but not GPU-timed
    gpu_->launch(71);
  }
  gpu_->launch(72);  // no span open on any thread
  {
    auto step = open("step", "timed_step");
    gpu_->launch(73);
  }
  gpu_->complete({kernel(71, 1000, 1010), kernel(72, 10, 20), kernel(73, 20, 30)});
  // The timed span waits for its record, which comes in the same flush as the two others.
  const auto all = spans();
  EXPECT_EQ(int_attr(only(all, "timed_step"), "gpu.kernels"), 1);
  EXPECT_EQ(attr(only(all, "optimizer_step"), "gpu.kernels"), nullptr);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_activities_unattributed, 2u);
  EXPECT_EQ(stats.gpu_activities_late, 0u);
  EXPECT_EQ(stats.gpu_launches_dropped, 0u);
  EXPECT_EQ(stats.gpu_activities_dropped, 0u);
}

// The control endpoint's dump carries the GPU counts where GPU time runs (docs/control.md).
TEST_F(GpuSpans, ASpanWaitingForItsRecordsIsCountedUntilItLeavesAndTheDumpShowsIt) {
  lens_test::TempDir control;
  env_.set("NEMO_LENS_CONTROL_DIR", (control.path() / "ctl").string());
  env_.set("OTEL_BSP_SCHEDULE_DELAY", "10");  // the exporter thread takes the span on its own
  start_gpu("step", "600000");                // and holds it for as long as this test takes
  {
    auto step = open("step", "waiting_step");
    gpu_->launch(81);
  }
  // The poller flushes the source only while a span waits: its first flush says one is held, and
  // nothing lets it go before its record comes.
  ASSERT_TRUE(gpu_->wait_for_flushes(1));
  EXPECT_EQ(handle_.stats().gpu_spans_waiting, 1u);
  const auto sockets = lens_test::control_sockets(control.path() / "ctl");
  ASSERT_EQ(sockets.size(), 1u);
  const auto dump = lens_test::control_request(sockets[0], "lens-ctl/1 dump");
  ASSERT_EQ(dump["ok"], true) << dump.dump();
  const auto& counts = dump["stats"];
  EXPECT_EQ(counts["gpu_spans_waiting"], 1) << counts.dump();
  for (const char* key :
       {"gpu_spans_timed", "gpu_spans_incomplete", "gpu_launches_dropped", "gpu_activities_dropped",
        "gpu_activities_late", "gpu_activities_unattributed"}) {
    EXPECT_EQ(counts[key], 0) << key << " in " << counts.dump();
  }
  gpu_->complete(kernel(81, 1000, 1010));
  EXPECT_EQ(int_attr(only(spans(), "waiting_step"), "gpu.kernels"), 1);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_spans_waiting, 0u);
  EXPECT_EQ(stats.gpu_spans_incomplete, 0u);
  EXPECT_EQ(stats.gpu_spans_timed, 1u);
  handle_.shutdown();  // its endpoint goes before its directory
}

TEST_F(GpuSpans, ASpanWithoutActivityHasZeroKernelsAndNoInterval) {
  start_gpu("step");
  { auto step = open("step", "idle_step"); }
  const auto s = only(spans(), "idle_step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 0);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 0);
  EXPECT_EQ(attr(s, "gpu.start"), nullptr);
  EXPECT_EQ(attr(s, "gpu.end"), nullptr);
}

TEST_F(GpuSpans, ALaunchFromAThreadWithoutASpanGoesToTheProcesssInnermostSpan) {
  start_gpu("step,forward_backward");
  auto step = open("step", "train_step");
  nemo::lens::Span fb;
  std::thread worker;
  {
    // Another thread opens forward_backward after the step started: it is the innermost.
    std::thread([&] { fb = open("forward_backward", "forward_backward"); }).join();
    // An autograd-like thread with no span launches.
    std::thread([&] { gpu_->launch(11); }).join();
  }
  fb.end();
  std::thread([&] { gpu_->launch(12); }).join();  // now the step is the innermost open span
  step.end();
  gpu_->complete(kernel(11, 1000, 1100));
  gpu_->complete(kernel(12, 200, 250));
  const auto all = spans();
  EXPECT_EQ(int_attr(only(all, "forward_backward"), "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(only(all, "forward_backward"), "gpu.busy"), 100);
  // The step gets the launch made while it was innermost; fb ran on another thread, so the
  // step's chain did not include it: the first launch is fb's alone.
  EXPECT_EQ(int_attr(only(all, "train_step"), "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(only(all, "train_step"), "gpu.busy"), 50);
}

TEST_F(GpuSpans, ASpanWaitsForItsActivityThenLeavesIncompleteAndLaterRecordsAreCountedLate) {
  start_gpu("step", "50");
  {
    auto step = open("step", "slow_step");
    gpu_->launch(21);
    gpu_->launch(22);
  }
  gpu_->complete(kernel(21, 1000, 1010));
  const auto s = only(spans(), "slow_step");  // flushes: waits 50 ms for kernel 22, in vain
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 10);
  gpu_->complete(kernel(22, 20, 30));
  EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
  // The late record is counted once the source is flushed again: by a span that waits.
  {
    auto step = open("step", "next_step");
    gpu_->launch(23);
  }
  gpu_->complete(kernel(23, 40, 45));
  EXPECT_EQ(int_attr(only(spans(), "next_step"), "gpu.kernels"), 1);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_spans_incomplete, 1u);
  EXPECT_EQ(stats.gpu_activities_late, 1u);
  EXPECT_EQ(stats.gpu_spans_timed, 2u);
}

TEST_F(GpuSpans, AHeldSpanLeavesAsSoonAsItsActivityComesWithoutAFlush) {
  start_gpu("step");
  {
    auto step = open("step", "held_step");
    gpu_->launch(31);
  }
  // No flush asked: the exporter thread takes the span at its schedule and holds it; the poller
  // flushes the source, finds the activity and wakes the exporter thread.
  gpu_->complete(kernel(31, 5, 15));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (memory_->spans().empty() && std::chrono::steady_clock::now() < deadline) {
    handle_.force_flush(std::chrono::seconds(1));
  }
  ASSERT_EQ(memory_->spans().size(), 1u);
  EXPECT_EQ(int_attr(memory_->spans()[0], "gpu.busy"), 10);
  EXPECT_GT(gpu_->flushes.load(), 0);
}

TEST_F(GpuSpans, TheExporterLeavesTheLockOfAThreadWithoutLaunchesToItsOwner) {
  // Each batch of GPU-timed spans makes the exporter thread take in the threads' launches. It
  // takes a thread's lock only when that thread queued some: a guest's lock costs the owner a
  // fence from then on once guests came often (owner_lock.hpp), on every span's start and end.
  start_gpu("step");
  constexpr int kBatches = 512;  // twice the guests after which a lock turns (owner_lock.hpp)
  bool biased_before = false, biased = false;
  std::thread([&] {  // a thread of its own: no earlier test's guest counts against its lock
    biased_before = nemo::lens::detail::this_thread_lock_biased();
    if (!biased_before) return;  // every lock fences here (TSan, or no membarrier)
    for (int i = 0; i < kBatches; ++i) {
      { auto step = open("step", "no_launch"); }
      ASSERT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    }
    { auto step = open("step", "after"); }  // an owner whose guests came often turns here
    biased = nemo::lens::detail::this_thread_lock_biased();
    // Launches still reach the attribution.
    auto step = open("step", "launching");
    gpu_->launch(77);
  }).join();
  if (!biased_before) GTEST_SKIP() << "every owner lock fences here";
  EXPECT_TRUE(biased);
  gpu_->complete(kernel(77, 100, 130));
  ASSERT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
  EXPECT_EQ(int_attr(only(memory_->spans(), "launching"), "gpu.busy"), 30);
  EXPECT_EQ(memory_->spans().size(), static_cast<std::size_t>(kBatches + 2));
}

TEST_F(GpuSpans, LaunchesFromThreadsWithoutSpansLeaveTheSpansThreadsLockToItsOwner) {
  // Autograd's backward threads launch every kernel of a backward pass with no span of their own:
  // each launch counts for the process's innermost GPU-timed span, read from the chain its thread
  // publishes. Taking that thread's lock instead, as a guest, would turn it symmetric after 256
  // launches (owner_lock.hpp), and every span of that thread would pay a fence from then on.
  start_gpu("step");
  constexpr int kLaunches = 300;  // per launching thread; 256 guests turn a lock
  bool biased_before = false, biased = false;
  std::thread([&] {  // a thread of its own: no earlier test's guest counts against its lock
    biased_before = nemo::lens::detail::this_thread_lock_biased();
    auto step = open("step", "backward_step");
    // One launching thread that never made a span (no thread state), one that did (its own
    // launch queue), none with a GPU-timed span.
    std::thread([&] {
      for (int i = 0; i < kLaunches; ++i) gpu_->launch(1000 + i);
    }).join();
    std::thread([&] {
      { auto other = open("job", "not_gpu_timed"); }
      for (int i = 0; i < kLaunches; ++i) gpu_->launch(2000 + i);
    }).join();
    step.end();
    { auto next = open("job", "after"); }  // an owner whose guests came often turns here
    biased = nemo::lens::detail::this_thread_lock_biased();
  }).join();
  for (int i = 0; i < kLaunches; ++i) {
    const std::int64_t at = 100 + 10 * i;  // a zero start would be CUPTI's "not timed"
    gpu_->complete({kernel(1000 + i, at, at + 5), kernel(2000 + i, at + 5, at + 7)});
  }
  const auto all = spans();
  EXPECT_EQ(int_attr(only(all, "backward_step"), "gpu.kernels"), 2 * kLaunches);
  EXPECT_EQ(int_attr(only(all, "backward_step"), "gpu.busy"), 7 * kLaunches);
  if (!biased_before) GTEST_SKIP() << "every owner lock fences here";
  EXPECT_TRUE(biased);
}

TEST_F(GpuSpans, TakingAThreadsOwnLaunchesLeavesItsLockToItsOwner) {
  // A thread that launches inside its own GPU-timed spans (a training loop) has its launches
  // taken by the exporter thread at nearly every batch. Taken under its lock, as a guest, 256
  // takes would turn the lock symmetric (owner_lock.hpp): every span of the training loop would
  // pay a fence from then on.
  start_gpu("step");
  constexpr int kSteps = 300;  // each one's launch taken by a flush of its own
  bool biased_before = false, biased = false;
  std::thread([&] {  // a thread of its own: no earlier test's guest counts against its lock
    biased_before = nemo::lens::detail::this_thread_lock_biased();
    for (int i = 0; i < kSteps; ++i) {
      {
        auto step = open("step", "train_step");
        gpu_->launch(5000 + i);
      }
      const std::int64_t at = 100 + 10 * i;
      gpu_->complete(kernel(5000 + i, at, at + 4));
      ASSERT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    }
    { auto next = open("job", "after"); }  // an owner whose guests came often turns here
    biased = nemo::lens::detail::this_thread_lock_biased();
  }).join();
  const auto all = spans();
  int steps = 0;
  for (const auto& s : all) {
    if (s.name != "train_step") continue;
    ++steps;
    EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
    EXPECT_EQ(int_attr(s, "gpu.busy"), 4);
  }
  EXPECT_EQ(steps, kSteps);
  if (!biased_before) GTEST_SKIP() << "every owner lock fences here";
  EXPECT_TRUE(biased);
}

TEST_F(GpuSpans, ALaunchFromAThreadWithoutSpansTakesNoLockAtAll) {
  // Not even the registry's, which a thread takes when it starts or exits: the launch reads the
  // states linked for for_each_thread_state(). Here the launch comes while the registry's mutex
  // is held; with visit_thread_states() back in on_launch() it would wait for it.
  start_gpu("step");
  auto step = open("step", "train_step");
  bool launched_meanwhile = false;
  bool first = true;
  std::future<void> launch;  // out here: its end is waited for once the mutex is released
  nemo::lens::detail::visit_thread_states([&](nemo::lens::detail::ThreadState&) {
    if (!std::exchange(first, false)) return;
    // A thread that never made a span: no state, so no lock of its own either.
    launch = std::async(std::launch::async, [&] { gpu_->launch(81); });
    launched_meanwhile = launch.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  });
  launch.wait();  // a launch that waited for the registry's mutex ends now
  EXPECT_TRUE(launched_meanwhile);
  step.end();
  gpu_->complete(kernel(81, 100, 140));
  const auto s = only(spans(), "train_step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 40);
}

TEST_F(GpuSpans, ALaunchInsideAGpuTimedSpanWaitsForNoLockOfItsThread) {
  // Not even its own thread's, held here by a guest (as by a thread ending a span this thread
  // started, or a dump of its open spans): the launch reads its thread's chain as other threads
  // do. With the lock back in on_launch() the launch waits for the guest.
  start_gpu("step");
  std::promise<void> opened;  // once the worker's span is open
  std::promise<void> go;
  std::promise<void> launched;
  std::future<void> launched_future = launched.get_future();
  std::thread worker([&] {
    auto step = open("step", "train_step");
    opened.set_value();
    go.get_future().wait();
    gpu_->launch(83);
    launched.set_value();
    step.end();  // takes the lock: after the guest let it go
  });
  opened.get_future().wait();
  // Every thread state's lock, the worker's as a guest (this is not its thread), and the
  // registry's.
  nemo::lens::detail::lock_all_thread_states();
  go.set_value();
  const bool launched_meanwhile =
      launched_future.wait_for(std::chrono::seconds(10)) == std::future_status::ready;
  nemo::lens::detail::unlock_all_thread_states();
  worker.join();
  EXPECT_TRUE(launched_meanwhile);
  gpu_->complete(kernel(83, 100, 140));
  const auto s = only(spans(), "train_step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 40);
}

std::uint64_t key_of(const nemo::lens::Span& span) {
  return nemo::lens::detail::span_key(span.context().span_id);
}

// The calling thread's published chain, as span keys innermost first ({-1} when unreadable), and
// whether its innermost asked for kernel spans.
std::vector<std::uint64_t> published_chain(bool* kernel_spans = nullptr) {
  nemo::lens::detail::GpuChainCopy copy;
  if (!nemo::lens::detail::read_this_thread_gpu_chain(copy)) return {~0ull};
  if (kernel_spans != nullptr) *kernel_spans = copy.kernel_spans;
  return {copy.spans, copy.spans + copy.size};
}

TEST_F(GpuSpans, AThreadPublishesItsOpenGpuTimedSpansInnermostFirst) {
  // What launches from threads without spans read (LaunchesFromThreadsWithoutSpans...): it
  // follows the thread's stack through every way a span starts and ends.
  env_.set("NEMO_LENS_GPU_KERNEL_SPANS", "forward_backward");
  start_gpu("step,forward_backward");
  std::thread([&] {
    EXPECT_EQ(published_chain(), std::vector<std::uint64_t>{});
    auto step = open("step", "step");
    auto job = open("job", "not_timed");
    // A LENS_SPAN site's too (a GPU-timed group's leaves the site's fast start for it).
    LENS_SPAN(site_fb, "forward_backward", "site_fb", {"i", std::int64_t{1}});
    bool kernels = false;
    const auto chain = published_chain(&kernels);
    ASSERT_EQ(chain.size(), 2u);
    EXPECT_EQ(chain[0], key_of(site_fb));
    EXPECT_EQ(chain[1], key_of(step));
    EXPECT_TRUE(kernels);  // forward_backward's
    {
      auto fb = open("forward_backward", "fb");
      EXPECT_EQ(published_chain(), (std::vector<std::uint64_t>{key_of(fb), chain[0], chain[1]}));
      // Ended out of order, then on another thread: each end takes it out.
      step.end();
      EXPECT_EQ(published_chain(), (std::vector<std::uint64_t>{key_of(fb), chain[0]}));
      std::thread([&] { fb.end(); }).join();
    }
    EXPECT_EQ(published_chain(), std::vector<std::uint64_t>{chain[0]});
    job.end();
    auto later = open("step", "later");
    EXPECT_EQ(published_chain(), (std::vector<std::uint64_t>{key_of(later), chain[0]}));
    EXPECT_TRUE(handle_.shutdown(std::chrono::seconds(10)));  // truncates the open ones
    EXPECT_EQ(published_chain(), std::vector<std::uint64_t>{});
  }).join();
}

TEST_F(GpuSpans, ASpanSwitchedOffMidFlightKeepsItsGpuTimeAndLaterOnesRecordNothing) {
  start_gpu("step");
  auto step = open("step", "switched");
  gpu_->launch(41);
  nemo::lens::set_enabled_span_groups({"job"});  // `lens ctl groups` does this live
  gpu_->launch(42);                              // the open span still records
  step.end();
  {
    auto off = open("step", "off_step");  // not recorded: its launch belongs to nobody
    gpu_->launch(43);
  }
  gpu_->complete(kernel(41, 1000, 1010));
  gpu_->complete(kernel(42, 10, 30));
  gpu_->complete(kernel(43, 30, 40));
  const auto all = spans();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(int_attr(all[0], "gpu.kernels"), 2);
  EXPECT_EQ(int_attr(all[0], "gpu.busy"), 30);
}

TEST_F(GpuSpans, ShutdownWithWorkInFlightExportsWhatIsKnownAndCountsTheRest) {
  start_gpu("step", "100");
  {
    auto step = open("step", "last_step");
    gpu_->launch(51);
    gpu_->launch(52);
  }
  gpu_->complete(kernel(51, 1000, 1010));
  EXPECT_TRUE(handle_.shutdown(std::chrono::seconds(10)));
  EXPECT_TRUE(gpu_->stopped.load());
  const auto all = memory_->spans();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(int_attr(all[0], "gpu.kernels"), 1);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 1u);
}

TEST_F(GpuSpans, OffByDefaultAndSpansAreUnchanged) {
  start("all");
  EXPECT_EQ(gpu_->timing, nullptr);  // the source was never started
  { auto step = open("step", "plain"); }
  const auto s = only(spans(), "plain");
  EXPECT_EQ(attr(s, "gpu.busy"), nullptr);
  EXPECT_EQ(attr(s, "gpu.kernels"), nullptr);
  EXPECT_EQ(handle_.stats().gpu_spans_timed, 0u);
}

using lens_test::capture_stderr;

TEST_F(GpuSpans, ASourceThatCannotStartSaysWhyOnceAndChangesNothingElse) {
  gpu_->refuse = "no GPU (test)";
  env_.set("NEMO_LENS_GPU_TIME", "per_step");
  const std::string err = capture_stderr([&] { start("all"); });
  EXPECT_NE(err.find("GPU time of spans is off (per_step): no GPU (test)"), std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  { auto step = open("step", "plain"); }
  const auto s = only(spans(), "plain");
  EXPECT_EQ(attr(s, "gpu.kernels"), nullptr);
  EXPECT_EQ(handle_.stats().spans_exported, 1u);
}

// The real source on this machine (CI has no GPU): set-up still succeeds, one line says why GPU
// time is off, and spans are exported as without it.
TEST_F(GpuSpans, TheCuptiSourceWithoutAGpuSaysWhyAndTheJobRunsOn) {
  nemo::lens::detail::set_gpu_source_factory(nullptr);
  env_.set("NEMO_LENS_GPU_TIME", "step");
  bool has_gpu = false;
  const std::string err = capture_stderr([&] { start("all"); });
  has_gpu = err.empty();
  if (has_gpu) GTEST_SKIP() << "this machine has a GPU: scripts/gpu-check covers it";
  EXPECT_NE(err.find("lens: GPU time of spans is off (step): "), std::string::npos) << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  { auto step = open("step", "cpu_step"); }
  const auto s = only(spans(), "cpu_step");
  EXPECT_EQ(attr(s, "gpu.kernels"), nullptr);
}

TEST(GpuTimeConfig, BadValuesAreConfigErrorsNamingTheVariable) {
  lens_test::ScopedEnv env;
  env.set("NEMO_LENS_GPU_TIME", "step,no_such_group");
  auto cfg = lens_test::enabled_config();
  try {
    nemo::lens::setup_telemetry(cfg, 0, 1, {});
    FAIL() << "no error";
  } catch (const nemo::lens::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NEMO_LENS_GPU_TIME"), std::string::npos) << what;
    EXPECT_NE(what.find("no_such_group"), std::string::npos) << what;
  }
  env.set("NEMO_LENS_GPU_TIME", "step");
  env.set("NEMO_LENS_GPU_TIME_WAIT_MS", "soon");
  try {
    nemo::lens::setup_telemetry(cfg, 0, 1, {});
    FAIL() << "no error";
  } catch (const nemo::lens::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NEMO_LENS_GPU_TIME_WAIT_MS"), std::string::npos) << what;
    EXPECT_NE(what.find("'soon'"), std::string::npos) << what;
  }
  env.unset("NEMO_LENS_GPU_TIME_WAIT_MS");
  env.set("NEMO_LENS_GPU_KERNEL_SPANS", "layr");
  try {
    nemo::lens::setup_telemetry(cfg, 0, 1, {});
    FAIL() << "no error";
  } catch (const nemo::lens::ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("NEMO_LENS_GPU_KERNEL_SPANS"), std::string::npos) << what;
    EXPECT_NE(what.find("'layr'"), std::string::npos) << what;
  }
}

// <PREFIX>_GPU_KERNEL_SPANS: each kernel, copy and memset of a GPU-timed span of those groups is
// also exported as its child, timed by the GPU, named by the kernel, with its stream, device and
// correlation id; the activity of a span of another group (or of a span nested in it) is not.
TEST_F(GpuSpans, KernelSpansAreChildrenTimedByTheGpu) {
  env_.set("NEMO_LENS_GPU_KERNEL_SPANS", "forward_backward,optimizer");  // optimizer: not timed
  start_gpu("step,forward_backward");
  {
    auto step = open("step", "step");
    gpu_->launch(1);  // the step's own: no kernel span (step is not in GPU_KERNEL_SPANS)
    {
      auto fb = open("forward_backward", "fb");
      gpu_->launch(2);
      gpu_->launch(3);
    }
  }
  GpuActivity gemm = kernel(2, 1100, 1300, /*stream=*/7, /*device=*/1);
  gemm.name = "ampere_sgemm_128x64_nn";
  GpuActivity copy{3, GpuActivityKind::kMemcpy, 1, 9, 1400, 1450, "memcpy"};
  gpu_->complete({kernel(1, 1000, 1050), gemm, copy});
  const auto all = spans();
  const auto fb = only(all, "fb");
  const auto k = only(all, "ampere_sgemm_128x64_nn");
  const auto c = only(all, "memcpy");
  for (const auto* s : {&k, &c}) {
    EXPECT_EQ(s->parent_span_id, fb.context.span_id) << s->name;
    EXPECT_EQ(s->context.trace_id, fb.context.trace_id) << s->name;
    EXPECT_EQ(s->attribute("thread.id"), nullptr) << "a kernel runs on no CPU thread";
  }
  EXPECT_EQ(k.start_time_unix_nano, 1100);
  EXPECT_EQ(k.end_time_unix_nano, 1300);
  EXPECT_EQ(int_attr(k, "gpu.stream"), 7);
  EXPECT_EQ(int_attr(k, "gpu.device"), 1);
  EXPECT_EQ(int_attr(k, "gpu.correlation_id"), 2);
  EXPECT_EQ(std::get<std::string>(*attr(k, "gpu.kind")), "kernel");
  EXPECT_EQ(std::get<std::string>(*attr(c, "gpu.kind")), "memcpy");
  EXPECT_EQ(c.start_time_unix_nano, 1400);
  EXPECT_EQ(all.size(), 4u) << "the step's own kernel has no span";
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_kernel_spans, 2u);
  EXPECT_EQ(stats.gpu_kernel_spans_dropped, 0u);
}

TEST_F(GpuSpans, KernelSpansBeyondTheBoundAreCounted) {
  env_.set("NEMO_LENS_GPU_KERNEL_SPANS", "step");
  start_gpu("step");
  const int n = static_cast<int>(GpuAttribution::kMaxKernelSpans) + 6;
  {
    auto step = open("step", "step");
    for (int i = 0; i < n; ++i) gpu_->launch(static_cast<std::uint64_t>(100 + i));
  }
  std::vector<GpuActivity> done;
  for (int i = 0; i < n; ++i)
    done.push_back(kernel(static_cast<std::uint64_t>(100 + i), 1000 + 10 * i, 1005 + 10 * i));
  {
    std::lock_guard lock(gpu_->mu);
    gpu_->completed.insert(gpu_->completed.end(), done.begin(), done.end());
  }
  const auto all = spans();
  EXPECT_EQ(int_attr(only(all, "step"), "gpu.kernels"), n);
  EXPECT_EQ(all.size(), 1 + GpuAttribution::kMaxKernelSpans);
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_kernel_spans, GpuAttribution::kMaxKernelSpans);
  EXPECT_EQ(stats.gpu_kernel_spans_dropped, 6u);
}

// Threads opening and closing spans and launching from inside them and from threads without
// one, while the exporter thread takes and holds spans: every kernel counts in exactly one root
// span (the roots do not nest), and every span leaves complete.
TEST_F(GpuSpans, ConcurrentLaunchesAllCountInExactlyOneRoot) {
  start_gpu("step,forward_backward");
  constexpr int kThreads = 4, kSteps = 50, kLaunches = 5;
  std::atomic<std::uint64_t> next{1};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int s = 0; s < kSteps; ++s) {
        auto step = open("step", "step");
        for (int i = 0; i < kLaunches; ++i) {
          auto fb = open("forward_backward", "fb");
          const std::uint64_t c = next++;
          gpu_->launch(c);
          gpu_->complete(
              kernel(c, static_cast<std::int64_t>(c) * 10, static_cast<std::int64_t>(c) * 10 + 5));
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  const auto all = spans();
  std::int64_t root_kernels = 0, fb_kernels = 0;
  for (const auto& s : all) {
    if (s.name == "step") root_kernels += int_attr(s, "gpu.kernels");
    if (s.name == "fb") fb_kernels += int_attr(s, "gpu.kernels");
  }
  EXPECT_EQ(root_kernels, kThreads * kSteps * kLaunches);
  EXPECT_EQ(fb_kernels, kThreads * kSteps * kLaunches);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
  EXPECT_EQ(handle_.stats().gpu_spans_timed,
            static_cast<std::uint64_t>(kThreads * kSteps * (kLaunches + 1)));
}

}  // namespace
