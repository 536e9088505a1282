// What `lens ctl dump` and the hang watchdog see of each thread: the spans open on it right now.
// Internal.
//
// Spans that record are the records on the thread's span stack, which a start and an end update
// anyway: they cost nothing more to follow. With <PREFIX>_TRACK_OPEN=all, spans that are not
// recorded (their group is off, or the rank does not export) get a light entry in the thread's
// registry: a site pointer and a start time, no record.
//
// Writers (the owner thread, or a thread ending a span it was handed) hold the owner's lock, and
// so does a reader, briefly, to copy the records and the light entries together. Should the lock
// stay busy, a reader still gets the light entries without it: a sequence counter tells it to
// retry when a write overlapped its copy.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "control/settings.hpp"
#include "nemo/lens/attributes.hpp"
#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/groups.hpp"
#include "nemo/lens/span.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

struct SpanRecord;
struct ThreadState;

/// The mode in force; kOff before set-up.
extern std::atomic<TrackOpen> g_track_mode;

/// Sets what is tracked: recorded spans (kEnabled), also every other span site (kAll: the site
/// flags of every group go on), or nothing (kOff). Implemented in state.cpp next to the flags.
void set_open_span_tracking(TrackOpen mode);

/// A group's mode bits (g_span_modes): its spans go to the flight recorder's rings rather than
/// the export queue (recorded, not exported); their ends are watched by its triggers (step and
/// job spans while it records); they are exported with GPU time (kModeGpu: their thread publishes
/// its chain of them, ThreadState::gpu_chain), and their GPU activity as kernel spans
/// (kModeGpuKernels, with kModeGpu).
inline constexpr std::uint8_t kModeFlight = 1, kModeWatch = 2, kModeGpu = 4, kModeGpuKernels = 8;

/// What a group's flags say: enabled for export; tracked (enabled, or its open spans are tracked);
/// its spans open NVTX ranges; its mode bits (flight-recorded, watched). `index` is its place in
/// the interned table (its NVTX category).
struct GroupState {
  bool enabled = false;
  bool tracked = false;
  bool nvtx = false;
  std::uint8_t mode = 0;
  std::uint32_t index = 0;
  /// Recorded for the flight recorder instead of exported.
  bool flight() const noexcept { return (mode & kModeFlight) != 0; }
};
/// How many groups the interned table holds, and each one's flags by its index there (state.cpp):
/// enabled for export; a LENS_SPAN site of it starts something (enabled, tracked or NVTX); its
/// spans open NVTX ranges.
inline constexpr std::uint32_t kMaxGroups = 4096;
extern std::atomic<bool> g_flags[kMaxGroups];
extern std::atomic<bool> g_site_flags[kMaxGroups];
extern std::atomic<bool> g_nvtx_flags[kMaxGroups];
/// Enabled or flight-recorded, without NVTX ranges and not GPU-timed: kRecordsWithoutRange with
/// the group's mode bits (g_span_modes) in one byte, else 0. What a recorded span's start reads
/// first (the others take the general start), and its mode with it.
inline constexpr std::uint8_t kRecordsWithoutRange = 0x80;
extern std::atomic<std::uint8_t> g_record_flags[kMaxGroups];
/// Each group's mode bits (kModeFlight, kModeWatch, kModeGpu, kModeGpuKernels).
extern std::atomic<std::uint8_t> g_span_modes[kMaxGroups];

/// Whether the open spans of groups that are off are tracked too (TRACK_OPEN=all).
inline bool tracked_by_mode() noexcept {
  return g_track_mode.load(std::memory_order_relaxed) == TrackOpen::kAll;
}

/// The state of the group with interned `index`.
inline GroupState state_at(std::uint32_t index) noexcept {
  GroupState g;
  g.enabled = g_flags[index].load(std::memory_order_relaxed);
  g.tracked = g.enabled || tracked_by_mode();
  g.nvtx = g_nvtx_flags[index].load(std::memory_order_relaxed);
  g.mode = g_span_modes[index].load(std::memory_order_relaxed);
  g.index = index;
  return g;
}

/// The state of `group`, looked up by name (one probe of the interned table).
GroupState group_state(std::string_view group) noexcept;

/// Finds `group` in the interned table, interning it when it is new: its `index` and the table's
/// copy of its name (immortal). False when the table is full or memory ran out. Takes the writer
/// lock only for a new name.
bool intern_group(std::string_view group, std::uint32_t& index,
                  std::string_view& interned_name) noexcept;

/// The interned index of the group of a LENS_SPAN site resolved by resolve_span_site() (the site
/// points into the site flags), or kMaxGroups or more when it is not resolved (the table is full).
inline std::uintptr_t site_group_index(const SiteGate& site) noexcept {
  static_assert(sizeof(std::atomic<bool>) == 1);
  return reinterpret_cast<std::uintptr_t>(site.flag.load(std::memory_order_relaxed)) -
         reinterpret_cast<std::uintptr_t>(g_site_flags);
}

