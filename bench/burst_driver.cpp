// LENS_SPAN in bursts, each burst timed on its own: the steadiest way on a noisy VM to compare two
// builds of the library, or a run with the caller and the exporter thread on one vCPU against one
// with them apart. One set-up; bursts of 1,024 spans (an int and a short string attribute, as in
// span_bench), a force_flush after each outside the timing, the output emptied every 64 bursts;
// prints the median, 10th and 90th percentile ns a span, and how many bursts needed a producer's
// wake-up call for the exporter thread (exporter_wakeups) with their median apart.
//
// `read` takes the records as `discard` does but first reads the lines each span wrote, as an
// encoder does: the cost of handing records between the cores, with no encoding or output.
//
//   build/bench/burst_driver [discard|read|file|otlp] [BURSTS]   # default: file 3000
//   taskset -c 0 build/bench/burst_driver file                   # caller and exporter on one vCPU
//   LD_LIBRARY_PATH=/tmp/other-build build/bench/burst_driver    # another build of the library
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "null_exporters.hpp"
#include "real_exporters.hpp"

namespace {

using namespace nemo::lens;

constexpr int kBurst = 1024;

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<std::size_t>(p * static_cast<double>(v.size() - 1))];
}

}  // namespace

int main(int argc, char** argv) {
  const char* kind = argc > 1 ? argv[1] : "file";
  const int bursts = argc > 2 ? std::atoi(argv[2]) : 3000;
  const bool discard = std::strcmp(kind, "discard") == 0;
  const bool read = std::strcmp(kind, "read") == 0;
  if ((!discard && !read && std::strcmp(kind, "file") != 0 && std::strcmp(kind, "otlp") != 0) ||
      bursts <= 0) {
    std::fprintf(stderr, "usage: burst_driver [discard|read|file|otlp] [BURSTS > 0]\n");
    return 2;
  }
  NemoLensConfig config;
  config.enabled = true;
  config.span_groups = "per_step";
  std::optional<lens_bench::RealExporter> real;
  TelemetryHandle h;
  if (discard || read) {
    config.metrics_enabled = false;
    SetupOptions options;
    options.exporter = read ? std::make_shared<lens_bench::ReadingSpanExporter>()
                            : std::make_shared<lens_bench::NullSpanExporter>();
    h = setup_telemetry(config, 0, 1, options);
  } else {
    real.emplace(std::strcmp(kind, "file") == 0 ? lens_bench::ExporterKind::kFile
                                                : lens_bench::ExporterKind::kOtlp);
    h = real->setup(config);
  }
  std::vector<double> all, woke, slept;
  std::int64_t i = 0;
  for (int b = 0; b < bursts; ++b) {
    const std::uint64_t wakes = h.stats().exporter_wakeups;
    const auto t0 = std::chrono::steady_clock::now();
    for (int k = 0; k < kBurst; ++k, ++i) {
      LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "forward"});
    }
    const auto t1 = std::chrono::steady_clock::now();
    all.push_back(std::chrono::duration<double, std::nano>(t1 - t0).count() / kBurst);
    (h.stats().exporter_wakeups != wakes ? woke : slept).push_back(all.back());
    h.force_flush();
    if (real && b % 64 == 63) real->trim();
  }
  const TelemetryStats st = h.stats();
  std::printf(
      "%s exporter, %d bursts of %d: median %.1f ns a span (p10 %.1f, p90 %.1f); "
      "%zu bursts woke the exporter thread (median %.1f), %zu did not (median %.1f); "
      "%llu dropped\n",
      kind, bursts, kBurst, percentile(all, 0.5), percentile(all, 0.1), percentile(all, 0.9),
      woke.size(), percentile(woke, 0.5), slept.size(), percentile(slept, 0.5),
      static_cast<unsigned long long>(st.spans_dropped_queue_full));
  h.shutdown();
  return 0;
}
