// The tracing engine's internal state: span records, per-thread state, the pipeline. Internal.
//
// Ownership: a record is, at any time, in exactly one of: a thread's free cache or the global free
// pool; open (on the current-span stack of the ThreadState that started it, guarded by that
// state's lock); queued (on the ring of the thread that ended it, or the shared queue); or being
// exported. ThreadStates and Pipelines are never freed, so a
// pointer to one stays valid for the life of the process (a forked child abandons the parent's).
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <semaphore>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "export/export_ledger.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/exporter.hpp"
#include "nemo/lens/telemetry.hpp"
#include "strings.hpp"
#include "tracing/cache_lines.hpp"
#include "tracing/clock.hpp"
#include "tracing/ids.hpp"
#include "tracing/mpmc_queue.hpp"
#include "tracing/open_spans.hpp"
#include "tracing/owner_lock.hpp"
#include "tracing/record_exporter.hpp"
#include "tracing/spsc_ring.hpp"

namespace nemo::lens::detail {

struct Pipeline;
struct ThreadState;
class GpuTiming;
struct SpanRing;
struct EhGlobals;
struct FlightRing;
class GpuInputs;

/// ThreadState::mu: an OwnerLock whose owner is the thread the state belongs to. lock(), unlock()
/// and try_lock() take the owner's side on that thread and the guests' side on any other; code
/// that knows it runs on the owner calls the owner's side directly.
class StateLock : public OwnerLock {
 public:
  explicit StateLock(const ThreadState* state) noexcept : state_(state) {}
  void lock() noexcept;
  void unlock() noexcept;
  bool try_lock() noexcept;

 private:
  bool owned_here() const noexcept;  // the calling thread's state is state_
  const ThreadState* const state_;
};

/// A span attribute kept in its record as plain bytes: a key of at most kKeyCapacity bytes and a
/// bool, an int, a double or a string of at most kStringCapacity bytes. Setting one costs a few
/// stores and no allocation; the exporter thread turns it into a KeyValue.
struct InlineAttribute {
  static constexpr std::size_t kKeyCapacity = 21, kStringCapacity = 16;
  enum Type : std::uint8_t { kBool, kInt, kDouble, kString };
  std::uint8_t key_size;
  std::uint8_t type;
  std::uint8_t string_size;
  char key[kKeyCapacity];
  union {
    bool b;
    std::int64_t i;
    double d;
    char s[kStringCapacity];
  };
  std::string_view key_view() const noexcept { return {key, key_size}; }
};
static_assert(sizeof(InlineAttribute) == 40);
/// The bytes of a slot before its value: key_size, type, string_size and the key.
inline constexpr std::size_t kInlineHeaderSize = offsetof(InlineAttribute, b);
static_assert(kInlineHeaderSize == 24);

/// What a string attribute under a redacted key says instead of its value.
inline constexpr std::string_view kRedactedValue = "[REDACTED]";

/// What few spans have: allocated the first time a span of its record needs it, then kept with
/// the record (its storage reused).
struct SpanCold {
  std::string name, group;  // when the record has no site
  std::string trace_state;
  /// attributes[0, attributes_used): the span's attributes after its inline ones (the first that
  /// did not fit inline, and every one set after it); later elements are storage for reuse.
  std::vector<KeyValue> attributes;
  std::uint32_t attributes_used = 0;
  std::uint32_t dropped_events_count = 0;
  std::uint32_t dropped_links_count = 0;
  std::vector<SpanEvent> events;
  std::vector<SpanLink> links;
  std::string status_message;
};

/// One span, open or queued: a compact record that starting and ending a span only store into
/// (its first two cache lines and the attribute slots in use). Exporters see it as SpanData,
/// filled in on the exporter thread (materialize()).
struct alignas(64) SpanRecord {
  static constexpr std::uint32_t kInlineAttributes = 4;

  /// Zero (invalid) until first needed: ensure_ids() makes them.
  TraceId trace_id;
  SpanId span_id;
  SpanId parent_span_id;          // invalid for a root
  std::uint64_t start_ticks = 0;  // now_ticks() at start and end
  std::uint64_t end_ticks = 0;
  /// The site of a LENS_SPAN (or an interned name): its name and group. Null: cold->name and
  /// cold->group hold them.
  const SpanSite* site = nullptr;
  ThreadState* owner = nullptr;  // whose lock guards the record while it is open

  Pipeline* pipeline = nullptr;  // the pipeline that started it; null for an attached context
  /// Meaningful only while cold_used; kept across reuse otherwise.
  SpanCold* cold = nullptr;
  std::int64_t thread_id = 0;
  // From here to inline_room: what init_record() sets, in one run of stores.
  /// The NVTX range opened on the owner's thread for this span (nvtx_open()); 0: none.
  std::uint32_t nvtx = 0;
  // nvtx and the next four fields: one word, which the common end tests at once (end_word()).
  bool recording = false;  // false: sampled out; only the context is kept
  /// Not exported when it ends: shutdown exported a copy, or fork inherited it.
  bool orphaned = false;
  /// Its group's mode bits when it started (kModeFlight: recorded for the flight recorder, not
  /// exported; kModeWatch: its end runs the recorder's triggers); 0 for nearly every span.
  std::uint8_t mode = 0;
  /// start_ticks and end_ticks hold Unix nanoseconds, not TSC ticks: the span was given a time
  /// of its own (SpanStartOptions::start_time_unix_nano, Span::end(time)), or it started while
  /// the clock did not use the TSC. Read them through start_unix_nano() and end_unix_nano().
  /// False: both are TSC ticks, so that the common end may read the TSC with no further check.
  bool unix_times = false;
  std::uint32_t dropped_attributes_count = 0;
  std::uint8_t trace_flags = 0;
  bool is_remote = false;  // an attached context from another process
  bool parent_is_remote = false;
  SpanKind kind = SpanKind::kInternal;
  StatusCode status_code = StatusCode::kUnset;
  bool exception_recorded = false;
  bool status_final = false;  // an OK status was set
  bool truncated = false;     // a copy ended by shutdown
  /// Started with SpanStartOptions::current = false: never the parent of a span started on its
  /// thread (OpenTelemetry's tracer.start_span); attached contexts and other spans are.
  bool not_current = false;
  std::uint8_t inline_used = 0;  // attributes[0, inline_used) are the span's first attributes
  /// New attributes go inline while inline_used < inline_room: the slots the count limit allows,
  /// until an attribute goes to the cold list (then every later one does too, to keep the order).
  std::uint8_t inline_room = 0;
  bool cold_used = false;  // `cold` holds something of this span
  InlineAttribute attributes[kInlineAttributes];

  SpanRecord() = default;
  SpanRecord(const SpanRecord&) = delete;
  SpanRecord& operator=(const SpanRecord&) = delete;
  ~SpanRecord() { delete cold; }

