// The batch pipeline: producers push ended spans into a bounded lock-free queue and never wait;
// one exporter thread wakes when a full batch is queued, when the schedule delay expires, or on a
// flush, and hands batches to the exporter. While spans come faster than a batch per wake-up, it
// naps between drains instead, and no producer wakes it.
#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "export/otlp.hpp"
#include "gpu/gpu_timing.hpp"
#include "immortal.hpp"
#include "logs/log_processor.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/metrics.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/state.hpp"
#include "record/recorder.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {
// The bucket of Pipeline::redacted_keys a key of this length is in.
std::size_t bucket_of(std::string_view key) noexcept {
  return std::min<std::size_t>(key.size(), Pipeline::kRedactedBuckets - 1);
}
}  // namespace

Pipeline::Pipeline(BatchOptions opts, SpanLimits lim, SamplerConfig samp,
                   std::vector<std::string> redact, Resource res, std::shared_ptr<SpanExporter> exp)
    : options(opts),
      limits(lim),
      sampler(samp),
      redacted_keys([&redact] {
        // Bucket by bucket (no sort: std::stable_sort's nothrow temporary buffer is an allocation
        // the allocation test's replaced operators do not pair).
        std::vector<std::string> keys;
        keys.reserve(redact.size());
        for (std::size_t n = 0; n < kRedactedBuckets; ++n) {
          for (const auto& k : redact) {
            if (bucket_of(k) == n) keys.push_back(k);
          }
        }
        return keys;
      }()),
      redacted_from([this] {
        // redacted_from[n]: the first key of bucket n or a later one.
        std::array<std::uint32_t, kRedactedBuckets + 1> from{};
        for (std::size_t n = 0, i = 0; n <= kRedactedBuckets; ++n) {
          while (i < redacted_keys.size() && bucket_of(redacted_keys[i]) < n) ++i;
          from[n] = static_cast<std::uint32_t>(i);
        }
        return from;
      }()),
      redacted_filter([this] {
        std::uint64_t f = 0;
        for (const auto& k : redacted_keys) f |= std::uint64_t{1} << redacted_filter_bit(k);
        return f;
      }()),
      inline_room(static_cast<std::uint8_t>(
          std::min<std::uint32_t>(SpanRecord::kInlineAttributes, lim.attribute_count))),
      resource(std::move(res)),
      exporter(std::move(exp)),
      shared_queue_(opts.max_queue_size) {
  keep_reachable(this);  // immortal: records and handles may point here
  calibrate_clock();
  inherit(SpanContext{});
  record_exporter_ = dynamic_cast<RecordSpanExporter*>(exporter.get());
  if (record_exporter_ != nullptr && !record_exporter_->encodes_records()) {
    record_exporter_ = nullptr;
  }
  visit_thread_states([&](ThreadState& s) {
    base_started_ += s.started.load(std::memory_order_relaxed);
    base_ended_ += s.ended.load(std::memory_order_relaxed);
    base_dropped_full_ += s.dropped_queue_full.load(std::memory_order_relaxed);
  });
}

void Pipeline::ensure_thread() noexcept {
  if (thread_started_.load(std::memory_order_acquire)) return;
  try {
    std::lock_guard lock(thread_mu_);
    if (thread_started_.load(std::memory_order_relaxed)) return;
    thread_ = std::thread([this] { run(); });
    thread_started_.store(true, std::memory_order_release);
  } catch (...) {
    // No thread could be started: spans stay queued (and are dropped once the queue is full).
  }
}

SpanRing* Pipeline::ring_for(ThreadState& ts) noexcept {
  // A state used by another thread before keeps its rings: it has one producer at a time.
  SpanRing* ring = nullptr;
  for (SpanRing* r = rings_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    if (r->producer == &ts) ring = r;
  }
  if (ring == nullptr) {
    try {
      ring = new SpanRing(options.max_queue_size, &ts);
    } catch (...) {
      return nullptr;
    }
    ring->next = rings_.load(std::memory_order_relaxed);
    // Release publishes the ring's fields to the exporter thread.
    while (!rings_.compare_exchange_weak(ring->next, ring, std::memory_order_release,
                                         std::memory_order_relaxed)) {
    }
  }
  ts.ring = ring;
  // enqueue() takes a thread's ring of this pipeline as a sign that the exporter thread runs:
  // while it could not be started, every span comes back here, which tries again.
  ts.ring_pipeline = thread_started_.load(std::memory_order_acquire) ? this : nullptr;
  ts.until_wake = options.max_export_batch_size;
  return ring;
}

