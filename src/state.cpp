// The enabled-group state. Every group name a site or a set ever mentioned is interned once into
// an append-only, lock-free hash table (entries are never removed or moved) and owns five flags
// in statically initialised arrays: enabled; nvtx (its spans open NVTX ranges, nvtx/nvtx.hpp);
// site (enabled, recorded by the flight recorder, nvtx, or every group's open spans are tracked,
// TRACK_OPEN=all; see gate.hpp); record (enabled or flight-recorded, without NVTX: such a span's
// start reads one flag); and mode (flight-recorded rather than exported, and watched by the
// flight recorder's triggers: record/recorder.hpp).
// Sites cache a pointer to their flag; lookups by name probe the table. Writers serialise on one
// mutex; readers never take it.
#include "nemo/lens/state.hpp"

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "nemo/lens/detail/gate.hpp"
#include "strings.hpp"
#include "tracing/open_spans.hpp"

namespace nemo::lens {
namespace detail {

const std::atomic<bool> g_unresolved_flag{true};

constinit std::atomic<bool> g_flags[kMaxGroups] = {};
constinit std::atomic<bool> g_site_flags[kMaxGroups] = {};
constinit std::atomic<bool> g_nvtx_flags[kMaxGroups] = {};
constinit std::atomic<std::uint8_t> g_record_flags[kMaxGroups] = {};
constinit std::atomic<std::uint8_t> g_span_modes[kMaxGroups] = {};

namespace {

constexpr std::size_t kTableSize = 8192;  // power of two, at most half full
constexpr std::size_t kTableMask = kTableSize - 1;

struct InternedGroup {
  std::string name;
  std::uint64_t hash;
  std::uint32_t index;
};

constinit std::atomic<const InternedGroup*> g_table[kTableSize] = {};
constinit std::atomic<const GroupSet*> g_snapshot{nullptr};  // null: nothing published yet
// The groups whose spans open NVTX ranges while NVTX emits: the enabled set, or on a rank that does
// not export, the groups it would export. Written under g_writer_mu only.
constinit std::atomic<const GroupSet*> g_nvtx_snapshot{nullptr};
constinit std::atomic<bool> g_nvtx_emitting{false};  // written under g_writer_mu
// The groups the flight recorder records (those of them not enabled); null or empty: none.
// Written under g_writer_mu only.
constinit std::atomic<const GroupSet*> g_flight_snapshot{nullptr};
// GPU-timed groups and those with kernel spans (set_gpu_timed_span_groups()), and who set them
// (guarded by g_writer_mu).
constinit std::atomic<const GroupSet*> g_gpu_snapshot{nullptr};
constinit std::atomic<const GroupSet*> g_gpu_kernel_snapshot{nullptr};
const void* g_gpu_owner = nullptr;
constinit std::atomic<bool> g_table_full{false};  // some enabled name could not be interned
constinit std::mutex g_writer_mu;                 // guards everything below

// Never destroyed: readers on other threads may still use them during exit.
std::vector<const InternedGroup*>& interned() {
  static auto* v = new std::vector<const InternedGroup*>();
  return *v;
}
std::vector<const GroupSet*>& published_sets() {
  static auto* v = new std::vector<const GroupSet*>();
  return *v;
}

[[gnu::always_inline]] inline const InternedGroup* find(std::string_view name,
                                                        std::uint64_t h) noexcept {
  for (std::size_t i = h & kTableMask, n = 0; n < kTableSize; i = (i + 1) & kTableMask, ++n) {
    // Acquire pairs with the release in intern_locked(): the entry's fields are visible.
    const InternedGroup* e = g_table[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e->hash == h && equal_short(e->name, name)) return e;
  }
  return nullptr;
}

bool contains(const std::atomic<const GroupSet*>& snapshot, std::string_view name) noexcept {
  const GroupSet* s = snapshot.load(std::memory_order_acquire);
  return s != nullptr && s->find(name) != s->end();
}
bool snapshot_contains(std::string_view name) noexcept { return contains(g_snapshot, name); }

// Requires g_writer_mu: the published set equal to `groups` (kept for the life of the process,
// since readers may hold it), publishing it first when it is new.
const GroupSet* publish_locked(GroupSet groups) {
  for (const GroupSet* s : published_sets()) {
    if (*s == groups) return s;
  }
  published_sets().reserve(published_sets().size() + 1);
  auto* s = new GroupSet(std::move(groups));
  published_sets().push_back(s);
  return s;
}

// Writes a flag only when its value changes, so a group on in both the old and the new state
// never reads false in between.
void store_if_changed(std::atomic<bool>& flag, bool value) noexcept {
  if (flag.load(std::memory_order_relaxed) != value) flag.store(value, std::memory_order_relaxed);
}

void store_if_changed(std::atomic<std::uint8_t>& flag, std::uint8_t value) noexcept {
  if (flag.load(std::memory_order_relaxed) != value) flag.store(value, std::memory_order_relaxed);
}

// Requires g_writer_mu.
void update_flags_locked(const InternedGroup& e) noexcept {
  const bool on = snapshot_contains(e.name);
  const bool nvtx =
      g_nvtx_emitting.load(std::memory_order_relaxed) && contains(g_nvtx_snapshot, e.name);
  const GroupSet* recorded = g_flight_snapshot.load(std::memory_order_relaxed);
  const bool recording = recorded != nullptr && !recorded->empty();
  const bool flight = !on && recording && recorded->find(e.name) != recorded->end();
  // The triggers watch the ends of step spans (slow_step, error) and job spans (error).
  const bool watch = recording && (e.name == SpanGroup::STEP || e.name == SpanGroup::JOB);
  // GPU time is given to exported spans only.
  const bool gpu = on && contains(g_gpu_snapshot, e.name);
  const bool kernels = gpu && contains(g_gpu_kernel_snapshot, e.name);
  store_if_changed(g_flags[e.index], on);
  store_if_changed(g_nvtx_flags[e.index], nvtx);
  const auto mode =
      static_cast<std::uint8_t>((flight ? kModeFlight : 0) | (watch ? kModeWatch : 0) |
                                (gpu ? kModeGpu : 0) | (kernels ? kModeGpuKernels : 0));
  store_if_changed(g_span_modes[e.index], mode);
  // GPU-timed spans take the general start, which publishes their thread's chain of them.
  store_if_changed(g_record_flags[e.index],
                   (on || flight) && !nvtx && !gpu ? kRecordsWithoutRange | mode : 0);
  store_if_changed(g_site_flags[e.index], on || flight || nvtx || tracked_by_mode());
}

void update_all_flags_locked() noexcept {
  for (const InternedGroup* e : interned()) update_flags_locked(*e);
}

// Requires g_writer_mu. Returns null when the table is full.
const InternedGroup* intern_locked(std::string_view name) {
  const std::uint64_t h = hash_short_string(name);
  if (const InternedGroup* e = find(name, h)) return e;
  auto& all = interned();
  if (all.size() >= kMaxGroups) {
    g_table_full.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  all.reserve(all.size() + 1);
  auto* e = new InternedGroup{std::string(name), h, static_cast<std::uint32_t>(all.size())};
  // The flags are set before the entry is published, so whoever finds the entry reads its state.
  update_flags_locked(*e);
  std::size_t i = h & kTableMask;
  while (g_table[i].load(std::memory_order_relaxed) != nullptr) i = (i + 1) & kTableMask;
  g_table[i].store(e, std::memory_order_release);
  all.push_back(e);
  return e;
}

}  // namespace

// fork(): the writer mutex is held across fork so the child never inherits it mid-update.
void lock_state_for_fork() noexcept { g_writer_mu.lock(); }
void unlock_state_after_fork() noexcept { g_writer_mu.unlock(); }

namespace {
// Points `site` at its group's flag in `flags`; null when the group cannot be interned.
const std::atomic<bool>* resolve_into(SiteGate& site, std::atomic<bool>* flags) noexcept {
  const InternedGroup* e = nullptr;
  try {
    std::lock_guard lock(g_writer_mu);
    e = intern_locked(site.group);
  } catch (...) {
    e = nullptr;  // out of memory: the site stays unresolved and asks by name each time
  }
  if (e == nullptr) return nullptr;
  // Relaxed: the flag arrays are statically initialised; see site_enabled().
  site.flag.store(&flags[e->index], std::memory_order_relaxed);
  return &flags[e->index];
}
}  // namespace

bool resolve_site(SiteGate& site) noexcept {
  const std::atomic<bool>* flag = resolve_into(site, g_flags);
  if (flag == nullptr) return is_span_group_enabled(site.group);
  return flag->load(std::memory_order_relaxed);
}

bool resolve_span_site(SiteGate& site) noexcept {
  const std::atomic<bool>* flag = resolve_into(site, g_site_flags);
  if (flag == nullptr) return group_state(site.group).tracked;
  return flag->load(std::memory_order_relaxed);
}

GroupState group_state(std::string_view group) noexcept {
  if (const InternedGroup* e = find(group, hash_short_string(group))) return state_at(e->index);
  // Every enabled or tracked name is interned unless the table filled up. Such a group opens no
  // NVTX range: its category would have no index.
  GroupState g;
  g.enabled = g_table_full.load(std::memory_order_relaxed) && snapshot_contains(group);
  g.tracked = g.enabled || tracked_by_mode();
  return g;
}

bool intern_group(std::string_view group, std::uint32_t& index,
                  std::string_view& interned_name) noexcept {
  const InternedGroup* e = find(group, hash_short_string(group));
  if (e == nullptr) {
    try {
      std::lock_guard lock(g_writer_mu);
      e = intern_locked(group);
    } catch (...) {
      e = nullptr;  // out of memory
    }
  }
  if (e == nullptr) return false;
  index = e->index;
  interned_name = e->name;
  return true;
}

void set_open_span_tracking(TrackOpen mode) {
  std::lock_guard lock(g_writer_mu);
  g_track_mode.store(mode, std::memory_order_relaxed);
  update_all_flags_locked();
}

void set_nvtx_span_groups(GroupSet groups) {
  std::lock_guard lock(g_writer_mu);
  g_nvtx_snapshot.store(publish_locked(std::move(groups)), std::memory_order_release);
  update_all_flags_locked();
  for (const auto& name : *g_nvtx_snapshot.load(std::memory_order_relaxed)) intern_locked(name);
}

void set_recorded_span_groups(GroupSet groups) {
  std::lock_guard lock(g_writer_mu);
  g_flight_snapshot.store(publish_locked(std::move(groups)), std::memory_order_release);
  for (const auto& name : *g_flight_snapshot.load(std::memory_order_relaxed)) intern_locked(name);
  intern_locked(SpanGroup::STEP);  // watched: their sites resolve to flags that say so
  intern_locked(SpanGroup::JOB);
  update_all_flags_locked();
}

void set_gpu_timed_span_groups(const void* owner, GroupSet timed, GroupSet kernel_spans) {
  std::lock_guard lock(g_writer_mu);
  const GroupSet* published = publish_locked(std::move(timed));
  g_gpu_snapshot.store(published, std::memory_order_release);
  g_gpu_kernel_snapshot.store(publish_locked(std::move(kernel_spans)), std::memory_order_release);
  g_gpu_owner = owner;
  for (const auto& name : *published) intern_locked(name);
  update_all_flags_locked();
}

void clear_gpu_timed_span_groups(const void* owner) {
  std::lock_guard lock(g_writer_mu);
  if (g_gpu_owner != owner) return;
  g_gpu_snapshot.store(nullptr, std::memory_order_release);
  g_gpu_kernel_snapshot.store(nullptr, std::memory_order_release);
  g_gpu_owner = nullptr;
  update_all_flags_locked();
}

GroupSet recorded_span_groups() {
  const GroupSet* s = g_flight_snapshot.load(std::memory_order_acquire);
  return s != nullptr ? *s : GroupSet{};
}

void set_nvtx_emitting(bool on) {
  std::lock_guard lock(g_writer_mu);
  g_nvtx_emitting.store(on, std::memory_order_relaxed);
  update_all_flags_locked();
}

bool nvtx_emitting() noexcept { return g_nvtx_emitting.load(std::memory_order_relaxed); }

}  // namespace detail

bool is_span_group_enabled(std::string_view group) noexcept {
  using namespace detail;
  if (const InternedGroup* e = find(group, hash_short_string(group))) {
    return g_flags[e->index].load(std::memory_order_relaxed);
  }
  // Every enabled name is interned unless the table filled up; only then ask the snapshot.
  return g_table_full.load(std::memory_order_relaxed) && snapshot_contains(group);
}

void set_enabled_span_groups(GroupSet groups) {
  using namespace detail;
  std::lock_guard lock(g_writer_mu);
  const GroupSet* snapshot = publish_locked(std::move(groups));
  g_snapshot.store(snapshot, std::memory_order_release);
  g_nvtx_snapshot.store(snapshot, std::memory_order_release);  // NVTX follows every switch
  update_all_flags_locked();
  for (const auto& name : *snapshot) intern_locked(name);
}

GroupSet enabled_span_groups() {
  const GroupSet* s = detail::g_snapshot.load(std::memory_order_acquire);
  return s != nullptr ? *s : GroupSet{};
}

}  // namespace nemo::lens
