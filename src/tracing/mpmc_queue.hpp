// A bounded multi-producer multi-consumer queue (Vyukov's design, with exact capacity: cells are
// indexed modulo the capacity, sequence numbers are 64-bit). Lock-free; push and pop never block.
// Internal.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace nemo::lens::detail {

template <class T>
class MpmcQueue {
 public:
  explicit MpmcQueue(std::size_t capacity)
      : capacity_(capacity == 0 ? 1 : capacity), cells_(new Cell[capacity_]) {
    for (std::size_t i = 0; i < capacity_; ++i) cells_[i].seq.store(i, std::memory_order_relaxed);
  }

  /// Adds `v`; false when the queue is full. On success `*position` (when given) receives the
  /// element's sequence number: 0 for the first element ever pushed, then 1, 2, ...
  bool try_push(T v, std::uint64_t* position = nullptr) noexcept {
    std::uint64_t pos = tail_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos % capacity_];
      // Acquire pairs with the consumer's release of this cell.
      const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::int64_t>(seq - pos);
      if (diff == 0) {
        if (tail_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          c.value = v;
          c.seq.store(pos + 1, std::memory_order_release);
          if (position != nullptr) *position = pos;
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = tail_.load(std::memory_order_relaxed);
      }
    }
  }

  /// Removes the oldest element into `out`; false when the queue is empty.
  bool try_pop(T& out) noexcept {
    std::uint64_t pos = head_.load(std::memory_order_relaxed);
    for (;;) {
      Cell& c = cells_[pos % capacity_];
      const std::uint64_t seq = c.seq.load(std::memory_order_acquire);
      const auto diff = static_cast<std::int64_t>(seq - (pos + 1));
      if (diff == 0) {
        if (head_.compare_exchange_weak(pos, pos + 1, std::memory_order_relaxed)) {
          out = c.value;
          c.seq.store(pos + capacity_, std::memory_order_release);
          return true;
        }
      } else if (diff < 0) {
        return false;
      } else {
        pos = head_.load(std::memory_order_relaxed);
      }
    }
  }

  /// An estimate of the number of queued elements (exact when no push or pop is in progress).
  std::size_t size_estimate() const noexcept {
    const std::uint64_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint64_t head = head_.load(std::memory_order_relaxed);
    return tail > head ? static_cast<std::size_t>(tail - head) : 0;
  }

  std::size_t capacity() const noexcept { return capacity_; }

 private:
  struct Cell {
    std::atomic<std::uint64_t> seq;
    T value;
  };
  const std::size_t capacity_;
  std::unique_ptr<Cell[]> cells_;
  alignas(64) std::atomic<std::uint64_t> tail_{0};
  alignas(64) std::atomic<std::uint64_t> head_{0};
};

}  // namespace nemo::lens::detail
