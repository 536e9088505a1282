// Trace and span ids: a per-thread xoshiro256** generator seeded from the operating system
// (getrandom), so program seeding (srand, std::mt19937) never affects ids, re-seeded in a forked
// child. Internal.
#pragma once

#include <atomic>
#include <cstdint>

#include "nemo/lens/context.hpp"

namespace nemo::lens::detail {

/// Incremented in every forked child; generators re-seed when it changes.
extern std::atomic<std::uint64_t> g_fork_generation;

/// 64 bits from the OS's entropy source. Never fails (falls back to /dev/urandom, then to clock and
/// address entropy).
std::uint64_t os_random64() noexcept;

/// A fast generator owned by one thread.
class IdGenerator {
 public:
  /// A random non-zero trace id.
  TraceId trace_id() noexcept;
  /// A random non-zero span id.
  SpanId span_id() noexcept;
  /// 64 random bits.
  std::uint64_t next() noexcept;

 private:
  void seed() noexcept;
  std::uint64_t s_[4] = {0, 0, 0, 0};
  std::uint64_t generation_ = ~std::uint64_t{0};
};

}  // namespace nemo::lens::detail
