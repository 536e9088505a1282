// A bounded single-producer single-consumer ring: a push is a store and a release store, with no
// read-modify-write and no division: the slots are a power of two (at least the capacity), an
// index's slot its low bits. The producer and the consumer each keep a cached copy of the
// other's index on their own cache line, and read the other's only when the ring looks full
// (producer) or empty (consumer). Internal.
//
// One thread pushes. Pops may come from several threads, but never two at once and each ordered
// after the previous by a lock or a join (the pipeline pops under its ledger's mutex).
#pragma once

#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "tracing/cache_lines.hpp"

namespace nemo::lens::detail {

template <class T>
class SpscRing {
 public:
  explicit SpscRing(std::size_t capacity)
      : capacity_(capacity == 0 ? 1 : capacity),
        mask_(std::bit_ceil(capacity_) - 1),
        slots_(new T[mask_ + 1]) {}

  /// Adds `v`; false when the ring holds `capacity` elements. Producer only.
  bool try_push(T v) noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_seen_ >= capacity_) {
      head_seen_ = head_.load(std::memory_order_acquire);  // pairs with the consumer's release
      if (tail - head_seen_ >= capacity_) return false;
    }
    T* slot = &slots_[tail & mask_];
    *slot = v;
    // The slots a few lines on: the consumer read them last, and the store into each would
    // otherwise wait for its line to come back (and a locked instruction after it, for the store).
    // Once a line: at the push into the first slot that starts in it.
    if ((reinterpret_cast<std::uintptr_t>(slot) & (kLineBytes - 1)) < sizeof(T)) {
      prefetch_for_write(reinterpret_cast<std::uintptr_t>(slot) + kPrefetchBytes);
    }
    tail_.store(tail + 1, std::memory_order_release);  // publishes the slot to the consumer
    return true;
  }

  /// Removes the oldest element into `out`; false when the ring is empty. Consumer only.
  bool try_pop(T& out) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (head == tail_seen_) {
      tail_seen_ = tail_.load(std::memory_order_acquire);  // pairs with the producer's release
      if (head == tail_seen_) return false;
    }
    out = slots_[head & mask_];
    head_.store(head + 1, std::memory_order_release);  // the slot is the producer's again
    return true;
  }

  /// Removes up to `max` of the oldest elements into out[0, n) and returns n (0 when the ring is
  /// empty): try_pop() n times, with one release of the slots for all of them. Consumer only.
  std::size_t try_pop_many(T* out, std::size_t max) noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    if (tail_seen_ - head < max) {
      tail_seen_ = tail_.load(std::memory_order_acquire);  // pairs with the producer's release
    }
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(max, tail_seen_ - head));
    if (n == 0) return 0;
    const auto at = static_cast<std::size_t>(head & mask_);
    const std::size_t first = std::min(n, mask_ + 1 - at);  // up to the end of the array
    std::copy_n(slots_.get() + at, first, out);
    std::copy_n(slots_.get(), n - first, out + first);
    head_.store(head + n, std::memory_order_release);  // the slots are the producer's again
    return n;
  }

  /// The number of elements queued (exact when no push or pop is in progress). Any thread.
  std::size_t size_estimate() const noexcept {
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    return tail > head ? static_cast<std::size_t>(tail - head) : 0;
  }

  std::size_t capacity() const noexcept { return capacity_; }

 private:
  static constexpr std::size_t kLineBytes = 64;
  static constexpr std::size_t kPrefetchBytes = 4 * kLineBytes;  // four lines ahead
  const std::size_t capacity_;
  const std::size_t mask_;  // the slots less one
  const std::unique_ptr<T[]> slots_;
  // The producer's line.
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  std::uint64_t head_seen_ = 0;
  // The consumer's line.
  alignas(64) std::atomic<std::uint64_t> head_{0};
  std::uint64_t tail_seen_ = 0;
};

}  // namespace nemo::lens::detail