  /// The cold part, allocated when missing and marked in use. May throw std::bad_alloc.
  SpanCold& use_cold();
  /// The cold part if this span uses one, else null.
  const SpanCold* cold_part() const noexcept { return cold_used ? cold : nullptr; }
  std::string_view name() const noexcept {
    return site != nullptr ? site->name : cold_used ? std::string_view(cold->name) : "";
  }
  std::string_view group() const noexcept {
    return site != nullptr ? site->gate.group : cold_used ? std::string_view(cold->group) : "";
  }
  std::string_view trace_state() const noexcept {
    return cold_used ? std::string_view(cold->trace_state) : std::string_view();
  }
  /// The span's context, its ids made if it had none (may throw std::bad_alloc for a long trace
  /// state). Requires the owner's lock while the span is open.
  SpanContext context();
};

static_assert(offsetof(SpanRecord, nvtx) % 8 == 0 && offsetof(SpanRecord, recording) ==
                                                     offsetof(SpanRecord, nvtx) + 4);
static_assert(offsetof(SpanRecord, orphaned) == offsetof(SpanRecord, nvtx) + 5 &&
              offsetof(SpanRecord, mode) == offsetof(SpanRecord, nvtx) + 6 &&
              offsetof(SpanRecord, unix_times) == offsetof(SpanRecord, nvtx) + 7);

/// What the common end of a span needs of `r` in one word: its nvtx, recording, orphaned, mode
/// and unix_times fields as they lie in memory. end_word_is_common() tests it.
inline std::uint64_t end_word(const SpanRecord& r) noexcept {
  std::uint64_t w;
  // The five fields, adjacent (asserted above), read as the record's bytes.
  std::memcpy(&w, reinterpret_cast<const unsigned char*>(&r) + offsetof(SpanRecord, nvtx),
              sizeof w);
  return w;
}

/// Whether an end_word() is that of a span the common end takes: no NVTX range, recording, not
/// orphaned, not GPU-timed (its end publishes the thread's GPU chain), times in TSC ticks.
inline bool end_word_is_common(std::uint64_t w) noexcept {
  // In memory order: nvtx's four bytes, recording, orphaned, mode (only kModeGpu tested),
  // unix_times.
  using Bytes = std::array<std::uint8_t, 8>;
  constexpr auto kMask = std::bit_cast<std::uint64_t>(Bytes{0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                                                            kModeGpu, 0xff});
  constexpr auto kCommon = std::bit_cast<std::uint64_t>(Bytes{0, 0, 0, 0, 1, 0, 0, 0});
  return (w & kMask) == kCommon;
}

/// A span's trace and span id.
struct RecordIds {
  TraceId trace_id;
  SpanId span_id;
};

/// New ids, made with `ids`, for `r`, which has no span id yet: a new trace id for a root, else
/// the one it was given at its start (its parent's).
inline RecordIds new_ids(const SpanRecord& r, IdGenerator& ids) noexcept {
  const TraceId trace_id = r.trace_id.is_valid() ? r.trace_id : ids.trace_id();
  return {trace_id, ids.span_id()};
}

/// Makes `r`'s ids if it has none yet, with `ids`, the calling thread's generator: a span's ids
/// are made when a child starts under it, its context is read (context(), a dump, shutdown's
/// copy) or it is exported (export_ids() for an exporter of records), not at its start. Requires
/// the owner's lock while the span is open, or sole access once it ended.
inline void ensure_ids(SpanRecord& r, IdGenerator& ids) noexcept {
  if (NEMO_LENS_LIKELY(r.span_id.is_valid())) return;
  const RecordIds made = new_ids(r, ids);
  r.trace_id = made.trace_id;
  r.span_id = made.span_id;
}

/// export_ids() for a span that has no ids yet: new_ids() with the calling thread's generator,
/// not stored. Exported from the library: the OTLP encoder is
/// also built apart from it (tests, benchmarks).
NEMO_LENS_API RecordIds make_export_ids(const SpanRecord& r) noexcept;

/// export_ids() of every record of `records` at once, into ids[i] (nothing for a null record): a
/// batch's ids in one call, the generator kept in registers across it rather than loaded and
/// stored for each id. Requires sole access (the exporter thread). Exported from the library, as
/// make_export_ids() is.
NEMO_LENS_API void export_ids(std::span<const SpanRecord* const> records, RecordIds* ids) noexcept;

/// The ids an ended span is exported with: its own, or, when nothing made them yet, new ones
/// (make_export_ids()). An exporter reads an ended span's record once and writes nothing into
/// it, so that the record's lines stay shared with the core that will reuse the record rather
/// than move to the exporter's. Requires sole access (the exporter thread).
inline RecordIds export_ids(const SpanRecord& r) noexcept {
  if (NEMO_LENS_LIKELY(r.span_id.is_valid())) return {r.trace_id, r.span_id};
  return make_export_ids(r);
}

/// Clears the cold part of a record for reuse (keeping its storage); init_record() does when it
/// reuses the record.
void reset_record(SpanRecord& r) noexcept;

/// A copy of `r` with its own cold part. May throw std::bad_alloc.
SpanRecord* copy_record(const SpanRecord& r);
/// A copy of `r`, open, ended now (`now`: now_ticks()) and marked truncated (nemo.span.truncated,
/// as attribute and event), as shutdown and the flight recorder export an open span; `r`'s ids
/// are made first, so that the copy and the open span (a parent still) agree. Requires `r`'s
/// owner's lock. May throw std::bad_alloc.
SpanRecord* truncated_copy(SpanRecord& r, std::uint64_t now);

/// The span as exporters see it, its times converted by `clock`, written into `out` (whose
/// storage is reused). May throw std::bad_alloc. Exported from the library for the encoders of
/// records, which are also built apart from it (tests, benchmarks).
NEMO_LENS_API void materialize(const SpanRecord& r, const TickConverter& clock, SpanData& out);

/// The span's attributes, inline ones first, into `out`. May throw std::bad_alloc.
void copy_attributes(const SpanRecord& r, std::vector<KeyValue>& out);

/// Stores `value` in `slot` when it fits (strings cut to `len_limit`, or "[REDACTED]" when
/// `redact`); false, the slot untouched, when it does not.
[[gnu::always_inline]] inline bool store_inline(InlineAttribute& slot, const AttributeArg& value,
                                                std::size_t len_limit, bool redact) noexcept {
  using T = AttributeArg::Type;
  switch (value.type()) {
    case T::kBool:
      slot.type = InlineAttribute::kBool;
      slot.b = value.as_bool();
      return true;
    case T::kInt:
      slot.type = InlineAttribute::kInt;
      slot.i = value.as_int();
      return true;
    case T::kDouble:
      slot.type = InlineAttribute::kDouble;
      slot.d = value.as_double();
      return true;
    case T::kString: {
      const std::string_view v = redact ? kRedactedValue : value.as_string();
      const std::size_t n = cut_length(v, len_limit);
      if (n > InlineAttribute::kStringCapacity) return false;
      slot.type = InlineAttribute::kString;
      slot.string_size = static_cast<std::uint8_t>(n);
      copy_small(slot.s, v.data(), n);
      return true;
    }
    default:
      return false;
  }
}

/// put_span_attribute() for every case: replacing, spilling to the cold list, limits.
void put_span_attribute_slow(SpanRecord& r, std::string_view key, const AttributeArg& value);

/// Attribute and event limits (OTEL_SPAN_*_LIMIT, OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT).
struct SpanLimits {
  std::uint32_t attribute_count = 128;
  std::uint32_t event_count = 128;
  std::uint32_t link_count = 128;
  std::uint32_t event_attribute_count = 128;
  std::uint32_t link_attribute_count = 128;
  std::size_t attribute_value_length = SIZE_MAX;  // no limit
};

/// OTEL_TRACES_SAMPLER, composed with the rank-aware sampler.
struct SamplerConfig {
  enum class Root : std::uint8_t { kAlwaysOn, kAlwaysOff, kRatio };
  Root root = Root::kAlwaysOn;
  bool parent_based = true;
  std::uint64_t ratio_threshold = 0;  // kRatio: sampled when the id's low 64 bits are below it
  bool ratio_one = false;             // kRatio with ratio >= 1
  /// False when no span of this process is ever recorded (rank sampled out, always_off).
  bool records_anything = true;
};

/// The NVTX push ranges a thread opened for lens spans and has not popped yet (nvtx/nvtx.cpp).
/// Spans opened beyond kCapacity ranges get none.
struct NvtxStack {
  static constexpr std::uint32_t kCapacity = 64;
  std::uint32_t depth = 0;      // ranges pushed and not popped
  bool closed[kCapacity] = {};  // closed[i]: the span of range i ended; popped once on top
};

/// One entry of a thread's cache of interned sites by the names' hash (find_cached_pair(),
/// cache_site()).
struct SiteCacheEntry {
  std::uint64_t hash = 0;
  const SpanSite* site = nullptr;
};
/// One entry of the same cache by where the caller keeps the names: a caller that passes the same
/// strings again (a literal, a string it keeps) skips the hash. The names are still compared.
/// A pair whose group was off has no site (pairs that start nothing are not interned): its entry
/// keeps the group's interned name and index instead, so that the next start with the same
/// strings compares the group and reads its flag, and hashes nothing.
struct SiteAddressEntry {
  const char* group = nullptr;
  const char* name = nullptr;
  const SpanSite* site = nullptr;
  std::string_view off_group;     // site null: the group's interned name
  std::uint32_t group_index = 0;  // site null: its index in the group flags
};

/// A span's key in the GPU timing's bookkeeping: its span id's first 8 bytes.
inline std::uint64_t span_key(const SpanId& id) noexcept {
  std::uint64_t k = 0;
  std::memcpy(&k, id.bytes.data(), sizeof(k));
  return k;
}

/// The chain of a thread's open GPU-timed spans (mode kModeGpu), innermost first, as span keys
/// (span_key()): what a launch from a thread with no such
/// span of its own counts for (gpu/gpu_timing.cpp). Written under the thread's lock whenever such
/// a span starts or leaves the thread's stack (publish_gpu_chain_locked()); read by any thread
/// without the lock (read_gpu_chain()), so that launches from other threads, one per kernel of a
/// backward pass, never take the lock as guests (owner_lock.hpp).
struct alignas(64) GpuChainSnapshot {
  static constexpr std::size_t kMaxSpans = 8;
  std::atomic<std::uint32_t> seq{0};  // odd while being written
  std::atomic<std::uint8_t> size{0};
  std::atomic<bool> kernel_spans{false};        // the innermost's group has kModeGpuKernels
  std::atomic<const Pipeline*> pipeline{nullptr};  // the innermost's
  std::atomic<std::int64_t> start_unix_nano{0};    // the innermost's start
  std::atomic<std::uint64_t> spans[kMaxSpans] = {};
};

/// A consistent copy of a GpuChainSnapshot (read_gpu_chain()).
struct GpuChainCopy {
  std::uint8_t size = 0;
  bool kernel_spans = false;
  const Pipeline* pipeline = nullptr;
  std::int64_t start_unix_nano = 0;
  std::uint64_t spans[GpuChainSnapshot::kMaxSpans] = {};
};

/// A thread's open span records, oldest first: a vector with a null element below the first, so
/// that top() is the newest or null without a test of the size, and a span's end compares it with
/// its record at once. Iterates over the records only.
class RecordStack {
 public:
  RecordStack() : v_(1, nullptr) {}  // may throw std::bad_alloc (a thread state's creation)
  bool empty() const noexcept { return v_.size() == 1; }
  std::size_t size() const noexcept { return v_.size() - 1; }
  /// Whether a push_back() would allocate.
  bool full() const noexcept { return v_.size() == v_.capacity(); }
  /// The newest record; null when empty.
  SpanRecord* top() const noexcept { return v_.back(); }
  void push_back(SpanRecord* r) { v_.push_back(r); }  // may throw when full()
  void pop_back() noexcept { v_.pop_back(); }         // requires !empty()
  void clear() noexcept { v_.resize(1); }
  auto begin() noexcept { return v_.begin() + 1; }
  auto end() noexcept { return v_.end(); }
  auto begin() const noexcept { return v_.begin() + 1; }
  auto end() const noexcept { return v_.end(); }
  auto rbegin() noexcept { return v_.rbegin(); }
  auto rend() noexcept { return v_.rend() - 1; }
  auto rbegin() const noexcept { return v_.rbegin(); }
  auto rend() const noexcept { return v_.rend() - 1; }
  /// Removes the record at `it` (an iterator of this stack).
  void erase(std::vector<SpanRecord*>::iterator it) noexcept { v_.erase(it); }

