// The rate of spans one process sustains with none dropped: one producer thread makes spans at a
// fixed rate (batches of 100, each then waiting for its time on the schedule) while the OTLP
// exporter sends them as HTTP protobuf to a real `lens collect` on a free loopback port, with the
// queue settings a user has by default (OTEL_BSP_* are unset: a queue of 2048 spans per thread,
// batches of 512). A span is LENS_SPAN in group STEP with an int and a short string attribute.
//
//   build/bench/export_rate --rate 100000              # one 10 s trial at 100,000 spans/s
//   build/bench/export_rate --search                   # the highest rate with none dropped
//   build/bench/export_rate --search --lens /tmp/lens  # another lens binary as the receiver
//   build/bench/export_rate --search --queue 8192      # OTEL_BSP_MAX_QUEUE_SIZE=8192
//
// --search doubles the rate from --start while a trial drops nothing, bisects between the last
// rate that dropped nothing and the first that did (to 5%), each trial --search-seconds long, and
// confirms the result with a trial of --seconds (stepping down 5% while it drops). A rate the
// producer itself cannot keep (it makes under 97% of it) counts as too high.
//
// The exporter thread, `lens collect` and the producer share the machine's cores: on a busy or
// small machine the figure moves from run to run, so run it a few times.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "real_exporters.hpp"

namespace {

using namespace nemo::lens;
using Clock = std::chrono::steady_clock;

// The lens binary whose `lens collect` receives the spans (--lens; the build's by default).
std::string g_lens_binary = LENS_BINARY;

struct Trial {
  double rate = 0;      // asked for, spans/s
  double achieved = 0;  // made over the trial's time, spans/s
  std::uint64_t made = 0, exported = 0, dropped = 0, dropped_queue_full = 0, requests = 0,
                wakeups = 0;
  double other_cpu_us_per_span = 0;  // this process's CPU off the producer thread, per span
  double collector_cpu_us_per_span = 0;  // lens collect's CPU, per span
  // The machine's busy CPU time while spans were made, in cores, and the part of it neither this
  // process nor lens collect spent (other programs: a trial they took cores from may drop spans
  // that a quiet machine would not).
  double busy_cores = 0, others_cores = 0;
  double process_cpu_seconds_while_making = 0, making_seconds = 0;
  bool ok() const { return dropped == 0 && achieved >= 0.97 * rate; }
};

double cpu_seconds(clockid_t id) {
  timespec t{};
  clock_gettime(id, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

// The machine's busy CPU time so far, in seconds (all cores; /proc/stat), or 0 when unreadable.
double machine_busy_seconds() {
  std::FILE* f = std::fopen("/proc/stat", "r");
  if (f == nullptr) return 0;
  unsigned long long v[8] = {};
  const int n = std::fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1], &v[2],
                            &v[3], &v[4], &v[5], &v[6], &v[7]);
  std::fclose(f);
  if (n != 8) return 0;
  // All but idle (v[3]) and iowait (v[4]), in clock ticks.
  const unsigned long long busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
  return static_cast<double>(busy) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double process_cpu_seconds(int who = RUSAGE_SELF) {
  rusage u{};
  getrusage(who, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// One trial: spans at `rate` for `seconds` to `collector`, then a flush.
Trial run_trial_with(const lens_bench::LensCollect& collector, double rate, double seconds) {
  setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", 1);
  setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collector.url.c_str(), 1);
  NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = "per_step";
  config.exporter = "otlp";
  config.metrics_enabled = false;
  SetupOptions options;
  options.allow_reinit = true;
  TelemetryHandle handle = setup_telemetry(config, 0, 1, options);

  constexpr int kBatch = 100;
  const auto period = std::chrono::duration<double>(kBatch / rate);
  const double process_cpu_before = process_cpu_seconds();
  const double producer_cpu_before = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const double machine_before = machine_busy_seconds();
  const auto start = Clock::now();
  const auto stop = start + std::chrono::duration_cast<Clock::duration>(
                                std::chrono::duration<double>(seconds));
  std::int64_t i = 0;
  std::uint64_t batches = 0;
  for (;;) {
    const auto due = start + std::chrono::duration_cast<Clock::duration>(period * batches);
    if (due >= stop) break;
    std::this_thread::sleep_until(due);  // behind the schedule: no wait, the next batch now
    for (int k = 0; k < kBatch; ++k, ++i) {
      LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "fwd"});
    }
    ++batches;
  }
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  const double producer_cpu = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - producer_cpu_before;
  const double machine_busy = machine_busy_seconds() - machine_before;
  const double process_cpu_while_making = process_cpu_seconds() - process_cpu_before;
  handle.force_flush(std::chrono::seconds(60));
  const double other_cpu = process_cpu_seconds() - process_cpu_before - producer_cpu;
  const TelemetryStats st = handle.stats();
  handle.shutdown();

  Trial t;
  t.rate = rate;
  t.made = static_cast<std::uint64_t>(i);
  t.achieved = static_cast<double>(i) / elapsed;
  t.exported = st.spans_exported;
  t.dropped_queue_full = st.spans_dropped_queue_full;
  t.dropped =
      st.spans_dropped_queue_full + st.spans_dropped_export_failed + st.spans_dropped_shutdown;
  t.requests = st.export_requests;
  t.wakeups = st.exporter_wakeups;
  t.other_cpu_us_per_span = t.made != 0 ? 1e6 * other_cpu / static_cast<double>(t.made) : 0;
  t.busy_cores = machine_busy / elapsed;
  t.process_cpu_seconds_while_making = process_cpu_while_making;
  t.making_seconds = elapsed;
  // A span neither exported nor counted as dropped (none should be) counts as dropped too.
  const std::uint64_t accounted = t.exported + t.dropped;
  if (accounted < t.made) t.dropped += t.made - accounted;
  return t;
}

// One trial: spans at `rate` for `seconds` to a fresh lens collect, then a flush.
Trial run_trial(double rate, double seconds) {
  const double children_cpu_before = process_cpu_seconds(RUSAGE_CHILDREN);
  Trial t;
  {
    const lens_bench::LensCollect collector(g_lens_binary);
    t = run_trial_with(collector, rate, seconds);
  }
  // The collector was reaped: its CPU time is in the children's.
  const double collector_cpu = process_cpu_seconds(RUSAGE_CHILDREN) - children_cpu_before;
  t.collector_cpu_us_per_span = t.made != 0 ? 1e6 * collector_cpu / static_cast<double>(t.made) : 0;
  // The collector's CPU time of the whole trial (its flush included): "others" is a lower bound.
  t.others_cores = std::max(0.0, t.busy_cores - (t.process_cpu_seconds_while_making + collector_cpu) /
                                                    t.making_seconds);
  return t;
}

void print(const Trial& t, double seconds) {
  std::printf(
      "rate %9.0f/s for %4.1f s: made %9llu (%9.0f/s), exported %9llu, dropped %7llu "
      "(queue full %llu), %5llu requests, %4llu wake-ups, CPU/span: %.2f us off the producer, "
      "%.2f us in lens collect; machine busy %.2f cores, others %.2f%s\n",
      t.rate, seconds, static_cast<unsigned long long>(t.made), t.achieved,
      static_cast<unsigned long long>(t.exported), static_cast<unsigned long long>(t.dropped),
      static_cast<unsigned long long>(t.dropped_queue_full),
      static_cast<unsigned long long>(t.requests), static_cast<unsigned long long>(t.wakeups),
      t.other_cpu_us_per_span, t.collector_cpu_us_per_span, t.busy_cores, t.others_cores,
      t.achieved < 0.97 * t.rate ? "  [the producer fell behind]" : "");
  std::fflush(stdout);
}

Trial trial(double rate, double seconds) {
  const Trial t = run_trial(rate, seconds);
  print(t, seconds);
  return t;
}

void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s [--rate SPANS_PER_S] [--seconds S] [--lens PATH]\n"
               "       %s --search [--start SPANS_PER_S] [--search-seconds S] [--seconds S]"
               " [--lens PATH]\n",
               argv0, argv0);
}

}  // namespace

