// Wall-clock timestamps for spans. Where the CPU has an invariant TSC, a timestamp is one rdtsc
// converted with a calibration against CLOCK_REALTIME (taken at set-up, refined and re-anchored by
// the exporter thread); elsewhere it is clock_gettime. Internal.
#pragma once

#include <atomic>
#include <cstdint>

#include "nemo/lens/detail/export.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define NEMO_LENS_HAVE_TSC 1
#else
#define NEMO_LENS_HAVE_TSC 0
#endif

namespace nemo::lens::detail {

/// Whether timestamps come from the TSC: set once, by the first calibration, before any span
/// starts (a pipeline calibrates before it is published), and never cleared (but by
/// set_clock_ticks_are_tsc()).
extern std::atomic<bool> g_clock_ticks_are_tsc;

/// Unix nanoseconds from clock_gettime(CLOCK_REALTIME).
std::int64_t system_now_unix_nano() noexcept;

/// A timestamp in the clock's own unit, for a span's hot path: one rdtsc where the TSC is used
/// (converted only when the span is exported or read, by ticks_to_unix_nano()), else Unix
/// nanoseconds.
inline std::uint64_t now_ticks() noexcept {
#if NEMO_LENS_HAVE_TSC
  if (g_clock_ticks_are_tsc.load(std::memory_order_relaxed)) return __rdtsc();
#endif
  return static_cast<std::uint64_t>(system_now_unix_nano());
}

/// now_ticks(), and in `tsc` whether it read the TSC (else the value is Unix nanoseconds).
inline std::uint64_t now_ticks(bool& tsc) noexcept {
#if NEMO_LENS_HAVE_TSC
  tsc = g_clock_ticks_are_tsc.load(std::memory_order_relaxed);
  if (tsc) return __rdtsc();
#else
  tsc = false;
#endif
  return static_cast<std::uint64_t>(system_now_unix_nano());
}

/// A copy of the calibration in force when it was taken: converts now_ticks() values to Unix
/// nanoseconds with plain arithmetic (no shared state), so that one batch's times all use one
/// calibration and keep their order and distances.
struct TickConverter {
  bool tsc = false;  // false: ticks are Unix nanoseconds already
  std::uint64_t base_tsc = 0;
  std::int64_t base_ns = 0;
  std::uint64_t mult = 0;  // ns per tick, << 32

  std::int64_t to_unix_nano(std::uint64_t ticks) const noexcept {
    if (!tsc) return static_cast<std::int64_t>(ticks);
    __extension__ using Int128 = __int128;
    const auto delta = static_cast<std::int64_t>(ticks - base_tsc);  // negative on a slow core
    return base_ns + static_cast<std::int64_t>(
                         (static_cast<Int128>(delta) * static_cast<Int128>(mult)) >> 32);
  }
};

/// The calibration in force now.
TickConverter tick_converter() noexcept;

/// Unix nanoseconds of a now_ticks() value, with the calibration in force now.
inline std::int64_t ticks_to_unix_nano(std::uint64_t ticks) noexcept {
  return tick_converter().to_unix_nano(ticks);
}

/// Unix nanoseconds now. Lock-free; about a third of a clock_gettime call where the TSC is used.
std::int64_t now_unix_nano() noexcept;

/// Calibrates the TSC clock if it is usable and not calibrated yet (about 2 ms, once).
void calibrate_clock() noexcept;

/// Refines the TSC frequency over the time since calibration and re-anchors it to the system
/// clock (so NTP adjustments reach span timestamps). Cheap; called by the exporter thread.
void refresh_clock() noexcept;

/// fork(): hold the calibration mutex across fork so the child never inherits it held.
void lock_clock_for_fork() noexcept;
void unlock_clock_after_fork() noexcept;

/// Whether timestamps come from the TSC.
bool clock_uses_tsc() noexcept;

/// Sets g_clock_ticks_are_tsc and returns what it was: for the test that stands in for a machine
/// without a usable TSC by turning it off around a few spans, never called by lens itself. (A
/// function, not the variable, is exported: tests that compile clock.cpp in would define the
/// variable twice.)
NEMO_LENS_API bool set_clock_ticks_are_tsc(bool tsc) noexcept;

}  // namespace nemo::lens::detail