 private:
  std::vector<SpanRecord*> v_;
};

/// Per-thread state. Only its owner thread touches `cache`; `stack`, the open records on it, `nvtx`
/// and writes to `open` are guarded by `mu`; counters are written by the owner and read by anyone.
struct ThreadState {
  StateLock mu{this};
  RecordStack stack;                    // open spans started by this thread, oldest first
  OpenStack open;                       // the open-span registry's light entries
  NvtxStack nvtx;                       // NVTX ranges of this thread's spans
  std::vector<SpanRecord*> cache;       // free records
  SiteCacheEntry sites[64];             // cache_site()'s, owner only
  SiteAddressEntry site_addresses[64];  // the same sites by the names' addresses, owner only
  // The ring this thread queues ended spans to, of the pipeline it last queued to; spans until
  // that ring next wakes the exporter thread. Owner only.
  SpanRing* ring = nullptr;
  Pipeline* ring_pipeline = nullptr;
  std::size_t until_wake = 0;
  /// The flight recorder's ring of this thread's recorded spans (record/recorder.hpp), made at its
  /// first; guarded by `mu`.
  FlightRing* flight = nullptr;
  /// GPU launches this thread reported for GPU time (gpu/gpu_timing.hpp), made by this thread at
  /// its first and kept with the state; the exporter thread takes them without `mu`.
  std::atomic<GpuInputs*> gpu{nullptr};
  std::int64_t tid = 0;
  /// The owner thread's exception globals (lookup_eh_globals()), set when a thread acquires the
  /// state: what a span reads std::uncaught_exceptions() from, with no thread-local lookup.
  const EhGlobals* eh = nullptr;
  bool in_use = false;  // guarded by the registry mutex
  std::atomic<std::uint64_t> started{0};
  std::atomic<std::uint64_t> ended{0};
  std::atomic<std::uint64_t> dropped_queue_full{0};
  /// Its open GPU-timed spans, for launches from other threads (on a line of its own: those
  /// threads read it at every launch).
  GpuChainSnapshot gpu_chain;
  /// The state created before this one (for_each_thread_state()); set before this one is
  /// published, never changed. On a line of its own: walking the states reads it in each, and
  /// the owner's counters, written at every span, would make each read a miss.
  alignas(64) ThreadState* registry_next = nullptr;

