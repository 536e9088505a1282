// The flight recorder (see recorder.hpp).
#include "record/recorder.hpp"

#include <algorithm>
#include <atomic>
#include <mutex>
#include <utility>

#include "nemo/lens/groups.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/telemetry.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

// The recent top-level steps, and where the latest began.
struct StepWindow {
  SlowStepRule rule;
  std::int64_t last_start = INT64_MIN;
};

// Relaxed throughout: the settings are written at set-up and shutdown, and a span that sees them
// late is recorded or not by the old ones; the counters are statistics.
constinit std::atomic<bool> g_on{false};
constinit std::atomic<std::size_t> g_capacity{0};
constinit std::atomic<double> g_slow_factor{kDefaultSlowFactor};
constinit std::atomic<std::uint64_t> g_captured{0};
constinit std::atomic<std::uint64_t> g_captures{0};         // since the recorder started
constinit std::atomic<std::uint64_t> g_last_capture_id{0};  // never reset: ids stay unique
// Counts of rings given back (a set-up with another capacity, stop_flight_recorder()), so that the
// totals stay complete.
constinit std::atomic<std::uint64_t> g_retired_recorded{0};
constinit std::atomic<std::uint64_t> g_retired_overwritten{0};

std::mutex& steps_mu() {
  static auto* mu = new std::mutex();  // immortal: spans may end during exit
  return *mu;
}
StepWindow& steps() {
  static auto* w = new StepWindow();
  return *w;
}

// Per-ring counters, written under the ring's lock (relaxed load + store), read by anyone.
struct RingCounts {
  std::atomic<std::uint64_t> recorded{0};
  std::atomic<std::uint64_t> overwritten{0};
};

// A FlightRing and its counters, in one allocation.
struct CountedRing : FlightRing {
  explicit CountedRing(std::size_t capacity) : FlightRing(capacity) {}
  RingCounts counts;
};

CountedRing* counted(FlightRing* r) noexcept { return static_cast<CountedRing*>(r); }

void bump(std::atomic<std::uint64_t>& c) noexcept {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);  // under the lock
}

// Takes `ring`'s spans into `out`, oldest first, and empties it. Requires its state's lock.
void drain_ring(FlightRing& ring, std::vector<SpanRecord*>& out) {
  for (std::size_t i = 0; i < ring.size; ++i) {
    out.push_back(ring.slots[(ring.head + i) % ring.slots.size()]);
  }
  ring.head = ring.size = 0;
}

// Gives `ring` back, its counts kept in the totals. Its spans go to `out`. Requires its lock.
void retire_ring(ThreadState& t, std::vector<SpanRecord*>& out) {
  CountedRing* ring = counted(t.flight);
  if (ring == nullptr) return;
  drain_ring(*ring, out);
  g_retired_recorded.fetch_add(ring->counts.recorded.load(std::memory_order_relaxed),
                               std::memory_order_relaxed);
  g_retired_overwritten.fetch_add(ring->counts.overwritten.load(std::memory_order_relaxed),
                                  std::memory_order_relaxed);
  t.flight = nullptr;
  delete ring;
}

void recycle_all(std::vector<SpanRecord*>& records) noexcept {
  for (SpanRecord* r : records) recycle(r);
  records.clear();
}

