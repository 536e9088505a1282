// The open-span registry (see open_spans.hpp).
#include "tracing/open_spans.hpp"

#include <mutex>
#include <string>
#include <unordered_map>

#include "nemo/lens/errors.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

constinit std::atomic<TrackOpen> g_track_mode{TrackOpen::kOff};

namespace {

struct EntryCopy {
  const SpanSite* site;
  SpanRecord* record;
  std::uint64_t start;  // ticks
  std::uint32_t token;
};

// A consistent copy of a thread's registry, or false when writers kept overlapping the copy.
bool read_stack(const OpenStack& o, std::vector<EntryCopy>& out, std::uint32_t& untracked) {
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const std::uint64_t before = o.sequence.load(std::memory_order_acquire);
    if ((before & 1) != 0) {
      __builtin_ia32_pause();
      continue;
    }
    out.clear();
    // Acquire loads: a value written after `before` makes the second look at the counter differ.
    const std::uint32_t d = std::min(o.depth.load(std::memory_order_acquire), OpenStack::kCapacity);
    for (std::uint32_t i = 0; i < d; ++i) {
      const OpenEntry& e = o.entries[i];
      out.push_back({e.site.load(std::memory_order_acquire),
                     e.record.load(std::memory_order_acquire),
                     e.start_ticks.load(std::memory_order_acquire),
                     e.token.load(std::memory_order_acquire)});
    }
    untracked = o.untracked.load(std::memory_order_relaxed);
    if (o.sequence.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

enum class RecordRead { kCopied, kEnded, kBusy };

// Copies what a reader may show of an open record, if its owner's lock is free within a few tries
// and the record is still open. Never waits longer than that for the owner.
RecordRead read_record(ThreadState& owner, SpanRecord* rec, OpenSpanView& view) {
  bool locked = false;
  for (int attempt = 0; attempt < 64 && !locked; ++attempt) {
    locked = owner.mu.try_lock();
    if (!locked) __builtin_ia32_pause();
  }
  if (!locked) return RecordRead::kBusy;
  std::lock_guard lock(owner.mu, std::adopt_lock);
  bool open = false;
  for (SpanRecord* r : owner.stack) open = open || r == rec;
  if (!open || !rec->recording) return RecordRead::kEnded;
  view.group = rec->group();
  view.name = rec->name();
  view.context = rec->context();
  copy_attributes(*rec, view.attributes);
  view.exported = !rec->orphaned;
  view.root = !rec->parent_span_id.is_valid();
  return RecordRead::kCopied;
}

}  // namespace

std::uint32_t open_light_entry(ThreadState& s, const SpanSite& site) noexcept {
  std::uint32_t token = s.open.next_token++;
  if (token == 0) token = s.open.next_token++;  // wrapped: 0 means untracked
  return open_push(s.open, &site, nullptr, now_ticks(), token) ? token : 0;
}

void close_light_span(ThreadState& owner, std::uint32_t token) noexcept {
  std::lock_guard lock(owner.mu);
  if (token == 0 || !open_remove(owner.open, [token](const OpenEntry& e) {
        return e.token.load(std::memory_order_relaxed) == token &&
               e.record.load(std::memory_order_relaxed) == nullptr;
      })) {
    open_count_untracked(owner.open, -1);
  }
}

const SpanSite* intern_site_if_room(std::string_view group, std::string_view name) noexcept {
  struct Interned {
    std::string group, name;
    SpanSite site;
  };
  static constexpr std::size_t kMaxSites = 4096;
  static auto* mu = new std::mutex();
  static auto* sites = new std::unordered_map<std::string, Interned*>();
  try {
    std::string key;
    key.reserve(group.size() + name.size() + 1);
    key.append(group).push_back('\0');
    key.append(name);
    std::lock_guard lock(*mu);
    if (auto it = sites->find(key); it != sites->end()) return &it->second->site;
    if (sites->size() >= kMaxSites) return nullptr;
    auto* e = new Interned{std::string(group), std::string(name), {}};
    e->site.gate.group = e->group;
    e->site.gate.flag.store(&g_unresolved_flag, std::memory_order_relaxed);
    e->site.name = e->name;
    if (!group.empty()) resolve_span_site(e->site.gate);  // span_site_state() reads its flag
    sites->emplace(std::move(key), e);
    return &e->site;
  } catch (...) {
    return nullptr;
  }
}

const SpanSite& intern_site(std::string_view group, std::string_view name) noexcept {
  static const SpanSite kOther{{"", &g_unresolved_flag}, "(other)"};
  const SpanSite* site = intern_site_if_room(group, name);
  return site != nullptr ? *site : kOther;
}

namespace {
std::uint64_t site_hash(std::string_view group, std::string_view name) noexcept {
  return hash_short_string(group) * 31 + hash_short_string(name);
}
SiteCacheEntry& cache_entry(ThreadState& ts, std::uint64_t hash) noexcept {
  return ts.sites[hash % std::size(ts.sites)];
}
SiteAddressEntry& address_entry(ThreadState& ts, std::string_view group,
                                std::string_view name) noexcept {
  const auto a = reinterpret_cast<std::uintptr_t>(name.data()) ^
                 (reinterpret_cast<std::uintptr_t>(group.data()) >> 4);
  return ts.site_addresses[(a * 0x9e3779b97f4a7c15ull) >> 58];  // 64 entries: the top 6 bits
}
static_assert(sizeof(ThreadState::site_addresses) / sizeof(SiteAddressEntry) == 64);
[[gnu::always_inline]] inline bool names_are(const SpanSite& site, std::string_view group,
                                             std::string_view name) noexcept {
  return equal_short(site.name, name) && equal_short(site.gate.group, group);
}
}  // namespace

const SpanSite* find_cached_site(ThreadState& ts, std::string_view group,
                                 std::string_view name) noexcept {
  SiteAddressEntry& a = address_entry(ts, group, name);
  if (a.name == name.data() && a.group == group.data() && a.site != nullptr &&
      names_are(*a.site, group, name)) {
    return a.site;
  }
  const std::uint64_t h = site_hash(group, name);
  const SiteCacheEntry& e = cache_entry(ts, h);
  if (e.site != nullptr && e.hash == h && names_are(*e.site, group, name)) {
    a = {group.data(), name.data(), e.site};
    return e.site;
  }
  return nullptr;
}

const SpanSite* cache_site(ThreadState& ts, std::string_view group, std::string_view name) noexcept {
  const SpanSite* site = intern_site_if_room(group, name);
  if (site != nullptr) {
    const std::uint64_t h = site_hash(group, name);
    cache_entry(ts, h) = {h, site};
    address_entry(ts, group, name) = {group.data(), name.data(), site};
  }
  return site;
}

std::vector<ThreadOpenSpans> snapshot_open_spans() {
  std::vector<ThreadOpenSpans> out;
  std::vector<EntryCopy> entries;
  const std::int64_t now = now_unix_nano();
  visit_thread_states([&](ThreadState& s) {
    std::uint32_t untracked = 0;
    if (!read_stack(s.open, entries, untracked)) return;
    if (entries.empty() && untracked == 0) return;
    ThreadOpenSpans t;
    t.tid = s.tid;  // written under the registry mutex, which visit_thread_states holds
    t.state = &s;
    t.untracked = untracked;
    for (const EntryCopy& e : entries) {
      OpenSpanView v;
      v.start_unix_nano = std::min(ticks_to_unix_nano(e.start), now);
      v.token = e.token;
      if (e.record != nullptr) {
        v.record = e.record;
        const RecordRead r = read_record(s, e.record, v);
        if (r == RecordRead::kEnded) continue;  // ended since the copy
        if (r == RecordRead::kBusy) v.name = "(owner busy)";
      } else if (e.site != nullptr) {
        v.group = e.site->gate.group;
        v.name = e.site->name;
      }
      t.spans.push_back(std::move(v));
    }
    if (t.spans.empty() && t.untracked == 0) return;
    out.push_back(std::move(t));
  });
  return out;
}

}  // namespace nemo::lens::detail
