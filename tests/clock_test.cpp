// The span clock against the system clock. Compiled with the clock's source (its functions are
// internal to the library).
#include "tracing/clock.hpp"

#include <gtest/gtest.h>

#include <cstdlib>

namespace nemo::lens::detail {
namespace {

TEST(Clock, AgreesWithTheSystemClockAfterCalibration) {
  calibrate_clock();
  for (int i = 0; i < 1000; ++i) {
    const std::int64_t a = system_now_unix_nano();
    const std::int64_t t = now_unix_nano();
    const std::int64_t b = system_now_unix_nano();
    // Within the bracket, plus 100 us for calibration error and a preemption between the reads.
    EXPECT_GE(t, a - 100'000) << (clock_uses_tsc() ? "tsc" : "system");
    EXPECT_LE(t, b + 100'000) << (clock_uses_tsc() ? "tsc" : "system");
  }
}

TEST(Clock, ConsecutiveReadsDoNotGoBackwards) {
  calibrate_clock();
  std::int64_t last = now_unix_nano();
  for (int i = 0; i < 100000; ++i) {
    const std::int64_t t = now_unix_nano();
    EXPECT_GE(t, last);
    last = t;
  }
}

TEST(Clock, RefreshKeepsItOnTheSystemClock) {
  calibrate_clock();
  for (int i = 0; i < 50; ++i) {
    refresh_clock();
    const std::int64_t a = system_now_unix_nano();
    const std::int64_t t = now_unix_nano();
    const std::int64_t b = system_now_unix_nano();
    EXPECT_GE(t, a - 100'000);
    EXPECT_LE(t, b + 100'000);
  }
}

}  // namespace
}  // namespace nemo::lens::detail
