// Span operations: start, attributes, events, links, status, end. Every function is noexcept and
// drops (rather than throws) when memory runs out.
#include "nemo/lens/span.hpp"

#include <algorithm>
#include <cassert>
#include <cstring>
#include <optional>
#include <span>

#include "nemo/lens/semconv.hpp"
#include "nemo/lens/state.hpp"
#include "nvtx/ranges.hpp"
#include "record/recorder.hpp"
#include "tracing/engine.hpp"
#include "tracing/exception_info.hpp"

namespace nemo::lens {

namespace detail {

std::atomic<Pipeline*> g_active_pipeline{nullptr};

namespace {

std::span<const Attribute> as_span(std::initializer_list<Attribute> list) noexcept {
  return {list.begin(), list.size()};
}

// Attributes of a new event or link: an empty list, every element in use.
void put_new_attributes(std::vector<KeyValue>& list, std::uint32_t& dropped,
                        std::uint32_t count_limit, const Pipeline& p,
                        std::span<const Attribute> attributes) {
  std::uint32_t used = 0;
  for (const Attribute& attr : attributes) {
    put_list_attribute(list, used, dropped, count_limit, 0, p, attr.key, attr.value);
  }
}

bool sample_root(const SamplerConfig& s, const TraceId& trace_id) noexcept {
  switch (s.root) {
    case SamplerConfig::Root::kAlwaysOn:
      return true;
    case SamplerConfig::Root::kAlwaysOff:
      return false;
    case SamplerConfig::Root::kRatio: {
      if (s.ratio_one) return true;
      std::uint64_t low = 0;
      for (int i = 8; i < 16; ++i) low = (low << 8) | trace_id.bytes[i];
      return low < s.ratio_threshold;
    }
  }
  return true;
}

void add_link_locked(SpanRecord& r, const SpanContext& target,
                     std::span<const Attribute> attributes) {
  if (!target.is_valid()) return;
  SpanCold& c = r.use_cold();
  if (c.links.size() >= r.pipeline->limits.link_count) {
    ++c.dropped_links_count;
    return;
  }
  SpanLink link;
  link.context = target;
  put_new_attributes(link.attributes, link.dropped_attributes_count,
                     r.pipeline->limits.link_attribute_count, *r.pipeline, attributes);
  c.links.push_back(std::move(link));
}

void add_event_locked(SpanRecord& r, std::string_view name, std::int64_t time,
                      std::span<const Attribute> attributes) {
  SpanCold& c = r.use_cold();
  if (c.events.size() >= r.pipeline->limits.event_count) {
    ++c.dropped_events_count;
    return;
  }
  SpanEvent ev;
  ev.name = std::string(name);
  ev.time_unix_nano = time;
  put_new_attributes(ev.attributes, ev.dropped_attributes_count,
                     r.pipeline->limits.event_attribute_count, *r.pipeline, attributes);
  c.events.push_back(std::move(ev));
}

void record_exception_locked(SpanRecord& r, std::string_view type, std::string_view message,
                             std::int64_t time) {
  const Attribute attributes[] = {{semconv::kExceptionType, type},
                                  {semconv::kExceptionMessage, message}};
  add_event_locked(r, semconv::kExceptionEvent, time, attributes);
  r.exception_recorded = true;
  if (!r.status_final) {
    r.status_code = StatusCode::kError;
    r.use_cold().status_message = std::string(message);
  }
}

// What a new span takes from its parent, a record or a context.
struct ParentView {
  const TraceId* trace_id = nullptr;  // null: no parent
  const SpanId* span_id = nullptr;
  std::string_view trace_state;
  bool is_remote = false;
  std::uint8_t trace_flags = 0;

