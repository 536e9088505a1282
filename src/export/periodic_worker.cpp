// PeriodicWorker (see periodic_worker.hpp).
#include "export/periodic_worker.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

PeriodicWorker::PeriodicWorker(std::chrono::milliseconds period, Round round, Round last)
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
    const Clock::time_point deadline = stopping ? stop_cutoff_ : Clock::time_point::max();
    const std::uint64_t target = requested_;
    lock.unlock();
    round_(deadline);
    lock.lock();
    if (abandoned_) return;  // stop gave up on this thread: no further round, no `last`
    if (stopping) {
      lock.unlock();
      last_(deadline);
      lock.lock();
    }
    done_ = target;
    if (Clock::now() >= next) next = Clock::now() + period_;
    stopped_ = stopping;
    cv_.notify_all();
    if (stopping) return;
  }
}

std::uint64_t PeriodicWorker::request_flush() noexcept {
  std::lock_guard lock(mu_);
  const std::uint64_t ticket = ++requested_;
  cv_.notify_all();
  return ticket;
}

bool PeriodicWorker::wait_flushed(std::uint64_t ticket, Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    return cv_.wait_until(lock, deadline, [&] { return done_ >= ticket || stopped_; });
  } catch (...) {
    return false;
  }
}

bool PeriodicWorker::flush(Clock::time_point deadline) noexcept {
  return wait_flushed(request_flush(), deadline);
}

void PeriodicWorker::request_stop(Clock::time_point cutoff) noexcept {
  {
    std::lock_guard lock(mu_);
    if (!stop_) stop_cutoff_ = cutoff;
    stop_ = true;
  }
  cv_.notify_all();
}

bool PeriodicWorker::wait_stopped(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    if (!cv_.wait_until(lock, deadline, [&] { return stopped_; })) return false;
  } catch (...) {
    return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

void PeriodicWorker::abandon() noexcept {
  try {
    {
      std::lock_guard lock(mu_);
      abandoned_ = true;
    }
    if (thread_.joinable()) thread_.detach();
  } catch (...) {
  }
}

void PeriodicWorker::wake() noexcept {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) {
    wake_ = true;
    cv_.notify_all();
  }
}

}  // namespace nemo::lens::detail
