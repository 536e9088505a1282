// A live multi-threaded program for tests/ctl_live_test.cpp: one thread blocks inside a
// communication span until standard input closes, another steps (a step span with a layer span
// inside, a quarter of a millisecond of "work" each, so that the exporter keeps up). The stepping
// thread reports on stderr when its layer spans start recording ("layer on") and stop ("layer
// off"); at exit the program prints how many recorded ("layer spans N") and how many spans were
// dropped ("dropped N"). Configured by the NEMO_LENS_* variables, Megatron catalog.
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <thread>

#include "nemo/lens/lens.hpp"

namespace lens = nemo::lens;
using lens::MegatronSpanGroup;

int main() {
  auto telemetry = lens::setup_telemetry(lens::NemoLensConfig::from_env<MegatronSpanGroup>(), 0, 1);
  std::atomic<bool> stop{false};
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false;
  std::thread blocked([&] {
    LENS_SPAN(step, MegatronSpanGroup::STEP, "train_step", {"iteration", 0});
    LENS_SPAN(ar, MegatronSpanGroup::COMMUNICATION, "all_reduce", {"bytes", 4096});
    std::unique_lock lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return stop.load(); });
  });
  long recorded = 0;
  std::thread stepping([&] {
    bool on = false;
    for (long i = 1; !stop.load(std::memory_order_relaxed); ++i) {
      LENS_SPAN(step, MegatronSpanGroup::STEP, "train_step", {"iteration", i});
      LENS_SPAN(layer, MegatronSpanGroup::LAYER, "layer_forward", {"layer", 0});
      const bool now = layer.is_recording();
      recorded += now;
      if (now != on) std::fprintf(stderr, now ? "layer on\n" : "layer off\n");
      on = now;
      std::this_thread::sleep_for(std::chrono::microseconds(250));  // the step's work
    }
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  std::fprintf(stderr, "ready\n");
  char buf[64];
  while (::read(0, buf, sizeof buf) > 0) {
  }
  {
    std::lock_guard lock(mu);
    stop = true;
  }
  cv.notify_all();
  blocked.join();
  stepping.join();
  telemetry.shutdown();
  const auto stats = telemetry.stats();
  std::fprintf(stderr, "layer spans %ld\ndropped %llu\n", recorded,
               static_cast<unsigned long long>(stats.spans_dropped_queue_full +
                                               stats.spans_dropped_export_failed +
                                               stats.spans_dropped_shutdown));
  return 0;
}
