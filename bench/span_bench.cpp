// The cost of a span on the calling thread while a real exporter works on its own thread, next to
// its baseline (two clock reads) measured in the same run: LENS_SPAN and managed_span() by name
// with two attributes, on one and two threads, to the `file` exporter (OTLP JSON to a file) and to
// the OTLP exporter sending to a real `lens collect`; the same span GPU-timed, and a kernel
// launch's share of GPU time (synthetic source); a disabled managed_span() by name next to
// is_span_group_enabled(); the same site whose group is off, and on a rank that does not export;
// and with the flight recorder on (<PREFIX>_RECORD_GROUPS): a recorded span, a site whose group
// is neither exported nor recorded, and a step span whose end runs the recorder's triggers.
//
//   build/bench/span_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//
// Spans come in bursts of kBurst (half the default queue of 2,048), the exporter thread draining
// and encoding them meanwhile, as it does while a training step runs; between bursts the clock is
// stopped and the exporter finishes (force_flush), as it does while the step computes. So no span
// is dropped (a figure that drops spans flatters itself; dropped_fraction reports it) and the
// caller pays what a real exporter costs it: the records it reuses were read on the exporter's
// core.
#include <benchmark/benchmark.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#endif

#include "bench_setup.hpp"
#include "gpu/gpu_timing.hpp"
#include "nemo/lens/lens.hpp"
#include "real_exporters.hpp"

namespace {

using namespace nemo::lens;
using lens_bench::ExporterKind;

constexpr int kBurst = 1024;

using lens_bench::BM_TwoClockReads;
BENCHMARK(BM_TwoClockReads);

#if defined(__x86_64__) || defined(__i386__)
// What an enabled span's clock costs at the least: its start and end each read the time stamp
// counter (not the realtime clock of the baseline above). The rest of a span's work overlaps
// these reads, so this is the floor under every span row (docs/performance.md).
void BM_TwoTscReads(benchmark::State& state) {
  for (auto _ : state) {
    const std::uint64_t a = __rdtsc();
    benchmark::DoNotOptimize(a);
    const std::uint64_t b = __rdtsc();
    benchmark::DoNotOptimize(b);
  }
}
BENCHMARK(BM_TwoTscReads);
#endif

// The benchmark's tracing: `per_step` on a one-rank job (or rank 0 of two, rank 1 exporting, when
// not `exporting`), the default queue and batch, a real exporter of `kind`; the base catalog, or
// Megatron's (`megatron`, whose per_step leaves microbatch and layer off).
struct Traced {
  std::unique_ptr<lens_bench::RealExporter> exporter;
  TelemetryHandle handle;
  std::atomic<std::uint64_t> bursts{0};
};
Traced g_traced;

void start(ExporterKind kind, bool exporting = true, bool megatron = false) {
  unsetenv("OTEL_BSP_MAX_QUEUE_SIZE");  // the defaults a user runs with
  unsetenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE");
  g_traced.handle = TelemetryHandle();
  g_traced.exporter = std::make_unique<lens_bench::RealExporter>(kind);
  NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "single_rank";
  config.export_rank = exporting ? 0 : 1;
  config.span_groups = "per_step";
  if (megatron) {
    config.span_group_catalog =
        std::make_shared<const SpanGroupCatalog>(MegatronSpanGroup::catalog());
  }
  g_traced.handle = g_traced.exporter->setup(config, 0, 2);
}

// Reports the fraction of spans dropped (none, when the bursts fit the queue) and which exporter
// ran, then shuts tracing down.
void stop(benchmark::State& state, ExporterKind kind) {
  const auto st = g_traced.handle.stats();
  state.counters["dropped_fraction"] =
      st.spans_ended ? static_cast<double>(st.spans_dropped_queue_full) / st.spans_ended : 0;
  state.SetLabel(lens_bench::exporter_name(kind));
  g_traced.handle.shutdown();
  g_traced.handle = TelemetryHandle();
  g_traced.exporter.reset();
  g_traced.bursts = 0;
}

// Times spans in bursts of kBurst on the steady clock, which stops between bursts while `between`
// runs (the exporter finishing, as it does while a step computes): a benchmark's time
// (UseManualTime) is its bursts' alone. Not PauseTiming() and ResumeTiming(): ResumeTiming()
// reads the thread's CPU clock, a system call (1.3 us on this project's VM), inside the timed part
// of every burst, which made each span row 5-8 ns dearer than its spans and left the baseline,
// which runs without pauses, as it was (docs/performance.md). A thread's first burst is counted
// untimed (its clock starts before the loop, where a thread of a multi-threaded run waits for
// the others and for the set-up), and so is an unfinished last one: under 2 * kBurst spans of
// the millions a run makes.
class BurstClock {
 public:
  explicit BurstClock(benchmark::State& state) : state_(state), start_(Clock::now()) {}
  template <class Between>
  void count(Between&& between) {
    if (NEMO_LENS_UNLIKELY(++k_ == kBurst)) {
      if (timed_) {
        state_.SetIterationTime(std::chrono::duration<double>(Clock::now() - start_).count());
      }
      timed_ = true;
      k_ = 0;
      between();
      start_ = Clock::now();
    }
  }
  /// The spans of the burst under way.
  int unfinished() const { return k_; }