  static ParentView of(const SpanRecord& r) noexcept {
    return {&r.trace_id, &r.span_id, r.trace_state(), r.is_remote, r.trace_flags};
  }
  static ParentView of(const SpanContext& c) noexcept {
    return {&c.trace_id, &c.span_id, c.trace_state, c.is_remote, c.trace_flags};
  }
};

struct StartRequest {
  const SpanSite* site = nullptr;  // names the span when set; else group and name
  bool own_site = false;           // `site` is a LENS_SPAN site, not an interned one
  std::string_view group;
  std::string_view name;
  SpanKind kind = SpanKind::kInternal;
  const SpanContext* parent = nullptr;
  bool root = false;
  bool not_current = false;  // SpanStartOptions::current == false
  const SpanContext* link = nullptr;
  std::int64_t start_unix = 0;  // SpanStartOptions::start_time_unix_nano; 0: now
};

// The thread's current span: its latest open record that may be a parent (not one started with
// SpanStartOptions::current = false); with `exported_only`, the latest such record that is
// exported. A span recorded only for the flight recorder (kModeFlight) leaves with a capture or
// never, so an exported child naming it would have no parent in the trace outside the captured
// steps: exported spans take the parents they have without the recorder. Null when there is
// none. Requires ts.mu.
inline SpanRecord* current_record(ThreadState& ts, bool exported_only = false) noexcept {
  for (auto it = ts.stack.rbegin(); it != ts.stack.rend(); ++it) {
    if (NEMO_LENS_LIKELY(!(*it)->not_current &&
                         !(exported_only && ((*it)->mode & kModeFlight) != 0))) {
      return *it;
    }
  }
  return nullptr;
}

// Starts a recorded span in `p` (which records something). Inline into both callers: a
// LENS_SPAN site's request is constant there, and most of the branches fold away.
[[gnu::always_inline]] inline SpanRecord* start_record(
    Pipeline* p, const StartRequest& req, std::initializer_list<Attribute> attributes) noexcept {
  ThreadState* ts = this_thread_state();
  if (ts == nullptr) return nullptr;
  SpanRecord* rec = take_record(*ts);
  if (rec == nullptr) return nullptr;
  const SiteKeys* keys = nullptr;
  try {
    OwnerLockGuard lock(ts->mu);  // this thread's own state
    init_record(*rec, ts, p);
    // Flight-recorded or watched (record/recorder.hpp): read where the span is named.
    std::uint8_t mode = rec->mode;
    if (req.site != nullptr) {
      mode = span_site_mode(req.site->gate);
    } else if (!req.group.empty()) {
      mode = group_state(req.group).mode;
    }
    // Parent: explicit, else the thread's current span (for an exported span, the current
    // exported one), else the inherited context, else none.
    ParentView parent;
    if (req.parent != nullptr && req.parent->is_valid()) {
      parent = ParentView::of(*req.parent);
    } else if (SpanRecord* top =
                   req.root ? nullptr : current_record(*ts, (mode & kModeFlight) == 0);
               top != nullptr) {
      ensure_ids(*top, t_ids);  // this thread's own record: made now if nothing asked before
      parent = ParentView::of(*top);
    } else if (!p->plain_roots && p->inherited.is_valid()) {
      parent = ParentView::of(p->inherited);  // the process's own parent (TRACEPARENT at set-up)
    }
    bool sampled;
    const bool has_parent = parent.trace_id != nullptr;
    if (has_parent) {
      rec->trace_id = *parent.trace_id;
      if (!parent.trace_state.empty()) rec->use_cold().trace_state.assign(parent.trace_state);
      rec->parent_span_id = *parent.span_id;
      rec->parent_is_remote = parent.is_remote;
    }
    if (has_parent && p->sampler.parent_based) {
      sampled = (parent.trace_flags & 0x01) != 0;
    } else if (!has_parent && p->plain_roots) {
      sampled = true;  // always_on
    } else {
      // The ratio sampler decides by the trace id, so a root's is made now; otherwise both ids
      // wait until something needs them (ensure_ids()).
      if (!has_parent && p->sampler.root == SamplerConfig::Root::kRatio) {
        rec->trace_id = t_ids.trace_id();
      }
      sampled = sample_root(p->sampler, rec->trace_id);
    }
    // W3C Level 2's random flag describes the trace id: children keep their parent's; a root's
    // id is random (the thread's generator, seeded by the OS), so it has the flag, as
    // OpenTelemetry's SDKs (and so NeMo Lens) set it.
    const std::uint8_t random = has_parent ? (parent.trace_flags & 0x02) : 0x02;
    rec->trace_flags = static_cast<std::uint8_t>((sampled ? 0x01 : 0x00) | random);
    rec->recording = sampled;
    if (sampled) {
      if (req.site != nullptr) {
        rec->site = req.site;
      } else {
        SpanCold& c = rec->use_cold();
        c.name.assign(req.name);
        c.group.assign(req.group);
      }
      rec->kind = req.kind;
      rec->thread_id = ts->tid;
      std::size_t checked = 0;  // the first attributes, stored through the site's checked keys
      if (attributes.size() != 0 && req.site != nullptr) {
        keys = site_keys(*req.site, p);
        if (keys != nullptr && keys->count == attributes.size()) {
          checked = put_checked_attributes(*rec, *keys, attributes.begin());
        }
      }
      for (std::size_t i = checked; i < attributes.size(); ++i) {
        put_span_attribute(*rec, attributes.begin()[i].key, attributes.begin()[i].value);
      }
      if (req.link != nullptr) add_link_locked(*rec, *req.link, {});
      if (NEMO_LENS_UNLIKELY(req.start_unix > 0)) {
        rec->start_ticks = static_cast<std::uint64_t>(req.start_unix);
        rec->unix_times = true;
      } else {
        // Unix nanoseconds where the clock does not use the TSC: marked so, so that the common
        // end, which reads the TSC, leaves the span to end_record().
        bool tsc = false;
        rec->start_ticks = now_ticks(tsc);
        rec->unix_times = !tsc;
      }
    }
    rec->not_current = req.not_current;
    rec->mode = mode;
    ts->stack.push_back(rec);
    if (NEMO_LENS_UNLIKELY((rec->mode & kModeGpu) != 0)) publish_gpu_chain_locked(*ts);
  } catch (...) {
    recycle(rec);  // out of memory: this span is not recorded
    return nullptr;
  }
  ts->count(ts->started);
  if (NEMO_LENS_UNLIKELY(keys == nullptr && attributes.size() != 0 && req.site != nullptr &&
                         rec->recording)) {
    check_site_keys(*req.site, *p, attributes, req.own_site);  // the site's first, in `p`
  }
  return rec;
}

#if NEMO_LENS_HAVE_TSC
// Whether the fast end (try_end_record()) may read the TSC.
constexpr bool kTscTicks = true;
inline std::uint64_t tsc_ticks() noexcept { return __rdtsc(); }
#else
constexpr bool kTscTicks = false;
inline std::uint64_t tsc_ticks() noexcept { return 0; }
#endif

}  // namespace

namespace {
// A handle without a record: its rec_ is the thread state that started the span with tag bits
// set; kLightTag when the span has a light entry, kRangeTag when it has only an NVTX range.
constexpr std::uintptr_t kLightTag = 1, kRangeTag = 2, kTagMask = kLightTag | kRangeTag;
std::uintptr_t tags(const SpanRecord* r) noexcept {
  return reinterpret_cast<std::uintptr_t>(r) & kTagMask;
}
bool is_light(const SpanRecord* r) noexcept { return (tags(r) & kLightTag) != 0; }
ThreadState* tagged_owner(SpanRecord* r) noexcept {
  return reinterpret_cast<ThreadState*>(reinterpret_cast<std::uintptr_t>(r) & ~kTagMask);
}
// The record behind a handle; null for an empty handle or one without a record.
SpanRecord* record_of(SpanRecord* r) noexcept { return tags(r) != 0 ? nullptr : r; }

bool tracking() noexcept { return g_track_mode.load(std::memory_order_relaxed) != TrackOpen::kOff; }

// The NVTX category of ungated spans: none (0).
constexpr std::uint32_t kNoGroupIndex = UINT32_MAX;
}  // namespace

struct SpanAccess {
  static Span make(SpanRecord* rec) noexcept { return Span(rec, 0, uncaught_exceptions_now()); }
  static Span make(SpanRecord* rec, int uncaught) noexcept { return Span(rec, 0, uncaught); }
  static void finish(Span& span, bool unwinding) noexcept;                 // Span::finish()
  static void finish_at(Span& span, std::int64_t end_unix_nano) noexcept;  // Span::end(time)
  static Span make_light(ThreadState* owner, std::uint32_t token) noexcept {
    return Span(reinterpret_cast<SpanRecord*>(reinterpret_cast<std::uintptr_t>(owner) | kLightTag),
                token, uncaught_exceptions_now());
  }
  // Gives `span`, just started on the thread whose state is `ts`, the NVTX range `range`.
  static void attach_range(Span& span, ThreadState& ts, std::uint32_t range) noexcept {
    if (span.rec_ == nullptr) {
      span.rec_ = reinterpret_cast<SpanRecord*>(reinterpret_cast<std::uintptr_t>(&ts) | kRangeTag);
      span.nvtx_ = range;
    } else if (SpanRecord* rec = record_of(span.rec_)) {
      rec->nvtx = range;  // read only by the handle's finish()
    } else {
      span.nvtx_ = range;  // a light handle of `ts`
    }
  }
};

namespace {
// Opens an NVTX range for a span of `site`, then starts the span with `start`, and gives it the
// range. Without a thread state the span gets no range.
template <class Start>
Span start_with_range(const SpanSite& site, std::uint32_t group_index, Start&& start) noexcept {
  ThreadState* ts = this_thread_state();
  if (ts == nullptr) return start();
  const std::uint32_t range = nvtx_open(*ts, site, group_index);
  Span span = start();
  if (range != 0) SpanAccess::attach_range(span, *ts, range);
  return span;
}
}  // namespace

Span open_light_span(const SpanSite& site) noexcept {
  ThreadState* ts = this_thread_state();
  if (ts == nullptr) return Span();
  std::uint32_t token = 0;
  {
    OwnerLockGuard lock(ts->mu);
    token = open_light_entry(*ts, site);
  }
  return SpanAccess::make_light(ts, token);
}

bool add_event_to_open_record(SpanRecord* rec, std::string_view name,
                              std::initializer_list<Attribute> attributes) noexcept {
  const std::int64_t now = now_unix_nano();
  std::lock_guard lock(rec->owner->mu);
  bool open = false;
  for (SpanRecord* r : rec->owner->stack) open = open || r == rec;
  if (!open || !rec->recording || rec->orphaned) return false;
  try {
    add_event_locked(*rec, name, now, as_span(attributes));
  } catch (...) {
    return false;
  }
  return true;
}

namespace {
// start_site_span() for every case but a recorded span without an NVTX range. Apart, so that the
// common case keeps its values in registers (a lambda capturing them would put them in memory).
[[gnu::noinline]] Span start_site_span_slow(const SpanSite& site, GroupState g, Pipeline* p,
                                            std::initializer_list<Attribute> attributes) noexcept {
  auto start = [&]() noexcept -> Span {
    if (p != nullptr && (g.enabled || g.flight()) && p->sampler.records_anything) {
      StartRequest req;
      req.site = &site;
      req.own_site = true;
      return SpanAccess::make(start_record(p, req, attributes));
    }
    if (g.tracked && tracking()) return open_light_span(site);
    return Span();
  };
  if (!g.nvtx) return start();
  return start_with_range(site, g.index, start);
}

// Stores a LENS_SPAN site's attributes in `rec` through the site's checked keys, none of which
// may differ from the ones checked (the same key literal and value type), and no string may be
// longer than a slot or end within 16 bytes of a page's end (copy_within_page()): false, at the
// first that does, for start_record() to store them all again.
[[gnu::always_inline]] inline bool put_site_attributes(SpanRecord& rec, const SiteKeys& keys,
                                                       const Attribute* attributes,
                                                       std::size_t count) noexcept {
  if (count > SpanRecord::kInlineAttributes) return false;  // never (keys.count): for the unrolling
#pragma GCC unroll 4
  for (std::size_t i = 0; i < count; ++i) {
    const Attribute& a = attributes[i];
    const SiteKeys::Key& k = keys.keys[i];
    if (a.key.data() != k.data || a.key.size() != k.slot.key_size || a.value.type() != k.type ||
        !store_checked_value(rec.attributes[i], k, a.value,
                             [](char* dst, const char* src, std::size_t n) noexcept {
                               return copy_within_page(dst, src, n);
                             })) {
      return false;
    }
  }
  return true;
}

// The common start of a LENS_SPAN site's span, with no call on its way: a recorded span of
// thread state `ts` (the caller's) whose record cache and stack have room, the site's keys checked
// for `p` and recognised by address, a root or the child of a sampled parent with ids and no trace
// state as `p` allows (Pipeline::fast_starts). `record_flags` is what site_record_flags() of the
// site's group said (not 0). Null, with nothing changed, otherwise.
[[gnu::always_inline]] inline SpanRecord* try_start_site_record(const SpanSite& site, Pipeline& p,
                                                                ThreadState& ts,
                                                                std::uint8_t record_flags,
                                                                const Attribute* attributes,
                                                                std::size_t count) noexcept {
  auto& stack = ts.stack;
  auto& cache = ts.cache;
  // Acquire pairs with check_site_keys()' publication.
  const auto* keys = static_cast<const SiteKeys*>(site.keys.load(std::memory_order_acquire));
  if (NEMO_LENS_UNLIKELY(!kTscTicks || cache.empty() ||
                         (count != 0 && (keys == nullptr || keys->checked_by_address != &p)))) {
    return nullptr;
  }
  SpanRecord* rec = cache.back();  // owner only: nobody sees it until it is on the stack
  rec->site = &site;               // (early: one value less to keep until the stores below)
  prefetch_record_ahead(cache);    // (here, where the cache's bounds are in registers)
  if (NEMO_LENS_UNLIKELY(rec->cold_used ||
                         (count != 0 && !put_site_attributes(*rec, *keys, attributes, count)) ||
                         !ts.mu.try_lock_as_owner_if_unshared())) {
    return nullptr;
  }
  // Parent: the thread's current span, else none (start_record() for every other case). The
  // capacity is checked here, next to the push, so that the push needs no growing path.
  const SpanRecord* top = stack.top();
  if (NEMO_LENS_UNLIKELY(
          stack.full() ||
          (top == nullptr ? (p.fast_starts & Pipeline::kFastRoots) == 0
                          : (p.fast_starts & Pipeline::kFastChildren) == 0 || top->not_current ||
                                !top->span_id.is_valid() || (top->trace_flags & 0x01) == 0 ||
                                (top->cold_used && !top->cold->trace_state.empty()) ||
                                // an exported span under a recorded one: current_record()
                                ((top->mode & ~record_flags) & kModeFlight) != 0))) {
    ts.mu.unlock_as_owner();
    return nullptr;
  }
  // The record is clean (clean_record()), as every free record is: what init_record() and
  // start_record() leave in a recorded root of a site is there already, and a child's context
  // comes from its parent.
  assert(record_is_clean(*rec));
  cache.pop_back();
  stack.push_back(rec);  // within its capacity: no allocation
  if (top != nullptr) {
    rec->trace_id = top->trace_id;
    rec->parent_span_id = top->span_id;
    rec->parent_is_remote = top->is_remote;
    rec->trace_flags = static_cast<std::uint8_t>(0x01 | (top->trace_flags & 0x02));
  }
  rec->owner = &ts;
  rec->pipeline = &p;
  rec->thread_id = ts.tid;
  rec->mode = static_cast<std::uint8_t>(record_flags & ~kRecordsWithoutRange);  // not GPU-timed
  rec->inline_used = static_cast<std::uint8_t>(count);
  rec->start_ticks = tsc_ticks();
  ts.mu.unlock_as_owner();
  ts.count(ts.started);
  return rec;
}

// start_site_span() for every case try_start_site_record() does not take. Apart, so that the
// common case saves no registers.
[[gnu::noinline]] Span start_site_span_general(
    const SpanSite& site, std::initializer_list<Attribute> attributes) noexcept {
  Pipeline* p = g_active_pipeline.load(std::memory_order_acquire);
  if (NEMO_LENS_LIKELY(records_without_range(site.gate) && p != nullptr &&
                       p->sampler.records_anything)) {
    StartRequest req;
    req.site = &site;
    req.own_site = true;
    return SpanAccess::make(start_record(p, req, attributes));
  }
  return start_site_span_slow(site, span_site_state(site.gate), p, attributes);
}
}  // namespace

// Without GCC's SLP vectoriser, which pairs two of the record's pointer stores through an SSE
// register: four instructions for two.
#if defined(__GNUC__) && !defined(__clang__)
[[gnu::optimize("no-tree-slp-vectorize")]]
#endif
Span start_site_span(const SpanSite& site, std::initializer_list<Attribute> attributes) noexcept {
  Pipeline* p = g_active_pipeline.load(std::memory_order_acquire);
  ThreadState* ts = t_state;
  const std::uint8_t record_flags = site_record_flags(site.gate);
  if (NEMO_LENS_LIKELY(record_flags != 0)) {
    if (SpanRecord* rec = p != nullptr && ts != nullptr
                              ? try_start_site_record(site, *p, *ts, record_flags,
                                                      attributes.begin(), attributes.size())
                              : nullptr) {
      return SpanAccess::make(rec, static_cast<int>(ts->eh->uncaught_exceptions));
    }
  }
  return start_site_span_general(site, attributes);
}

}  // namespace detail

using detail::SpanRecord;

namespace {
// What start_span() asks for: a span named by `site`, or by options.group and `name` when null.
detail::StartRequest start_request(std::string_view name, const SpanStartOptions& options,
                                   const detail::SpanSite* site) noexcept {
  detail::StartRequest req;
  req.site = site;
  req.group = options.group;
  req.name = name;
  req.kind = options.kind;
  req.parent = options.parent;
  req.root = options.root;
  req.not_current = !options.current;
  req.link = options.link;
  req.start_unix = options.start_time_unix_nano;
  return req;
}

// start_span() for every case but a recorded span of a cached site without an NVTX range. `site`
// is the pair's site if the thread's cache had it, else null.
Span start_span_slow(std::string_view name, const SpanStartOptions& options,
                     std::initializer_list<Attribute> attributes, detail::Pipeline* p,
                     detail::ThreadState* ts, const detail::SpanSite* site) noexcept {
  const bool tracking = detail::tracking();
  const bool nvtx = detail::nvtx_emitting();
  if (p == nullptr && !tracking && !nvtx) return Span();
  // An ungated span is on whenever something records; its NVTX range has no category.
  detail::GroupState g{true, true, nvtx, 0, detail::kNoGroupIndex};
  if (!options.group.empty()) {
    g = site != nullptr ? detail::span_site_state(site->gate) : detail::group_state(options.group);
  }
  // A span that is not exported may still be tracked as open, for `lens ctl dump`.
  // Exported, or recorded for the flight recorder: a record either way.
  const bool exported = p != nullptr && p->sampler.records_anything && (g.enabled || g.flight());
  const bool light = !exported && g.tracked && tracking;
  if (!exported && !light && !g.nvtx) {
    // A group that is off (not enabled, tracked or NVTX): the thread's cache remembers it, so that
    // the next start of the same strings reads the group's flag and hashes nothing.
    if (site == nullptr && ts != nullptr && !options.group.empty() && !g.tracked) {
      detail::remember_off_pair(*ts, options.group, name);
    }
    return Span();
  }
  // The names as an interned site, cached in the thread: the record then carries a pointer, not
  // copies. Only pairs that start something are interned, so that pairs that are off never fill
  // the table. Null without a thread state or once the table is full: names are copied.
  if (site == nullptr && ts != nullptr && (exported || light || g.nvtx)) {
    site = detail::cache_site(*ts, options.group, name);
  }
  auto start = [&]() noexcept -> Span {
    if (!exported) {
      if (!light) return Span();
      return detail::open_light_span(site != nullptr ? *site
                                                     : detail::intern_site(options.group, name));
    }
    return detail::SpanAccess::make(
        detail::start_record(p, start_request(name, options, site), attributes));
  };
  if (NEMO_LENS_LIKELY(!g.nvtx)) return start();
  return detail::start_with_range(
      site != nullptr ? *site : detail::intern_site(options.group, name), g.index, start);
}
}  // namespace

namespace {
// What start_cached() found.
enum class CachedStart : std::uint8_t {
  kRecord,  // the common case: start the span's record
  kOff,     // nothing to start: the pair's group is off (the thread's cache remembers it)
  kSlow,    // start_span_slow() decides
};

// Whether a start_span() or start_managed_span() is the common case: a gated pair this thread
// started before, its group recorded, no NVTX range (kRecord: `site` is the pair's site and `p`
// the pipeline to start the span in); or a pair this thread found off before, its group still off
// (kOff). kSlow: `site` is the pair's site if the thread's cache has it, else null, and `p` and
// `ts` are as start_span_slow() takes them.
[[gnu::always_inline]] inline CachedStart start_cached(std::string_view group,
                                                       std::string_view name, detail::Pipeline*& p,
                                                       detail::ThreadState*& ts,
                                                       const detail::SpanSite*& site) noexcept {
  p = detail::g_active_pipeline.load(std::memory_order_acquire);
  ts = detail::this_thread_state_if_any();
  site = nullptr;
  if (NEMO_LENS_LIKELY(p != nullptr && ts != nullptr && !group.empty())) {
    const detail::CachedPair found = detail::find_cached_pair(*ts, group, name, site);
    if (found == detail::CachedPair::kSite &&
        NEMO_LENS_LIKELY(detail::records_without_range(site->gate) &&
                         p->sampler.records_anything)) {
      return CachedStart::kRecord;
    }
    if (found == detail::CachedPair::kOff) return CachedStart::kOff;
  }
  if (ts == nullptr) ts = detail::this_thread_state();
  return CachedStart::kSlow;
}
}  // namespace

Span start_span(std::string_view name, const SpanStartOptions& options,
                std::initializer_list<Attribute> attributes) noexcept {
  detail::Pipeline* p;
  detail::ThreadState* ts;
  const detail::SpanSite* site;
  const CachedStart cached = start_cached(options.group, name, p, ts, site);
  if (NEMO_LENS_LIKELY(cached == CachedStart::kRecord)) {
    return detail::SpanAccess::make(
        detail::start_record(p, start_request(name, options, site), attributes));
  }
  if (cached == CachedStart::kOff) return Span();
  return start_span_slow(name, options, attributes, p, ts, site);
}

namespace detail {
namespace {
// start_managed_span() for every case its common start does not take. Apart, so that the common
// case saves few registers.
[[gnu::noinline]] Span start_managed_span_general(
    std::string_view group, std::string_view name,
    std::initializer_list<Attribute> attributes) noexcept {
  Pipeline* p;
  ThreadState* ts;
  const SpanSite* site;
  const CachedStart cached = start_cached(group, name, p, ts, site);
  if (NEMO_LENS_LIKELY(cached == CachedStart::kRecord)) {
    StartRequest req;  // no parent, root, link or kind: those fold away in start_record()
    req.site = site;
    return SpanAccess::make(start_record(p, req, attributes));
  }
  if (cached == CachedStart::kOff) return Span();
  SpanStartOptions options;
  options.group = group;
  return start_span_slow(name, options, attributes, p, ts, site);
}
}  // namespace

// Without GCC's SLP vectoriser, as start_site_span().
#if defined(__GNUC__) && !defined(__clang__)
[[gnu::optimize("no-tree-slp-vectorize")]]
#endif
Span start_managed_span(std::string_view group, std::string_view name,
                        std::initializer_list<Attribute> attributes) noexcept {
  // The common case, with no call on its way: a pair this thread started before, found by the
  // names' addresses, its group recorded without an NVTX range, and the common start of a
  // LENS_SPAN site's span (a cached pair is a site).
  Pipeline* p = g_active_pipeline.load(std::memory_order_acquire);
  ThreadState* ts = t_state;
  if (NEMO_LENS_LIKELY(p != nullptr && ts != nullptr)) {
    const SiteAddressEntry& a = site_address_entry(*ts, group, name);
    if (NEMO_LENS_LIKELY(a.name == name.data() && a.group == group.data())) {
      const SpanSite* site = a.site;
      if (NEMO_LENS_LIKELY(site != nullptr)) {
        const std::uint8_t record_flags = site_record_flags(site->gate);
        if (NEMO_LENS_LIKELY(names_are(*site, group, name) && record_flags != 0 &&
                             p->sampler.records_anything)) {
          // Attributes given at the start take the general start: the site's keys are checked
          // by address only for a LENS_SPAN site's literals.
          if (SpanRecord* rec = attributes.size() == 0
                                    ? try_start_site_record(*site, *p, *ts, record_flags, nullptr, 0)
                                    : nullptr) {
            return SpanAccess::make(rec, static_cast<int>(ts->eh->uncaught_exceptions));
          }
        }
      } else if (is_off_pair(a, group)) {
        return Span();
      }
    }
  }
  return start_managed_span_general(group, name, attributes);
}
}  // namespace detail

Span& Span::operator=(Span&& other) noexcept {
  if (this != &other) {
    end();
    rec_ = std::exchange(other.rec_, nullptr);
    uncaught_ = other.uncaught_;
    token_ = other.token_;
    nvtx_ = other.nvtx_;
  }
  return *this;
}

bool Span::is_recording() const noexcept {
  const SpanRecord* r = detail::record_of(rec_);
  return r != nullptr && r->recording;
}

namespace {
// Runs f(record) under the owner's lock when the span records and is still to be exported.
template <class F>
void mutate(SpanRecord* rec, F&& f) noexcept {
  if (rec == nullptr || !rec->recording) return;
  std::lock_guard lock(rec->owner->mu);
  if (rec->orphaned) return;
  try {
    f(*rec);
  } catch (...) {
    // Out of memory: the change is lost, the span stays valid.
  }
}
}  // namespace

namespace {
// set_attribute() for every case but a new attribute that fits a free slot under a key that is not
// redacted, set on the span's own thread while no guest shares its lock: replacing, spilling to
// the cold list, limits, redaction, a span shutdown copied, another thread.
// Returns `span` (set_attribute() ends with a jump here, and so keeps nothing across it).
[[gnu::noinline]] Span& set_attribute_slow(Span& span, SpanRecord* rec, std::string_view key,
                                           const AttributeArg& value) noexcept {
  mutate(rec, [&](SpanRecord& r) { detail::put_span_attribute_slow(r, key, value); });
  return span;
}
}  // namespace

Span& Span::set_attribute(std::string_view key, const AttributeArg& value) noexcept {
  SpanRecord* rec = detail::record_of(rec_);
  if (rec == nullptr || !rec->recording) return *this;
  // The common case in few instructions and no call: the span's own thread takes its lock, a
  // free slot, the lock again. A guest thread, or a lock a guest holds, takes the slow path.
  detail::ThreadState* owner = rec->owner;
  if (NEMO_LENS_LIKELY(owner == detail::t_state && owner->mu.try_lock_as_owner_if_unshared())) {
    const bool done = !rec->orphaned && detail::append_new_inline(*rec, key, value);
    owner->mu.unlock_as_owner();
    if (NEMO_LENS_LIKELY(done)) return *this;
  }
  return set_attribute_slow(*this, rec, key, value);
}

Span& Span::set_attributes(std::initializer_list<Attribute> attributes) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    for (const Attribute& a : attributes) detail::put_span_attribute(r, a.key, a.value);
  });
  return *this;
}

