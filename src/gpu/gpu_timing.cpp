// GPU time of spans in a pipeline (see gpu_timing.hpp).
#include "gpu/gpu_timing.hpp"

#include <algorithm>
#include <utility>

#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

GpuSourceFactory& source_factory() {
  static GpuSourceFactory f;
  return f;
}

// The next GpuTiming's id_.
std::atomic<std::uint32_t> g_next_timing_id{1};

}  // namespace

GpuInputs::~GpuInputs() {
  delete spare_.load(std::memory_order_relaxed);
  while (head_ != nullptr) delete std::exchange(head_, head_->next.load(std::memory_order_relaxed));
}

bool GpuInputs::push(const GpuInput& input, std::size_t bound) {
  const std::uint64_t produced = produced_.load(std::memory_order_relaxed);
  if (produced - consumed_seen_ >= bound) {
    consumed_seen_ = consumed_.load(std::memory_order_relaxed);  // read only when it may be full
    if (produced - consumed_seen_ >= bound) return false;
  }
  if (tail_index_ == kBlockInputs) {
    Block* next = spare_.exchange(nullptr, std::memory_order_acquire);
    if (next == nullptr) {
      next = new Block();
    } else {
      next->next.store(nullptr, std::memory_order_relaxed);
    }
    // Published by the release of produced_ below, with the input stored into it.
    tail_->next.store(next, std::memory_order_relaxed);
    tail_ = next;
    tail_index_ = 0;
  }
  tail_->inputs[tail_index_++] = input;
  produced_.store(produced + 1, std::memory_order_release);  // pairs with take()'s acquire
  return true;
}

void GpuInputs::take(std::uint32_t timing, std::vector<GpuInput>& out) {
  const std::uint64_t produced = produced_.load(std::memory_order_acquire);
  std::uint64_t consumed = consumed_.load(std::memory_order_relaxed);
  while (consumed != produced) {
    if (head_index_ == kBlockInputs) {
      // The producer linked the next block before it counted an input stored there.
      Block* next = head_->next.load(std::memory_order_relaxed);
      // The producer's next block, unless it has one waiting already. Release: what this
      // thread read from the block happens before the producer writes into it again.
      delete spare_.exchange(std::exchange(head_, next), std::memory_order_acq_rel);
      head_index_ = 0;
    }
    const GpuInput& in = head_->inputs[head_index_];
    if (in.timing == timing) out.push_back(in);  // may throw: this input stays queued
    ++head_index_;
    ++consumed;
    // Each input given back at once: a producer that found the queue full sees the room.
    consumed_.store(consumed, std::memory_order_relaxed);
  }
}

void set_gpu_source_factory(GpuSourceFactory factory) { source_factory() = std::move(factory); }

std::unique_ptr<GpuSource> make_gpu_source() {
  if (source_factory()) return source_factory()();
  return make_cupti_source();
}

GpuTiming::GpuTiming(Pipeline& pipeline, GroupSet groups, std::chrono::milliseconds wait,
                     GroupSet kernel_spans)
    : pipeline_(pipeline),
      groups_(std::move(groups)),
      kernel_spans_(std::move(kernel_spans)),
      wait_(wait),
      generation_(g_fork_generation.load(std::memory_order_relaxed)),
      id_(g_next_timing_id.fetch_add(1, std::memory_order_relaxed)) {}

GpuTiming::~GpuTiming() {
  stop();
  // The threads' queues keep nothing for a timing that is gone (a later one would skip it).
  try {
    std::vector<Input> gone;
    take_thread_queues(gone);
  } catch (...) {
  }
}

void GpuTiming::take_thread_queues(std::vector<Input>& out) {
  for_each_thread_state([&](ThreadState& t) {
    GpuInputs* q = t.gpu.load(std::memory_order_acquire);
    if (q == nullptr || !q->pending()) return;
    std::lock_guard lock(q->consumer_mu);
    q->take(id_, out);
  });
}