 private:
  using Clock = std::chrono::steady_clock;
  benchmark::State& state_;
  Clock::time_point start_;
  int k_ = 0;
  bool timed_ = false;  // from the second burst on
};

// Between two bursts: the exporter exports everything (and every 64 bursts the file the spans
// went to is emptied).
void flush_between_bursts() {
  g_traced.handle.force_flush();
  if (g_traced.bursts.fetch_add(1) % 64 == 63) g_traced.exporter->trim();
}

// The figure: an int and a short string attribute.
void BM_EnabledSpanTwoAttributes(benchmark::State& state) {
  const auto kind = static_cast<ExporterKind>(state.range(0));
  if (state.thread_index() == 0) start(kind);
  std::int64_t i = 0;
  BurstClock bursts(state);
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
    bursts.count(flush_between_bursts);
  }
  if (state.thread_index() == 0) stop(state, kind);
}
BENCHMARK(BM_EnabledSpanTwoAttributes)
    ->ArgName("exporter")
    ->Arg(static_cast<int>(ExporterKind::kFile))
    ->Arg(static_cast<int>(ExporterKind::kOtlp))
    ->UseManualTime();
BENCHMARK(BM_EnabledSpanTwoAttributes)
    ->ArgName("exporter")
    ->Arg(static_cast<int>(ExporterKind::kFile))
    ->Threads(2)
    ->UseManualTime();

// managed_span() by group and name (found as an interned site in the thread's cache) and two
// set_attribute() calls, an int and a short string, each under the span's lock.
void BM_ManagedSpanTwoSetAttributes(benchmark::State& state) {
  const auto kind = static_cast<ExporterKind>(state.range(0));
  if (state.thread_index() == 0) start(kind);
  std::int64_t i = 0;
  BurstClock bursts(state);
  for (auto _ : state) {
    Span s = managed_span("step", "train_step");
    s.set_attribute("iteration", i);
    s.set_attribute("stage", "forward");
    ++i;
    bursts.count(flush_between_bursts);
  }
  if (state.thread_index() == 0) stop(state, kind);
}
BENCHMARK(BM_ManagedSpanTwoSetAttributes)
    ->ArgName("exporter")
    ->Arg(static_cast<int>(ExporterKind::kFile))
    ->Arg(static_cast<int>(ExporterKind::kOtlp))
    ->UseManualTime();