void Pipeline::wake_after_batch(ThreadState& current) noexcept {
  current.until_wake = options.max_export_batch_size;
  // The push before, the flag after, taken with a read-modify-write that pairs with the exchange
  // in wait_for_spans(): whichever comes first in the flag's order, either this thread sees the
  // exporter thread waiting (and is the one producer to wake it), or that thread, acquiring from
  // this one, sees the push.
  if (wake_wanted_.exchange(0, std::memory_order_acq_rel) == 0) {
    // It drains or naps, or another thread woke it: no call, unless this thread's ring filled
    // faster than the nap allowed for (valve_due()), and then one call until it next drains.
    if (current.ring == nullptr ||
        !valve_due(current.ring->queue.size_estimate(), options.max_queue_size) ||
        valve_pulled_.exchange(true, std::memory_order_relaxed)) {
      return;
    }
  }
  producer_wakes_.fetch_add(1, std::memory_order_relaxed);
  wake_.release();
}

void Pipeline::enqueue_slow(SpanRecord* rec, ThreadState* current) noexcept {
  if (!accepting.load(std::memory_order_acquire)) {
    dropped_at_shutdown_.fetch_add(1, std::memory_order_relaxed);  // rare: during shutdown only
    recycle(rec);
    return;
  }
  ensure_thread();  // first: ring_for() marks a thread's ring for enqueue() only once it runs
  SpanRing* ring = nullptr;
  if (current != nullptr) {
    ring = NEMO_LENS_LIKELY(current->ring_pipeline == this) ? current->ring : ring_for(*current);
  }
  const bool queued = ring != nullptr ? ring->queue.try_push(rec) : shared_queue_.try_push(rec);
  if (!queued) {
    if (current != nullptr) current->count(current->dropped_queue_full);
    recycle(rec);
    return;
  }
  // Wake the exporter once per batch's worth of this thread's spans: counting here, rather than
  // reading the queue's size, keeps the consumer's cache line out of the producer's path.
  if (ring == nullptr) {
    wake_.release();
  } else if (--current->until_wake == 0) {
    wake_after_batch(*current);
  }
}

void Pipeline::enqueue_captured(std::vector<SpanRecord*>& records) noexcept {
  if (records.empty()) return;
  if (!accepting.load(std::memory_order_acquire)) {
    dropped_at_shutdown_.fetch_add(records.size(), std::memory_order_relaxed);
    recycle_batch(records);
    return;
  }
  ensure_thread();
  try {
    std::lock_guard lock(captured_mu_);
    captured_.insert(captured_.end(), records.begin(), records.end());
    captured_count_.store(captured_.size(), std::memory_order_release);
  } catch (...) {
    dropped_at_shutdown_.fetch_add(records.size(), std::memory_order_relaxed);  // out of memory
    recycle_batch(records);
    return;
  }
  records.clear();
  wake_.release();
}

std::size_t Pipeline::queued_estimate() const noexcept {
  std::size_t n = shared_queue_.size_estimate() + captured_count_.load(std::memory_order_relaxed);
  for (SpanRing* r = rings_.load(std::memory_order_acquire); r != nullptr; r = r->next) {
    n += r->queue.size_estimate();
  }
  return n;
}

