// What recording a metric or writing a log record costs on the caller's thread, next to the
// disabled span gate: with metrics (logs) off, and on, on one and two threads. The reader and the
// log processor export to exporters that discard everything.
//
//   build/bench/metrics_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <cstdlib>

#include "nemo/lens/lens.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/metrics.hpp"
#include "null_exporters.hpp"

namespace {

using namespace nemo::lens;

TelemetryHandle start(bool on) {
  setenv("NEMO_LENS_CONTROL", "off", 1);
  setenv("OTEL_METRIC_EXPORT_INTERVAL", "1000", 1);
  setenv("OTEL_BLRP_MAX_QUEUE_SIZE", "65536", 1);
  NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.metrics_enabled = on;
  c.logs_enabled = on;
  SetupOptions o;
  o.metric_exporter = std::make_shared<lens_bench::NullMetricExporter>();
  o.log_exporter = std::make_shared<lens_bench::NullLogExporter>();
  o.allow_reinit = true;
  return setup_telemetry(c, 0, 1, o);
}

Meter& meter() { return get_meter("bench"); }

TelemetryHandle g_handle;

void begin(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle = start(state.range(0) != 0);
  state.SetLabel(state.range(0) != 0 ? "on" : "off");
}
void end(benchmark::State& state) {
  if (state.thread_index() == 0) g_handle.shutdown();
}

void BM_DisabledSpanGate(benchmark::State& state) {
  for (auto _ : state) {
    LENS_SPAN(s, "layer", "never_enabled", {"i", 1});
    benchmark::DoNotOptimize(s);
  }
}
BENCHMARK(BM_DisabledSpanGate);

void BM_CounterAdd(benchmark::State& state) {
  static const auto counter = meter().create_counter<std::int64_t>("bench.counter");
  begin(state);
  for (auto _ : state) counter.add(1);
  end(state);
}
BENCHMARK(BM_CounterAdd)->Arg(0)->Arg(1);
BENCHMARK(BM_CounterAdd)->Arg(1)->Threads(2);

void BM_CounterAddTwoAttributes(benchmark::State& state) {
  static const auto counter = meter().create_counter<std::int64_t>("bench.counter_attrs");
  begin(state);
  for (auto _ : state) counter.add(512, {{"dataset", "web"}, {"rank", 3}});
  end(state);
}
BENCHMARK(BM_CounterAddTwoAttributes)->Arg(1);
BENCHMARK(BM_CounterAddTwoAttributes)->Arg(1)->Threads(2);

void BM_HistogramRecord(benchmark::State& state) {
  static const auto histogram = meter().create_histogram<double>("bench.histogram", "ms");
  begin(state);
  double v = 0;
  for (auto _ : state) {
    histogram.record(v);
    v = v < 9000 ? v + 37.5 : 0;
  }
  end(state);
}
BENCHMARK(BM_HistogramRecord)->Arg(0)->Arg(1);
BENCHMARK(BM_HistogramRecord)->Arg(1)->Threads(2);

void BM_GaugeSet(benchmark::State& state) {
  static const auto gauge = meter().create_gauge<double>("bench.gauge");
  begin(state);
  double v = 0;
  for (auto _ : state) gauge.set(v += 1);
  end(state);
}
BENCHMARK(BM_GaugeSet)->Arg(1);

void BM_Log(benchmark::State& state) {
  begin(state);
  std::int64_t i = 0;
  for (auto _ : state) log(Severity::kInfo, "step done", {{"iteration", ++i}});
  end(state);
}
BENCHMARK(BM_Log)->Arg(0)->Arg(1);

}  // namespace

BENCHMARK_MAIN();
