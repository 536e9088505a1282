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
/// by `last`. The owner must stop it before its own members go.
class PeriodicWorker {
 public:
  PeriodicWorker(std::chrono::milliseconds period, std::function<void()> round,
                 std::function<void()> last);
  ~PeriodicWorker();
  /// Runs a round now; false when `deadline` passed before it ended.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// A last round, `last`, then the thread ends. Idempotent; false when `deadline` passed first
  /// (the thread is then left to finish).
  bool stop(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for a round soon, without ever waiting (a busy thread runs another round anyway).
  void wake() noexcept;

 private:
  void run() noexcept;

  const std::chrono::milliseconds period_;
  const std::function<void()> round_, last_;
  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::uint64_t requested_ = 0, done_ = 0;  // flush tickets
  bool stop_ = false, stopped_ = false, wake_ = false;
  std::thread thread_;
};

}  // namespace nemo::lens::detail