std::size_t Pipeline::take_queued(std::vector<SpanRecord*>& out, std::size_t max,
                                  std::size_t& lost) noexcept {
  const std::size_t before = out.size() + lost;
  SpanRecord* rec = nullptr;
  auto take_from = [&](auto& queue) {
    while (out.size() + lost < max && queue.try_pop(rec)) {
      try {
        out.push_back(rec);
      } catch (...) {
        ++lost;  // out of memory
        delete rec;
      }
    }
  };
  // A ring's spans a run at a time: one release of its slots and one append per run.
  auto take_from_ring = [&](SpscRing<SpanRecord*>& queue) {
    constexpr std::size_t kRun = 64;
    SpanRecord* run[kRun];
    while (out.size() + lost < max) {
      const std::size_t n = queue.try_pop_many(run, std::min(kRun, max - out.size() - lost));
      if (n == 0) return;
      try {
        out.insert(out.end(), run, run + n);
      } catch (...) {
        lost += n;  // out of memory
        for (std::size_t i = 0; i < n; ++i) delete run[i];
      }
    }
  };
  // Start where the previous take stopped, so that no thread's ring waits behind the others'.
  SpanRing* head = rings_.load(std::memory_order_acquire);
  SpanRing* start = next_ring_ != nullptr ? next_ring_ : head;
  SpanRing* r = start;
  while (r != nullptr && out.size() + lost < max) {
    take_from_ring(r->queue);
    if (out.size() + lost >= max) break;
    r = r->next != nullptr ? r->next : head;
    if (r == start) break;
  }
  next_ring_ = r;
  // The flight recorder's captures (acquire pairs with enqueue_captured()'s release).
  if (out.size() + lost < max && captured_count_.load(std::memory_order_acquire) != 0) {
    std::lock_guard lock(captured_mu_);
    const std::size_t n = std::min(captured_.size(), max - out.size() - lost);
    try {
      out.insert(out.end(), captured_.begin(), captured_.begin() + static_cast<std::ptrdiff_t>(n));
    } catch (...) {
      lost += n;  // out of memory
      for (std::size_t i = 0; i < n; ++i) delete captured_[i];
    }
    captured_.erase(captured_.begin(), captured_.begin() + static_cast<std::ptrdiff_t>(n));
    captured_count_.store(captured_.size(), std::memory_order_relaxed);
  }
  // Last: shutdown's truncated copies come after the spans that ended before it.
  take_from(shared_queue_);
  return out.size() + lost - before;
}

RecordIds make_export_ids(const SpanRecord& r) noexcept { return new_ids(r, t_ids); }

void export_ids(std::span<const SpanRecord* const> records, RecordIds* ids) noexcept {
  // A copy, stored back at the end (no other id is made on this thread meanwhile), checked for a
  // fork once: the ids new_ids() would make, the state in a register.
  IdGenerator generator = t_ids;
  generator.reseed_after_fork();
  for (std::size_t i = 0; i < records.size(); ++i) {
    const SpanRecord* r = records[i];
    if (r == nullptr) continue;
    if (r->span_id.is_valid()) {
      ids[i] = {r->trace_id, r->span_id};
      continue;
    }
    ids[i].trace_id = r->trace_id.is_valid() ? r->trace_id : generator.next_trace_id();
    ids[i].span_id = generator.next_span_id();
  }
  t_ids = generator;
}

bool Pipeline::export_batch(std::vector<SpanRecord*>& batch,
                            std::chrono::steady_clock::time_point deadline,
                            bool gpu_sorted) noexcept {
  if (gpu != nullptr && !gpu_sorted) gpu->sort(batch);
  if (batch.empty()) return true;
  auto outcome = ExportLedger::Outcome::kShutdown;  // no time left: not sent at all
  if (std::chrono::steady_clock::now() < deadline) {
    outcome = ExportLedger::Outcome::kFailed;
    try {
      ExportResult result = ExportResult::kFailure;
      const TickConverter clock = tick_converter();  // one calibration for the whole batch
      // Most spans' ids are made on this thread, off the threads that made the spans: by the
      // exporter of records as it reads them (export_ids()), or here.
      if (record_exporter_ != nullptr) {
        export_calls_.fetch_add(1, std::memory_order_relaxed);
        result = record_exporter_->export_records(batch, resource, clock, deadline);
      } else {
        // The views keep their storage from batch to batch: in steady state this allocates
        // nothing.
        if (views_.size() < batch.size()) views_.resize(batch.size());
        view_ptrs_.clear();
        for (std::size_t i = 0; i < batch.size(); ++i) {
          ensure_ids(*batch[i], t_ids);
          materialize(*batch[i], clock, views_[i]);
          view_ptrs_.push_back(&views_[i]);
        }
        export_calls_.fetch_add(1, std::memory_order_relaxed);
        if (exporter != nullptr) result = exporter->export_spans(view_ptrs_, resource, deadline);
      }
      if (result == ExportResult::kSuccess) outcome = ExportLedger::Outcome::kExported;
    } catch (...) {
    }
  }
  const bool open = ledger_.settle(batch.size(), outcome);
  // Cleaned before their lines are evicted: cleaning them after would bring the lines back here.
  // With GPU time, the cold part its attributes used is cleared here too rather than at the
  // record's next start, on the thread that starts spans.
  for (SpanRecord* r : batch) {
    if (gpu != nullptr) reset_record(*r);
    clean_record(*r);
    evict_record(*r);
  }
  recycle_batch(batch, true);
  return open;
}

