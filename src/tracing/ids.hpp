// Trace and span ids: a per-thread wyrand generator (a 64-bit Weyl sequence mixed by one 128-bit
// multiply) seeded from the operating system (getrandom), so program seeding (srand, std::mt19937)
// never affects ids, re-seeded in a forked child. Internal.
//
// A span's ids are made when they are first needed, not at its start (ensure_ids() in engine.hpp):
// most spans are leaves whose ids nobody reads before the exporter thread, which then makes them.
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

/// A fast generator owned by one thread (wyrand: a few instructions per 64 bits, and the
/// multiplies of one span's ids do not wait on each other). Inline: it is on every span's start.
class IdGenerator {
 public:
  /// A random non-zero trace id.
  TraceId trace_id() noexcept {
    reseed_after_fork();
    return next_trace_id();
  }
  /// A random non-zero span id.
  SpanId span_id() noexcept {
    reseed_after_fork();
    return next_span_id();
  }
  /// Re-seeds from the OS if this process forked since the generator was seeded. trace_id() and
  /// span_id() check every time; a run of ids made at once checks once, then uses next_*().
  void reseed_after_fork() noexcept {
    // Relaxed: only this thread's own view of the counter matters (it is written in the child).
    if (NEMO_LENS_UNLIKELY(generation_ != g_fork_generation.load(std::memory_order_relaxed))) {
      seed();
    }
  }
  /// trace_id() without the fork check: only after a reseed_after_fork() on this thread with no
  /// fork since (nothing else running on it between the two).
  TraceId next_trace_id() noexcept {
    TraceId id;
    std::uint64_t hi = 0, lo = 0;
    while (NEMO_LENS_UNLIKELY((hi | lo) == 0)) {
      hi = step();
      lo = step();
    }
    std::memcpy(id.bytes.data(), &hi, 8);
    std::memcpy(id.bytes.data() + 8, &lo, 8);
    return id;
  }
  /// span_id() without the fork check (see next_trace_id()).
  SpanId next_span_id() noexcept {
    SpanId id;
    std::uint64_t v = 0;
    while (NEMO_LENS_UNLIKELY(v == 0)) v = step();
    std::memcpy(id.bytes.data(), &v, 8);
    return id;
  }
  /// Starts the sequence at `state` (tests compare it with an independent implementation).
  void seed_with(std::uint64_t state) noexcept {
    state_ = state;
    generation_ = g_fork_generation.load(std::memory_order_relaxed);
  }
  /// The sequence's constants (wyrand's).
  static constexpr std::uint64_t kIncrement = 0xa0761d6478bd642fULL;
  static constexpr std::uint64_t kMix = 0xe7037ed1a0b428dbULL;

 private:
  std::uint64_t step() noexcept {
    __extension__ using Uint128 = unsigned __int128;
    state_ += kIncrement;
    const Uint128 t = static_cast<Uint128>(state_) * (state_ ^ kMix);
    return static_cast<std::uint64_t>(t >> 64) ^ static_cast<std::uint64_t>(t);
  }
  void seed() noexcept;
  std::uint64_t state_ = 0;
  std::uint64_t generation_ = ~std::uint64_t{0};
};

/// The calling thread's generator (a %fs-relative access: the initial-exec TLS model). Seeded on
/// first use.
[[gnu::tls_model("initial-exec")]] extern constinit thread_local IdGenerator t_ids;

}  // namespace nemo::lens::detail
