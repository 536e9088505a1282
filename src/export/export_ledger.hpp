// The books of one signal's exporter thread (spans, metric points or log records): what it took to
// export and how each export ended, until shutdown closes them. Internal.
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>

namespace nemo::lens::detail {

/// The time by which shutdown interrupts every export still in flight: `deadline` less a margin
/// of a tenth of the time left, at most 100 ms, for the exporter threads to finish and the books
/// to close before shutdown returns.
inline std::chrono::steady_clock::time_point export_cutoff(
    std::chrono::steady_clock::time_point deadline) noexcept {
  const auto left = deadline - std::chrono::steady_clock::now();
  return deadline - std::clamp<std::chrono::steady_clock::duration>(
                        left / 10, std::chrono::steady_clock::duration::zero(),
                        std::chrono::milliseconds(100));
}

/// What an exporter thread took from its queue (or collected), exported and failed to export.
/// Once close()d the books take no further entry: a thread that shutdown stopped waiting for (an
/// exporter that ignored its deadline) finds them closed when its export returns, and counts
/// nothing, because close() counted what it held as dropped at shutdown. So the counts are final
/// when shutdown returns. The counters are read without the lock.
class ExportLedger {
 public:
  enum class Outcome : std::uint8_t { kExported, kFailed, kShutdown };

  /// Runs `take_items` under the lock unless the books are closed: it takes items from the queue
  /// and returns how many. False when closed (nothing was taken).
  template <class Take>
  bool take(Take&& take_items) noexcept {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    const std::uint64_t n = take_items();
    in_flight_ += n;
    taken_.fetch_add(n, std::memory_order_relaxed);
    return true;
  }

  /// `n` items taken earlier are done: exported, failed, or dropped for want of time at shutdown.
  /// A failed export counts as a failed request. False when the books were closed meanwhile (the
  /// items were counted then).
  bool settle(std::uint64_t n, Outcome outcome) noexcept {
    std::lock_guard lock(mu_);
    if (closed_) return false;
    in_flight_ -= std::min(in_flight_, n);
    switch (outcome) {
      case Outcome::kExported:
        exported_.fetch_add(n, std::memory_order_relaxed);
        break;
      case Outcome::kFailed:
        failed_.fetch_add(n, std::memory_order_relaxed);
        failed_requests_.fetch_add(1, std::memory_order_relaxed);
        break;
      case Outcome::kShutdown:
        shutdown_.fetch_add(n, std::memory_order_relaxed);
        break;
    }
    return true;
  }

  /// Closes the books: the items in flight, and the `rest` the caller takes from the queue itself
  /// (a callable returning how many), count as dropped at shutdown. Idempotent.
  template <class Rest>
  void close(Rest&& rest) noexcept {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    const std::uint64_t rest_count = rest();
    taken_.fetch_add(rest_count, std::memory_order_relaxed);
    shutdown_.fetch_add(in_flight_ + rest_count, std::memory_order_relaxed);
    in_flight_ = 0;
  }

  bool closed() const noexcept {
    std::lock_guard lock(mu_);
    return closed_;
  }
  /// Items taken in all (with close()'s rest): exported + failed + dropped at shutdown, once no
  /// export is in flight.
  std::uint64_t taken() const noexcept { return taken_.load(std::memory_order_relaxed); }
  std::uint64_t exported() const noexcept { return exported_.load(std::memory_order_relaxed); }
  std::uint64_t failed() const noexcept { return failed_.load(std::memory_order_relaxed); }
  std::uint64_t failed_requests() const noexcept {
    return failed_requests_.load(std::memory_order_relaxed);
  }
  std::uint64_t dropped_at_shutdown() const noexcept {
    return shutdown_.load(std::memory_order_relaxed);
  }

 private:
  mutable std::mutex mu_;
  bool closed_ = false;
  std::uint64_t in_flight_ = 0;
  std::atomic<std::uint64_t> taken_{0}, exported_{0}, failed_{0}, failed_requests_{0}, shutdown_{0};
};

}  // namespace nemo::lens::detail