bool Pipeline::export_gpu_due(bool all, std::chrono::steady_clock::time_point cutoff) noexcept {
  std::vector<SpanRecord*> due;
  gpu->release(due, all, cutoff);
  // One batch however many were due (at most what was held).
  return export_batch(
      due, std::min(cutoff, std::chrono::steady_clock::now() + options.export_timeout), true);
}

std::size_t Pipeline::drain(bool full_batches_only,
                            std::chrono::steady_clock::time_point deadline) noexcept {
  std::size_t total = 0;
  std::vector<SpanRecord*> batch;
  for (;;) {
    if (full_batches_only && queued_estimate() < options.max_export_batch_size) break;
    try {
      // Room for a whole batch: the last one's went to the free pool with its records.
      batch.reserve(options.max_export_batch_size);
    } catch (...) {
    }
    // Spans leave the queues under the ledger's lock: once shutdown closed it, they are its.
    std::size_t lost = 0;  // out of memory
    const bool open = ledger_.take([&] {
      take_queued(batch, options.max_export_batch_size, lost);
      return batch.size() + lost;
    });
    if (!open) break;
    if (lost != 0 && !ledger_.settle(lost, ExportLedger::Outcome::kFailed)) break;
    if (batch.empty()) break;
    total += batch.size();
    const auto now = std::chrono::steady_clock::now();
    if (!export_batch(batch, std::min(deadline, now + options.export_timeout))) break;
  }
  return total;
}

bool Pipeline::wait_for_spans(std::chrono::steady_clock::duration nap) noexcept {
  if (nap != nap.zero()) {
    (void)wake_.try_acquire_for(nap);  // a flush or a stop ends it early
    return true;
  }
  // Pairs with wake_after_batch()'s read-modify-write: a batch completed before it saw the flag
  // is found here.
  wake_wanted_.exchange(1, std::memory_order_acq_rel);
  const bool woken = queued_estimate() >= options.max_export_batch_size ||
                     wake_.try_acquire_for(options.schedule_delay);
  wake_wanted_.store(0, std::memory_order_relaxed);
  return woken;
}

std::chrono::steady_clock::duration Pipeline::next_nap(std::size_t taken,
                                                       std::chrono::steady_clock::duration since,
                                                       std::chrono::steady_clock::duration busy,
                                                       bool valve_pulled) const noexcept {
  using std::chrono::microseconds;
  // Spans come slower than a batch per drain: producers wake this thread when a batch is queued.
  if (taken < options.max_export_batch_size) return microseconds(0);
  // A ring filled faster than the last nap allowed for (a producer pulled the valve): the rate
  // this thread saw leaves out what it could not drain in time, and a nap would only fill the
  // rings. It drains again at once while a batch is queued, and waits to be woken after.
  if (valve_pulled) return microseconds(0);
  // Faster: rather than have a producer make a system call for every batch (microseconds in a
  // virtual machine, on the thread being traced), begin the next drain when, at the rate just
  // seen, a quarter of a thread's ring (at least two batches, at most half the ring) is queued
  // since this one began, with room left for the rate to grow. A drain that took most of that
  // time leaves the shortest nap: this thread is then what holds the spans back.
  const std::size_t target =
      std::min(options.max_queue_size / 2,
               std::max(options.max_queue_size / 4, 2 * options.max_export_batch_size));
  const auto fill = std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      since * static_cast<double>(target) / static_cast<double>(taken));
  return std::clamp<std::chrono::steady_clock::duration>(fill - busy, microseconds(20),
                                                         microseconds(5000));
}