std::string GpuTiming::start(std::unique_ptr<GpuSource> source) noexcept {
  if (!source) return "no GPU activity source";
  // The groups' spans publish their chains from their next start (kModeGpu): before the source
  // reports launches.
  try {
    set_gpu_timed_span_groups(this, groups_, kernel_spans_);
  } catch (...) {
    return "out of memory";
  }
  source_ = std::move(source);
  std::string why = source_->start(*this);
  if (!why.empty()) {
    source_.reset();
    clear_gpu_timed_span_groups(this);
    return why;
  }
  try {
    poller_ = std::thread([this] { poll_loop(); });
  } catch (...) {
    source_->stop();
    source_.reset();
    clear_gpu_timed_span_groups(this);
    return "could not start a thread";
  }
  return "";
}

void GpuTiming::stop() noexcept {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  if (poller_.joinable()) poller_.join();
  if (source_) source_->stop();
  try {
    clear_gpu_timed_span_groups(this);
  } catch (...) {  // std::mutex::lock: a system error
  }
}

bool GpuTiming::timed(const SpanRecord& r) const noexcept {
  return r.pipeline == &pipeline_ && r.recording && (r.mode & kModeGpu) != 0;
}

namespace {

static_assert(GpuChain::kMaxSpans == GpuChainSnapshot::kMaxSpans);

// `copy` as a chain of `timing`'s spans; empty when it is another pipeline's.
GpuChain chain_of(const Pipeline& pipeline, const GpuChainCopy& copy) noexcept {
  GpuChain chain;
  if (copy.pipeline != &pipeline || copy.size == 0) return chain;
  chain.size = copy.size;
  chain.kernel_spans = copy.kernel_spans;
  std::copy_n(copy.spans, copy.size, chain.spans);
  return chain;
}

}  // namespace

void GpuTiming::dropped(const Input& input) noexcept {
  if (input.op == Input::Op::kLaunch) in_launches_dropped_.fetch_add(1, std::memory_order_relaxed);
}

void GpuTiming::queue_input(ThreadState* own, Input input) noexcept {
  input.timing = id_;
  if (own != nullptr) {
    try {
      GpuInputs* q = own->gpu.load(std::memory_order_relaxed);  // only this thread stores it
      if (q == nullptr) {
        q = new GpuInputs();
        own->gpu.store(q, std::memory_order_release);  // pairs with absorb_locked()'s acquire
      }
      if (!q->push(input, max_queued_.load(std::memory_order_relaxed))) dropped(input);
    } catch (...) {
      dropped(input);
    }
    return;
  }
  std::lock_guard lock(in_mu_);
  if (in_launches_.size() >= max_queued_.load(std::memory_order_relaxed)) return dropped(input);
  try {
    in_launches_.push_back(input);
  } catch (...) {
    dropped(input);
  }
}

void GpuTiming::set_queue_bound(std::size_t bound) noexcept {
  max_queued_.store(bound, std::memory_order_relaxed);
}

void GpuTiming::on_launch(std::uint64_t correlation, std::uint32_t records) noexcept {
  // A forked child: CUDA does not work there, and the parent's locks may be held forever.
  if (g_fork_generation.load(std::memory_order_relaxed) != generation_) return;
  ThreadState* own = this_thread_state_if_any();
  Input in{correlation, {}, 0, records, Input::Op::kLaunch};
  if (own != nullptr) {
    // No lock, not even this thread's own: its chain is read as any thread reads it (a guest
    // ending a span of this thread's may be writing it), and the queue's only producer is this
    // thread. The launch is queued before this thread ends the span, so before the exporter
    // thread sees the span; a span another thread is ending meanwhile is one a launch from a
    // thread without spans may read too (below).
    GpuChainCopy copy;
    if (read_gpu_chain(*own, copy)) in.chain = chain_of(pipeline_, copy);
    if (in.chain.size > 0) return queue_input(own, in);
  }
  // No such span on this thread (autograd's, NCCL's or a data loader's): the process's innermost
  // one, the one that started last among every thread's innermost, read from the chains the
  // threads publish: no other thread's lock is taken, so launches from a thread without spans
  // (a backward pass: one per kernel) leave the owners' locks biased, and no lock at all, not
  // even the registry's. A launch that read a span from a chain just as it ended may come after
  // the span was exported: it counts for the enclosing spans still open, or as late
  // (GpuAttribution::launch()).
  std::int64_t best_start = 0;
  for_each_thread_state([&](ThreadState& s) noexcept {
    if (&s == own) return;
    GpuChainCopy copy;
    if (!read_gpu_chain(s, copy)) return;
    const GpuChain chain = chain_of(pipeline_, copy);
    if (chain.size > 0 && (in.chain.size == 0 || copy.start_unix_nano > best_start)) {
      in.chain = chain;
      best_start = copy.start_unix_nano;
    }
  });
  if (in.chain.size == 0) return;
  queue_own(in);
}

