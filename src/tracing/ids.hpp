// Trace and span ids: a per-thread xoshiro256** generator seeded from the operating system
// (getrandom), so program seeding (srand, std::mt19937) never affects ids, re-seeded in a forked
// child. Internal.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>

#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"

namespace nemo::lens::detail {

/// Incremented in every forked child; generators re-seed when it changes.
extern std::atomic<std::uint64_t> g_fork_generation;

/// 64 bits from the OS's entropy source. Never fails (falls back to /dev/urandom, then to clock and
/// address entropy).
std::uint64_t os_random64() noexcept;

/// A fast generator owned by one thread (xoshiro256**). Inline: it is on every span's start.
class IdGenerator {
 public:
  /// A random non-zero trace id.
  TraceId trace_id() noexcept {
    reseed_after_fork();
    TraceId id;
    std::uint64_t hi = 0, lo = 0;
    while ((hi | lo) == 0) {
      hi = step();
      lo = step();
    }
    std::memcpy(id.bytes.data(), &hi, 8);
    std::memcpy(id.bytes.data() + 8, &lo, 8);
    return id;
  }
  /// A random non-zero span id.
  SpanId span_id() noexcept {
    reseed_after_fork();
    SpanId id;
    std::uint64_t v = 0;
    while (v == 0) v = step();
    std::memcpy(id.bytes.data(), &v, 8);
    return id;
  }

 private:
  static std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
  void reseed_after_fork() noexcept {
    // Relaxed: only this thread's own view of the counter matters (it is written in the child).
    if (NEMO_LENS_UNLIKELY(generation_ != g_fork_generation.load(std::memory_order_relaxed))) {
      seed();
    }
  }
  std::uint64_t step() noexcept {
    const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
    const std::uint64_t t = s_[1] << 17;
    s_[2] ^= s_[0];
    s_[3] ^= s_[1];
    s_[1] ^= s_[2];
    s_[0] ^= s_[3];
    s_[2] ^= t;
    s_[3] = rotl(s_[3], 45);
    return result;
  }
  void seed() noexcept;
  std::uint64_t s_[4] = {0, 0, 0, 0};
  std::uint64_t generation_ = ~std::uint64_t{0};
};

}  // namespace nemo::lens::detail
