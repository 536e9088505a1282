// The enabled-group state. Every group name a site or a set ever mentioned is interned once into
// an append-only, lock-free hash table (entries are never removed or moved) and owns one flag in a
// statically initialised array. Sites cache a pointer to their flag; lookups by name probe the
// table. Writers serialise on one mutex; readers never take it.
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/state.hpp"

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

// Eight bytes per multiply and no variable-length copies: lookups by name must stay near 10 ns.
[[gnu::always_inline]] inline std::uint64_t hash_name(std::string_view s) noexcept {
  const char* p = s.data();
  const std::size_t n = s.size();
  auto load64 = [](const char* q) {
    std::uint64_t w;
    std::memcpy(&w, q, 8);
    return w;
  };
  auto load32 = [](const char* q) {
    std::uint32_t w;
    std::memcpy(&w, q, 4);
    return static_cast<std::uint64_t>(w);
  };
  auto mix = [](std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
  };
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  if (n >= 8) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) h = mix(h, load64(p + i));
    if (i != n) h = mix(h, load64(p + n - 8));  // the tail, overlapping the last word
  } else if (n >= 4) {
    h = mix(h, load32(p) | (load32(p + n - 4) << 32));
  } else if (n != 0) {
    const auto b = [&](std::size_t i) { return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])); };
    h = mix(h, b(0) | (b(n / 2) << 8) | (b(n - 1) << 16));
  }
  return h ^ (h >> 32);
}

// Equality without a call into the C library: names are short.
[[gnu::always_inline]] inline bool same_name(const std::string& a, std::string_view b) noexcept {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  const char* p = a.data();
  const char* q = b.data();
  std::size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    std::uint64_t x, y;
    std::memcpy(&x, p + i, 8);
    std::memcpy(&y, q + i, 8);
    if (x != y) return false;
  }
  for (; i < n; ++i) {
    if (p[i] != q[i]) return false;
  }
  return true;
}

[[gnu::always_inline]] inline const InternedGroup* find(std::string_view name, std::uint64_t h) noexcept {
  for (std::size_t i = h & kTableMask, n = 0; n < kTableSize; i = (i + 1) & kTableMask, ++n) {
    // Acquire pairs with the release in intern_locked(): the entry's fields are visible.
    const InternedGroup* e = g_table[i].load(std::memory_order_acquire);
    if (e == nullptr) return nullptr;
    if (e->hash == h && same_name(e->name, name)) return e;
  }
  return nullptr;
}

bool snapshot_contains(std::string_view name) noexcept {
  const GroupSet* s = g_snapshot.load(std::memory_order_acquire);
  return s != nullptr && s->find(name) != s->end();
}

// Requires g_writer_mu. Returns null when the table is full.
const InternedGroup* intern_locked(std::string_view name) {
  const std::uint64_t h = hash_name(name);
  if (const InternedGroup* e = find(name, h)) return e;
  auto& all = interned();
  if (all.size() >= kMaxGroups) {
    g_table_full.store(true, std::memory_order_relaxed);
    return nullptr;
  }
  all.reserve(all.size() + 1);
  auto* e = new InternedGroup{std::string(name), h, static_cast<std::uint32_t>(all.size())};
  // The flag is set before the entry is published, so whoever finds the entry reads its state.
  g_flags[e->index].store(snapshot_contains(name), std::memory_order_relaxed);
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

bool resolve_site(SiteGate& site) noexcept {
  const InternedGroup* e = nullptr;
  try {
    std::lock_guard lock(g_writer_mu);
    e = intern_locked(site.group);
  } catch (...) {
    e = nullptr;  // out of memory: the site stays unresolved and asks by name each time
  }
  if (e == nullptr) return is_span_group_enabled(site.group);
  // Relaxed: the flag array is statically initialised; see site_enabled().
  site.flag.store(&g_flags[e->index], std::memory_order_relaxed);
  return g_flags[e->index].load(std::memory_order_relaxed);
}

}  // namespace detail

bool is_span_group_enabled(std::string_view group) noexcept {
  using namespace detail;
  if (const InternedGroup* e = find(group, hash_name(group))) {
    return g_flags[e->index].load(std::memory_order_relaxed);
  }
  // Every enabled name is interned unless the table filled up; only then ask the snapshot.
  return g_table_full.load(std::memory_order_relaxed) && snapshot_contains(group);
}

void set_enabled_span_groups(GroupSet groups) {
  using namespace detail;
  std::lock_guard lock(g_writer_mu);
  const GroupSet* snapshot = nullptr;
  for (const GroupSet* s : published_sets()) {
    if (*s == groups) snapshot = s;
  }
  if (snapshot == nullptr) {
    published_sets().reserve(published_sets().size() + 1);
    snapshot = new GroupSet(std::move(groups));
    published_sets().push_back(snapshot);
  }
  g_snapshot.store(snapshot, std::memory_order_release);
  // Only flags whose value changes are written, so a group in both sets never reads false.
  for (const InternedGroup* e : interned()) {
    const bool on = snapshot->count(e->name) != 0;
    if (g_flags[e->index].load(std::memory_order_relaxed) != on) {
      g_flags[e->index].store(on, std::memory_order_relaxed);
    }
  }
  for (const auto& name : *snapshot) intern_locked(name);
}

GroupSet enabled_span_groups() {
  const GroupSet* s = detail::g_snapshot.load(std::memory_order_acquire);
  return s != nullptr ? *s : GroupSet{};
}

}  // namespace nemo::lens
