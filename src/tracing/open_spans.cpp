// The open-span registry (see open_spans.hpp).
#include "tracing/open_spans.hpp"

#include <algorithm>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>

#include "nemo/lens/errors.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

constinit std::atomic<TrackOpen> g_track_mode{TrackOpen::kOff};

namespace {

struct EntryCopy {
  const SpanSite* site;
  std::uint64_t start;  // ticks
  std::uint32_t token;
};

// Copies the light entries of a registry, whose writers cannot run (the owner's lock is held) or
// may (then a copy that overlapped a write is discarded). False when writers kept overlapping.
bool read_entries(const OpenStack& o, std::vector<EntryCopy>& out, std::uint32_t& untracked) {
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
                     e.start_ticks.load(std::memory_order_acquire),
                     e.token.load(std::memory_order_acquire)});
    }
    untracked = o.untracked.load(std::memory_order_relaxed);
    if (o.sequence.load(std::memory_order_relaxed) == before) return true;
  }
  return false;
}

// Takes the owner's lock with a bounded number of tries: spins briefly, then yields so that an
// owner preempted while holding it can finish. The lock is only ever held for a few stores.
bool try_lock_owner(ThreadState& owner) noexcept {
  for (int attempt = 0; attempt < 64; ++attempt) {
    if (owner.mu.try_lock()) return true;
    __builtin_ia32_pause();
  }
  for (int attempt = 0; attempt < 1000; ++attempt) {
    if (owner.mu.try_lock()) return true;
    std::this_thread::yield();
  }
  return false;
}

// What a reader may show of an open record. Requires the owner's lock.
OpenSpanView view_of(SpanRecord& rec, const TickConverter& clock, std::int64_t now) {
  OpenSpanView view;
  view.start_unix_nano = std::min(start_unix_nano(rec, clock), now);
  view.group = rec.group();
  view.name = rec.name();
  view.context = rec.context();
  copy_attributes(rec, view.attributes);
  view.exported = !rec.orphaned;
  view.root = !rec.parent_span_id.is_valid();
  view.record = &rec;
  return view;
}

}  // namespace

std::uint32_t open_light_entry(ThreadState& s, const SpanSite& site) noexcept {
  std::uint32_t token = s.open.next_token++;
  if (token == 0) token = s.open.next_token++;  // wrapped: 0 means untracked
  return open_push(s.open, &site, now_ticks(), token) ? token : 0;
}

void close_light_span(ThreadState& owner, std::uint32_t token) noexcept {
  std::lock_guard lock(owner.mu);
  if (token == 0 || !open_remove(owner.open, token)) open_count_untracked(owner.open, -1);
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
}  // namespace

const SpanSite* find_cached_site_by_hash(ThreadState& ts, std::string_view group,
                                         std::string_view name) noexcept {
  const std::uint64_t h = site_hash(group, name);
  const SiteCacheEntry& e = cache_entry(ts, h);
  if (e.site != nullptr && e.hash == h && names_are(*e.site, group, name)) {
    site_address_entry(ts, group, name) = {group.data(), name.data(), e.site, {}, 0};
    return e.site;
  }
  return nullptr;
}

void remember_off_pair(ThreadState& ts, std::string_view group, std::string_view name) noexcept {
  std::uint32_t index = 0;
  std::string_view interned;
  if (!intern_group(group, index, interned)) return;  // the table is full: asked by name each time
  site_address_entry(ts, group, name) = {group.data(), name.data(), nullptr, interned, index};
}

const SpanSite* cache_site(ThreadState& ts, std::string_view group,
                           std::string_view name) noexcept {
  const SpanSite* site = intern_site_if_room(group, name);
  if (site != nullptr) {
    const std::uint64_t h = site_hash(group, name);
    cache_entry(ts, h) = {h, site};
    site_address_entry(ts, group, name) = {group.data(), name.data(), site, {}, 0};
  }
  return site;
}

std::vector<ThreadOpenSpans> snapshot_open_spans() {
  std::vector<ThreadOpenSpans> out;
  std::vector<EntryCopy> entries;
  std::vector<OpenSpanView> records;
  const std::int64_t now = now_unix_nano();
  const TickConverter clock = tick_converter();  // one for all: start times keep their order
  const bool records_tracked = g_track_mode.load(std::memory_order_relaxed) != TrackOpen::kOff;
  visit_thread_states([&](ThreadState& s) {
    ThreadOpenSpans t;
    records.clear();
    if (try_lock_owner(s)) {
      std::lock_guard lock(s.mu, std::adopt_lock);
      read_entries(s.open, entries, t.untracked);  // no writer runs: the first copy holds
      if (records_tracked) {
        for (SpanRecord* r : s.stack) {
          // Sampled-out records and attached contexts are on the stack only as parents.
          if (r->recording && r->pipeline != nullptr) records.push_back(view_of(*r, clock, now));
        }
      }
    } else {
      t.owner_busy = true;
      if (!read_entries(s.open, entries, t.untracked)) return;
    }
    if (entries.empty() && records.empty() && t.untracked == 0) return;
    t.tid = s.tid;  // written under the registry mutex, which visit_thread_states holds
    t.state = &s;
    // Records and light entries each in the order they started; together, by start time.
    auto r = records.begin();
    for (const EntryCopy& e : entries) {
      OpenSpanView v;
      v.group = e.site->gate.group;
      v.name = e.site->name;
      v.start_unix_nano = std::min(clock.to_unix_nano(e.start), now);
      v.token = e.token;
      for (; r != records.end() && r->start_unix_nano <= v.start_unix_nano; ++r) {
        t.spans.push_back(std::move(*r));
      }
      t.spans.push_back(std::move(v));
    }
    for (; r != records.end(); ++r) t.spans.push_back(std::move(*r));
    out.push_back(std::move(t));
  });
  return out;
}

}  // namespace nemo::lens::detail
