// A lock that one thread, its owner, takes far more often than any other: the lock of a thread's
// span bookkeeping, which that thread takes at every span's start and end and other threads only
// to end or change a span handed to them, or to read the open spans (a dump, the watchdog).
// Internal.
//
// The owner takes it with plain stores and loads, no locked instruction: a locked instruction
// waits for every earlier store to reach the cache, and a span's stores often wait for lines
// coming back from the exporter thread's core. The rare side pays instead: a guest (any other
// thread) announces itself, then makes every running thread of the process execute a full
// barrier (membarrier(2), PRIVATE_EXPEDITED), and only then looks whether the owner is in. Between
// the owner's store and its load, either the guest's barrier reached the owner's core (the
// owner's store is visible to the guest) or it had not (the owner sees the guest): Dekker's
// mutual exclusion with the owner's half of the fence moved to the guest.
//
// A lock whose guests come often (kGuestsBeforeSymmetric) turns symmetric for good: its owner
// fences too, and guests no longer interrupt every core of the process. So does every lock where
// membarrier is not available, and under TSan (which does not model membarrier).
#pragma once

#include <atomic>
#include <cstdint>

namespace nemo::lens::detail {

/// Whether guests may use membarrier: registered for this process (register_owner_locks()).
bool owner_locks_biased() noexcept;
/// Registers the process for membarrier PRIVATE_EXPEDITED (once when the library loads; again in
/// a forked child); false when the kernel does not offer it.
bool register_owner_locks() noexcept;

class OwnerLock {
 public:
  /// Guest acquisitions after which the lock turns symmetric.
  static constexpr std::uint32_t kGuestsBeforeSymmetric = 256;

  OwnerLock() noexcept : guests_(owner_locks_biased() ? 0 : kSymmetric) {}
  OwnerLock(const OwnerLock&) = delete;
  OwnerLock& operator=(const OwnerLock&) = delete;

  /// The owner's side: only ever called by the one thread that owns the lock.
  /// Takes the lock when no guest holds it or waits for one; never waits for one.
  [[gnu::always_inline]] bool try_lock_as_owner() noexcept {
    return enter_if_unshared() || owner_slow(false);
  }
  /// try_lock_as_owner() in the common case only, with no call on its way: also false, the lock
  /// left free, whenever the lock is symmetric or turning so.
  [[gnu::always_inline]] bool try_lock_as_owner_if_unshared() noexcept {
    if (__builtin_expect(enter_if_unshared(), 1)) return true;
    owner_in_.store(false, std::memory_order_release);
    return false;
  }
  [[gnu::always_inline]] void lock_as_owner() noexcept {
    if (__builtin_expect(!enter_if_unshared(), 0)) owner_slow(true);
  }
  [[gnu::always_inline]] void unlock_as_owner() noexcept {
    owner_in_.store(false, std::memory_order_release);
  }

  /// The guests' side: any thread but the owner.
  void lock_as_guest() noexcept;
  /// Takes the lock unless the owner (or another guest) keeps it busy for longer than a short
  /// spin.
  bool try_lock_as_guest() noexcept;
  void unlock_as_guest() noexcept;

  /// Whether the owner takes the lock without a fence (false once symmetric).
  bool biased() const noexcept {
    return (guests_.load(std::memory_order_relaxed) & kSymmetric) == 0;
  }
  /// Makes the lock biased again for a new owner thread, the old one gone. Requires the guest
  /// lock (held by the caller).
  void start_over_for_new_owner() noexcept;
  /// Only for a forked child, where the holders no longer exist: free, biased when `biased`.
  void reset_after_fork(bool biased) noexcept;

 private:
  static constexpr std::uint8_t kGuestIn = 1;      // a guest announced itself or holds the lock
  static constexpr std::uint8_t kToSymmetric = 2;  // guests came often: the owner turns symmetric
  static constexpr std::uint8_t kSymmetric = 4;  // the owner fences too; guests need no membarrier

  // Between the owner's store to owner_in_ and its load of guests_ on the biased path: only the
  // compiler's order, the guest's membarrier being the fence. (A symmetric lock, as every lock is
  // under TSan, never passes that load: guests_ is not 0.)
  static void owner_fence() noexcept { std::atomic_signal_fence(std::memory_order_seq_cst); }
  // The owner's biased path: announces the owner, then whether guests_ is 0 (no guest, the lock
  // not symmetric): the lock is then the owner's. Otherwise owner_in_ stays set.
  [[gnu::always_inline]] bool enter_if_unshared() noexcept {
    owner_in_.store(true, std::memory_order_relaxed);
    owner_fence();
    return guests_.load(std::memory_order_acquire) == 0;
  }
  // Announces a guest (holding guest_mu_) and, on a biased lock, runs the guest's half of the
  // fence; then owner_in_ says whether the owner is in.
  void announce_guest() noexcept;
  // The owner's lock when guests_ was not 0 (owner_in_ set): a guest in, the lock symmetric or to
  // turn so. False (owner_in_ cleared) when a guest holds it and !wait.
  bool owner_slow(bool wait) noexcept;
  // Counts a guest's acquisition (holding guest_mu_), asking the owner to turn symmetric at
  // kGuestsBeforeSymmetric.
  void count_guest() noexcept;

  std::atomic<bool> owner_in_{false};
  std::atomic<std::uint8_t> guests_;
  std::atomic<bool> guest_mu_{false};  // guests among themselves
  std::uint32_t guest_count_ = 0;      // guarded by guest_mu_
};

/// Holds an OwnerLock as its owner for a scope.
class OwnerLockGuard {
 public:
  explicit OwnerLockGuard(OwnerLock& lock) noexcept : lock_(lock) { lock_.lock_as_owner(); }
  ~OwnerLockGuard() { lock_.unlock_as_owner(); }
  OwnerLockGuard(const OwnerLockGuard&) = delete;
  OwnerLockGuard& operator=(const OwnerLockGuard&) = delete;

 private:
  OwnerLock& lock_;
};

}  // namespace nemo::lens::detail