  void count(std::atomic<std::uint64_t>& c) noexcept {
    // Relaxed load + store: only this thread writes its counters.
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }
};

/// The entry of `ts`'s cache of sites by address for names at these addresses.
inline SiteAddressEntry& site_address_entry(ThreadState& ts, std::string_view group,
                                            std::string_view name) noexcept {
  static_assert(sizeof(ThreadState::site_addresses) / sizeof(SiteAddressEntry) == 64);
  const auto a = reinterpret_cast<std::uintptr_t>(name.data()) ^
                 (reinterpret_cast<std::uintptr_t>(group.data()) >> 4);
  return ts.site_addresses[(a * 0x9e3779b97f4a7c15ull) >> 58];  // 64 entries: the top 6 bits
}

/// Whether `a`, an entry without a site found by the addresses of `group` and a name, says that
/// the pair's group is off: the group the entry remembers (its content compared) and its site
/// flag off, read now.
[[gnu::always_inline]] inline bool is_off_pair(const SiteAddressEntry& a,
                                               std::string_view group) noexcept {
  return equal_short(a.off_group, group) &&
         !g_site_flags[a.group_index].load(std::memory_order_relaxed);
}

/// What a thread's cache knows of a pair of names (find_cached_pair()).
enum class CachedPair : std::uint8_t {
  kSite,     // the pair's interned site
  kOff,      // its group is off: a span of it starts nothing (not enabled, tracked or NVTX)
  kUnknown,  // not in the cache
};

/// Looks `group` and `name` up in `ts`'s small cache: by the names' addresses, else by their
/// hash, the names compared either way; no lock. kSite sets `site`. A pair remembered as off
/// (remember_off_pair()) is kOff while its group's site flag stays off, read now. Interns nothing.
/// Owner only.
[[gnu::always_inline]] inline CachedPair find_cached_pair(ThreadState& ts, std::string_view group,
                                                          std::string_view name,
                                                          const SpanSite*& site) noexcept {
  const SiteAddressEntry& a = site_address_entry(ts, group, name);
  if (NEMO_LENS_LIKELY(a.name == name.data() && a.group == group.data())) {
    if (NEMO_LENS_LIKELY(a.site != nullptr)) {
      if (NEMO_LENS_LIKELY(names_are(*a.site, group, name))) {
        site = a.site;
        return CachedPair::kSite;
      }
    } else if (is_off_pair(a, group)) {
      return CachedPair::kOff;
    }
  }
  site = find_cached_site_by_hash(ts, group, name);
  return site != nullptr ? CachedPair::kSite : CachedPair::kUnknown;
}

/// Remembers in `ts`'s cache that the pair's group (not empty) is off, by the names' addresses,
/// for find_cached_pair(); interns the group when it is new (once per name). Owner only.
void remember_off_pair(ThreadState& ts, std::string_view group, std::string_view name) noexcept;

/// The calling thread's state, once acquired (a %fs-relative load: the initial-exec TLS model).
[[gnu::tls_model("initial-exec")]] extern constinit thread_local ThreadState* t_state;
inline bool StateLock::owned_here() const noexcept { return t_state == state_; }
inline void StateLock::lock() noexcept {
  if (owned_here()) {
    lock_as_owner();
  } else {
    lock_as_guest();
  }
}
inline void StateLock::unlock() noexcept {
  if (owned_here()) {
    unlock_as_owner();
  } else {
    unlock_as_guest();
  }
}
inline bool StateLock::try_lock() noexcept {
  return owned_here() ? try_lock_as_owner() : try_lock_as_guest();
}

/// Acquires a state for the calling thread; null when memory ran out or the thread is exiting.
ThreadState* acquire_for_this_thread() noexcept;

/// Whether the calling thread's state lock (acquiring the state) still takes the owner's side
/// without a fence (OwnerLock::biased()): false once guests took it often. For tests.
NEMO_LENS_API bool this_thread_lock_biased() noexcept;

/// Publishes `s`'s chain of open GPU-timed spans (ThreadState::gpu_chain), making their ids.
/// Requires s.mu; called where such a span starts or leaves the stack, or is orphaned.
NEMO_LENS_API void publish_gpu_chain_locked(ThreadState& s) noexcept;
/// A consistent copy of `s`'s published chain, without its lock; false (nothing copied) when
/// writers kept changing it.
NEMO_LENS_API bool read_gpu_chain(const ThreadState& s, GpuChainCopy& out) noexcept;
/// read_gpu_chain() of the calling thread's state (acquired if it has none; false when memory
/// ran out). For tests.
NEMO_LENS_API bool read_this_thread_gpu_chain(GpuChainCopy& out) noexcept;

/// The calling thread's state (acquired on first use, returned at thread exit). Null only when
/// memory ran out.
inline ThreadState* this_thread_state() noexcept {
  ThreadState* s = t_state;
  if (NEMO_LENS_LIKELY(s != nullptr)) return s;
  return acquire_for_this_thread();
}
/// The calling thread's state if it has one; never acquires one (so it takes no lock).
inline ThreadState* this_thread_state_if_any() noexcept { return t_state; }

/// Calls f for every state ever created, holding the registry mutex (not the states' locks).
/// Exported from the library for tests.
NEMO_LENS_API void visit_thread_states(const std::function<void(ThreadState&)>& f);

/// The newest state created (thread_state.cpp): the head of the states linked by
/// ThreadState::registry_next. States are never freed.
extern std::atomic<ThreadState*> g_newest_thread_state;

/// Calls f for every state created before the call, newest first, with no lock at all (where
/// visit_thread_states() holds the registry's mutex): for a GPU launch and the exporter's take
/// of launch queues, which must not wait for a thread that starts or exits. A state created
/// meanwhile may be missed; f must read only what is safe without the state's lock.
template <class F>
void for_each_thread_state(F&& f) {
  // Acquire pairs with the creator's release: each state's registry_next was set before.
  for (ThreadState* s = g_newest_thread_state.load(std::memory_order_acquire); s != nullptr;
       s = s->registry_next) {
    f(*s);
  }
}

/// take_record() when the thread's cache is empty: refills it from the global free pool, or
/// allocates.
SpanRecord* refill_and_take_record(ThreadState& s) noexcept;

/// How many spans before its start prefetch_record_ahead() asks for a record's lines: a line the
/// exporter thread's core read last can take longer than a span to come back (on this project's
/// VM, spans took twice as long with only the next record asked for).
inline constexpr std::size_t kPrefetchAhead = 8;

/// Asks for the lines a span's start writes in `rec`, in a state that allows writing: the
/// exporter thread read them last, and without this the start waits for them to come back.
inline void prefetch_record(const SpanRecord* rec) noexcept {
  const auto r = reinterpret_cast<std::uintptr_t>(rec);
  prefetch_for_write(r);
  prefetch_for_write(r + 64);
  prefetch_for_write(r + 128);
}

/// How many of `r`'s cache lines a span's start and end wrote: the fixed fields and the inline
/// attributes in use.
inline std::size_t record_lines_written(const SpanRecord& r) noexcept {
  const auto end =
      static_cast<std::size_t>(reinterpret_cast<const char*>(r.attributes + r.inline_used) -
                               reinterpret_cast<const char*>(&r));
  return (end + 63) / 64;
}

/// Drops the lines of an exported record (sole access) from every cache before it goes back to the
/// free pool: the thread that reuses it writes them next, and a line the exporter's core still
/// holds costs that store a hand-over between the cores, which prefetch_record() does not hide
/// (on this project's VM, 16 ns more a record of three lines), where a line from memory costs
/// what the prefetch hides.
inline void evict_record(const SpanRecord& r) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(&r);
  const std::size_t lines = record_lines_written(r);
  for (std::size_t i = 0; i < lines; ++i) evict_line(a + 64 * i);
}