void Pipeline::run() noexcept {
  auto nap = std::chrono::steady_clock::duration::zero();
  auto last_drain = std::chrono::steady_clock::now();
  // What the flushes' drains took since the last other drain, and whether a producer pulled the
  // valve since then.
  std::size_t flushed = 0;
  bool valve_pulled = false;
  for (;;) {
    const bool woken = wait_for_spans(nap);
    if (valve_pulled_.load(std::memory_order_relaxed)) {
      valve_pulled = true;
      valve_pulled_.store(false, std::memory_order_relaxed);  // a filling ring may call again
    }
    refresh_clock();
    std::uint64_t flush_target = 0;
    bool stopping = false;
    auto cutoff = std::chrono::steady_clock::time_point::max();
    {
      std::lock_guard lock(flush_mu_);
      flush_target = flush_requested_;
      stopping = stop_requested_;
      if (stopping) cutoff = stop_cutoff_;
    }
    const bool flushing = flush_target > flush_done_local_;
    // A wake-up for a full batch or a nap's end exports full batches only; a timer expiry, a
    // flush or a stop exports everything.
    const auto drain_start = std::chrono::steady_clock::now();
    const std::size_t taken = drain(woken && !flushing && !stopping, cutoff);
    const auto busy = std::chrono::steady_clock::now() - drain_start;
    if (flushing) {
      // A flush says nothing of the rate spans come at: the nap decided before it stands, and
      // the next drain's rate counts what the flushes took (not their time: the program asked
      // for them, and waits for them).
      flushed += taken;
    } else {
      nap = next_nap(taken + flushed, drain_start - last_drain, busy, valve_pulled);
      last_drain = drain_start;
      flushed = 0;
      valve_pulled = false;
    }
    // Shutdown gave up waiting for this thread: it touches nothing more.
    if (ledger_.closed()) return;
    if (gpu != nullptr) {
      const bool open = export_gpu_due(flushing || stopping, cutoff);
      // Last act of GPU time: CUPTI unsubscribed, nothing more queued for this pipeline.
      if (stopping || !open) gpu->stop();
      if (!open) return;
    }
    if (flushing || stopping) {
      if (exporter != nullptr) {
        exporter->force_flush(
            std::min(cutoff, std::chrono::steady_clock::now() + options.export_timeout));
        // The thread's last act, so that finish_shutdown() waits for it no longer than for an
        // export: an exporter whose shutdown() ignores its deadline cannot hold the program.
        if (stopping) exporter->shutdown(cutoff);
      }
      flush_done_local_ = flush_target;
      std::lock_guard lock(flush_mu_);
      flush_done_ = flush_target;
      if (stopping) stopped_ = true;
      flush_cv_.notify_all();
    }
    if (stopping) return;
  }
}

std::uint64_t Pipeline::request_flush() noexcept {
  ensure_thread();
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(flush_mu_);
    ticket = ++flush_requested_;
  }
  wake_.release();
  return ticket;
}

bool Pipeline::wait_flushed(std::uint64_t ticket,
                            std::chrono::steady_clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(flush_mu_);
    return flush_cv_.wait_until(lock, deadline, [&] { return flush_done_ >= ticket || stopped_; });
  } catch (...) {
    return false;
  }
}

bool Pipeline::flush(std::chrono::steady_clock::time_point deadline) noexcept {
  return wait_flushed(request_flush(), deadline);
}

SpanRecord* truncated_copy(SpanRecord& r, std::uint64_t now) {
  ensure_ids(r, t_ids);
  SpanRecord* copy = copy_record(r);
  copy->end_ticks =
      std::max(r.unix_times ? static_cast<std::uint64_t>(now_unix_nano()) : now, r.start_ticks);
  copy->truncated = true;
  try {
    put_span_attribute(*copy, semconv::kNemoSpanTruncated, true);
    copy->use_cold().events.push_back(
        SpanEvent{std::string(semconv::kNemoSpanTruncated), ticks_to_unix_nano(now), {}, 0});
  } catch (...) {
    delete copy;
    throw;
  }
  return copy;
}

