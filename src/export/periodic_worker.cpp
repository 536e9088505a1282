// PeriodicWorker (see periodic_worker.hpp).
#include "export/periodic_worker.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

PeriodicWorker::PeriodicWorker(std::chrono::milliseconds period, std::function<void()> round,
                               std::function<void()> last)
    : period_(period), round_(std::move(round)), last_(std::move(last)) {
  thread_ = std::thread([this] { run(); });
}

PeriodicWorker::~PeriodicWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicWorker::run() noexcept {
  auto next = Clock::now() + period_;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_until(lock, next, [&] { return stop_ || wake_ || requested_ != done_; });
    wake_ = false;
    const bool stopping = stop_;
    const std::uint64_t target = requested_;
    lock.unlock();
    round_();
    if (stopping) last_();
    lock.lock();
    done_ = target;
    if (Clock::now() >= next) next = Clock::now() + period_;
    stopped_ = stopping;
    cv_.notify_all();
    if (stopping) return;
  }
}

bool PeriodicWorker::flush(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    if (stopped_) return true;
    const std::uint64_t ticket = ++requested_;
    cv_.notify_all();
    return cv_.wait_until(lock, deadline, [&] { return done_ >= ticket || stopped_; });
  } catch (...) {
    return false;
  }
}

bool PeriodicWorker::stop(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    stop_ = true;
    cv_.notify_all();
    if (!cv_.wait_until(lock, deadline, [&] { return stopped_; })) return false;
  } catch (...) {
    return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

void PeriodicWorker::wake() noexcept {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) {
    wake_ = true;
    cv_.notify_all();
  }
}

}  // namespace nemo::lens::detail