/// The record flags (g_record_flags) of a resolved site's group: kRecordsWithoutRange with the
/// group's mode bits when its spans are recorded (exported or flight-recorded), open no NVTX
/// range and are not GPU-timed, what such a span's start reads first (the site's flag pointer
/// and one load); else 0, as for an unresolved site (the table is full), which span_site_state()
/// then looks up by name.
inline std::uint8_t site_record_flags(const SiteGate& site) noexcept {
  const std::uintptr_t index = site_group_index(site);
  return index < kMaxGroups ? g_record_flags[index].load(std::memory_order_relaxed) : 0;
}
/// Whether site_record_flags() says kRecordsWithoutRange.
inline bool records_without_range(const SiteGate& site) noexcept {
  return site_record_flags(site) != 0;
}

/// The mode bits of the group of a LENS_SPAN or interned site: one load when it is resolved.
inline std::uint8_t span_site_mode(const SiteGate& site) noexcept {
  const std::uintptr_t index = site_group_index(site);
  if (NEMO_LENS_LIKELY(index < kMaxGroups)) {
    return g_span_modes[index].load(std::memory_order_relaxed);
  }
  return group_state(site.group).mode;  // unresolved: the table is full
}

/// The state of the group of a LENS_SPAN site resolved by resolve_span_site(): three loads when
/// the site points into the flags.
inline GroupState span_site_state(const SiteGate& site) noexcept {
  const std::uintptr_t index = site_group_index(site);
  if (NEMO_LENS_LIKELY(index < kMaxGroups)) return state_at(static_cast<std::uint32_t>(index));
  return group_state(site.group);  // unresolved: the table is full
}

/// The groups whose spans open NVTX ranges while NVTX emits, without enabling them for export: a
/// rank that does not export shows the ranges of the groups it would export.
/// set_enabled_span_groups() sets this set too. Implemented in state.cpp.
void set_nvtx_span_groups(GroupSet groups);
/// The groups the flight recorder records (record/recorder.hpp): those of them not enabled for
/// export become flight-recorded, and step and job spans become watched; empty: none (off).
/// Implemented in state.cpp.
void set_recorded_span_groups(GroupSet groups);
/// The set set_recorded_span_groups() set last.
GroupSet recorded_span_groups();
/// Sets the groups whose exported spans `owner` (a GpuTiming) times, and among them those whose
/// GPU activity it exports as kernel spans: their mode bits kModeGpu and kModeGpuKernels.
void set_gpu_timed_span_groups(const void* owner, GroupSet timed, GroupSet kernel_spans);
/// Clears what set_gpu_timed_span_groups() set, when `owner` set it last.
void clear_gpu_timed_span_groups(const void* owner);
/// Whether spans of the NVTX groups open NVTX ranges (set-up decides, from <PREFIX>_NVTX).
void set_nvtx_emitting(bool on);
/// The value set_nvtx_emitting() set last.
bool nvtx_emitting() noexcept;

/// One light entry of a thread's registry. Every field is atomic so that a reader racing a writer
/// reads stale or new values, never torn ones; the sequence counter then discards the copy.
struct OpenEntry {
  std::atomic<const SpanSite*> site{nullptr};  // group and name
  std::atomic<std::uint64_t> start_ticks{0};   // now_ticks()
  std::atomic<std::uint32_t> token{0};         // identifies it to its handle
};

/// A thread's registry of light entries. Guarded for writers by the owner's ThreadState::mu.
struct OpenStack {
  static constexpr std::uint32_t kCapacity = 64;
  std::atomic<std::uint64_t> sequence{0};   // odd while a write is in progress
  std::atomic<std::uint32_t> depth{0};      // entries in use
  std::atomic<std::uint32_t> untracked{0};  // open spans beyond kCapacity
  std::uint32_t next_token = 1;             // never 0 (0 marks an untracked light handle)
  OpenEntry entries[kCapacity];
};

/// A sequence-counter write section, as in clock.cpp: the odd count is stored first, every data
/// store is release (so the odd count is visible before any new value), and the even count last.
class OpenWriteSection {
 public:
  explicit OpenWriteSection(OpenStack& o) noexcept
      : o_(o), start_(o.sequence.load(std::memory_order_relaxed)) {
    o_.sequence.store(start_ + 1, std::memory_order_relaxed);
  }
  ~OpenWriteSection() { o_.sequence.store(start_ + 2, std::memory_order_release); }
  OpenWriteSection(const OpenWriteSection&) = delete;
  OpenWriteSection& operator=(const OpenWriteSection&) = delete;

 private:
  OpenStack& o_;
  std::uint64_t start_;
};

/// Requires the owner's lock. Counts one span more (+1) or fewer (-1) beyond the registry.
inline void open_count_untracked(OpenStack& o, int delta) noexcept {
  const std::uint32_t n = o.untracked.load(std::memory_order_relaxed);  // writers hold the lock
  if (delta > 0 || n > 0)
    o.untracked.store(n + static_cast<std::uint32_t>(delta), std::memory_order_relaxed);
}

