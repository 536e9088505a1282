// Per-thread state: acquired on a thread's first span, returned to a reuse pool when the thread
// exits (once no span it started is still open), never freed.
#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>

#include "record/recorder.hpp"
#include "tracing/engine.hpp"
#include "tracing/exception_info.hpp"

namespace nemo::lens::detail {

namespace {

constexpr std::size_t kMaxCachedRecords = 1024;

std::mutex& registry_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
std::vector<ThreadState*>& registry() {
  static auto* v = new std::vector<ThreadState*>();
  return *v;
}

// The global free pool: a stack of batches. The exporter pushes one batch per export, threads
// take everything at once, so there is no ABA problem.
struct FreeBatch {
  std::vector<SpanRecord*> records;
  FreeBatch* next = nullptr;
};
std::atomic<FreeBatch*> g_free_batches{nullptr};

// Requires s.mu. Whether a span that opened an NVTX range on s's thread is still open.
bool has_open_nvtx_range(const ThreadState& s) noexcept {
  for (std::uint32_t i = 0; i < s.nvtx.depth; ++i) {
    if (!s.nvtx.closed[i]) return true;
  }
  return false;
}

ThreadState* acquire_state() noexcept {
  try {
    std::lock_guard lock(registry_mu());
    for (ThreadState* s : registry()) {
      if (s->in_use) continue;
      std::lock_guard state_lock(s->mu);
      // Spans it started are still open elsewhere (handles moved to another thread).
      if (!s->stack.empty() || s->open.depth.load(std::memory_order_relaxed) != 0 ||
          s->open.untracked.load(std::memory_order_relaxed) != 0 || has_open_nvtx_range(*s)) {
        continue;
      }
      s->nvtx.depth = 0;  // ranges of the exited thread, all of whose spans have ended
      s->mu.start_over_for_new_owner();  // guests of the old thread do not make the new one fence
      s->in_use = true;
      s->tid = static_cast<std::int64_t>(::syscall(SYS_gettid));
      return s;
    }
    auto* s = new ThreadState();
    registry().reserve(registry().size() + 1);
    registry().push_back(s);
    // Linked for for_each_thread_state() (one writer: the registry mutex is held).
    s->registry_next = g_newest_thread_state.load(std::memory_order_relaxed);
    g_newest_thread_state.store(s, std::memory_order_release);
    s->in_use = true;
    s->tid = static_cast<std::int64_t>(::syscall(SYS_gettid));
    return s;
  } catch (...) {
    return nullptr;
  }
}

void release_state(ThreadState* s) noexcept {
  recycle_batch(s->cache);
  std::lock_guard lock(registry_mu());
  s->in_use = false;
}

// The fast path reads a plain pointer in the initial-exec TLS model (a %fs-relative load, no
// __tls_get_addr call and no init guard); a separate holder, created once per thread, returns the
// state at thread exit.
[[gnu::tls_model("initial-exec")]] thread_local bool t_exited = false;  // no spans after exit

struct ThreadStateHolder {
  ThreadState* state = nullptr;
  ~ThreadStateHolder() {
    t_state = nullptr;
    t_exited = true;
    if (state != nullptr) release_state(state);
  }
};

}  // namespace

std::atomic<ThreadState*> g_newest_thread_state{nullptr};

[[gnu::tls_model("initial-exec")]] constinit thread_local ThreadState* t_state = nullptr;

ThreadState* acquire_for_this_thread() noexcept {
  if (t_exited) return nullptr;  // a destructor running after this thread's holder is gone
  thread_local ThreadStateHolder holder;
  ThreadState* s = acquire_state();
  if (s != nullptr) s->eh = t_eh_globals != nullptr ? t_eh_globals : lookup_eh_globals();
  holder.state = s;
  t_state = s;
  return s;
}

void recycle(SpanRecord* rec) noexcept {
  ThreadState* s = this_thread_state();
  if (s != nullptr && s->cache.size() < kMaxCachedRecords) {
    clean_record(*rec);
    try {
      s->cache.push_back(rec);
      return;
    } catch (...) {
    }
  }
  delete rec;
}

void recycle_batch(std::vector<SpanRecord*>& records, bool cleaned) noexcept {
  if (records.empty()) return;
  if (!cleaned) {
    for (SpanRecord* r : records) clean_record(*r);
  }
  FreeBatch* batch = nullptr;
  try {
    batch = new FreeBatch{std::move(records), nullptr};
  } catch (...) {
    for (SpanRecord* r : records) delete r;
    records.clear();
    return;
  }
  records.clear();
  FreeBatch* top = g_free_batches.load(std::memory_order_relaxed);
  do {
    batch->next = top;
    // Release publishes the records' contents to the thread that takes them.
  } while (!g_free_batches.compare_exchange_weak(top, batch, std::memory_order_release,
                                                 std::memory_order_relaxed));
}

bool this_thread_lock_biased() noexcept {
  const ThreadState* s = this_thread_state();
  return s != nullptr && s->mu.biased();
}

void publish_gpu_chain_locked(ThreadState& s) noexcept {
  GpuChainSnapshot& g = s.gpu_chain;
  // A seqlock without fences (which TSan does not model): writers hold s.mu and store the fields
  // with release after making the count odd, so a reader that loads (acquire) any new field then
  // sees the odd or a later count and retries; the even count, last, publishes the whole.
  constexpr auto kPublish = std::memory_order_release;
  const std::uint32_t seq = g.seq.load(std::memory_order_relaxed);
  g.seq.store(seq + 1, std::memory_order_relaxed);
  std::uint8_t n = 0;
  for (auto it = s.stack.rbegin(); it != s.stack.rend() && n < GpuChainSnapshot::kMaxSpans; ++it) {
    SpanRecord& r = **it;
    if ((r.mode & kModeGpu) == 0 || !r.recording || r.orphaned) continue;
    ensure_ids(r, t_ids);
    if (n == 0) {
      g.kernel_spans.store((r.mode & kModeGpuKernels) != 0, kPublish);
      g.pipeline.store(r.pipeline, kPublish);
      g.start_unix_nano.store(start_unix_nano(r, tick_converter()), kPublish);
    }
    g.spans[n++].store(span_key(r.span_id), kPublish);
  }
  g.size.store(n, kPublish);
  g.seq.store(seq + 2, std::memory_order_release);
}

bool read_gpu_chain(const ThreadState& s, GpuChainCopy& out) noexcept {
  const GpuChainSnapshot& g = s.gpu_chain;
  constexpr auto kRead = std::memory_order_acquire;  // keeps the count's second load after them
  for (int attempt = 0; attempt < 16; ++attempt) {
    const std::uint32_t before = g.seq.load(std::memory_order_acquire);
    if ((before & 1) != 0) continue;
    out.size = g.size.load(kRead);
    out.kernel_spans = g.kernel_spans.load(kRead);
    out.pipeline = g.pipeline.load(kRead);
    out.start_unix_nano = g.start_unix_nano.load(kRead);
    for (std::uint8_t i = 0; i < out.size && i < GpuChainSnapshot::kMaxSpans; ++i) {
      out.spans[i] = g.spans[i].load(kRead);
    }
    if (g.seq.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

bool read_this_thread_gpu_chain(GpuChainCopy& out) noexcept {
  const ThreadState* s = this_thread_state();
  return s != nullptr && read_gpu_chain(*s, out);
}

SpanRecord* refill_and_take_record(ThreadState& s) noexcept {
  // Take every free batch at once (one atomic exchange per refill, not per span); the records
  // stay with this thread until it exits. Acquire pairs with recycle_batch()'s release.
  FreeBatch* batch = g_free_batches.exchange(nullptr, std::memory_order_acquire);
  while (batch != nullptr) {
    FreeBatch* next = batch->next;
    try {  // inserting (not swapping) keeps the cache's capacity: no allocation once warm
      s.cache.insert(s.cache.end(), batch->records.begin(), batch->records.end());
    } catch (...) {
      for (SpanRecord* r : batch->records) delete r;
    }
    delete batch;
    batch = next;
  }
  if (s.cache.empty()) {
    try {
      auto* rec = new SpanRecord();
      clean_record(*rec);
      return rec;
    } catch (...) {
      return nullptr;
    }
  }
  SpanRecord* rec = s.cache.back();
  s.cache.pop_back();
  // The next starts' records: prefetch_record_ahead() asks for each one further back as spans
  // start.
  const std::size_t ahead = std::min(s.cache.size(), kPrefetchAhead);
  for (std::size_t i = 1; i <= ahead; ++i) prefetch_record(s.cache.end()[-std::ptrdiff_t(i)]);
  return rec;
}

void lock_all_thread_states() noexcept {
  registry_mu().lock();
  for (ThreadState* s : registry()) s->mu.lock();
}

void unlock_all_thread_states() noexcept {
  for (ThreadState* s : registry()) s->mu.unlock();
  registry_mu().unlock();
}

void visit_thread_states(const std::function<void(ThreadState&)>& f) {
  std::lock_guard lock(registry_mu());
  for (ThreadState* s : registry()) f(*s);
}

void reset_thread_states_in_child() noexcept {
  // Called in a forked child with every lock held by the parent's prepare handler. Spans open in
  // the parent are the parent's to export: the child keeps the calling thread's stack for context
  // but never exports those records; other threads do not exist here.
  ThreadState* self = t_state;
  const bool biased = register_owner_locks();  // a new process: register it for membarrier
  for (ThreadState* s : registry()) {
    for (SpanRecord* r : s->stack) r->orphaned = true;
    publish_gpu_chain_locked(*s);  // empty: every span is orphaned
    // The GPU launches queued for the parent's exporter, whose consumer may have been taking
    // them (its lock held) when the process forked: leaked, a new queue made at the next launch.
    s->gpu.store(nullptr, std::memory_order_relaxed);
    // The flight recorder's spans are the parent's to capture: its rings are emptied here, their
    // records leaked rather than reused (as the other threads' caches are).
    if (s->flight != nullptr) s->flight->head = s->flight->size = 0;
    if (s == self) {
      s->tid = static_cast<std::int64_t>(::syscall(SYS_gettid));  // the child's own thread id
    } else {
      s->stack.clear();
      s->cache.clear();  // their records may be mid-use: leak them rather than guess
      s->open.depth.store(0, std::memory_order_relaxed);  // single-threaded here
      s->open.untracked.store(0, std::memory_order_relaxed);
      s->open.sequence.store(0, std::memory_order_relaxed);
      s->nvtx.depth = 0;  // those threads' ranges do not exist in the child
      s->in_use = false;
    }
    s->mu.reset_after_fork(biased);
  }
  // registry_mu() is held by this thread (the prepare handler took it); release it normally.
  registry_mu().unlock();
}

}  // namespace nemo::lens::detail
