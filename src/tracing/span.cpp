// Span operations: start, attributes, events, links, status, end. Every function is noexcept and
// drops (rather than throws) when memory runs out.
#include "nemo/lens/span.hpp"

#include <algorithm>
#include <cstring>
#include <span>

#include "nemo/lens/semconv.hpp"
#include "nemo/lens/state.hpp"
#include "nvtx/ranges.hpp"
#include "tracing/engine.hpp"
#include "tracing/exception_info.hpp"

namespace nemo::lens {

namespace detail {

std::atomic<Pipeline*> g_active_pipeline{nullptr};

namespace {

constexpr std::string_view kRedacted = "[REDACTED]";

// At most `limit` bytes, cut at a UTF-8 character boundary.
std::string truncated_string(std::string_view s, std::size_t limit) {
  if (s.size() <= limit) return std::string(s);
  std::size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return std::string(s.substr(0, n));
}

}  // namespace

bool is_string_attribute(AttributeArg::Type t) noexcept {
  using T = AttributeArg::Type;
  return t == T::kString || t == T::kStringArray || t == T::kStringViewArray;
}

void assign_attribute_value(AttributeValue& out, const AttributeArg& a, std::size_t len_limit,
                            bool redact) {
  using T = AttributeArg::Type;
  switch (a.type()) {
    case T::kBool:
      out.emplace<bool>(a.as_bool());
      return;
    case T::kInt:
      out.emplace<std::int64_t>(a.as_int());
      return;
    case T::kDouble:
      out.emplace<double>(a.as_double());
      return;
    case T::kString: {
      const std::string_view v = redact ? kRedacted : a.as_string();
      if (v.size() > len_limit) {
        out = truncated_string(v, len_limit);
      } else if (auto* s = std::get_if<std::string>(&out)) {
        s->assign(v);
      } else {
        out.emplace<std::string>(v);
      }
      return;
    }
    case T::kBoolArray:
      out.emplace<std::vector<bool>>(a.as_bool_array());
      return;
    case T::kIntArray:
      out.emplace<std::vector<std::int64_t>>(a.as_int_array().begin(), a.as_int_array().end());
      return;
    case T::kDoubleArray:
      out.emplace<std::vector<double>>(a.as_double_array().begin(), a.as_double_array().end());
      return;
    case T::kStringArray: {
      auto& v = out.emplace<std::vector<std::string>>();
      v.reserve(a.as_string_array().size());
      for (const auto& e : a.as_string_array()) {
        v.push_back(redact ? std::string(kRedacted) : truncated_string(e, len_limit));
      }
      return;
    }
    case T::kStringViewArray: {
      auto& v = out.emplace<std::vector<std::string>>();
      v.reserve(a.as_string_view_array().size());
      for (auto e : a.as_string_view_array()) {
        v.push_back(redact ? std::string(kRedacted) : truncated_string(e, len_limit));
      }
      return;
    }
  }
}

namespace {

std::span<const Attribute> as_span(std::initializer_list<Attribute> list) noexcept {
  return {list.begin(), list.size()};
}

// The first `used` elements of `list` are the attributes; the elements after them are kept from
// the record's previous span so that their storage is reused, not freed and allocated again.
struct AttributeSlots {
  std::vector<KeyValue>& list;
  std::uint32_t& used;
};

// Sets `key` (replacing an existing value), or counts a drop past `count_limit`.
void put_attribute(AttributeSlots a, std::uint32_t& dropped, std::uint32_t count_limit,
                   const Pipeline& p, std::string_view key, const AttributeArg& value) {
  const bool redact = is_string_attribute(value.type()) && p.redacted(key);
  for (std::uint32_t i = 0; i < a.used; ++i) {
    if (a.list[i].key == key) {
      assign_attribute_value(a.list[i].value, value, p.limits.attribute_value_length, redact);
      return;
    }
  }
  if (a.used >= count_limit) {
    ++dropped;
    return;
  }
  KeyValue& kv = a.used < a.list.size() ? a.list[a.used] : a.list.emplace_back();
  kv.key.assign(key);
  assign_attribute_value(kv.value, value, p.limits.attribute_value_length, redact);
  ++a.used;
}

void put_attributes(AttributeSlots a, std::uint32_t& dropped, std::uint32_t count_limit,
                    const Pipeline& p, std::span<const Attribute> attributes) {
  for (const Attribute& attr : attributes) {
    put_attribute(a, dropped, count_limit, p, attr.key, attr.value);
  }
}

// Attributes of a new event or link: an empty list, every element in use.
void put_new_attributes(std::vector<KeyValue>& list, std::uint32_t& dropped,
                        std::uint32_t count_limit, const Pipeline& p,
                        std::span<const Attribute> attributes) {
  std::uint32_t used = 0;
  put_attributes({list, used}, dropped, count_limit, p, attributes);
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

void reset_record(SpanRecord& r) noexcept {
  SpanData& d = r.data;
  d.name.clear();
  d.group.clear();
  d.context.trace_state.clear();
  d.context.is_remote = false;
  d.parent_span_id = SpanId{};
  d.parent_is_remote = false;
  d.kind = SpanKind::kInternal;
  d.end_time_unix_nano = 0;
  r.attributes_used = 0;  // the elements stay, for reuse
  d.dropped_attributes_count = 0;
  d.events.clear();
  d.dropped_events_count = 0;
  d.links.clear();
  d.dropped_links_count = 0;
  d.status_code = StatusCode::kUnset;
  d.status_message.clear();
  d.truncated = false;
  r.exception_recorded = false;
  r.status_final = false;
  r.orphaned = false;
  r.nvtx = 0;
  r.open_state = kOpenNone;
}

void add_link_locked(SpanRecord& r, const SpanContext& target,
                     std::span<const Attribute> attributes) {
  SpanData& d = r.data;
  if (!target.is_valid()) return;
  if (d.links.size() >= r.pipeline->limits.link_count) {
    ++d.dropped_links_count;
    return;
  }
  SpanLink link;
  link.context = target;
  put_new_attributes(link.attributes, link.dropped_attributes_count,
                 r.pipeline->limits.link_attribute_count, *r.pipeline, attributes);
  d.links.push_back(std::move(link));
}

void add_event_locked(SpanRecord& r, std::string_view name, std::int64_t time,
                      std::span<const Attribute> attributes) {
  SpanData& d = r.data;
  if (d.events.size() >= r.pipeline->limits.event_count) {
    ++d.dropped_events_count;
    return;
  }
  SpanEvent ev;
  ev.name = std::string(name);
  ev.time_unix_nano = time;
  put_new_attributes(ev.attributes, ev.dropped_attributes_count,
                 r.pipeline->limits.event_attribute_count, *r.pipeline, attributes);
  d.events.push_back(std::move(ev));
}

void record_exception_locked(SpanRecord& r, std::string_view type, std::string_view message,
                             std::int64_t time) {
  const Attribute attributes[] = {{semconv::kExceptionType, type},
                                  {semconv::kExceptionMessage, message}};
  add_event_locked(r, semconv::kExceptionEvent, time, attributes);
  r.exception_recorded = true;
  if (!r.status_final) {
    r.data.status_code = StatusCode::kError;
    r.data.status_message = std::string(message);
  }
}

struct StartRequest {
  std::string_view group;
  std::string_view name;
  SpanKind kind = SpanKind::kInternal;
  const SpanContext* parent = nullptr;
  bool root = false;
  const SpanContext* link = nullptr;
};

SpanRecord* start_record(Pipeline* p, const StartRequest& req,
                         std::initializer_list<Attribute> attributes) noexcept {
  if (!p->sampler.records_anything) return nullptr;
  ThreadState* ts = this_thread_state();
  if (ts == nullptr) return nullptr;
  SpanRecord* rec = take_record(*ts);
  if (rec == nullptr) return nullptr;
  reset_record(*rec);
  rec->owner = ts;
  rec->pipeline = p;
  SpanData& d = rec->data;
  try {
    std::lock_guard lock(ts->mu);
    // Parent: explicit, else the thread's current span, else the inherited context, else none.
    const SpanContext* parent = nullptr;
    if (req.parent != nullptr && req.parent->is_valid()) {
      parent = req.parent;
    } else if (!req.root && !ts->stack.empty()) {
      parent = &ts->stack.back()->data.context;
    } else if (p->inherited.is_valid()) {
      parent = &p->inherited;  // the process's own parent (TRACEPARENT at set-up)
    }
    bool sampled;
    if (parent != nullptr) {
      d.context.trace_id = parent->trace_id;
      d.context.trace_state = parent->trace_state;
      d.parent_span_id = parent->span_id;
      d.parent_is_remote = parent->is_remote;
      sampled = p->sampler.parent_based ? parent->is_sampled()
                                        : sample_root(p->sampler, d.context.trace_id);
    } else {
      d.context.trace_id = ts->ids.trace_id();
      sampled = sample_root(p->sampler, d.context.trace_id);
    }
    d.context.span_id = ts->ids.span_id();
    // W3C Level 2's random flag describes the trace id: children keep their parent's.
    d.context.trace_flags = static_cast<std::uint8_t>(
        (sampled ? 0x01 : 0x00) | (parent != nullptr ? parent->trace_flags & 0x02 : 0x00));
    rec->recording = sampled;
    if (sampled) {
      d.name.assign(req.name);
      d.group.assign(req.group);
      d.kind = req.kind;
      d.thread_id = ts->tid;
      put_attributes({d.attributes, rec->attributes_used}, d.dropped_attributes_count,
                     p->limits.attribute_count, *p, as_span(attributes));
      if (req.link != nullptr) add_link_locked(*rec, *req.link, {});
      d.start_time_unix_nano = now_unix_nano();
      if (g_track_mode.load(std::memory_order_relaxed) != TrackOpen::kOff) {
        rec->open_state = open_record(*ts, rec, d.start_time_unix_nano) ? kOpenRegistered
                                                                         : kOpenUntracked;
      }
    }
    ts->stack.push_back(rec);
  } catch (...) {
    recycle(rec);  // out of memory: this span is not recorded
    return nullptr;
  }
  ts->count(ts->started);
  return rec;
}

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
  static Span make(SpanRecord* rec) noexcept { return Span(rec); }
  static Span make_light(ThreadState* owner, std::uint32_t token) noexcept {
    return Span(reinterpret_cast<SpanRecord*>(reinterpret_cast<std::uintptr_t>(owner) | kLightTag),
                token);
  }
  // Gives `span`, just started on the thread whose state is `ts`, the NVTX range `range`.
  static void attach_range(Span& span, ThreadState& ts, std::uint32_t range) noexcept {
    if (span.rec_ == nullptr) {
      span.rec_ =
          reinterpret_cast<SpanRecord*>(reinterpret_cast<std::uintptr_t>(&ts) | kRangeTag);
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
    std::lock_guard lock(ts->mu);
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

Span start_site_span(const SpanSite& site, std::initializer_list<Attribute> attributes) noexcept {
  Pipeline* p = g_active_pipeline.load(std::memory_order_acquire);
  const GroupState g = span_site_state(site.gate);
  auto start = [&]() noexcept -> Span {
    if (p != nullptr && g.enabled && p->sampler.records_anything) {
      StartRequest req;
      req.group = site.gate.group;
      req.name = site.name;
      return SpanAccess::make(start_record(p, req, attributes));
    }
    if (g.tracked && tracking()) return open_light_span(site);
    return Span();
  };
  if (NEMO_LENS_LIKELY(!g.nvtx)) return start();
  return start_with_range(site, g.index, start);
}

}  // namespace detail

using detail::SpanRecord;

Span start_span(std::string_view name, const SpanStartOptions& options,
                std::initializer_list<Attribute> attributes) noexcept {
  detail::Pipeline* p = detail::g_active_pipeline.load(std::memory_order_acquire);
  const bool tracking = detail::tracking();
  const bool nvtx = detail::nvtx_emitting();
  if (p == nullptr && !tracking && !nvtx) return Span();
  // An ungated span is on whenever something records; its NVTX range has no category.
  detail::GroupState g{true, true, nvtx, detail::kNoGroupIndex};
  if (!options.group.empty()) g = detail::group_state(options.group);
  // A span that is not exported may still be tracked as open, for `lens ctl dump`.
  const bool exported = p != nullptr && p->sampler.records_anything && g.enabled;
  auto start = [&]() noexcept -> Span {
    if (!exported) {
      if (!g.tracked || !tracking) return Span();
      return detail::open_light_span(detail::intern_site(options.group, name));
    }
    detail::StartRequest req;
    req.group = options.group;
    req.name = name;
    req.kind = options.kind;
    req.parent = options.parent;
    req.root = options.root;
    req.link = options.link;
    return detail::SpanAccess::make(detail::start_record(p, req, attributes));
  };
  if (NEMO_LENS_LIKELY(!g.nvtx)) return start();
  return detail::start_with_range(detail::intern_site(options.group, name), g.index, start);
}

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

Span& Span::set_attribute(std::string_view key, AttributeArg value) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    detail::put_attribute({r.data.attributes, r.attributes_used}, r.data.dropped_attributes_count,
                          r.pipeline->limits.attribute_count, *r.pipeline, key, value);
  });
  return *this;
}

Span& Span::set_attributes(std::initializer_list<Attribute> attributes) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    detail::put_attributes({r.data.attributes, r.attributes_used}, r.data.dropped_attributes_count,
                           r.pipeline->limits.attribute_count, *r.pipeline,
                           detail::as_span(attributes));
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

Span& Span::add_link(const SpanContext& target, std::initializer_list<Attribute> attributes) noexcept {
  mutate(detail::record_of(rec_),
         [&](SpanRecord& r) { detail::add_link_locked(r, target, detail::as_span(attributes)); });
  return *this;
}

Span& Span::set_status(StatusCode code, std::string_view message) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) {
    if (code == StatusCode::kUnset || r.status_final) return;
    r.data.status_code = code;
    // The description only accompanies ERROR (OpenTelemetry's rule).
    r.data.status_message = code == StatusCode::kError ? std::string(message) : std::string();
    r.status_final = code == StatusCode::kOk;
  });
  return *this;
}