/// Requires the owner's lock. Adds an entry on top; false when the registry is full (counted
/// untracked).
inline bool open_push(OpenStack& o, const SpanSite* site, std::uint64_t start,
                      std::uint32_t token) noexcept {
  const std::uint32_t d = o.depth.load(std::memory_order_relaxed);  // writers hold the lock
  if (NEMO_LENS_UNLIKELY(d >= OpenStack::kCapacity)) {
    open_count_untracked(o, +1);
    return false;
  }
  OpenWriteSection w(o);
  OpenEntry& e = o.entries[d];
  e.site.store(site, std::memory_order_release);
  e.start_ticks.store(start, std::memory_order_release);
  e.token.store(token, std::memory_order_release);
  o.depth.store(d + 1, std::memory_order_release);
  return true;
}

/// Requires the owner's lock. Removes the entry with `token`, moving the ones above it down (spans
/// may end in any order); false when there is none.
inline bool open_remove(OpenStack& o, std::uint32_t token) noexcept {
  const std::uint32_t d = o.depth.load(std::memory_order_relaxed);  // writers hold the lock
  for (std::uint32_t i = d; i-- > 0;) {
    if (o.entries[i].token.load(std::memory_order_relaxed) != token) continue;
    if (NEMO_LENS_LIKELY(i + 1 == d)) {
      // The innermost entry (spans mostly end innermost first): a smaller depth is all it takes.
      // No entry changes, so no write section: a reader that saw the old depth copied an entry
      // that was intact, and the next push into that slot is a write section.
      o.depth.store(d - 1, std::memory_order_release);
      return true;
    }
    OpenWriteSection w(o);
    for (std::uint32_t j = i; j + 1 < d; ++j) {
      OpenEntry& to = o.entries[j];
      const OpenEntry& from = o.entries[j + 1];
      to.site.store(from.site.load(std::memory_order_relaxed), std::memory_order_release);
      to.start_ticks.store(from.start_ticks.load(std::memory_order_relaxed),
                           std::memory_order_release);
      to.token.store(from.token.load(std::memory_order_relaxed), std::memory_order_release);
    }
    o.depth.store(d - 1, std::memory_order_release);
    return true;
  }
  return false;
}

/// Requires s.mu. Registers a light entry for a tracked, unexported span of `site`; returns its
/// token, 0 when the registry is full (counted untracked).
std::uint32_t open_light_entry(ThreadState& s, const SpanSite& site) noexcept;
/// Removes a light entry (token 0: one untracked span ended). Takes the owner's lock.
void close_light_span(ThreadState& owner, std::uint32_t token) noexcept;
/// A light handle for a tracked, unexported span of `site` on the calling thread (span.cpp).
Span open_light_span(const SpanSite& site) noexcept;

/// An immortal site for a group and name known only at run time (managed_span, start_span).
/// Interned: at most a few thousand distinct pairs, later ones share one "(other)" site.
const SpanSite& intern_site(std::string_view group, std::string_view name) noexcept;
/// The interned site of `group` and `name` (its gate resolved), or null once the table is full
/// (or memory ran out).
const SpanSite* intern_site_if_room(std::string_view group, std::string_view name) noexcept;
/// find_cached_pair() (engine.hpp) when the names' addresses missed: by their hash.
const SpanSite* find_cached_site_by_hash(ThreadState& ts, std::string_view group,
                                         std::string_view name) noexcept;
/// Whether `site` is named `group` and `name`.
[[gnu::always_inline]] inline bool names_are(const SpanSite& site, std::string_view group,
                                             std::string_view name) noexcept {
  return equal_short(site.name, name) && equal_short(site.gate.group, group);
}
/// intern_site_if_room(), kept in `ts`'s cache for find_cached_pair().
const SpanSite* cache_site(ThreadState& ts, std::string_view group, std::string_view name) noexcept;

/// One open span as a reader sees it.
struct OpenSpanView {
  std::string group;
  std::string name;
  std::int64_t start_unix_nano = 0;
  bool exported = false;             // recorded for export (a record); false for a light entry
  bool root = false;                 // records: the span has no parent
  SpanContext context;               // records only
  std::vector<KeyValue> attributes;  // records only
  std::uint32_t token = 0;           // light entries: with the thread state, identifies the span
  SpanRecord* record = nullptr;      // records: valid only while the span is open
};

/// One thread's open spans, outermost first.
struct ThreadOpenSpans {
  std::int64_t tid = 0;
  const ThreadState* state = nullptr;
  std::uint32_t untracked = 0;  // light entries beyond the registry's capacity
  /// The owner's lock stayed busy: `spans` holds the light entries only, not the records.
  bool owner_busy = false;
  std::vector<OpenSpanView> spans;
};

/// Every thread's open spans right now, outermost first. Holds each owner's lock briefly (taken
/// with a bounded number of tries and yields, never a blocking wait); where it stays busy, that
/// thread's light entries are read without it (owner_busy). Records are listed unless tracking is
/// off. Allocates; may throw std::bad_alloc.
std::vector<ThreadOpenSpans> snapshot_open_spans();

/// Adds an event to `rec` if it is still open and recording (any thread; takes the owner's lock).
/// False when the span has ended.
bool add_event_to_open_record(SpanRecord* rec, std::string_view name,
                              std::initializer_list<Attribute> attributes) noexcept;

}  // namespace nemo::lens::detail