void GpuTiming::on_alias(std::uint64_t alias, std::uint64_t correlation) noexcept {
  if (g_fork_generation.load(std::memory_order_relaxed) != generation_) return;
  queue_own({alias, {}, correlation, 0, Input::Op::kAlias});
}

void GpuTiming::on_cancel(std::uint64_t correlation) noexcept {
  if (g_fork_generation.load(std::memory_order_relaxed) != generation_) return;
  queue_own({correlation, {}, 0, 0, Input::Op::kCancel});
}

void GpuTiming::queue_own(const Input& input) noexcept {
  ThreadState* own = this_thread_state_if_any();
  queue_input(own, input);  // its own queue needs no lock: this thread is its only producer
}

void GpuTiming::on_synchronized() noexcept {
  if (held_count_.load(std::memory_order_relaxed) == 0) return;
  if (flush_requested_.exchange(true, std::memory_order_relaxed)) return;
  cv_.notify_all();
}

void GpuTiming::on_source_dropped(std::uint64_t records) noexcept {
  if (records == 0) return;
  std::lock_guard lock(in_mu_);
  in_activities_dropped_ += records;
}

void GpuTiming::on_activities(std::span<const GpuActivity> activities) noexcept {
  if (activities.empty()) return;
  {
    std::lock_guard lock(in_mu_);
    const std::size_t bound = max_queued_.load(std::memory_order_relaxed);
    const std::size_t room = in_activities_.size() < bound ? bound - in_activities_.size() : 0;
    const std::size_t n = std::min(room, activities.size());
    try {
      in_activities_.insert(in_activities_.end(), activities.begin(), activities.begin() + n);
      in_activities_dropped_ += activities.size() - n;
    } catch (...) {
      in_activities_dropped_ += activities.size();
    }
  }
  cv_.notify_all();
}

void GpuTiming::absorb_locked() {
  // Taken into vectors kept for their capacity: the queues keep theirs too (cleared, not
  // swapped), so that no launching thread grows a vector again after each take.
  std::vector<Input>& launches = absorbing_launches_;
  std::vector<GpuActivity>& activities = absorbing_activities_;
  launches.clear();
  activities.clear();
  // The records first: a record's launch was queued before its work could run, so it is in the
  // launches taken after.
  {
    std::lock_guard lock(in_mu_);
    activities.swap(in_activities_);
    launches.swap(in_launches_);
    counts_.activities_dropped += in_activities_dropped_;
    in_activities_dropped_ = 0;
  }
  take_thread_queues(launches);
  counts_.launches_dropped += in_launches_dropped_.exchange(0, std::memory_order_relaxed);
  // Launches, then their aliases, then cancellations: each queue is in its order, but a launch
  // may sit in another queue than its alias or its cancellation, which always come after it (the
  // shared one, then the thread's own once the launching thread made its first span).
  for (const Input& in : launches) {
    if (in.op == Input::Op::kLaunch) attribution_.launch(in.correlation, in.chain, in.records);
  }
  for (const Input& in : launches) {
    if (in.op == Input::Op::kAlias) attribution_.alias(in.correlation, in.aliased);
  }
  for (const Input& in : launches) {
    if (in.op == Input::Op::kCancel) attribution_.cancel(in.correlation);
  }
  for (const GpuActivity& a : activities) attribution_.activity(a);
}

bool GpuTiming::due_locked(const Held& h, std::chrono::steady_clock::time_point now) const {
  return attribution_.settled(h.span) || now - h.since >= wait_;
}

