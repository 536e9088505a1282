// Wall-clock timestamps for spans. Where the CPU has an invariant TSC, a timestamp is one rdtsc
// converted with a calibration against CLOCK_REALTIME (taken at set-up, refined and re-anchored by
// the exporter thread); elsewhere it is clock_gettime. Internal.
#pragma once

#include <cstdint>

namespace nemo::lens::detail {

/// Unix nanoseconds now. Lock-free; about a third of a clock_gettime call where the TSC is used.
std::int64_t now_unix_nano() noexcept;

/// Unix nanoseconds from clock_gettime(CLOCK_REALTIME).
std::int64_t system_now_unix_nano() noexcept;

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

}  // namespace nemo::lens::detail
