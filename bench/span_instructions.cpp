// The calling thread's instructions per span, to be counted by callgrind (exact and repeatable,
// unlike timings on a shared machine), with a real exporter (the `file` exporter writing OTLP JSON
// to a temporary file) working on its own thread. Collection is on only around the measured
// loops, on this thread: chunks of 1,000 spans (the queue holds them all, so none is dropped while
// callgrind runs one thread at a time), each followed by a flush outside the count. Modes:
//   span      LENS_SPAN, group STEP, an int and a short string attribute
//   recorded  the same LENS_SPAN in group OPTIMIZER, kept by the flight recorder (only `step` is
//             exported), its thread's ring of 1,024 spans full: each end overwrites the oldest
//   managed   managed_span("step", ...) and two set_attribute() calls, an int and a short string
//   disabled  managed_span("layer", ...) by name, its group off
//   enabled   is_span_group_enabled("layer"), what the disabled one is read against
//
//   bench/count_span_instructions.sh build
#include <cstdio>
#include <cstdlib>
#include <cstring>

#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#else
#define CALLGRIND_TOGGLE_COLLECT
#endif

#include "nemo/lens/lens.hpp"
#include "real_exporters.hpp"

namespace {

using namespace nemo::lens;

volatile bool g_sink = false;

[[gnu::noinline]] void lens_spans(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
  }
}

[[gnu::noinline]] void recorded_spans(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    LENS_SPAN(s, SpanGroup::OPTIMIZER, "optimizer_step", {"iteration", i}, {"stage", "forward"});
  }
}

[[gnu::noinline]] void managed_spans(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    Span s = managed_span("step", "train_step");
    s.set_attribute("iteration", i);
    s.set_attribute("stage", "forward");
  }
}

[[gnu::noinline]] void disabled_managed_spans(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) {
    Span s = managed_span("layer", "layer_forward");
    g_sink = static_cast<bool>(s);
  }
}

[[gnu::noinline]] void enabled_checks(std::int64_t n) {
  for (std::int64_t i = 0; i < n; ++i) g_sink = is_span_group_enabled("layer");
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "span";
  const int chunks = argc > 2 ? std::atoi(argv[2]) : 20;
  void (*run)(std::int64_t) = nullptr;
  if (std::strcmp(mode, "span") == 0) run = lens_spans;
  if (std::strcmp(mode, "recorded") == 0) run = recorded_spans;
  if (std::strcmp(mode, "managed") == 0) run = managed_spans;
  if (std::strcmp(mode, "disabled") == 0) run = disabled_managed_spans;
  if (std::strcmp(mode, "enabled") == 0) run = enabled_checks;
  if (run == nullptr || chunks <= 0) {
    std::fprintf(stderr, "usage: %s span|recorded|managed|disabled|enabled [CHUNKS of 1000]\n",
                 argv[0]);
    return 2;
  }
  unsetenv("OTEL_BSP_MAX_QUEUE_SIZE");  // the default queue (2,048) holds a chunk
  if (run == recorded_spans) {
    setenv("NEMO_LENS_RECORD_GROUPS", "optimizer", 1);
    setenv("NEMO_LENS_RECORD_SPANS", "1024", 1);  // full after the warm-up
  }
  lens_bench::RealExporter exporter(lens_bench::ExporterKind::kFile);
  NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = run == recorded_spans ? "step" : "per_step";
  TelemetryHandle handle = exporter.setup(config);
  // Warm up: the sites resolved, the thread's records and caches in use, every path taken once.
  for (int k = 0; k < 4; ++k) {
    run(1000);
    handle.force_flush();
  }
  for (int k = 0; k < chunks; ++k) {
    CALLGRIND_TOGGLE_COLLECT;
    run(1000);
    CALLGRIND_TOGGLE_COLLECT;
    handle.force_flush();
  }
  const TelemetryStats stats = handle.stats();
  handle.shutdown();
  std::printf("%s: %d spans measured, %llu dropped, %llu recorded, %llu overwritten\n", mode,
              chunks * 1000, static_cast<unsigned long long>(stats.spans_dropped_queue_full),
              static_cast<unsigned long long>(stats.spans_recorded),
              static_cast<unsigned long long>(stats.spans_record_overwritten));
  // A recorded count is of spans that overwrote the oldest in a full ring, none exported.
  const bool recorded_as_meant =
      run != recorded_spans ||
      (stats.spans_record_overwritten >= static_cast<std::uint64_t>(chunks) * 1000 &&
       stats.spans_exported == 0);
  return stats.spans_dropped_queue_full == 0 && recorded_as_meant ? 0 : 1;
}
