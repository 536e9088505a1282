// The background thread of the metric reader and of the log processor: one export round every
// period, on demand, at flush and at stop. Internal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>

namespace nemo::lens::detail {

/// The thread of the metric reader and of the log processor: runs `round` every `period`, when
/// woken, at each flush (which waits for a round started after it) and once more at stop, followed
/// by `last`. `round` gets the time its exports must end by: the stop's cutoff for the last round,
/// no limit otherwise (the owner's own export timeout applies); `last` gets the stop's cutoff. The
/// owner must stop it before its own members go, and must leave itself undestroyed when
/// wait_stopped() gave up.
class PeriodicWorker {
 public:
  using Round = std::function<void(std::chrono::steady_clock::time_point deadline)>;
  PeriodicWorker(std::chrono::milliseconds period, Round round, Round last);
  ~PeriodicWorker();
  /// Runs a round now; false when `deadline` passed before it ended.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for a flush round without waiting; returns its ticket for wait_flushed().
  std::uint64_t request_flush() noexcept;
  /// Waits for the flush round `ticket`; false when `deadline` passed first.
  bool wait_flushed(std::uint64_t ticket, std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for the last round (its exports end by `cutoff`), `last`, then the thread's end, without
  /// waiting.
  void request_stop(std::chrono::steady_clock::time_point cutoff) noexcept;
  /// Waits for the thread to end and joins it; false when `deadline` passed first (the thread is
  /// then left running). Idempotent.
  bool wait_stopped(std::chrono::steady_clock::time_point deadline) noexcept;
  /// After wait_stopped() gave up: the thread ends when its round in progress returns, without
  /// another round or `last`, on its own (detached). The owner must then never be destroyed.
  void abandon() noexcept;
  /// Asks for a round soon, without ever waiting (a busy thread runs another round anyway).
  void wake() noexcept;

 private:
  void run() noexcept;

  const std::chrono::milliseconds period_;
  const Round round_;
  const Round last_;
  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::uint64_t requested_ = 0, done_ = 0;  // flush tickets
  bool stop_ = false, stopped_ = false, wake_ = false, abandoned_ = false;
  std::chrono::steady_clock::time_point stop_cutoff_ = std::chrono::steady_clock::time_point::max();
  std::thread thread_;
};

}  // namespace nemo::lens::detail