// A managed_span() by name whose group is off (`layer` under per_step), next to what it must stay
// within 2x of: asking whether the group is enabled by name.
void BM_DisabledManagedSpanByName(benchmark::State& state) {
  start(ExporterKind::kFile);
  for (auto _ : state) {
    Span s = managed_span("layer", "layer_forward");
    benchmark::DoNotOptimize(s);
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_DisabledManagedSpanByName);

void BM_IsSpanGroupEnabledByName(benchmark::State& state) {
  start(ExporterKind::kFile);
  for (auto _ : state) {
    bool on = is_span_group_enabled("layer");
    benchmark::DoNotOptimize(on);
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_IsSpanGroupEnabledByName);

void BM_SpanOnNonExportingRank(benchmark::State& state) {
  start(ExporterKind::kFile, /*exporting=*/false);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_SpanOnNonExportingRank);

void BM_DisabledGroupSite(benchmark::State& state) {
  start(ExporterKind::kFile);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "layer_forward", {"layer", i});
    ++i;
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_DisabledGroupSite);

// The flight recorder (docs/flight-recorder.md): Megatron's `per_step` exported, `record`
// recorded, the default ring of 16,384 spans a thread (full after the first 16,384 spans: each
// then overwrites the oldest), the file exporter set up.
void start_recording(const char* record) {
  setenv("NEMO_LENS_RECORD_GROUPS", record, 1);
  start(ExporterKind::kFile, true, true);
  unsetenv("NEMO_LENS_RECORD_GROUPS");
}

// A recorded span with the two attributes of BM_EnabledSpanTwoAttributes (the goal: no
// more than that exported span).
void BM_RecordedSpanTwoAttributes(benchmark::State& state) {
  start_recording("all");
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, MegatronSpanGroup::LAYER, "layer_forward", {"iteration", i},
              {"stage", "forward"});
    ++i;
  }
  const auto st = g_traced.handle.stats();
  state.counters["overwritten_fraction"] =
      st.spans_recorded ? static_cast<double>(st.spans_record_overwritten) / st.spans_recorded : 0;
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_RecordedSpanTwoAttributes);

// A site of Megatron's `layer`, neither exported nor recorded, without (0) and with (1) the
// recorder on for another group (microbatch): the same gate (the goal: what it costs
// today).
void BM_UnrecordedGroupSite(benchmark::State& state) {
  if (state.range(0) == 0) {
    start(ExporterKind::kFile, true, true);
  } else {
    start_recording("microbatch");
  }
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "layer_forward", {"layer", i});
    ++i;
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_UnrecordedGroupSite)->ArgName("recorder")->Arg(0)->Arg(1);

// An exported top-level step span without (0) and with (1) the recorder: with it, its end runs
// the triggers (the slow-step rule against the median of the last 32 steps, the error check).
void BM_StepSpanTriggers(benchmark::State& state) {
  if (state.range(0) == 0) {
    start(ExporterKind::kFile, true, true);
  } else {
    start_recording("all");
  }
  std::int64_t i = 0;
  BurstClock bursts(state);
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i});
    ++i;
    bursts.count(flush_between_bursts);
  }
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_StepSpanTriggers)->ArgName("recorder")->Arg(0)->Arg(1)->UseManualTime();

// GPU time of spans (<PREFIX>_GPU_TIME=step) from a synthetic source, the one CI can run (the GPU
// figures are scripts/gpu-check's): a launch is what CUPTI's launch callback hands lens, and its
// kernel's record comes back with the burst's end.
class BenchGpuSource : public detail::GpuSource {
 public:
  std::string start(detail::GpuTiming& timing) noexcept override {
    timing_ = &timing;
    return "";
  }
  void flush() noexcept override {}
  void stop() noexcept override { timing_ = nullptr; }
  detail::GpuTiming* timing_ = nullptr;
};
BenchGpuSource* g_gpu = nullptr;

void start_gpu(ExporterKind kind) {
  detail::set_gpu_source_factory([] {
    auto source = std::make_unique<BenchGpuSource>();
    g_gpu = source.get();
    return source;
  });
  setenv("NEMO_LENS_GPU_TIME", "step", 1);
  start(kind);
  unsetenv("NEMO_LENS_GPU_TIME");
  detail::set_gpu_source_factory(nullptr);
}

// The same span as BM_EnabledSpanTwoAttributes with its group GPU-timed: the calling thread's
// cost (the general start and end, which publish the thread's chain of GPU-timed spans), its GPU
// time joined on lens' threads.
void BM_GpuTimedSpanTwoAttributes(benchmark::State& state) {
  const auto kind = static_cast<ExporterKind>(state.range(0));
  start_gpu(kind);
  std::int64_t i = 0;
  BurstClock bursts(state);
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
    bursts.count(flush_between_bursts);
  }
  stop(state, kind);
}
BENCHMARK(BM_GpuTimedSpanTwoAttributes)
    ->ArgName("exporter")
    ->Arg(static_cast<int>(ExporterKind::kFile))
    ->UseManualTime();