int main(int argc, char** argv) {
  double rate = 100000, seconds = 10, start = 25000, search_seconds = 3;
  long queue = 0;  // 0: the default
  bool search = false;
  for (int a = 1; a < argc; ++a) {
    const std::string arg = argv[a];
    auto value = [&]() -> double {
      if (a + 1 >= argc) {
        usage(argv[0]);
        std::exit(2);
      }
      return std::atof(argv[++a]);
    };
    if (arg == "--rate") {
      rate = value();
    } else if (arg == "--seconds") {
      seconds = value();
    } else if (arg == "--search") {
      search = true;
    } else if (arg == "--start") {
      start = value();
    } else if (arg == "--search-seconds") {
      search_seconds = value();
    } else if (arg == "--lens" && a + 1 < argc) {
      g_lens_binary = argv[++a];
    } else if (arg == "--queue") {
      queue = static_cast<long>(value());
    } else {
      usage(argv[0]);
      return 2;
    }
  }
  if (rate <= 0 || seconds <= 0 || start <= 0 || search_seconds <= 0) {
    usage(argv[0]);
    return 2;
  }
  // The queue a user has by default, unless --queue says otherwise.
  for (const char* v : {"OTEL_BSP_MAX_QUEUE_SIZE", "OTEL_BSP_MAX_EXPORT_BATCH_SIZE",
                        "OTEL_BSP_SCHEDULE_DELAY", "OTEL_BSP_EXPORT_TIMEOUT"}) {
    unsetenv(v);
  }
  if (queue > 0) setenv("OTEL_BSP_MAX_QUEUE_SIZE", std::to_string(queue).c_str(), 1);
  std::printf("OTLP http/protobuf to %s collect on 127.0.0.1; a queue of %ld spans per thread%s, "
              "batches of 512; %u hardware threads\n",
              g_lens_binary.c_str(), queue > 0 ? queue : 2048L, queue > 0 ? "" : " (the default)",
              std::thread::hardware_concurrency());
  if (!search) {
    const Trial t = trial(rate, seconds);
    return t.ok() ? 0 : 1;
  }
  double good = 0, bad = 0;
  for (double r = start; bad == 0; r *= 2) {
    if (trial(r, search_seconds).ok()) {
      good = r;
    } else {
      bad = r;
    }
  }
  while (good != 0 && bad / good > 1.05) {
    const double mid = std::round((good + bad) / 2);
    if (trial(mid, search_seconds).ok()) {
      good = mid;
    } else {
      bad = mid;
    }
  }
  if (good == 0) {
    std::printf("no rate from %.0f/s down dropped nothing: try a lower --start\n", start);
    return 1;
  }
  for (int attempt = 0; attempt < 5; ++attempt, good = std::round(good * 0.95)) {
    if (trial(good, seconds).ok()) {
      std::printf("sustained: %.0f spans/s for %.0f s with none dropped\n", good, seconds);
      return 0;
    }
  }
  std::printf("no confirmation: %.0f spans/s still dropped over %.0f s\n", good / 0.95, seconds);
  return 1;
}
