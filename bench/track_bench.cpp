// What the open-span registry (<PREFIX>_TRACK_OPEN) costs at a call site, per mode, next to two
// clock reads: a site whose group is off, an exported span, and a site on a rank that does not
// export (with `all`, its spans are tracked for `lens ctl dump` but not recorded).
//
//   build/bench/track_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "bench_setup.hpp"
#include "nemo/lens/lens.hpp"

namespace {

using namespace nemo::lens;

const char* mode_name(std::int64_t mode) {
  return mode == 0 ? "off" : mode == 1 ? "enabled" : "all";
}

// Sets up `per_step` tracing with the registry in `mode` (0 off, 1 enabled, 2 all), on a rank
// that exports or not. No control socket: only the registry's cost is measured.
TelemetryHandle start(std::int64_t mode, bool exporting) {
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8192", 1);
  setenv("NEMO_LENS_CONTROL", "off", 1);
  setenv("NEMO_LENS_TRACK_OPEN", mode_name(mode), 1);
  return lens_bench::start_tracing(exporting);
}

using lens_bench::BM_TwoClockReads;
BENCHMARK(BM_TwoClockReads);

TelemetryHandle g_handle;

// A LENS_SPAN site whose group (layer) is not in the spec, on the exporting rank.
void BM_DisabledSite(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle = start(state.range(0), true);
  state.SetLabel(mode_name(state.range(0)));
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "layer_forward", {"layer", 3});
    benchmark::DoNotOptimize(s);
  }
  if (state.thread_index() == 0) g_handle.shutdown();
}
BENCHMARK(BM_DisabledSite)->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_DisabledSite)->Arg(2)->Threads(2);

// An exported span (group step) with two attributes.
void BM_EnabledSpan(benchmark::State& state) {
  g_handle = start(state.range(0), true);
  state.SetLabel(mode_name(state.range(0)));
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    ++i;
  }
  g_handle.shutdown();
}
BENCHMARK(BM_EnabledSpan)->Arg(0)->Arg(1);

// The same site on a rank that does not export: the gate, unless TRACK_OPEN=all gives it a
// registry entry.
void BM_NonExportingRankSite(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle = start(state.range(0), false);
  state.SetLabel(mode_name(state.range(0)));
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    ++i;
  }
  if (state.thread_index() == 0) g_handle.shutdown();
}
BENCHMARK(BM_NonExportingRankSite)->Arg(0)->Arg(1)->Arg(2);
BENCHMARK(BM_NonExportingRankSite)->Arg(2)->Threads(2);

}  // namespace

BENCHMARK_MAIN();