namespace {

const char* kind_name(GpuActivityKind kind) noexcept {
  switch (kind) {
    case GpuActivityKind::kKernel:
      return "kernel";
    case GpuActivityKind::kMemcpy:
      return "memcpy";
    case GpuActivityKind::kMemset:
      return "memset";
  }
  return "";
}

// A kernel span: a record of its own, child of `parent` (an ended, timed span with ids), timed by
// the GPU's start and end of `a`, named by it, in `parent`'s group, on no thread. Null when out of
// memory.
SpanRecord* kernel_span(const SpanRecord& parent, const GpuActivity& a) noexcept {
  SpanRecord* k = nullptr;
  try {
    k = new SpanRecord();
    init_record(*k, parent.owner, parent.pipeline);
    k->trace_id = parent.trace_id;  // its span id is made at export
    k->parent_span_id = parent.span_id;
    k->trace_flags = parent.trace_flags;
    k->recording = true;
    k->unix_times = true;
    k->start_ticks = static_cast<std::uint64_t>(a.start_ns);
    k->end_ticks = static_cast<std::uint64_t>(std::max(a.end_ns, a.start_ns));
    SpanCold& c = k->use_cold();
    c.name.assign(a.name != nullptr ? a.name : kind_name(a.kind));
    c.group.assign(parent.group());
    put_span_attribute_slow(*k, "gpu.kind", std::string_view(kind_name(a.kind)));
    put_span_attribute_slow(*k, "gpu.device", static_cast<std::int64_t>(a.device));
    put_span_attribute_slow(*k, "gpu.stream", static_cast<std::int64_t>(a.stream));
    put_span_attribute_slow(*k, "gpu.correlation_id", static_cast<std::int64_t>(a.correlation));
    return k;
  } catch (...) {
    delete k;
    return nullptr;
  }
}

}  // namespace

void GpuTiming::attach_locked(SpanRecord& r, std::uint64_t span,
                              std::vector<SpanRecord*>& children) {
  const GpuTime t = span != 0 ? attribution_.take(span) : GpuTime{};
  ++counts_.spans_timed;
  if (!t.complete) {
    ++counts_.spans_incomplete;
    if (source_) source_->incomplete();
  }
  try {
    SpanCold& c = r.use_cold();
    const std::uint32_t n = t.activities > 0 ? 4 : 2;
    if (c.attributes.size() < c.attributes_used + n) c.attributes.resize(c.attributes_used + n);
    KeyValue* kv = c.attributes.data() + c.attributes_used;
    kv[0] = {"gpu.busy", t.busy_ns};
    kv[1] = {"gpu.kernels", static_cast<std::int64_t>(t.kernels)};
    if (n == 4) {
      kv[2] = {"gpu.start", t.start_ns};
      kv[3] = {"gpu.end", t.end_ns};
    }
    c.attributes_used += n;
  } catch (...) {
    // Out of memory: the span leaves without its GPU time.
  }
  counts_.kernel_spans_dropped += t.children_dropped;
  for (const GpuActivity& a : t.children) {
    SpanRecord* k = kernel_span(r, a);
    if (k == nullptr) {
      ++counts_.kernel_spans_dropped;
      continue;
    }
    try {
      children.push_back(k);
      ++counts_.kernel_spans;
    } catch (...) {
      recycle(k);
      ++counts_.kernel_spans_dropped;
    }
  }
}

void GpuTiming::sort(std::vector<SpanRecord*>& batch) noexcept {
  std::unique_lock lock(mu_);
  bool held = false;
  try {
    absorb_locked();
  } catch (...) {
  }
  const auto now = std::chrono::steady_clock::now();
  std::size_t kept = 0;
  std::vector<SpanRecord*> children;
  for (SpanRecord* r : batch) {
    if (timed(*r)) {
      const std::uint64_t span = r->span_id.is_valid() ? span_key(r->span_id) : 0;
      // No id: no launch asked for one, so none was attributed to it.
      if (span != 0 && !attribution_.settled(span)) {
        try {
          held_.push_back({r, span, now});
          held = true;
          continue;
        } catch (...) {
        }
      }
      attach_locked(*r, span, children);
    }
    batch[kept++] = r;
  }
  batch.resize(kept);
  try {
    batch.insert(batch.end(), children.begin(), children.end());
  } catch (...) {
    recycle_batch(children);  // out of memory: the kernel spans are lost
  }
  held_count_.store(held_.size(), std::memory_order_relaxed);
  lock.unlock();
  if (held) cv_.notify_all();
}