/// prefetch_record() for the record of a thread's cache `cache` that the start kPrefetchAhead
/// starts after the next one takes (the cache is a stack, its last taken first): every start
/// asks before it takes its record from the cache; refill_and_take_record() asks for the nearer
/// ones after a refill.
inline void prefetch_record_ahead(const std::vector<SpanRecord*>& cache) noexcept {
  const std::size_t n = cache.size();
  if (n > kPrefetchAhead) prefetch_record(cache[n - 1 - kPrefetchAhead]);
}

/// A free record for `s` (its cache, the global free pool, or new), its cold part unused; null
/// when memory ran out.
inline SpanRecord* take_record(ThreadState& s) noexcept {
  if (NEMO_LENS_UNLIKELY(s.cache.empty())) return refill_and_take_record(s);
  prefetch_record_ahead(s.cache);
  SpanRecord* rec = s.cache.back();
  s.cache.pop_back();
  return rec;
}

/// Fork support: take every thread-state lock (prepare), release them (parent), or reset them and
/// orphan every inherited open span (child).
/// (Exported for the tests that hold every state's lock as a guest while a thread works.)
NEMO_LENS_API void lock_all_thread_states() noexcept;
NEMO_LENS_API void unlock_all_thread_states() noexcept;
void reset_thread_states_in_child() noexcept;

/// Returns a record to the calling thread's cache, cleaned (clean_record()), or frees it; its next
/// start resets the rest.
void recycle(SpanRecord* rec) noexcept;

/// Returns records to the global free pool as one batch, cleaned (clean_record()) unless
/// `cleaned` says they are already; their next starts reset the rest. Any thread; leaves
/// `records` empty.
void recycle_batch(std::vector<SpanRecord*>& records, bool cleaned = false) noexcept;

/// Batch span processor settings (OTEL_BSP_*).
struct BatchOptions {
  std::size_t max_queue_size = 2048;
  std::chrono::milliseconds schedule_delay{5000};
  std::size_t max_export_batch_size = 512;
  std::chrono::milliseconds export_timeout{30000};
};

/// Whether a thread whose ring of `capacity` holds `queued` spans at the end of a batch wakes an
/// exporter thread that naps (the valve, pulled once per drain): when three quarters of the ring
/// are taken. The nap is sized for half the ring at most (Pipeline::next_nap()), so the valve
/// leaves room for the rate to grow by half before a thread calls, and a quarter of the ring for
/// the exporter thread to wake and drain in once it does.
inline bool valve_due(std::size_t queued, std::size_t capacity) noexcept {
  return queued >= capacity - capacity / 4;
}

/// The spans one thread ended in one pipeline, queued for its exporter thread.
struct SpanRing {
  explicit SpanRing(std::size_t capacity, const ThreadState* p) : queue(capacity), producer(p) {}
  SpscRing<SpanRecord*> queue;
  const ThreadState* const producer;
  SpanRing* next = nullptr;  // the pipeline's list; set before the ring is published
};

/// The export pipeline of one set-up: a bounded ring per thread that ends spans, drained by a
/// background exporter thread.
struct Pipeline {
  Pipeline(BatchOptions options, SpanLimits limits, SamplerConfig sampler,
           std::vector<std::string> redacted_keys, Resource resource,
           std::shared_ptr<SpanExporter> exporter);
  ~Pipeline() = delete;  // immortal: records and handles may point here