// Hands the timing a kernel record for each of the burst's launches, the last `records.size()`
// before `next` (kernel c ran from 10c to 10c + 5 ns, on stream 7): what CUPTI delivers later.
void complete_burst(std::vector<detail::GpuActivity>& records, std::uint64_t next) {
  for (std::size_t j = 0; j < records.size(); ++j) {
    const auto c = next - records.size() + j;
    records[j] = {c, detail::GpuActivityKind::kKernel,  0,
                  7, static_cast<std::int64_t>(c) * 10, static_cast<std::int64_t>(c) * 10 + 5};
  }
  g_gpu->timing_->on_activities(records);
}

// complete_burst() for the `k` launches of an unfinished burst when the loop ends, so that no span
// waits for records of launches that never ran (the GPU wait, 10 s, at each of Google
// Benchmark's short trial runs).
void complete_unfinished_burst(int k, std::uint64_t next) {
  if (k == 0) return;
  std::vector<detail::GpuActivity> records(static_cast<std::size_t>(k));
  complete_burst(records, next);
}

// What lens adds to a kernel launch on the launching thread: the launch callback's attribution to
// the innermost GPU-timed span, here inside a step span of 1,024 launches whose records come back
// at the burst's end (the goal: at most 10 % of CUPTI's own record cost, 1.6 us).
void BM_GpuLaunchInsideATimedSpan(benchmark::State& state) {
  start_gpu(ExporterKind::kFile);
  std::uint64_t correlation = 1;
  std::vector<detail::GpuActivity> records(kBurst);
  BurstClock bursts(state);
  auto step = std::make_unique<Span>(managed_span("step", "train_step"));
  for (auto _ : state) {
    g_gpu->timing_->on_launch(correlation++);
    bursts.count([&] {
      step.reset();
      complete_burst(records, correlation);
      g_traced.handle.force_flush();
      step = std::make_unique<Span>(managed_span("step", "train_step"));
    });
  }
  complete_unfinished_burst(bursts.unfinished(), correlation);
  step.reset();
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_GpuLaunchInsideATimedSpan)->UseManualTime();

// The same launches from a thread with no span (autograd's backward thread), the step span open on
// another thread: the launch reads the threads' published chains of GPU-timed spans, and takes no
// other thread's lock.
void BM_GpuLaunchFromAThreadWithoutSpans(benchmark::State& state) {
  start_gpu(ExporterKind::kFile);
  std::mutex mu;
  std::condition_variable cv;
  int phase = 0;  // even: the step is to be (or was) opened; odd: it is open
  bool done = false;
  std::thread stepper([&] {
    std::unique_lock lock(mu);
    while (!done) {
      {
        Span step = managed_span("step", "train_step");
        ++phase;
        cv.notify_all();
        const int open = phase;
        cv.wait(lock, [&] { return done || phase != open; });
      }
      g_traced.handle.force_flush();
    }
  });
  auto wait_open = [&] {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return phase % 2 == 1; });
  };
  wait_open();
  std::uint64_t correlation = 1;
  std::vector<detail::GpuActivity> records(kBurst);
  BurstClock bursts(state);
  for (auto _ : state) {
    g_gpu->timing_->on_launch(correlation++);
    bursts.count([&] {
      complete_burst(records, correlation);
      {
        std::lock_guard lock(mu);
        ++phase;  // the stepper ends the step, flushes and opens the next
      }
      cv.notify_all();
      wait_open();
    });
  }
  complete_unfinished_burst(bursts.unfinished(), correlation);
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  stepper.join();
  stop(state, ExporterKind::kFile);
}
BENCHMARK(BM_GpuLaunchFromAThreadWithoutSpans)->UseManualTime();

// The caller's share alone: the same span to an exporter that takes the records and discards
// them, so that no record line ever leaves the caller's core. Not what a user sees; the
// difference to the rows above is what the exporter's reading costs the caller.
void BM_EnabledSpanDiscardingExporter(benchmark::State& state) {
  auto h = lens_bench::start_tracing(true);
  std::int64_t i = 0;
  BurstClock bursts(state);
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
    bursts.count([&] { h.force_flush(); });
  }
  state.SetLabel("discarding exporter");
  h.shutdown();
}
BENCHMARK(BM_EnabledSpanDiscardingExporter)->UseManualTime();

}  // namespace

BENCHMARK_MAIN();
