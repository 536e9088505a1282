#include "tracing/clock.hpp"

#include <time.h>

#if NEMO_LENS_HAVE_TSC
#include <cpuid.h>
#endif

#include <atomic>
#include <mutex>

namespace nemo::lens::detail {

constinit std::atomic<bool> g_clock_ticks_are_tsc{false};

namespace {

__extension__ using UInt128 = unsigned __int128;  // GCC/Clang extension, for exact scaling

// ns = base_ns + ((tsc - base_tsc) * mult) >> 32, published under a sequence lock: readers retry
// while a refresh is writing, and never wait otherwise.
struct Calibration {
  std::atomic<std::uint32_t> seq{0};
  std::atomic<std::uint64_t> base_tsc{0};
  std::atomic<std::int64_t> base_ns{0};
  std::atomic<std::uint64_t> mult{0};  // 0: not calibrated, use the system clock
};

constinit Calibration g_cal;
constinit std::mutex g_cal_mu;  // writers only
std::uint64_t g_first_tsc = 0;  // guarded by g_cal_mu
std::int64_t g_first_ns = 0;

#if NEMO_LENS_HAVE_TSC
std::uint64_t read_tsc() noexcept { return __rdtsc(); }
bool invariant_tsc() noexcept {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  __get_cpuid(0x80000007u, &a, &b, &c, &d);
  return (d & (1u << 8)) != 0;
}
#else
std::uint64_t read_tsc() noexcept { return 0; }
bool invariant_tsc() noexcept { return false; }
#endif

// A (tsc, ns) pair taken as close together as the two clocks allow.
void sample(std::uint64_t& tsc, std::int64_t& ns) noexcept {
  std::uint64_t best_gap = UINT64_MAX;
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t0 = read_tsc();
    const std::int64_t n = system_now_unix_nano();
    const std::uint64_t t1 = read_tsc();
    if (t1 - t0 < best_gap) {
      best_gap = t1 - t0;
      tsc = t0 + (t1 - t0) / 2;
      ns = n;
    }
  }
}

// A sequence lock without fences (which TSan cannot model): the data stores are release, so the
// odd sequence number is visible before any new value; the reader's data loads are acquire, so
// its second look at the sequence number comes after them.
void publish(std::uint64_t base_tsc, std::int64_t base_ns, std::uint64_t mult) noexcept {
  const std::uint32_t s = g_cal.seq.load(std::memory_order_relaxed);
  g_cal.seq.store(s + 1, std::memory_order_relaxed);
  g_cal.base_tsc.store(base_tsc, std::memory_order_release);
  g_cal.base_ns.store(base_ns, std::memory_order_release);
  g_cal.mult.store(mult, std::memory_order_release);
  g_cal.seq.store(s + 2, std::memory_order_release);
}

std::uint64_t multiplier(std::uint64_t dtsc, std::int64_t dns) noexcept {
  if (dtsc == 0 || dns <= 0) return 0;
  return static_cast<std::uint64_t>((static_cast<UInt128>(dns) << 32) / dtsc);
}

}  // namespace

std::int64_t system_now_unix_nano() noexcept {
  timespec ts{};
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

namespace {
// A consistent copy of the calibration; mult 0 when there is none.
TickConverter read_calibration() noexcept {
  for (;;) {
    TickConverter c;
    const std::uint32_t s = g_cal.seq.load(std::memory_order_acquire);
    c.mult = g_cal.mult.load(std::memory_order_acquire);
    c.base_tsc = g_cal.base_tsc.load(std::memory_order_acquire);
    c.base_ns = g_cal.base_ns.load(std::memory_order_acquire);
    if ((s & 1) != 0 || g_cal.seq.load(std::memory_order_relaxed) != s) continue;
    c.tsc = c.mult != 0;
    return c;
  }
}
}  // namespace

std::int64_t now_unix_nano() noexcept {
  const TickConverter c = read_calibration();
  return c.tsc ? c.to_unix_nano(read_tsc()) : system_now_unix_nano();
}

TickConverter tick_converter() noexcept {
  if (!g_clock_ticks_are_tsc.load(std::memory_order_acquire)) return {};
  return read_calibration();
}

void calibrate_clock() noexcept {
  std::lock_guard lock(g_cal_mu);
  if (g_cal.mult.load(std::memory_order_relaxed) != 0 || !invariant_tsc()) return;
  std::uint64_t t0 = 0, t1 = 0;
  std::int64_t n0 = 0, n1 = 0;
  sample(t0, n0);
  do {
    sample(t1, n1);
  } while (n1 - n0 < 2'000'000);  // 2 ms
  const std::uint64_t mult = multiplier(t1 - t0, n1 - n0);
  if (mult == 0) return;
  g_first_tsc = t0;
  g_first_ns = n0;
  publish(t1, n1, mult);
  g_clock_ticks_are_tsc.store(true, std::memory_order_release);
}

void refresh_clock() noexcept {
  std::lock_guard lock(g_cal_mu);
  if (g_cal.mult.load(std::memory_order_relaxed) == 0) return;
  std::uint64_t t = 0;
  std::int64_t n = 0;
  sample(t, n);
  const std::uint64_t old_mult = g_cal.mult.load(std::memory_order_relaxed);
  const std::uint64_t mult = multiplier(t - g_first_tsc, n - g_first_ns);
  // A frequency more than 0.1% off means the system clock was stepped: start measuring afresh
  // from here, keep the frequency, and only re-anchor.
  const std::uint64_t diff = mult > old_mult ? mult - old_mult : old_mult - mult;
  if (mult == 0 || diff > old_mult / 1000) {
    g_first_tsc = t;
    g_first_ns = n;
    publish(t, n, old_mult);
    return;
  }
  publish(t, n, mult);
}

void lock_clock_for_fork() noexcept { g_cal_mu.lock(); }
void unlock_clock_after_fork() noexcept { g_cal_mu.unlock(); }

bool clock_uses_tsc() noexcept { return g_cal.mult.load(std::memory_order_relaxed) != 0; }

bool set_clock_ticks_are_tsc(bool tsc) noexcept {
  return g_clock_ticks_are_tsc.exchange(tsc, std::memory_order_acq_rel);
}

}  // namespace nemo::lens::detail