void GpuTiming::release(std::vector<SpanRecord*>& out, bool all,
                        std::chrono::steady_clock::time_point deadline) noexcept {
  std::unique_lock lock(mu_);
  if (held_.empty()) return;
  deadline = std::min(deadline, std::chrono::steady_clock::now() + wait_);
  try {
    absorb_locked();
    if (all) {
      // Flush the source until every waiting span's activity is in, or the deadline.
      auto unsettled = [&] {
        return std::any_of(held_.begin(), held_.end(),
                           [&](const Held& h) { return !attribution_.settled(h.span); });
      };
      while (unsettled() && std::chrono::steady_clock::now() < deadline) {
        lock.unlock();
        if (source_) source_->flush();
        lock.lock();
        absorb_locked();
        if (!unsettled()) break;
        cv_.wait_until(lock, std::min(deadline, std::chrono::steady_clock::now() +
                                                    std::chrono::milliseconds(5)));
        absorb_locked();
      }
    }
  } catch (...) {
  }
  const auto now = std::chrono::steady_clock::now();
  std::vector<SpanRecord*> children;
  for (auto it = held_.begin(); it != held_.end();) {
    if (!all && !due_locked(*it, now)) {
      ++it;
      continue;
    }
    try {
      out.push_back(it->record);
    } catch (...) {
      break;  // out of memory: the next release takes it
    }
    attach_locked(*it->record, it->span, children);
    it = held_.erase(it);
  }
  held_count_.store(held_.size(), std::memory_order_relaxed);
  try {
    out.insert(out.end(), children.begin(), children.end());
  } catch (...) {
    recycle_batch(children);  // out of memory: the kernel spans are lost
  }
}

GpuCounts GpuTiming::counts() const noexcept {
  std::lock_guard lock(mu_);
  GpuCounts c = counts_;
  c.activities_late = attribution_.late();
  c.activities_unattributed = attribution_.unattributed();
  c.activities_invalid = attribution_.invalid();
  c.launches_dropped += attribution_.launches_dropped();
  c.spans_waiting = held_.size();
  {
    // What was dropped since the exporter thread last took the queues in counts already.
    std::lock_guard in_lock(in_mu_);
    c.launches_dropped += in_launches_dropped_.load(std::memory_order_relaxed);
    c.activities_dropped += in_activities_dropped_;
  }
  return c;
}

void GpuTiming::poll_loop() noexcept {
  std::unique_lock lock(mu_);
  auto last_flush = std::chrono::steady_clock::now() - std::chrono::seconds(1);  // none yet
  while (!stopping_) {
    if (held_.empty()) {
      cv_.wait(lock, [&] { return stopping_ || !held_.empty(); });
      continue;
    }
    // At most one flush every 10 ms (activity delivered meanwhile wakes this loop too), and one
    // as soon as a synchronising call returned: its work's records are complete.
    if (flush_requested_.exchange(false, std::memory_order_relaxed) ||
        std::chrono::steady_clock::now() - last_flush >= std::chrono::milliseconds(10)) {
      lock.unlock();
      source_->flush();
      lock.lock();
      last_flush = std::chrono::steady_clock::now();
    }
    bool due = false;
    auto next = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    try {
      absorb_locked();
      const auto now = std::chrono::steady_clock::now();
      for (const Held& h : held_) {
        due = due || due_locked(h, now);
        next = std::min(next, h.since + wait_);
      }
    } catch (...) {
    }
    if (due) {
      lock.unlock();
      pipeline_.wake_exporter();
      lock.lock();
      next = std::chrono::steady_clock::now() + std::chrono::milliseconds(20);
    }
    if (!stopping_) cv_.wait_until(lock, next);
  }
}

}  // namespace nemo::lens::detail
