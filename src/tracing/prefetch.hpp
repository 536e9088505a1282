// A prefetch for writing: asks for a cache line in a state that allows a store, ahead of the
// store. Internal.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace nemo::lens::detail {

/// Whether the CPU prefetches for writing (x86 PREFETCHW, from CPUID), read once per program.
inline bool detect_prefetch_for_write() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(0x80000001u, &a, &b, &c, &d) != 0 && (c & (1u << 8)) != 0;  // PRFCHW
#else
  return false;
#endif
}
inline const bool g_cpu_prefetches_for_write = detect_prefetch_for_write();

/// Asks for the line at `address` for writing. A hint: the address may be anywhere (a prefetch
/// never faults), and nothing happens where the CPU has no such prefetch.
[[gnu::always_inline]] inline void prefetch_for_write(std::uintptr_t address) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (g_cpu_prefetches_for_write) asm volatile("prefetchw (%0)" ::"r"(address));
#else
  __builtin_prefetch(reinterpret_cast<const void*>(address), 1);
#endif
}

}  // namespace nemo::lens::detail
