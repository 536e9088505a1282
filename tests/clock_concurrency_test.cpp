// Readers of the span clock while the exporter-side refresh re-anchors it. Run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

#include "tracing/clock.hpp"

namespace nemo::lens::detail {
namespace {

TEST(ClockConcurrency, ReadersStayOnTheSystemClockWhileItIsRefreshed) {
  calibrate_clock();
  std::atomic<bool> stop{false};
  std::atomic<long> outside{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        const std::int64_t a = system_now_unix_nano();
        const std::int64_t now = now_unix_nano();
        const std::int64_t b = system_now_unix_nano();
        if (now < a - 1'000'000 || now > b + 1'000'000) outside.fetch_add(1);
      }
    });
  }
  std::thread refresher([&] {
    while (!stop.load()) refresh_clock();
  });
  for (auto& r : readers) r.join();
  stop.store(true);
  refresher.join();
  EXPECT_EQ(outside.load(), 0) << "a torn calibration would put a reading far off";
}

}  // namespace
}  // namespace nemo::lens::detail
