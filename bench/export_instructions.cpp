// The exporter thread's work per span, to be counted by callgrind (exact and repeatable, unlike
// timings on a shared machine): one producer makes `n` spans (LENS_SPAN, group STEP, an int and a
// short string attribute), flushes and shuts down. With `proto`, the spans go to an exporter that
// encodes them as OTLP protobuf straight from the records, as the OTLP exporter does, and
// discards the bytes; with `json`, to the file exporter (OTLP/JSON lines in a temporary file).
// The queue holds every span, so that none is dropped while callgrind runs one thread at a time.
// Run natively, it also prints the CPU time the process spent off the main thread per span
// exported: the exporter thread's, a timing figure (noisy on a shared machine).
//
//   bench/count_export_instructions.sh build     # instructions per span on the exporter thread
//   build/bench/export_instructions proto 1000000  # and the exporter thread's CPU time
#include <sys/resource.h>
#include <unistd.h>

#include <ctime>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "export/otlp.hpp"
#include "encoding_exporter.hpp"
#include "nemo/lens/lens.hpp"
#include "tracing/record_exporter.hpp"

namespace {

using namespace nemo::lens;

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || (std::string(argv[1]) != "proto" && std::string(argv[1]) != "json")) {
    std::fprintf(stderr, "usage: %s proto|json [spans]\n", argv[0]);
    return 2;
  }
  const std::string mode = argv[1];
  const long n = argc > 2 ? std::atol(argv[2]) : 100000;
  const std::string queue = std::to_string(n + 1024);
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", queue.c_str(), 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512", 1);
  const std::string path = "/tmp/lens_export_instructions_" + std::to_string(::getpid()) + ".jsonl";
  setenv("NEMO_LENS_EXPORT_PATH", path.c_str(), 1);
  NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = "per_step";
  config.metrics_enabled = false;  // no metric reader thread
  SetupOptions options;
  std::shared_ptr<lens_bench::EncodingNullExporter> proto;
  if (mode == "proto") {
    proto = std::make_shared<lens_bench::EncodingNullExporter>();
    options.exporter = proto;
  } else {
    config.exporter = "file";
  }
  TelemetryHandle handle = setup_telemetry(config, 0, 1, options);
  auto cpu_seconds = [](clockid_t id) {
    timespec t{};
    clock_gettime(id, &t);
    return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
  };
  auto process_cpu_seconds = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
  };
  const double process_before = process_cpu_seconds();
  const double main_before = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  for (long i = 0; i < n; ++i) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", static_cast<std::int64_t>(i)},
              {"stage", "fwd"});
  }
  handle.force_flush(std::chrono::seconds(600));
  const double off_main = (process_cpu_seconds() - process_before) -
                          (cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - main_before);
  handle.shutdown();
  const auto st = handle.stats();
  std::remove(path.c_str());
  std::printf("mode %s: %llu spans exported in %llu requests, %llu dropped", mode.c_str(),
              static_cast<unsigned long long>(st.spans_exported),
              static_cast<unsigned long long>(st.export_requests),
              static_cast<unsigned long long>(st.spans_dropped_queue_full +
                                              st.spans_dropped_export_failed +
                                              st.spans_dropped_shutdown));
  if (proto) std::printf(", %zu protobuf bytes", proto->bytes());
  std::printf("; %.1f ns CPU per span off the main thread\n",
              st.spans_exported != 0 ? 1e9 * off_main / static_cast<double>(st.spans_exported)
                                     : 0.0);
  return 0;
}