TelemetryStats Pipeline::stats() const noexcept {
  TelemetryStats s;
  std::uint64_t started = 0, ended = 0, dropped_full = 0;
  try {
    visit_thread_states([&](ThreadState& t) {
      started += t.started.load(std::memory_order_relaxed);
      ended += t.ended.load(std::memory_order_relaxed);
      dropped_full += t.dropped_queue_full.load(std::memory_order_relaxed);
    });
  } catch (...) {
  }
  s.spans_started = started - base_started_;
  s.spans_ended = ended - base_ended_;
  s.spans_dropped_queue_full = dropped_full - base_dropped_full_;
  // The deferred counts first: a batch accepted between the two reads is then counted as
  // exported for a moment, never as pending without being exported.
  DeferredCounts deferred;
  if (auto* d = dynamic_cast<const DeferredSpanExporter*>(exporter.get())) {
    deferred = d->deferred_spans();
  }
  s.spans_exported = ledger_.exported() - deferred.pending - deferred.dropped;
  s.spans_buffered = deferred.pending;
  s.spans_dropped_export_failed = ledger_.failed() + deferred.dropped;
  s.spans_dropped_shutdown =
      dropped_at_shutdown_.load(std::memory_order_relaxed) + ledger_.dropped_at_shutdown();
  s.spans_truncated = truncated_.load(std::memory_order_relaxed);
  s.spans_end_clamped = end_clamped.load(std::memory_order_relaxed);
  s.export_requests = export_calls_.load(std::memory_order_relaxed);
  s.exporter_wakeups = producer_wakes_.load(std::memory_order_relaxed);
  if (exporter != nullptr) s.spans_rejected = exporter->rejected_spans();
  if (gpu != nullptr) {
    const GpuCounts g = gpu->counts();
    s.gpu_spans_timed = g.spans_timed;
    s.gpu_spans_incomplete = g.spans_incomplete;
    s.gpu_activities_late = g.activities_late;
    s.gpu_activities_unattributed = g.activities_unattributed;
    s.gpu_launches_dropped = g.launches_dropped;
    s.gpu_activities_dropped = g.activities_dropped;
    s.gpu_activities_invalid = g.activities_invalid;
    s.gpu_kernel_spans = g.kernel_spans;
    s.gpu_kernel_spans_dropped = g.kernel_spans_dropped;
    s.gpu_spans_waiting = g.spans_waiting;
  }
  const FlightStats f = flight_stats();
  s.spans_recorded = f.recorded;
  s.spans_record_overwritten = f.overwritten;
  s.spans_captured = f.captured;
  s.record_captures = f.captures;
  s.record_spans_held = f.held;
  s.record_memory_bytes = f.bytes;
  return s;
}

void Pipeline::begin_shutdown(std::chrono::steady_clock::time_point deadline) noexcept {
  // New spans no longer start here, then open ones are exported as truncated copies.
  Pipeline* self = this;
  g_active_pipeline.compare_exchange_strong(self, nullptr, std::memory_order_acq_rel);
  const std::uint64_t now = now_ticks();
  std::vector<SpanRecord*> copies;
  try {
    visit_thread_states([&](ThreadState& t) {
      std::lock_guard lock(t.mu);
      bool gpu_timed = false;  // its published chain lost a span: published again
      try {
        for (auto it = t.stack.rbegin(); it != t.stack.rend(); ++it) {  // innermost first
          SpanRecord* r = *it;
          if (!r->recording || r->orphaned || r->pipeline != this) continue;
          SpanRecord* copy = truncated_copy(*r, now);
          r->orphaned = true;
          gpu_timed = gpu_timed || (r->mode & kModeGpu) != 0;
          copies.push_back(copy);
        }
      } catch (...) {
        if (gpu_timed) publish_gpu_chain_locked(t);
        throw;
      }
      if (gpu_timed) publish_gpu_chain_locked(t);
    });
  } catch (...) {
  }
  for (SpanRecord* c : copies) {
    if (shared_queue_.try_push(c)) {
      truncated_.fetch_add(1, std::memory_order_relaxed);
    } else {
      dropped_at_shutdown_.fetch_add(1, std::memory_order_relaxed);
      delete c;
    }
  }
  accepting.store(false, std::memory_order_release);
  // Exports end by the cutoff: one waiting on a slow receiver (or backing off) gives up then, and
  // the thread drops what is left, so that it finishes by the deadline.
  const auto cutoff = export_cutoff(deadline);
  interrupt_if_interruptible(exporter.get(), cutoff);
  try {
    ensure_thread();
    std::lock_guard lock(flush_mu_);
    if (!stop_requested_) stop_cutoff_ = cutoff;
    stop_requested_ = true;
  } catch (...) {
  }
  wake_.release();
}

