// The guests' side of OwnerLock and the owner's uncommon cases (owner_lock.hpp).
#include "tracing/owner_lock.hpp"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <thread>

namespace nemo::lens::detail {

namespace {

std::atomic<bool> g_biased{false};

// Spins briefly, then yields: a holder preempted in its few stores gets to finish them.
void back_off(int& spins) noexcept {
  if (spins++ < 64) {
    __builtin_ia32_pause();
  } else {
    std::this_thread::yield();
  }
}

// The guest's half of the fence on a biased lock: a full barrier on every running thread of the
// process, the owner's among them. (Should the call fail, which registration rules out, nothing
// else would order the owner's store; the guest's read-modify-write before it orders its own.)
void guest_fence() noexcept {
  (void)::syscall(__NR_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0);
}

[[maybe_unused]] const bool g_registered_at_load = register_owner_locks();

}  // namespace

bool register_owner_locks() noexcept {
  bool ok = false;
#if !defined(__SANITIZE_THREAD__)
  const long commands = ::syscall(__NR_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  ok = commands > 0 && (commands & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0 &&
       ::syscall(__NR_membarrier, MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED, 0, 0) == 0;
#endif
  g_biased.store(ok, std::memory_order_relaxed);
  return ok;
}

bool owner_locks_biased() noexcept { return g_biased.load(std::memory_order_relaxed); }

bool OwnerLock::owner_slow(bool wait) noexcept {
  for (int spins = 0;;) {
    std::uint8_t g = guests_.load(std::memory_order_acquire);
    if ((g & kToSymmetric) != 0) {
      // Guests come often: fence here from now on, and spare every core their interruptions. The
      // read-modify-write makes owner_in_ visible before a guest can see kSymmetric.
      guests_.fetch_or(kSymmetric, std::memory_order_acq_rel);
      g = guests_.fetch_and(static_cast<std::uint8_t>(~kToSymmetric), std::memory_order_acq_rel);
    }
    if ((g & kSymmetric) != 0) {
      // Symmetric: the owner's store and load are sequentially consistent too, as the guests'.
      owner_in_.exchange(true, std::memory_order_seq_cst);
      g = guests_.load(std::memory_order_seq_cst);
    }
    if ((g & kGuestIn) == 0) return true;
    owner_in_.store(false, std::memory_order_release);  // a guest is in or about to be: let it
    if (!wait) return false;
    while ((guests_.load(std::memory_order_relaxed) & kGuestIn) != 0) back_off(spins);
    owner_in_.store(true, std::memory_order_relaxed);
    owner_fence();
  }
}

void OwnerLock::announce_guest() noexcept {
  const std::uint8_t before = guests_.fetch_or(kGuestIn, std::memory_order_seq_cst);
  if ((before & kSymmetric) == 0) guest_fence();
}

void OwnerLock::lock_as_guest() noexcept {
  for (int spins = 0; guest_mu_.exchange(true, std::memory_order_acquire);) {
    while (guest_mu_.load(std::memory_order_relaxed)) back_off(spins);
  }
  announce_guest();
  for (int spins = 0; owner_in_.load(std::memory_order_seq_cst);) back_off(spins);
  count_guest();
}

bool OwnerLock::try_lock_as_guest() noexcept {
  if (guest_mu_.load(std::memory_order_relaxed) ||
      guest_mu_.exchange(true, std::memory_order_acquire)) {
    return false;
  }
  announce_guest();
  for (int spins = 0; owner_in_.load(std::memory_order_seq_cst); ++spins) {
    if (spins == 256) {  // the owner is in for longer than its few stores: preempted
      unlock_as_guest();
      return false;
    }
    __builtin_ia32_pause();
  }
  count_guest();
  return true;
}

void OwnerLock::count_guest() noexcept {
  if (++guest_count_ == kGuestsBeforeSymmetric) {
    guests_.fetch_or(kToSymmetric, std::memory_order_relaxed);
  }
}

void OwnerLock::unlock_as_guest() noexcept {
  guests_.fetch_and(static_cast<std::uint8_t>(~kGuestIn), std::memory_order_release);
  guest_mu_.store(false, std::memory_order_release);
}

void OwnerLock::start_over_for_new_owner() noexcept {
  guest_count_ = 0;
  guests_.store(owner_locks_biased() ? kGuestIn : kGuestIn | kSymmetric, std::memory_order_relaxed);
}

void OwnerLock::reset_after_fork(bool biased) noexcept {
  owner_in_.store(false, std::memory_order_relaxed);
  guests_.store(biased ? 0 : kSymmetric, std::memory_order_relaxed);
  guest_mu_.store(false, std::memory_order_relaxed);
  guest_count_ = 0;
}

}  // namespace nemo::lens::detail
