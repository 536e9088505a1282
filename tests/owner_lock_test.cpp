// OwnerLock (the lock of a thread's span bookkeeping): its owner and guests on other threads never
// hold it at once, biased (the owner without a fence, guests with membarrier) and symmetric; it
// turns symmetric after frequent guests; try_lock fails on either side while the other holds it.
// Run under TSan as a concurrency test (where the lock is symmetric from the start).
#include "tracing/owner_lock.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <latch>
#include <thread>
#include <vector>

namespace {

using nemo::lens::detail::owner_locks_biased;
using nemo::lens::detail::OwnerLock;

// What the lock guards: two counters that every holder steps together, and a flag that says
// whether someone is inside.
struct Guarded {
  std::uint64_t a = 0, b = 0;
  std::atomic<bool> inside{false};
  std::atomic<int> overlaps{0};

  void step() {
    if (inside.exchange(true, std::memory_order_relaxed)) overlaps.fetch_add(1);
    if (a != b) overlaps.fetch_add(1);
    ++a;
    ++b;
    inside.store(false, std::memory_order_relaxed);
  }
};

// `guests` threads take the lock `guest_rounds` times each while the owner (this thread) takes it
// over and over until they are done, at least `owner_rounds` times; returns how many times the
// owner took it.
std::uint64_t contend(OwnerLock& lock, Guarded& g, std::uint64_t owner_rounds, int guests,
                      int guest_rounds) {
  std::latch start(guests + 1);
  std::atomic<int> guests_done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < guests; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < guest_rounds; ++i) {
        if (i % 2 == 0) {
          lock.lock_as_guest();
        } else {
          while (!lock.try_lock_as_guest()) std::this_thread::yield();
        }
        g.step();
        lock.unlock_as_guest();
      }
      guests_done.fetch_add(1);
    });
  }
  start.arrive_and_wait();
  std::uint64_t taken = 0;
  for (; taken < owner_rounds || guests_done.load(std::memory_order_relaxed) < guests; ++taken) {
    if (taken % 2 == 0) {
      lock.lock_as_owner();
    } else {
      while (!lock.try_lock_as_owner()) std::this_thread::yield();
    }
    g.step();
    lock.unlock_as_owner();
  }
  for (auto& t : threads) t.join();
  return taken;
}

TEST(OwnerLock, OwnerAndGuestsNeverHoldItAtOnce) {
  // Many locks, each with fewer guest rounds than kGuestsBeforeSymmetric: every lock stays as it
  // started (biased where membarrier is available), and the owner races each guest's arrival.
  for (int round = 0; round < 400; ++round) {
    OwnerLock lock;
    const bool biased = lock.biased();
    ASSERT_EQ(biased, owner_locks_biased());
    Guarded g;
    const std::uint64_t owner_took = contend(lock, g, 1000, 2, 120);
    ASSERT_EQ(g.overlaps.load(), 0) << "round " << round;
    ASSERT_EQ(g.a, owner_took + 240);
    ASSERT_EQ(g.b, g.a);
    ASSERT_EQ(lock.biased(), biased);
  }
}

TEST(OwnerLock, TurnsSymmetricAfterFrequentGuestsAndStaysExclusive) {
  OwnerLock lock;
  for (std::uint32_t i = 0; i < OwnerLock::kGuestsBeforeSymmetric; ++i) {
    std::thread([&] {
      lock.lock_as_guest();
      lock.unlock_as_guest();
    }).join();
  }
  lock.lock_as_owner();  // the owner learns it at its next lock
  lock.unlock_as_owner();
  EXPECT_FALSE(lock.biased());
  Guarded g;
  const std::uint64_t owner_took = contend(lock, g, 1000, 2, 20'000);
  EXPECT_EQ(g.overlaps.load(), 0);
  EXPECT_EQ(g.a, owner_took + 40'000);
  EXPECT_FALSE(lock.biased());
}

TEST(OwnerLock, StartsOverBiasedForANewOwnerAndAfterFork) {
  OwnerLock lock;
  for (std::uint32_t i = 0; i < OwnerLock::kGuestsBeforeSymmetric; ++i) {
    lock.lock_as_guest();
    lock.unlock_as_guest();
  }
  lock.lock_as_owner();
  lock.unlock_as_owner();
  ASSERT_FALSE(lock.biased());
  lock.lock_as_guest();
  lock.start_over_for_new_owner();
  lock.unlock_as_guest();
  EXPECT_EQ(lock.biased(), owner_locks_biased());
  lock.lock_as_owner();  // held when "forked": the child's reset frees it
  lock.reset_after_fork(false);
  EXPECT_FALSE(lock.biased());
  EXPECT_TRUE(lock.try_lock_as_owner());
  lock.unlock_as_owner();
}

TEST(OwnerLock, EachSideFailsToTryWhileTheOtherHoldsIt) {
  OwnerLock lock;
  lock.lock_as_owner();
  bool guest_got_it = true;
  std::thread([&] { guest_got_it = lock.try_lock_as_guest(); }).join();
  EXPECT_FALSE(guest_got_it);
  lock.unlock_as_owner();
  std::thread([&] {
    guest_got_it = lock.try_lock_as_guest();
    if (guest_got_it) lock.unlock_as_guest();
  }).join();
  EXPECT_TRUE(guest_got_it);

  std::atomic<bool> held{false}, release{false};
  std::thread guest([&] {
    lock.lock_as_guest();
    held.store(true);
    while (!release.load()) std::this_thread::yield();
    lock.unlock_as_guest();
  });
  while (!held.load()) std::this_thread::yield();
  EXPECT_FALSE(lock.try_lock_as_owner());
  release.store(true);
  guest.join();
  EXPECT_TRUE(lock.try_lock_as_owner());
  lock.unlock_as_owner();
}

}  // namespace