bool Pipeline::finish_shutdown(std::chrono::steady_clock::time_point deadline) noexcept {
  bool done = false;
  try {
    std::unique_lock lock(flush_mu_);
    done = flush_cv_.wait_until(lock, deadline, [&] { return stopped_; });
  } catch (...) {
  }
  // What is queued now (spans that ended between the stop and `accepting` turning false, or
  // everything, when the thread did not finish) counts as dropped at shutdown.
  auto take_late = [this] {
    std::vector<SpanRecord*> late;
    std::size_t lost = 0;
    const std::size_t n = take_queued(late, SIZE_MAX, lost);
    recycle_batch(late);
    return static_cast<std::uint64_t>(n);
  };
  std::lock_guard lock(thread_mu_);
  if (done) {
    if (thread_.joinable()) thread_.join();
    dropped_at_shutdown_.fetch_add(take_late(), std::memory_order_relaxed);
  } else {
    ledger_.close(take_late);
    if (thread_.joinable()) thread_.detach();  // it counts nothing more; it owns nothing we free
  }
  return done;
}

Pipeline* Pipeline::current() noexcept {
  Pipeline* p = this;
  while (Pipeline* next = p->successor.load(std::memory_order_acquire)) p = next;
  return p;
}

Pipeline* Pipeline::clone_for_child() noexcept {
  try {
    std::shared_ptr<SpanExporter> child_exporter =
        exporter_for_child ? exporter_for_child() : exporter;
    Resource child_resource = resource;
    for (KeyValue& kv : child_resource.attributes) {
      if (kv.key == semconv::kProcessPid) kv.value = static_cast<std::int64_t>(::getpid());
    }
    auto* p = new Pipeline(options, limits, sampler, redacted_keys, std::move(child_resource),
                           child_exporter);
    p->exporter_for_child = exporter_for_child;
    p->inherit(inherited);
    return p;
  } catch (...) {
    return nullptr;
  }
}

// ---------------------------------------------------------------------------------------------
// fork()

void lock_state_for_fork() noexcept;
void unlock_state_after_fork() noexcept;

namespace {

void prepare_fork() noexcept {
  lock_state_for_fork();
  lock_clock_for_fork();
  lock_all_thread_states();
}

void parent_after_fork() noexcept {
  unlock_all_thread_states();
  unlock_clock_after_fork();
  unlock_state_after_fork();
}

void child_after_fork() noexcept {
  g_fork_generation.fetch_add(1, std::memory_order_relaxed);
  // The metric reader's and log processor's threads do not exist here: the child records no
  // metrics and no logs (its values would never be collected).
  g_metrics_recording.store(false, std::memory_order_relaxed);
  g_logs_recording.store(false, std::memory_order_relaxed);
  g_log_processor.store(nullptr, std::memory_order_relaxed);
  reset_thread_states_in_child();
  unlock_clock_after_fork();
  unlock_state_after_fork();
  // The exporter thread does not exist here: a fresh pipeline takes over, its thread starts on
  // first use. The parent's queue stays behind (its spans are the parent's to export).
  Pipeline* parent = g_active_pipeline.load(std::memory_order_relaxed);
  if (parent != nullptr) {
    parent->accepting.store(false, std::memory_order_relaxed);
    Pipeline* child = parent->clone_for_child();
    parent->successor.store(child, std::memory_order_release);
    g_active_pipeline.store(child, std::memory_order_release);
  }
}

}  // namespace

void install_fork_handlers() noexcept {
  static const bool installed = [] {
    return pthread_atfork(prepare_fork, parent_after_fork, child_after_fork) == 0;
  }();
  (void)installed;
}

}  // namespace nemo::lens::detail
