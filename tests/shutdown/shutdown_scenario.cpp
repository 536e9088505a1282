// The program shutdown_test runs: two threads emit spans at a steady rate (one every millisecond
// each), a counter counts them and every tenth span logs a record, all exported over OTLP to the
// receiver the environment names (a black hole, in the test). Then it calls shutdown(timeout) and
// reports, or, with "exit" as the timeout, returns from main without one (the exit handler shuts
// down). Its report is JSON lines on stdout:
//   {"shutdown_ms": ..., "returned": true|false, "stats": {...}}   right after shutdown returned
//   {"later": {...}}                                              the stats one second later
//   {"exiting_ns": ...}                                           CLOCK_MONOTONIC as main returns
//
//   shutdown_scenario RUN_MS TIMEOUT_MS|exit
#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"

namespace lens = nemo::lens;
using Clock = std::chrono::steady_clock;

namespace {

void print_stats(const char* key, const lens::TelemetryStats& s) {
  std::printf(
      "\"%s\": {\"spans_ended\": %llu, \"spans_exported\": %llu, \"spans_dropped_queue_full\": "
      "%llu, "
      "\"spans_dropped_export_failed\": %llu, \"spans_dropped_shutdown\": %llu, "
      "\"spans_truncated\": %llu, \"metric_points_collected\": %llu, \"metric_points_exported\": "
      "%llu, \"metric_points_dropped\": %llu, \"log_records_emitted\": %llu, "
      "\"log_records_exported\": %llu, \"log_records_dropped\": %llu}",
      key, static_cast<unsigned long long>(s.spans_ended),
      static_cast<unsigned long long>(s.spans_exported),
      static_cast<unsigned long long>(s.spans_dropped_queue_full),
      static_cast<unsigned long long>(s.spans_dropped_export_failed),
      static_cast<unsigned long long>(s.spans_dropped_shutdown),
      static_cast<unsigned long long>(s.spans_truncated),
      static_cast<unsigned long long>(s.metric_points_collected),
      static_cast<unsigned long long>(s.metric_points_exported),
      static_cast<unsigned long long>(s.metric_points_dropped),
      static_cast<unsigned long long>(s.log_records_emitted),
      static_cast<unsigned long long>(s.log_records_exported),
      static_cast<unsigned long long>(s.log_records_dropped));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: shutdown_scenario RUN_MS TIMEOUT_MS|exit\n");
    return 2;
  }
  const auto run_for = std::chrono::milliseconds(std::atoi(argv[1]));
  const bool at_exit = std::string(argv[2]) == "exit";
  auto telemetry = lens::setup_telemetry(lens::NemoLensConfig::from_env(), 0, 1);
  auto counter = lens::get_meter("scenario").create_counter<std::int64_t>("scenario.spans");

  const auto until = Clock::now() + run_for;
  std::vector<std::thread> threads;
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&, t] {
      auto next = Clock::now();
      for (int i = 0; Clock::now() < until; ++i) {
        {
          auto span = lens::managed_span("step", "work", {{"thread", t}, {"i", i}});
          counter.add(1);
          if (i % 10 == 0) lens::log(lens::Severity::kInfo, "ten spans", {{"thread", t}});
        }
        next += std::chrono::milliseconds(1);  // a steady rate, not a wait for anything
        std::this_thread::sleep_until(next);
      }
    });
  }
  for (auto& th : threads) th.join();

  if (!at_exit) {
    const auto t0 = Clock::now();
    const bool returned = telemetry.shutdown(std::chrono::milliseconds(std::atoi(argv[2])));
    const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t0);
    const lens::TelemetryStats at_return = telemetry.stats();
    std::printf("{\"shutdown_ms\": %lld, \"returned\": %s, ", static_cast<long long>(took.count()),
                returned ? "true" : "false");
    print_stats("stats", at_return);
    std::printf("}\n");
    std::fflush(stdout);
    // An observation window: nothing may change after shutdown returned.
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("{");
    print_stats("later", telemetry.stats());
    std::printf("}\n");
  }
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  std::printf("{\"exiting_ns\": %lld}\n",
              static_cast<long long>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec);
  std::fflush(stdout);
  return 0;
}
