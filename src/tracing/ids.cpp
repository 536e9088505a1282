#include "tracing/ids.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace nemo::lens::detail {

std::atomic<std::uint64_t> g_fork_generation{0};

std::uint64_t os_random64() noexcept {
  std::uint64_t v = 0;
  if (getrandom(&v, sizeof v, 0) == static_cast<ssize_t>(sizeof v)) return v;
  int fd = ::open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t n = ::read(fd, &v, sizeof v);
    ::close(fd);
    if (n == static_cast<ssize_t>(sizeof v)) return v;
  }
  // Last resort: time, pid and an address, mixed.
  v = static_cast<std::uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  v ^= static_cast<std::uint64_t>(::getpid()) << 32;
  v ^= reinterpret_cast<std::uintptr_t>(&v);
  return v;
}

namespace {
std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
}  // namespace

void IdGenerator::seed() noexcept {
  do {
    for (auto& s : s_) s = os_random64();
  } while ((s_[0] | s_[1] | s_[2] | s_[3]) == 0);
  // Relaxed: only this thread's own view of the counter matters (it is written in the child).
  generation_ = g_fork_generation.load(std::memory_order_relaxed);
}

std::uint64_t IdGenerator::next() noexcept {
  if (generation_ != g_fork_generation.load(std::memory_order_relaxed)) seed();
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

TraceId IdGenerator::trace_id() noexcept {
  TraceId id;
  std::uint64_t hi = 0, lo = 0;
  while ((hi | lo) == 0) {
    hi = next();
    lo = next();
  }
  std::memcpy(id.bytes.data(), &hi, 8);
  std::memcpy(id.bytes.data() + 8, &lo, 8);
  return id;
}

SpanId IdGenerator::span_id() noexcept {
  SpanId id;
  std::uint64_t v = 0;
  while (v == 0) v = next();
  std::memcpy(id.bytes.data(), &v, 8);
  return id;
}

}  // namespace nemo::lens::detail
