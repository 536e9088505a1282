// What NVTX support costs a span site, per <PREFIX>_NVTX mode, next to two clock reads: an enabled
// LENS_SPAN with two attributes (recorded, queued and discarded) with NVTX off, auto without a
// tool and on; a site whose group is off; and a site on a rank that does not export (a range only).
//
//   build/bench/nvtx_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
//   # the same with the test NVTX tool attached (it takes every call; its log is off):
//   NVTX_INJECTION64_PATH=build/tests/liblens_nvtx_test_tool.so build/bench/nvtx_bench ...
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "bench_setup.hpp"
#include "nemo/lens/lens.hpp"

namespace {

using namespace nemo::lens;

constexpr const char* kModes[] = {"off", "auto", "on"};

TelemetryHandle start(const char* nvtx, bool exporting) {
  // Deep enough that the exporter keeps up: no dropped span flatters the figure.
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8192", 1);
  setenv("NEMO_LENS_NVTX", nvtx, 1);
  return lens_bench::start_tracing(exporting, NemoLensConfig::from_env());
}

using lens_bench::BM_TwoClockReads;
BENCHMARK(BM_TwoClockReads);

void BM_EnabledSpan(benchmark::State& state) {
  const char* mode = kModes[state.range(0)];
  state.SetLabel(std::string("nvtx=") + mode);
  auto h = start(mode, true);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    ++i;
  }
  const auto st = h.stats();
  state.counters["dropped_fraction"] =
      st.spans_ended ? static_cast<double>(st.spans_dropped_queue_full) / st.spans_ended : 0;
  h.shutdown();
}
BENCHMARK(BM_EnabledSpan)->DenseRange(0, 2);

void BM_DisabledSite(benchmark::State& state) {
  const char* mode = kModes[state.range(0)];
  state.SetLabel(std::string("nvtx=") + mode);
  auto h = start(mode, true);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "layer_forward", {"layer", i});
    ++i;
  }
  h.shutdown();
}
BENCHMARK(BM_DisabledSite)->DenseRange(0, 2);

void BM_NonExportingRankSite(benchmark::State& state) {
  const char* mode = kModes[state.range(0)];
  state.SetLabel(std::string("nvtx=") + mode);
  auto h = start(mode, false);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    ++i;
  }
  h.shutdown();
}
BENCHMARK(BM_NonExportingRankSite)->DenseRange(0, 2);

}  // namespace

BENCHMARK_MAIN();