Span& Span::add_event(std::string_view name, std::initializer_list<Attribute> attributes) noexcept {
  return add_event(name, detail::as_span(attributes));
}

Span& Span::add_event(std::string_view name, std::span<const Attribute> attributes) noexcept {
  const std::int64_t now = detail::now_unix_nano();
  mutate(detail::record_of(rec_),
         [&](SpanRecord& r) { detail::add_event_locked(r, name, now, attributes); });
  return *this;
}

Span& Span::add_link(const SpanContext& target,
                     std::initializer_list<Attribute> attributes) noexcept {
  mutate(detail::record_of(rec_),
         [&](SpanRecord& r) { detail::add_link_locked(r, target, detail::as_span(attributes)); });
  return *this;
}

Span& Span::set_status(StatusCode code, std::string_view message) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    if (code == StatusCode::kUnset || r.status_final) return;
    r.status_code = code;
    // The description only accompanies ERROR (OpenTelemetry's rule).
    if (code == StatusCode::kError && !message.empty()) {
      r.use_cold().status_message.assign(message);
    } else if (r.cold_part() != nullptr) {
      r.cold->status_message.clear();
    }
    r.status_final = code == StatusCode::kOk;
  });
  return *this;
}

Span& Span::set_kind(SpanKind kind) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) { r.kind = kind; });
  return *this;
}