  /// Queues an ended span on the ring of `current` (the calling thread's state, or null), or drops
  /// and counts it when that ring is full. Never blocks. Inline: a push to the thread's ring when
  /// the pipeline runs and the ring is the thread's current one.
  void enqueue(SpanRecord* rec, ThreadState* current) noexcept;
  /// Queues the flight recorder's captured spans (record/recorder.cpp) for export, all of them
  /// (the recorder's rings bound how many), and wakes the exporter thread. Any thread; never
  /// blocks beyond a short lock. Once shutdown began they are dropped and counted. Leaves
  /// `records` empty.
  void enqueue_captured(std::vector<SpanRecord*>& records) noexcept;
  /// Exports everything queued before the call; false when `deadline` passed first.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for everything queued now to be exported, without waiting; the ticket is for
  /// wait_flushed().
  std::uint64_t request_flush() noexcept;
  /// Waits for the flush `ticket`; false when `deadline` passed first.
  bool wait_flushed(std::uint64_t ticket, std::chrono::steady_clock::time_point deadline) noexcept;
  /// Stops accepting spans, queues truncated copies of open spans, and asks the exporter thread
  /// to export everything queued by export_cutoff(deadline) and stop: an export in flight is
  /// interrupted at the cutoff (an InterruptibleExporter), spans left then are dropped at
  /// shutdown. Does not wait.
  void begin_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Waits for the exporter thread, whose last act is the exporter's shutdown(), until `deadline`.
  /// When it did not stop in time (an exporter whose export or shutdown() ignores its deadline),
  /// closes the books: what the thread holds and what is queued count as dropped at shutdown, and
  /// the thread, left running, counts nothing more. False then.
  bool finish_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Whether `key` may be a redacted attribute key: false for most keys, which share no (length,
  /// first byte) class with a redacted key; true for every redacted key.
  [[gnu::always_inline]] bool may_be_redacted(std::string_view key) const noexcept {
    return (redacted_filter >> redacted_filter_bit(key) & 1) != 0;
  }
  /// Whether `key` is a redacted attribute key (inline: records.cpp needs no Pipeline symbol).
  bool redacted(std::string_view key) const noexcept {
    if (NEMO_LENS_LIKELY(!may_be_redacted(key))) return false;
    const std::size_t bucket = std::min<std::size_t>(key.size(), kRedactedBuckets - 1);
    for (std::size_t i = redacted_from[bucket]; i < redacted_from[bucket + 1]; ++i) {
      if (equal_short(redacted_keys[i], key)) return true;
    }
    return false;
  }
  /// The statistics since this pipeline started.
  TelemetryStats stats() const noexcept;
  /// The pipeline that replaced this one in a forked child, or this one.
  Pipeline* current() noexcept;
  /// In a forked child: a fresh pipeline with the same settings; the exporter comes from
  /// `exporter_for_child` (or is shared when that is empty).
  Pipeline* clone_for_child() noexcept;

  const BatchOptions options;
  const SpanLimits limits;
  const SamplerConfig sampler;
  /// The redacted keys, by length: those of length n are redacted_keys[redacted_from[n],
  /// redacted_from[n + 1]), the last bucket holding every longer one. A key is compared only with
  /// keys of its length (usually none).
  static constexpr std::size_t kRedactedBuckets = 64;
  const std::vector<std::string> redacted_keys;
  const std::array<std::uint32_t, kRedactedBuckets + 1> redacted_from;
  /// A bit per (length, first byte) class of the redacted keys (redacted_filter_bit()): most keys
  /// fall in a class no redacted key is in, and need no comparison at all.
  const std::uint64_t redacted_filter;
  static unsigned redacted_filter_bit(std::string_view key) noexcept {
    const unsigned first = key.empty() ? 0u : static_cast<unsigned char>(key[0]);
    return (static_cast<unsigned>(key.size()) * 8u ^ first) & 63u;
  }
  /// The inline attribute slots a span may use: kInlineAttributes, or fewer under a lower count
  /// limit (SpanRecord::inline_room starts here).
  const std::uint8_t inline_room;
  const Resource resource;
  std::shared_ptr<SpanExporter> exporter;
  std::function<std::shared_ptr<SpanExporter>()> exporter_for_child;
  /// The parent of spans that would start a new trace: the context this process inherited
  /// (TRACEPARENT); invalid when none. Set (inherit()) before the pipeline is published, then
  /// read-only.
  SpanContext inherited;
  /// Every span without a parent is a sampled root: no inherited context and an always-on root
  /// sampler. Set with `inherited`.
  bool plain_roots = false;
  /// What a LENS_SPAN site's common start (try_start_site_record()) may take with no further
  /// check of the pipeline and the clock, both needing TSC ticks and every inline slot open to
  /// attributes (a clean record's inline_room; no lower count limit): kFastRoots, spans without a
  /// parent (plain_roots); kFastChildren, children of a sampled parent (a parent-based sampler
  /// in a pipeline that records). Set with `inherited`.
  static constexpr std::uint8_t kFastRoots = 1, kFastChildren = 2;
  std::uint8_t fast_starts = 0;
  /// Sets `inherited` (plain_roots, fast_starts); before the pipeline is published, after the
  /// clock's calibration.
  void inherit(const SpanContext& context) noexcept {
    inherited = context;
    plain_roots = !inherited.is_valid() && sampler.root == SamplerConfig::Root::kAlwaysOn;
    const bool fast = g_clock_ticks_are_tsc.load(std::memory_order_acquire) &&
                      inline_room == SpanRecord::kInlineAttributes;
    fast_starts = static_cast<std::uint8_t>(
        (fast && plain_roots ? kFastRoots : 0) |
        (fast && sampler.parent_based && sampler.records_anything ? kFastChildren : 0));
  }

  /// GPU time of spans (<PREFIX>_GPU_TIME), when on and its source runs; set before the pipeline
  /// is published. Never freed, like the pipeline.
  GpuTiming* gpu = nullptr;
  /// Wakes the exporter thread (GpuTiming: held spans are due).
  void wake_exporter() noexcept { wake_.release(); }

  /// False once shutdown began (read by every producer, written once).
  alignas(64) std::atomic<bool> accepting{true};
  /// Set in a forked child: the pipeline that took over from this one.
  std::atomic<Pipeline*> successor{nullptr};

 private:
  void ensure_thread() noexcept;
  // enqueue() for every case: shutdown begun, no ring yet, the thread not started, a full ring.
  void enqueue_slow(SpanRecord* rec, ThreadState* current) noexcept;
  // Wakes the exporter thread, `current` having queued a batch's worth since its last call, when
  // that thread waits to be woken, or once per drain when valve_due() says so of `current`'s ring.
  void wake_after_batch(ThreadState& current) noexcept;
  void run() noexcept;
  // Waits for spans to export: `nap` long when it is not zero, else until a producer wakes this
  // thread for a batch or the schedule delay passes. True: drain full batches only.
  bool wait_for_spans(std::chrono::steady_clock::duration nap) noexcept;
  // The nap before the next drain, after one that took `taken` spans in `busy`, `since` the one
  // before began, a producer having pulled the valve in between or not; zero: wait to be woken.
  std::chrono::steady_clock::duration next_nap(std::size_t taken,
                                               std::chrono::steady_clock::duration since,
                                               std::chrono::steady_clock::duration busy,
                                               bool valve_pulled) const noexcept;
  // Exports (or drops) `batch` and empties it; false when the books were closed meanwhile. The
  // GPU-timed spans of a batch not `gpu_sorted` yet may stay with `gpu` until their GPU time is
  // known.
  bool export_batch(std::vector<SpanRecord*>& batch, std::chrono::steady_clock::time_point deadline,
                    bool gpu_sorted = false) noexcept;
  // Exports the spans `gpu` holds that are due (with `all`, every one, after waiting for their
  // activity until `cutoff` at most); false when the books were closed meanwhile.
  bool export_gpu_due(bool all, std::chrono::steady_clock::time_point cutoff) noexcept;
  std::size_t drain(bool full_batches_only,
                    std::chrono::steady_clock::time_point deadline) noexcept;
  // The ring of `ts` here, created on first use; null when memory ran out.
  SpanRing* ring_for(ThreadState& ts) noexcept;
  // Spans queued on every ring and the shared queue (an estimate while spans are queued).
  std::size_t queued_estimate() const noexcept;
  // Moves queued spans into `out` until it holds `max` with the `lost` ones (deleted for want of
  // memory, and counted there); returns how many it took. Consumer only: the exporter thread, or
  // another thread under the ledger's lock or after the exporter thread ended.
  std::size_t take_queued(std::vector<SpanRecord*>& out, std::size_t max,
                          std::size_t& lost) noexcept;

  // Read by every producer, written rarely.
  alignas(64) std::atomic<bool> thread_started_{false};
  std::atomic<SpanRing*> rings_{nullptr};  // a list, pushed to at its head, never shortened
  // Spans of threads without a state, and shutdown's truncated copies.
  MpmcQueue<SpanRecord*> shared_queue_;
  // The flight recorder's captured spans (enqueue_captured()), and how many: the exporter thread
  // takes the lock only when there are some.
  std::mutex captured_mu_;
  std::vector<SpanRecord*> captured_;
  std::atomic<std::size_t> captured_count_{0};

  // Written by producers once a batch and by the exporter thread once a drain: a line of their
  // own, away from what every span reads.
  // 1 when the exporter thread waits for a producer to wake it (wait_for_spans()); 0 while it
  // drains, while it naps because spans come faster than it needs waking for, and once a
  // producer woke it. Producers take it, and the exporter thread sets it to 1, with
  // read-modify-writes (see wake_after_batch()).
  alignas(64) std::atomic<std::uint32_t> wake_wanted_{1};
  // A producer found its ring three quarters full and called since the exporter thread last woke.
  std::atomic<bool> valve_pulled_{false};

  // The exporter thread's.
  alignas(64) std::counting_semaphore<> wake_{0};
  SpanRing* next_ring_ = nullptr;  // where the next take starts (consumer only), for fairness
  // `exporter` when it encodes records itself; else the records are made SpanData (views_).
  RecordSpanExporter* record_exporter_ = nullptr;
  // The exporter thread's: what the batch's records read as, and pointers to them.
  std::vector<SpanData> views_;
  std::vector<const SpanData*> view_ptrs_;
  std::mutex thread_mu_;
  std::thread thread_;

  std::mutex flush_mu_;  // guards the fields below
  std::condition_variable flush_cv_;
  std::uint64_t flush_requested_ = 0;
  std::uint64_t flush_done_ = 0;
  std::uint64_t flush_done_local_ = 0;  // the exporter thread's copy, read without the mutex
  bool stop_requested_ = false;
  bool stopped_ = false;
  std::chrono::steady_clock::time_point stop_cutoff_ = std::chrono::steady_clock::time_point::max();

  ExportLedger ledger_;  // what the exporter thread took, exported, failed to export
  std::atomic<std::uint64_t> dropped_at_shutdown_{0};  // ended while stopping, or no room to queue
  std::atomic<std::uint64_t> export_calls_{0};
  std::atomic<std::uint64_t> producer_wakes_{0};
  std::atomic<std::uint64_t> truncated_{0};

 public:
  /// Spans given an end before their start (ended at their start instead).
  std::atomic<std::uint64_t> end_clamped{0};

 private:
  // Per-thread counter totals when this pipeline started; stats() reports the difference.
  std::uint64_t base_started_ = 0, base_ended_ = 0, base_dropped_full_ = 0;
};

inline void Pipeline::enqueue(SpanRecord* rec, ThreadState* current) noexcept {
  // A ring of this pipeline: its exporter thread runs (ring_for()).
  if (NEMO_LENS_LIKELY(current != nullptr && current->ring_pipeline == this &&
                       accepting.load(std::memory_order_acquire) &&
                       current->ring->queue.try_push(rec))) {
    // Counting here, rather than reading the queue's size, keeps the consumer's cache line out of
    // the producer's path.
    if (NEMO_LENS_UNLIKELY(--current->until_wake == 0)) wake_after_batch(*current);
    return;
  }
  enqueue_slow(rec, current);
}

/// Adds a new attribute (its key not set yet) to a free inline slot of `r`: true when it fit
/// (inline room left, the key short enough, the value small enough).
[[gnu::always_inline]] inline bool append_inline(SpanRecord& r, std::string_view key,
                                                 const AttributeArg& value, bool redact) noexcept {
  const std::uint32_t n = r.inline_used;
  if (n >= r.inline_room || key.size() > InlineAttribute::kKeyCapacity) return false;
  InlineAttribute& slot = r.attributes[n];
  if (!store_inline(slot, value, r.pipeline->limits.attribute_value_length, redact)) return false;
  slot.key_size = static_cast<std::uint8_t>(key.size());
  copy_small(slot.key, key.data(), key.size());
  r.inline_used = static_cast<std::uint8_t>(n + 1);
  return true;
}

/// A span's start in Unix nanoseconds, its ticks converted by `clock` (a copy of the calibration:
/// one batch's spans keep their order) unless the span was given times of its own.
inline std::int64_t start_unix_nano(const SpanRecord& r, const TickConverter& clock) noexcept {
  return r.unix_times ? static_cast<std::int64_t>(r.start_ticks)
                      : clock.to_unix_nano(r.start_ticks);
}
/// A span's end in Unix nanoseconds (see start_unix_nano()).
inline std::int64_t end_unix_nano(const SpanRecord& r, const TickConverter& clock) noexcept {
  return r.unix_times ? static_cast<std::int64_t>(r.end_ticks) : clock.to_unix_nano(r.end_ticks);
}

/// Sets the fields of `r` that a LENS_SPAN site's common start (try_start_site_record()) does not
/// write to what that start needs: no ids, no NVTX range, recording, nothing dropped, internal,
/// status unset, TSC times, every inline slot open to attributes, and the context of a sampled
/// root (no parent, trace flags 0x03), which a child's start overwrites. Every record is clean
/// while free (in a thread's cache or the free pool): recycle() and recycle_batch() clean what
/// they take, and the exporter thread before it evicts an exported record's lines.
inline void clean_record(SpanRecord& r) noexcept {
  r.trace_id = TraceId{};
  r.span_id = SpanId{};
  r.parent_span_id = SpanId{};
  r.parent_is_remote = false;
  r.trace_flags = 0x03;  // sampled; a root's trace id is random
  r.inline_room = SpanRecord::kInlineAttributes;
  r.nvtx = 0;
  r.recording = true;
  r.orphaned = false;
  r.unix_times = false;
  r.dropped_attributes_count = 0;
  r.is_remote = false;
  r.kind = SpanKind::kInternal;
  r.status_code = StatusCode::kUnset;
  r.exception_recorded = false;
  r.status_final = false;
  r.truncated = false;
  r.not_current = false;
}

/// Whether `r` is as clean_record() leaves it (its checks in debug builds).
inline bool record_is_clean(const SpanRecord& r) noexcept {
  return !r.trace_id.is_valid() && !r.span_id.is_valid() && !r.parent_span_id.is_valid() &&
         !r.parent_is_remote && r.trace_flags == 0x03 &&
         r.inline_room == SpanRecord::kInlineAttributes && r.nvtx == 0 && r.recording && !r.orphaned && !r.unix_times &&
         r.dropped_attributes_count == 0 && !r.is_remote && r.kind == SpanKind::kInternal &&
         r.status_code == StatusCode::kUnset && !r.exception_recorded && !r.status_final &&
         !r.truncated && !r.not_current;
}

/// Writes every field a span's start writes, for a span of `owner` in `pipeline` (so no reset is
/// needed before), and clears the cold part the record's previous span left in use: nothing
/// clears it when a span is exported, since reading the record there would pull its lines to the
/// exporter thread's core.
inline void init_record(SpanRecord& r, ThreadState* owner, Pipeline* pipeline) noexcept {
  if (NEMO_LENS_UNLIKELY(r.cold_used)) reset_record(r);
  clean_record(r);      // what every span starts with (not every record here comes from a cache)
  r.recording = false;  // until the sampler decides
  r.site = nullptr;
  r.owner = owner;
  r.pipeline = pipeline;
  r.trace_flags = 0;
  r.mode = 0;
  r.inline_used = 0;
  r.inline_room = pipeline != nullptr ? pipeline->inline_room : 0;
}

/// Adds `key` to `r` as a new inline attribute when that is all put_span_attribute() would do: no
/// attribute of `r` has the key, the key is not one that may be redacted (for a string), the value
/// fits a free slot and no limit cuts it. False, `r` unchanged, otherwise. Short keys and strings
/// are copied with one 16-byte move each (copy_within_page()). Requires the owner's lock while the
/// span is open.
[[gnu::always_inline]] inline bool append_new_inline(SpanRecord& r, std::string_view key,
                                                     const AttributeArg& value) noexcept {
  const std::uint32_t n = r.inline_used;
  for (std::uint32_t i = 0; i < n; ++i) {
    if (equal_short(r.attributes[i].key_view(), key)) return false;
  }
  if (n >= r.inline_room || key.size() > InlineAttribute::kKeyCapacity) return false;
  InlineAttribute& slot = r.attributes[n];
  using T = AttributeArg::Type;
  switch (value.type()) {
    case T::kInt:
      slot.type = InlineAttribute::kInt;
      slot.i = value.as_int();
      break;
    case T::kString: {
      const std::string_view v = value.as_string();
      if (r.pipeline->may_be_redacted(key) || v.size() > InlineAttribute::kStringCapacity ||
          v.size() > r.pipeline->limits.attribute_value_length ||
          !copy_within_page(slot.s, v.data(), v.size())) {
        return false;
      }
      slot.type = InlineAttribute::kString;
      slot.string_size = static_cast<std::uint8_t>(v.size());
      break;
    }
    case T::kDouble:
      slot.type = InlineAttribute::kDouble;
      slot.d = value.as_double();
      break;
    case T::kBool:
      slot.type = InlineAttribute::kBool;
      slot.b = value.as_bool();
      break;
    default:
      return false;
  }
  if (key.size() > InlineAttribute::kStringCapacity ||
      !copy_within_page(slot.key, key.data(), key.size())) {
    copy_small(slot.key, key.data(), key.size());
  }
  slot.key_size = static_cast<std::uint8_t>(key.size());
  r.inline_used = static_cast<std::uint8_t>(n + 1);
  return true;
}

/// Sets (or replaces) a span attribute of `r`, within the pipeline's limits and redaction.
/// Requires the owner's lock while the span is open. May throw std::bad_alloc. Inline for the
/// common case, a new attribute that fits a free slot.
[[gnu::always_inline]] inline void put_span_attribute(SpanRecord& r, std::string_view key,
                                                      const AttributeArg& value) {
  if (!append_new_inline(r, key, value)) put_span_attribute_slow(r, key, value);
}

/// The attribute list a span site's spans start with, as a pipeline first recorded it: its keys,
/// checked once (each short enough for a slot, distinct, not redacted, within the count limit,
/// with a value type that fits a slot) and each one's slot header. A later start whose keys and
/// value types are the same copies the headers and stores the values, with none of
/// put_span_attribute()'s checks per key. Immortal, like the pipelines it refers to.
struct SiteKeys {
  /// count when the list did not pass the checks: its starts check each key as it comes.
  static constexpr std::uint32_t kUnchecked = UINT32_MAX;
  const Pipeline* pipeline = nullptr;
  /// `pipeline` when every key passed the checks and is recognised by address (by_address): a
  /// LENS_SPAN start compares this one field to know both. Null otherwise.
  const Pipeline* checked_by_address = nullptr;
  std::uint32_t count = kUnchecked;
  /// Every key lies in read-only memory of a LENS_SPAN site's own object (a literal): a key at the
  /// same address and of the same size is the same key. Otherwise keys are compared by content.
  bool by_address = false;
  struct Key {
    const char* data = nullptr;  // where the checked key lay
    AttributeArg::Type type = AttributeArg::Type::kBool;
    InlineAttribute slot{};  // the slot's header (key_size, type, key); its value unset
  };
  Key keys[SpanRecord::kInlineAttributes];
  const SiteKeys* previous = nullptr;  // the site's keys for an earlier pipeline (kept: immortal)
};

/// Stores `value`, of the type checked for `k`, in `slot` under `k`'s header: false, the slot's
/// value unset, for a string longer than a slot or one `copy(dst, src, n)` (which returns whether
/// it copied) declines. Both starts of a span with a site's checked keys store through it.
template <class Copy>
[[gnu::always_inline]] inline bool store_checked_value(InlineAttribute& slot,
                                                       const SiteKeys::Key& k,
                                                       const AttributeArg& value,
                                                       Copy copy) noexcept {
  using T = AttributeArg::Type;
  const T type = value.type();  // k's: the callers compared them (read before the header's store)
  std::memcpy(&slot, &k.slot, kInlineHeaderSize);
  if (type == T::kInt) {
    slot.i = value.as_int();
  } else if (type == T::kString) {
    const std::string_view v = value.as_string();
    // No limit cuts a string that fits (checked).
    if (v.size() > InlineAttribute::kStringCapacity || !copy(slot.s, v.data(), v.size())) {
      return false;
    }
    slot.string_size = static_cast<std::uint8_t>(v.size());
  } else if (type == T::kDouble) {
    slot.d = value.as_double();
  } else {
    slot.b = value.as_bool();
  }
  return true;
}

/// Stores `attributes` as the first attributes of `r` (which has none yet) through `keys`, while
/// each key and value type is the one checked and each value fits its slot; returns how many it
/// stored (the rest go through put_span_attribute()). Requires keys.count == attributes' size.
[[gnu::always_inline]] inline std::size_t put_checked_attributes(
    SpanRecord& r, const SiteKeys& keys, const Attribute* attributes) noexcept {
  std::size_t i = 0;
  for (; i < keys.count; ++i) {
    const Attribute& a = attributes[i];
    const SiteKeys::Key& k = keys.keys[i];
    if (a.value.type() != k.type || a.key.size() != k.slot.key_size) break;
    if (!(keys.by_address && a.key.data() == k.data) && !equal_short(a.key, k.slot.key_view())) {
      break;
    }
    const auto copy = [](char* dst, const char* src, std::size_t n) noexcept {
      copy_small(dst, src, n);
      return true;
    };
    if (!store_checked_value(r.attributes[i], k, a.value, copy)) break;
  }
  r.inline_used = static_cast<std::uint8_t>(i);
  return i;
}

/// Checks the attribute list a span of `site` started with in `p` and publishes the result as the
/// site's SiteKeys for `p` (keys that fail a check too, so that they are not checked again).
/// `own_site`: a LENS_SPAN site, whose keys may be recognised by address. Allocates once per site
/// and pipeline; does nothing when memory runs out.
void check_site_keys(const SpanSite& site, const Pipeline& p, std::span<const Attribute> attributes,
                     bool own_site) noexcept;

/// The site's SiteKeys for `p`, or null when there are none yet.
inline const SiteKeys* site_keys(const SpanSite& site, const Pipeline* p) noexcept {
  // Acquire pairs with check_site_keys()'s publication.
  const auto* k = static_cast<const SiteKeys*>(site.keys.load(std::memory_order_acquire));
  return k != nullptr && k->pipeline == p ? k : nullptr;
}

/// The pipeline spans start in, or null when tracing is not set up on an exporting rank.
extern std::atomic<Pipeline*> g_active_pipeline;

/// Installs the fork handlers once.
void install_fork_handlers() noexcept;

/// Settings read from the standard OpenTelemetry variables. Each throws ConfigError naming the
/// variable, its value and what is valid.
BatchOptions batch_options_from_env();
SpanLimits span_limits_from_env();
SamplerConfig sampler_from_env();

/// Stores an attribute argument into `out` in place (reusing its storage where the type matches),
/// cut to `len_limit` bytes (at a UTF-8 boundary) and "[REDACTED]" for strings when `redact`.
/// May throw std::bad_alloc.
void assign_attribute_value(AttributeValue& out, const AttributeArg& a, std::size_t len_limit,
                            bool redact);

/// Sets `key` in list[0, used) (replacing an existing value), or counts a drop once the list and
/// the `others` attributes kept elsewhere reach `count_limit`. Elements from `used` on are storage
/// for reuse. May throw std::bad_alloc.
void put_list_attribute(std::vector<KeyValue>& list, std::uint32_t& used, std::uint32_t& dropped,
                        std::uint32_t count_limit, std::uint32_t others, const Pipeline& p,
                        std::string_view key, const AttributeArg& value);

/// Whether attribute values of type `t` are strings (and so subject to redaction).
bool is_string_attribute(AttributeArg::Type t) noexcept;

/// The default redacted attribute keys.
std::vector<std::string> default_redacted_keys();

}  // namespace nemo::lens::detail
