// The cost of an enabled span next to its baseline (two clock reads), on one and two threads, and
// the same site on a rank that does not export. Spans go through the real pipeline to an exporter
// that discards them.
//
//   build/bench/span_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "bench_setup.hpp"
#include "nemo/lens/lens.hpp"

namespace {

using namespace nemo::lens;

TelemetryHandle start(bool exporting) {
  // A queue deep enough that the exporter keeps up and no span is dropped (dropped spans would
  // flatter the figure); dropped_fraction reports it.
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8192", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512", 1);
  return lens_bench::start_tracing(exporting);
}

using lens_bench::BM_TwoClockReads;
BENCHMARK(BM_TwoClockReads);

TelemetryHandle g_handle;

// Reports the fraction of spans dropped for a full queue (a figure that drops spans flatters
// itself) and the exporter thread's wake-up calls per 1,000 spans (a system call each on the
// thread that ends the spans), then shuts g_handle down.
void stop(benchmark::State& state) {
  auto st = g_handle.stats();
  state.counters["dropped_fraction"] =
      st.spans_ended ? static_cast<double>(st.spans_dropped_queue_full) / st.spans_ended : 0;
  state.counters["wakeups_per_1k"] =
      st.spans_ended ? 1000.0 * static_cast<double>(st.exporter_wakeups) / st.spans_ended : 0;
  g_handle.shutdown();
}

// The figure: an int and a short string attribute.
void BM_EnabledSpanTwoAttributes(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle = start(true);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
  }
  if (state.thread_index() == 0) stop(state);
}
BENCHMARK(BM_EnabledSpanTwoAttributes);
BENCHMARK(BM_EnabledSpanTwoAttributes)->Threads(2);

// managed_span() by group and name (found as an interned site in the thread's cache) and two
// set_attribute() calls, an int and a short string, each under the span's lock.
void BM_ManagedSpanTwoSetAttributes(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle = start(true);
  std::int64_t i = 0;
  for (auto _ : state) {
    Span s = managed_span("step", "train_step");
    s.set_attribute("iteration", i);
    s.set_attribute("stage", "forward");
    ++i;
  }
  if (state.thread_index() == 0) stop(state);
}
BENCHMARK(BM_ManagedSpanTwoSetAttributes);

void BM_SpanOnNonExportingRank(benchmark::State& state) {
  auto h = start(false);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    ++i;
  }
  h.shutdown();
}
BENCHMARK(BM_SpanOnNonExportingRank);

void BM_DisabledGroupSite(benchmark::State& state) {
  auto h = start(true);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "layer_forward", {"layer", i});
    ++i;
  }
  h.shutdown();
}
BENCHMARK(BM_DisabledGroupSite);

}  // namespace

BENCHMARK_MAIN();