Span& Span::record_exception(const std::exception& e) noexcept {
  const std::int64_t now = detail::now_unix_nano();
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    detail::record_exception_locked(r, detail::demangle(typeid(e).name()), e.what(), now);
  });
  return *this;
}

Span& Span::record_exception(std::string_view type, std::string_view message) noexcept {
  const std::int64_t now = detail::now_unix_nano();
  mutate(detail::record_of(rec_),
         [&](SpanRecord& r) { detail::record_exception_locked(r, type, message, now); });
  return *this;
}

Span attach_context(const SpanContext& ctx) noexcept {
  if (!ctx.is_valid()) return Span();
  detail::ThreadState* ts = detail::this_thread_state();
  if (ts == nullptr) return Span();
  SpanRecord* rec = detail::take_record(*ts);
  if (rec == nullptr) return Span();
  detail::init_record(*rec, ts, nullptr);  // no pipeline: never exported, never counted
  rec->trace_id = ctx.trace_id;
  rec->span_id = ctx.span_id;
  rec->trace_flags = ctx.trace_flags;
  rec->is_remote = ctx.is_remote;
  try {
    if (!ctx.trace_state.empty()) rec->use_cold().trace_state = ctx.trace_state;
    detail::OwnerLockGuard lock(ts->mu);
    ts->stack.push_back(rec);
  } catch (...) {
    detail::recycle(rec);  // out of memory: no parent
    return Span();
  }
  return detail::SpanAccess::make(rec);
}

