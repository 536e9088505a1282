// What the span-site benchmarks (span_bench, track_bench, nvtx_bench) share: tracing set up
// through the real pipeline to an exporter that discards spans, and the baseline they are read
// against, two clock reads. Each benchmark sets the environment it measures before start_tracing.
//
//   setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8192", 1);      // the benchmark's own settings
//   TelemetryHandle h = lens_bench::start_tracing(/*exporting=*/true);
//   using lens_bench::BM_TwoClockReads;
//   BENCHMARK(BM_TwoClockReads);
#pragma once

#include <benchmark/benchmark.h>
#include <time.h>

#include <memory>

#include "nemo/lens/lens.hpp"
#include "null_exporters.hpp"

namespace lens_bench {

/// Sets up `per_step` tracing of a two-rank job as rank 0, exporting to a NullSpanExporter. With
/// `exporting` false, rank 1 is the exporting rank, so this one records nothing (its gated sites
/// cost only the gate, or what tracking and NVTX add). `config` carries what the benchmark reads
/// from the environment (defaults otherwise); enabled, strategy, rank and groups are set here.
/// Replaces an earlier set-up (allow_reinit).
inline nemo::lens::TelemetryHandle start_tracing(bool exporting,
                                                 nemo::lens::NemoLensConfig config = {}) {
  config.enabled = true;
  config.export_strategy = "single_rank";
  config.export_rank = exporting ? 0 : 1;
  config.span_groups = "per_step";
  nemo::lens::SetupOptions options;
  options.exporter = std::make_shared<NullSpanExporter>();
  options.allow_reinit = true;
  return nemo::lens::setup_telemetry(config, 0, 2, options);
}

/// The baseline of every span figure: two reads of the realtime clock, what a span's start and
/// end cost at the least.
inline void BM_TwoClockReads(benchmark::State& state) {
  timespec a{}, b{};
  for (auto _ : state) {
    clock_gettime(CLOCK_REALTIME, &a);
    clock_gettime(CLOCK_REALTIME, &b);
    benchmark::DoNotOptimize(a);
    benchmark::DoNotOptimize(b);
  }
}

}  // namespace lens_bench
