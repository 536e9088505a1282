// The enabled-group state. Every group name a site or a set ever mentioned is interned once into
// an append-only, lock-free hash table (entries are never removed or moved) and owns two flags in
// statically initialised arrays: enabled, and site (enabled, or every group's open spans are
// tracked, TRACK_OPEN=all; see gate.hpp). Sites cache a pointer to their flag; lookups by name probe the table. Writers
// serialise on one mutex; readers never take it.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/state.hpp"
#include "strings.hpp"
#include "tracing/open_spans.hpp"

namespace nemo::lens {
namespace detail {

const std::atomic<bool> g_unresolved_flag{true};

namespace {

constexpr std::uint32_t kMaxGroups = 4096;
constexpr std::size_t kTableSize = 8192;  // power of two, at most half full
constexpr std::size_t kTableMask = kTableSize - 1;

struct InternedGroup {
  std::string name;
  std::uint64_t hash;
  std::uint32_t index;
};

constinit std::atomic<bool> g_flags[kMaxGroups] = {};
constinit std::atomic<bool> g_site_flags[kMaxGroups] = {};
constinit std::atomic<const InternedGroup*> g_table[kTableSize] = {};
constinit std::atomic<const GroupSet*> g_snapshot{nullptr};  // null: nothing published yet
constinit std::atomic<bool> g_table_full{false};  // some enabled name could not be interned
constinit std::mutex g_writer_mu;                  // guards everything below

// Never destroyed: readers on other threads may still use them during exit.
std::vector<const InternedGroup*>& interned() {
  static auto* v = new std::vector<const InternedGroup*>();
  return *v;
}
std::vector<const GroupSet*>& published_sets() {
  static auto* v = new std::vector<const GroupSet*>();
  return *v;
}

[[gnu::always_inline]] inline const InternedGroup* find(std::string_view name, std::uint64_t h) noexcept {
  for (std::size_t i = h & kTableMask, n = 0; n < kTableSize; i = (i + 1) & kTableMask, ++n) {
    // Acquire pairs with the release in intern_locked(): the entry's fields are visible.
    const InternedGroup* e = g_table[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e->hash == h && same_short_string(e->name, name)) return e;
  }
  return nullptr;
}

bool snapshot_contains(std::string_view name) noexcept {
  const GroupSet* s = g_snapshot.load(std::memory_order_acquire);
  return s != nullptr && s->find(name) != s->end();
}

// Whether a group's open spans are tracked without it being enabled: only with TRACK_OPEN=all.
bool tracked_by_mode() noexcept {
  return g_track_mode.load(std::memory_order_relaxed) == TrackOpen::kAll;
}

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

// Requires g_writer_mu. Writes a flag only when its value changes, so a group on in both the old
// and the new state never reads false in between.
void update_flags_locked(const InternedGroup& e) noexcept {
  const bool on = snapshot_contains(e.name);
  if (g_flags[e.index].load(std::memory_order_relaxed) != on) {
    g_flags[e.index].store(on, std::memory_order_relaxed);
  }
  const bool site = on || tracked_by_mode();
  if (g_site_flags[e.index].load(std::memory_order_relaxed) != site) {
    g_site_flags[e.index].store(site, std::memory_order_relaxed);
  }
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

GroupState span_site_state(const SiteGate& site) noexcept {
  const std::atomic<bool>* flag = site.flag.load(std::memory_order_relaxed);
  if (flag >= g_site_flags && flag < g_site_flags + kMaxGroups) {
    const auto index = static_cast<std::size_t>(flag - g_site_flags);
    return {g_flags[index].load(std::memory_order_relaxed), flag->load(std::memory_order_relaxed)};
  }
  return group_state(site.group);  // unresolved: the table is full
}

GroupState group_state(std::string_view group) noexcept {
  if (const InternedGroup* e = find(group, hash_short_string(group))) {
    return {g_flags[e->index].load(std::memory_order_relaxed),
            g_site_flags[e->index].load(std::memory_order_relaxed)};
  }
  // Every enabled or tracked name is interned unless the table filled up.
  const bool enabled = g_table_full.load(std::memory_order_relaxed) && snapshot_contains(group);
  return {enabled, enabled || tracked_by_mode()};
}

void set_open_span_tracking(TrackOpen mode) {
  std::lock_guard lock(g_writer_mu);
  g_track_mode.store(mode, std::memory_order_relaxed);
  for (const InternedGroup* e : interned()) update_flags_locked(*e);
}

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
  for (const InternedGroup* e : interned()) update_flags_locked(*e);
  for (const auto& name : *snapshot) intern_locked(name);
}

GroupSet enabled_span_groups() {
  const GroupSet* s = detail::g_snapshot.load(std::memory_order_acquire);
  return s != nullptr ? *s : GroupSet{};
}

}  // namespace nemo::lens