SpanContext Span::context() const noexcept {
  SpanRecord* r = detail::record_of(rec_);
  if (r == nullptr) return {};
  std::lock_guard lock(r->owner->mu);
  try {
    return r->context();
  } catch (...) {
    SpanContext c;  // out of memory for the trace state
    c.trace_id = r->trace_id;
    c.span_id = r->span_id;
    c.trace_flags = r->trace_flags;
    return c;
  }
}

namespace {
// Ends `rec` at `at_unix` (Unix ns; 0: now) in Unix nanoseconds, its start converted first when
// it is in ticks: a span given a time of its own (SpanStartOptions::start_time_unix_nano,
// Span::end(time)). An end before the start is clamped to it and counted. Requires the owner's
// lock.
[[gnu::noinline]] void set_end_unix(SpanRecord& rec, std::int64_t at_unix) noexcept {
  if (!rec.unix_times) {
    rec.start_ticks = static_cast<std::uint64_t>(detail::ticks_to_unix_nano(rec.start_ticks));
    rec.unix_times = true;
  }
  const auto start = static_cast<std::int64_t>(rec.start_ticks);
  std::int64_t end = at_unix > 0 ? at_unix : detail::now_unix_nano();
  if (end < start) {
    if (at_unix > 0 && rec.pipeline != nullptr) {
      rec.pipeline->end_clamped.fetch_add(1, std::memory_order_relaxed);
    }
    end = start;
  }
  rec.end_ticks = static_cast<std::uint64_t>(end);
}

// Ends `rec`: takes it off its owner's stack and sets its end; when `unwinding`, records the
// exception being unwound (`thrown`, looked up before the lock, or null). Then queues it (and
// prefetches the thread's next record), or recycles it when it is not to be exported. Inline
// twice: with `unwinding` constant, the common end has no exception code.
[[gnu::always_inline]] inline void end_record(SpanRecord* rec, std::uint64_t now, bool unwinding,
                                              const detail::ThrownException* thrown,
                                              std::int64_t at_unix = 0) noexcept {
  bool export_it = false;
  {
    detail::ThreadState* owner = rec->owner;
    std::lock_guard lock(owner->mu);
    if (rec->nvtx != 0) detail::nvtx_close_locked(*owner, std::exchange(rec->nvtx, 0));
    auto& stack = owner->stack;
    if (NEMO_LENS_LIKELY(stack.top() == rec)) {
      stack.pop_back();  // spans mostly end innermost first
    } else {
      for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
        if (*it == rec) {
          stack.erase(std::next(it).base());
          break;
        }
      }
    }
    if (NEMO_LENS_UNLIKELY((rec->mode & detail::kModeGpu) != 0)) {
      detail::publish_gpu_chain_locked(*owner);
    }
    export_it = rec->recording && !rec->orphaned;
    if (export_it) {
      if (unwinding && !rec->exception_recorded) {
        try {
          const bool known = thrown != nullptr && thrown->known;
          detail::record_exception_locked(*rec, known ? thrown->type : "unknown",
                                          known ? thrown->message : "",
                                          detail::ticks_to_unix_nano(now));
        } catch (...) {
          rec->status_code = StatusCode::kError;
        }
      }
      if (NEMO_LENS_UNLIKELY(at_unix > 0 || rec->unix_times)) {
        set_end_unix(*rec, at_unix);
      } else {
        // A system clock stepped back between start and end must not make the span end before
        // it began (the TSC never goes back).
        rec->end_ticks = std::max(now, rec->start_ticks);
      }
    }
  }
  detail::ThreadState* current = detail::this_thread_state();
  // An attached context (no pipeline) was never counted as started.
  if (current != nullptr && rec->pipeline != nullptr) current->count(current->ended);
  if (!export_it) {
    detail::recycle(rec);
    return;
  }
  if (NEMO_LENS_UNLIKELY(rec->mode != 0)) {
    detail::end_span_with_mode(rec, current);  // flight-recorded, or watched by its triggers
  } else {
    rec->pipeline->enqueue(rec, current);
  }
}

