#include "tracing/ids.hpp"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

namespace nemo::lens::detail {

std::atomic<std::uint64_t> g_fork_generation{0};

[[gnu::tls_model("initial-exec")]] constinit thread_local IdGenerator t_ids;

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

void IdGenerator::seed() noexcept { seed_with(os_random64()); }

}  // namespace nemo::lens::detail