// Puts `rec` into `ring` (of the recorder's capacity), counted; when the ring is full it
// overwrites the oldest, returned (null otherwise), and prefetches the record that the put
// kPrefetchAhead puts later overwrites: a ring's records do not fit in the core's cache, and the
// next start reuses the overwritten one. Requires the ring's owner's lock.
[[gnu::always_inline]] inline SpanRecord* put_in_ring(FlightRing& ring, SpanRecord* rec) noexcept {
  const std::size_t capacity = ring.slots.size();
  RingCounts& counts = counted(&ring)->counts;
  bump(counts.recorded);
  if (NEMO_LENS_UNLIKELY(ring.size != capacity)) {
    std::size_t tail = ring.head + ring.size;
    if (tail >= capacity) tail -= capacity;
    ring.slots[tail] = rec;
    ++ring.size;
    return nullptr;
  }
  SpanRecord* evicted = std::exchange(ring.slots[ring.head], rec);
  if (++ring.head == capacity) ring.head = 0;
  // Within the ring after one wrap: its capacity is at least kMinRecordSpans.
  static_assert(kPrefetchAhead <= kMinRecordSpans);
  std::size_t ahead = ring.head + kPrefetchAhead;
  if (ahead >= capacity) ahead -= capacity;
  prefetch_record(ring.slots[ahead]);
  bump(counts.overwritten);
  return evicted;
}

// Puts an ended flight span into its owner's ring, overwriting the oldest when it is full.
void push_flight(SpanRecord* rec) noexcept {
  ThreadState* owner = rec->owner;
  SpanRecord* evicted = nullptr;
  bool kept = false;
  std::vector<SpanRecord*> retired;  // a ring of another capacity's (a new set-up)
  {
    std::lock_guard lock(owner->mu);
    const std::size_t capacity = g_capacity.load(std::memory_order_relaxed);
    if (g_on.load(std::memory_order_relaxed) && capacity != 0) {
      try {
        if (owner->flight != nullptr && owner->flight->slots.size() != capacity) {
          retire_ring(*owner, retired);
        }
        if (owner->flight == nullptr) owner->flight = new CountedRing(capacity);
        evicted = put_in_ring(*owner->flight, rec);
        kept = true;
      } catch (...) {
        // Out of memory for the ring: this span is not recorded.
      }
    }
  }
  if (!kept) recycle(rec);
  if (evicted != nullptr) recycle(evicted);
  recycle_all(retired);
}

// push_flight()'s common case, with no call on its way: a span ended on its own thread (`current`),
// whose lock no guest shares, into a ring of the recorder's capacity. The span it overwrites, when
// the ring is full, goes cleaned to the thread's cache, which has room for it without growing.
// False, with nothing changed, otherwise.
[[gnu::always_inline]] inline bool try_push_own_flight(SpanRecord* rec,
                                                       ThreadState* current) noexcept {
  if (rec->owner != current || !current->mu.try_lock_as_owner_if_unshared()) return false;
  FlightRing* ring = current->flight;
  auto& cache = current->cache;
  const std::size_t capacity = g_capacity.load(std::memory_order_relaxed);
  if (NEMO_LENS_UNLIKELY(ring == nullptr || ring->slots.size() != capacity ||
                         !g_on.load(std::memory_order_relaxed) ||
                         cache.size() == cache.capacity())) {
    current->mu.unlock_as_owner();
    return false;
  }
  SpanRecord* evicted = put_in_ring(*ring, rec);
  current->mu.unlock_as_owner();
  if (evicted != nullptr) {  // nobody else sees it now: out of the ring, not yet in the cache
    clean_record(*evicted);
    if (cache.size() == cache.capacity()) __builtin_unreachable();  // checked above
    cache.push_back(evicted);  // within its capacity: no allocation
  }
  return true;
}

// What the triggers need of a watched span, read before it is queued or recorded.
struct WatchedEnd {
  std::int64_t start = 0;  // Unix ns
  std::int64_t end = 0;
  TraceId trace;
  bool error = false;
  bool step = false;       // of the step group
  bool top_level = false;  // a step with no other step span open on its thread
};

bool is_step_group(std::string_view group) noexcept { return group == SpanGroup::STEP; }

WatchedEnd watched(const SpanRecord& rec) noexcept {
  WatchedEnd w;
  const TickConverter clock = tick_converter();
  w.start = start_unix_nano(rec, clock);
  w.end = end_unix_nano(rec, clock);
  w.trace = rec.trace_id;
  w.error = rec.status_code == StatusCode::kError;
  w.step = is_step_group(rec.group());
  if (w.step) {
    std::lock_guard lock(rec.owner->mu);
    w.top_level = std::none_of(rec.owner->stack.begin(), rec.owner->stack.end(),
                               [](const SpanRecord* r) { return is_step_group(r->group()); });
  }
  return w;
}