// end_record() for a span whose scope an exception is leaving.
[[gnu::noinline]] void end_record_unwinding(SpanRecord* rec, std::uint64_t now) noexcept {
  // What the exception hook recorded for the throw being unwound.
  std::optional<detail::ThrownException> thrown;
  if (rec->recording) thrown = detail::last_thrown_exception(std::uncaught_exceptions());
  end_record(rec, now, true, thrown ? &*thrown : nullptr);
}
}  // namespace

namespace detail {
// Span::finish(), inline into both of its callers (one call level less at every scope's end).
[[gnu::always_inline]] inline void SpanAccess::finish(Span& span, bool unwinding) noexcept {
  SpanRecord* rec = std::exchange(span.rec_, nullptr);
  if (tags(rec) != 0) {
    ThreadState* owner = tagged_owner(rec);
    if (span.nvtx_ != 0) nvtx_close(*owner, std::exchange(span.nvtx_, 0));
    if (is_light(rec)) close_light_span(*owner, span.token_);
    return;
  }
  const std::uint64_t now = now_ticks();
  if (NEMO_LENS_UNLIKELY(unwinding)) return end_record_unwinding(rec, now);
  end_record(rec, now, false, nullptr);
}

void SpanAccess::finish_at(Span& span, std::int64_t end_unix_nano) noexcept {
  SpanRecord* rec = span.rec_;
  if (rec == nullptr) return;
  if (tags(rec) != 0 || end_unix_nano <= 0) return finish(span, false);  // nothing to time
  span.rec_ = nullptr;
  end_record(rec, now_ticks(), false, nullptr, end_unix_nano);
}
}  // namespace detail

