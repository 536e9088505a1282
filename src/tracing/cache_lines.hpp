// Hints about cache lines that cross between a thread that writes them and one that reads them: a
// prefetch for writing (asks for a line in a state that allows a store, ahead of the store) and an
// eviction (drops a line this core read from every cache, so that the next store does not wait for
// it to be taken from this core). Internal.
#pragma once

#include <cstdint>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace nemo::lens::detail {

/// A CPUID output register that holds feature bits.
enum class CpuidRegister : std::uint8_t { kEbx, kEcx };

/// Whether CPUID leaf `leaf` (subleaf 0) sets bit `bit` of `reg`; false for a leaf the CPU does
/// not have, and on CPUs other than x86.
inline bool cpuid_bit(unsigned leaf, CpuidRegister reg, unsigned bit) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(leaf, 0, &a, &b, &c, &d) == 0) return false;
  return (((reg == CpuidRegister::kEbx ? b : c) >> bit) & 1u) != 0;
#else
  (void)leaf, (void)reg, (void)bit;
  return false;
#endif
}

/// Whether the CPU prefetches for writing (x86 PREFETCHW), read once per program.
inline const bool g_cpu_prefetches_for_write = cpuid_bit(0x80000001u, CpuidRegister::kEcx, 8);

/// Asks for the line at `address` for writing. A hint: the address may be anywhere (a prefetch
/// never faults), and nothing happens where the CPU has no such prefetch.
[[gnu::always_inline]] inline void prefetch_for_write(std::uintptr_t address) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (g_cpu_prefetches_for_write) asm volatile("prefetchw (%0)" ::"r"(address));
#else
  __builtin_prefetch(reinterpret_cast<const void*>(address), 1);
#endif
}

/// Whether the CPU evicts a line without ordering it against other evictions (x86 CLFLUSHOPT),
/// read once per program.
inline const bool g_cpu_evicts_lines = cpuid_bit(7, CpuidRegister::kEbx, 23);

/// Writes the line at `address` back to memory if it was modified and drops it from every core's
/// caches. For lines this thread only read and another core writes next: that core's store then
/// takes the line from memory (which its prefetch hides) instead of waiting for this core to give
/// up its copy. The contents stay as they are. `address` must be mapped and readable (unlike a
/// prefetch, an eviction can fault); nothing happens where the CPU has no CLFLUSHOPT.
[[gnu::always_inline]] inline void evict_line(std::uintptr_t address) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  if (g_cpu_evicts_lines) asm volatile("clflushopt (%0)" ::"r"(address));
#else
  (void)address;
#endif
}

}  // namespace nemo::lens::detail