void run_triggers(const WatchedEnd& w) noexcept {
  if (!g_on.load(std::memory_order_relaxed)) return;
  bool slow = false;
  std::int64_t last_step_start = INT64_MIN;
  if (w.step && w.top_level) {
    std::lock_guard lock(steps_mu());
    StepWindow& s = steps();
    slow = s.rule.add(w.end - w.start, g_slow_factor.load(std::memory_order_relaxed));
    s.last_start = w.start;
  } else if (!w.step) {
    std::lock_guard lock(steps_mu());
    last_step_start = steps().last_start;
  }
  if (!w.trace.is_valid()) return;  // no span was ever started under it: nothing inside it
  CaptureWindow window;
  window.to_unix_nano = w.end;
  window.trace = w.trace;
  if (w.error) {
    // A step: its spans. A job: what it recorded since its latest step began.
    window.from_unix_nano = w.step ? w.start : std::max(w.start, last_step_start);
    capture_window(kCaptureError, window);
  } else if (slow) {
    window.from_unix_nano = w.start;
    capture_window(kCaptureSlowStep, window);
  }
}

bool in_window(const SpanRecord& r, const CaptureWindow& w, bool ended) noexcept {
  if (w.trace.is_valid() && !(r.trace_id == w.trace)) return false;
  const TickConverter clock = tick_converter();
  if (start_unix_nano(r, clock) < w.from_unix_nano) return false;
  return !ended || end_unix_nano(r, clock) <= w.to_unix_nano;
}

}  // namespace

void start_flight_recorder(const RecordSettings& settings) {
  // The figures count from here (a process may set up again; stop_flight_recorder() gave the
  // previous rings back).
  for (auto* c : {&g_captured, &g_captures, &g_retired_recorded, &g_retired_overwritten}) {
    c->store(0, std::memory_order_relaxed);
  }
  if (!settings.on()) return;
  g_capacity.store(settings.spans, std::memory_order_relaxed);
  g_slow_factor.store(settings.slow_factor, std::memory_order_relaxed);
  {
    std::lock_guard lock(steps_mu());
    steps() = StepWindow{};
  }
  g_on.store(true, std::memory_order_relaxed);
  set_recorded_span_groups(settings.groups);
}

void stop_flight_recorder() noexcept {
  if (!g_on.exchange(false, std::memory_order_relaxed)) return;
  try {
    set_recorded_span_groups({});
  } catch (...) {
    // Out of memory publishing the empty set: the flags stay; g_on being off, nothing is recorded.
  }
  std::vector<SpanRecord*> records;
  try {
    visit_thread_states([&](ThreadState& t) {
      std::lock_guard lock(t.mu);
      retire_ring(t, records);
    });
  } catch (...) {
  }
  recycle_batch(records);
}

bool flight_recorder_on() noexcept { return g_on.load(std::memory_order_relaxed); }

namespace {
// end_span_with_mode() for every case try_push_own_flight() does not take. Apart, so that the
// common case saves no registers.
[[gnu::noinline]] void end_span_with_mode_general(SpanRecord* rec, ThreadState* current) noexcept {
  const std::uint8_t mode = rec->mode;
  WatchedEnd w;
  if ((mode & kModeWatch) != 0) w = watched(*rec);  // before the record is handed on
  if ((mode & kModeFlight) != 0) {
    push_flight(rec);
  } else {
    rec->pipeline->enqueue(rec, current);
  }
  if ((mode & kModeWatch) != 0) run_triggers(w);
}
}  // namespace