Span& Span::set_kind(SpanKind kind) noexcept {
  mutate(detail::record_of(rec_), [&](SpanRecord& r) { r.data.kind = kind; });
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
  detail::reset_record(*rec);
  rec->owner = ts;
  rec->pipeline = nullptr;  // never exported, never counted
  rec->recording = false;
  try {
    std::lock_guard lock(ts->mu);
    rec->data.context = ctx;
    ts->stack.push_back(rec);
  } catch (...) {
    detail::recycle(rec);  // out of memory: no parent
    return Span();
  }
  return detail::SpanAccess::make(rec);
}

SpanContext Span::context() const noexcept {
  const SpanRecord* r = detail::record_of(rec_);
  if (r == nullptr) return {};
  std::lock_guard lock(r->owner->mu);
  try {
    return r->data.context;
  } catch (...) {
    SpanContext c;
    c.trace_id = r->data.context.trace_id;
    c.span_id = r->data.context.span_id;
    c.trace_flags = r->data.context.trace_flags;
    return c;
  }
}

void Span::finish(bool unwinding) noexcept {
  SpanRecord* rec = std::exchange(rec_, nullptr);
  if (detail::tags(rec) != 0) {
    detail::ThreadState* owner = detail::tagged_owner(rec);
    if (nvtx_ != 0) detail::nvtx_close(*owner, std::exchange(nvtx_, 0));
    if (detail::is_light(rec)) detail::close_light_span(*owner, token_);
    return;
  }
  const std::int64_t now = detail::now_unix_nano();
  detail::ThrownException thrown;
  if (unwinding && rec->recording) thrown = detail::last_thrown_exception(std::uncaught_exceptions());
  bool export_it = false;
  {
    detail::ThreadState* owner = rec->owner;
    std::lock_guard lock(owner->mu);
    if (rec->nvtx != 0) detail::nvtx_close_locked(*owner, std::exchange(rec->nvtx, 0));
    auto& stack = owner->stack;
    for (auto it = stack.rbegin(); it != stack.rend(); ++it) {
      if (*it == rec) {
        stack.erase(std::next(it).base());
        break;
      }
    }
    if (rec->open_state != detail::kOpenNone) {
      detail::close_record(*owner, rec, rec->open_state == detail::kOpenRegistered);
      rec->open_state = detail::kOpenNone;
    }
    export_it = rec->recording && !rec->orphaned;
    if (export_it) {
      if (unwinding && !rec->exception_recorded) {
        try {
          detail::record_exception_locked(*rec, thrown.known ? thrown.type : "unknown",
                                          thrown.known ? thrown.message : "", now);
        } catch (...) {
          rec->data.status_code = StatusCode::kError;
        }
      }
      // A clock re-anchoring between start and end must not make the span end before it began.
      rec->data.end_time_unix_nano = std::max(now, rec->data.start_time_unix_nano);
    }
  }
  detail::ThreadState* current = detail::this_thread_state();
  // An attached context (no pipeline) was never counted as started.
  if (current != nullptr && rec->pipeline != nullptr) current->count(current->ended);
  if (!export_it) {
    detail::recycle(rec);
    return;
  }
  rec->data.attributes.resize(rec->attributes_used);  // the record is ours alone now
  rec->pipeline->enqueue(rec, current);
}

SpanContext current_span_context() noexcept {
  detail::ThreadState* ts = detail::this_thread_state();
  if (ts == nullptr) return {};
  std::lock_guard lock(ts->mu);
  if (ts->stack.empty()) return {};
  try {
    return ts->stack.back()->data.context;
  } catch (...) {
    return {};
  }
}

}  // namespace nemo::lens