namespace {
// end_record()'s common case, with no call on its way, for `rec`, open on the calling thread
// (`current`, its owner) whose lock is free, recorded and to be exported, its span the top of the
// thread's stack, without an NVTX range, on a TSC clock: takes it off the stack and sets its end.
// False when any of that does not hold, with nothing changed.
[[gnu::always_inline]] inline bool try_end_record(SpanRecord* rec,
                                                  detail::ThreadState* current) noexcept {
  auto& stack = current->stack;
  if (NEMO_LENS_UNLIKELY(!detail::kTscTicks || !current->mu.try_lock_as_owner_if_unshared())) {
    return false;
  }
  // A span whose times are not in Unix nanoseconds started on the TSC, which the clock, once it
  // uses it, uses for good: no check of the clock here.
  const std::uint64_t now = detail::tsc_ticks();
  if (NEMO_LENS_UNLIKELY(!detail::end_word_is_common(detail::end_word(*rec)) ||
                         stack.top() != rec)) {
    current->mu.unlock_as_owner();
    return false;
  }
  stack.pop_back();
  rec->end_ticks = std::max(now, rec->start_ticks);  // as end_record()
  current->mu.unlock_as_owner();
  return true;
}

// Span::finish() when try_end_record() does not take the span: every case.
[[gnu::noinline]] void finish_general(Span& span, bool unwinding) noexcept {
  detail::SpanAccess::finish(span, unwinding);
}
}  // namespace