void end_span_with_mode(SpanRecord* rec, ThreadState* current) noexcept {
  if (NEMO_LENS_LIKELY(rec->mode == kModeFlight && try_push_own_flight(rec, current))) return;
  return end_span_with_mode_general(rec, current);
}

Capture capture_window(std::string_view reason, const CaptureWindow& window) noexcept {
  Pipeline* p = g_active_pipeline.load(std::memory_order_acquire);
  if (!g_on.load(std::memory_order_relaxed) || p == nullptr) return {};
  const std::int64_t id =
      static_cast<std::int64_t>(g_last_capture_id.fetch_add(1, std::memory_order_relaxed) + 1);
  g_captures.fetch_add(1, std::memory_order_relaxed);
  std::vector<SpanRecord*> taken;
  try {
    const std::uint64_t now = now_ticks();
    visit_thread_states([&](ThreadState& t) {
      std::lock_guard lock(t.mu);
      if (FlightRing* ring = t.flight) {
        // Keep what is not taken, in order.
        std::size_t kept = 0;
        const std::size_t n = ring->slots.size();
        for (std::size_t i = 0; i < ring->size; ++i) {
          SpanRecord* r = ring->slots[(ring->head + i) % n];
          if (r->pipeline == p && in_window(*r, window, true)) {
            taken.push_back(r);
          } else {
            ring->slots[(ring->head + kept++) % n] = r;
          }
        }
        ring->size = kept;
      }
      if (!window.include_open) return;
      for (SpanRecord* r : t.stack) {  // open flight spans: truncated copies, as at shutdown
        if ((r->mode & kModeFlight) == 0 || !r->recording || r->orphaned || r->pipeline != p ||
            !in_window(*r, window, false)) {
          continue;
        }
        SpanRecord* copy = truncated_copy(*r, now);
        try {
          taken.push_back(copy);
        } catch (...) {
          delete copy;
          throw;
        }
        r->orphaned = true;  // its end is not recorded again
      }
    });
  } catch (...) {
    // Out of memory: what was taken so far is captured.
  }
  for (SpanRecord* r : taken) {
    try {
      put_span_attribute(*r, semconv::kLensCaptureReason, reason);
      put_span_attribute(*r, semconv::kLensCaptureId, id);
    } catch (...) {
      // Out of memory for the attributes: the span goes without them.
    }
  }
  const std::uint64_t n = taken.size();
  p->enqueue_captured(taken);
  g_captured.fetch_add(n, std::memory_order_relaxed);
  return {n, id};
}

FlightStats flight_stats() noexcept {
  FlightStats s;
  s.on = g_on.load(std::memory_order_relaxed);
  s.recorded = g_retired_recorded.load(std::memory_order_relaxed);
  s.overwritten = g_retired_overwritten.load(std::memory_order_relaxed);
  s.captured = g_captured.load(std::memory_order_relaxed);
  s.captures = g_captures.load(std::memory_order_relaxed);
  s.ring_spans = g_capacity.load(std::memory_order_relaxed);
  try {
    visit_thread_states([&](ThreadState& t) {
      std::lock_guard lock(t.mu);
      CountedRing* ring = counted(t.flight);
      if (ring == nullptr) return;
      ++s.rings;
      s.held += ring->size;
      s.recorded += ring->counts.recorded.load(std::memory_order_relaxed);
      s.overwritten += ring->counts.overwritten.load(std::memory_order_relaxed);
      s.bytes += sizeof(CountedRing) + ring->slots.size() * sizeof(SpanRecord*);
    });
  } catch (...) {
  }
  s.bytes += s.held * sizeof(SpanRecord);
  return s;
}

}  // namespace nemo::lens::detail

namespace nemo::lens {

std::uint64_t capture(std::string_view reason) noexcept {
  detail::CaptureWindow everything;
  everything.include_open = true;
  return detail::capture_window(reason.empty() ? detail::kCaptureManual : reason, everything).spans;
}

}  // namespace nemo::lens