void Span::finish(bool unwinding) noexcept { detail::SpanAccess::finish(*this, unwinding); }

void Span::end(std::int64_t end_unix_nano) noexcept {
  detail::SpanAccess::finish_at(*this, end_unix_nano);
}

void Span::finish_scope() noexcept {
  SpanRecord* rec = rec_;
  detail::ThreadState* current = detail::t_state;
  // The common end: no exception leaving the scope, the span ended on the thread that started it
  // (a record's owner is never null).
  if (NEMO_LENS_LIKELY(detail::tags(rec) == 0 && rec->owner == current &&
                       static_cast<int>(current->eh->uncaught_exceptions) <= uncaught_ &&
                       try_end_record(rec, current))) {
    // The handle is not cleared: only its destructor calls this, and nothing reads it after.
    current->count(current->ended);
    if (NEMO_LENS_UNLIKELY(rec->mode != 0)) return detail::end_span_with_mode(rec, current);
    return rec->pipeline->enqueue(rec, current);  // its calls are tail calls
  }
  return finish_general(*this, detail::uncaught_exceptions_now() > uncaught_);
}

namespace detail {

bool site_records_only(const SiteGate& site) noexcept {
  return (span_site_mode(site) & kModeFlight) != 0;
}

namespace {
// The context of the calling thread's latest open span, or of its latest exported one.
SpanContext current_context(bool exported_only) noexcept {
  ThreadState* ts = this_thread_state();
  if (ts == nullptr) return {};
  OwnerLockGuard lock(ts->mu);
  SpanRecord* top = current_record(*ts, exported_only);
  if (top == nullptr) return {};
  try {
    return top->context();
  } catch (...) {
    return {};
  }
}
}  // namespace

SpanContext innermost_span_context() noexcept { return current_context(false); }

}  // namespace detail

SpanContext current_span_context() noexcept {
  // A span recorded only (flight recorder) is left out, as the trace leaves it out.
  return detail::current_context(true);
}

}  // namespace nemo::lens
