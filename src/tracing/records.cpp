// Span records: their attributes (inline slots, then the cold list), their reset and copy, and
// how exporters see them (materialize()).
#include <algorithm>
#include <cstring>

#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

// At most `limit` bytes, cut at a UTF-8 character boundary.
std::string truncated_string(std::string_view s, std::size_t limit) {
  return std::string(s.substr(0, cut_length(s, limit)));
}

// The value of an inline attribute, as an argument.
AttributeArg inline_value(const InlineAttribute& a) noexcept {
  switch (a.type) {
    case InlineAttribute::kBool:
      return AttributeArg(a.b);
    case InlineAttribute::kInt:
      return AttributeArg(a.i);
    case InlineAttribute::kDouble:
      return AttributeArg(a.d);
    default:
      return AttributeArg(std::string_view(a.s, a.string_size));
  }
}

void assign_inline(KeyValue& kv, const InlineAttribute& a) {
  kv.key.assign(a.key_view());
  assign_attribute_value(kv.value, inline_value(a), SIZE_MAX, false);  // limits applied when set
}

// Moves the inline attributes to the front of the cold list, so that the cold list holds every
// attribute in the order they were set.
void move_inline_attributes(SpanRecord& r) {
  const std::uint32_t n = r.inline_used;
  if (n == 0) return;
  SpanCold& c = r.use_cold();
  const std::uint32_t total = c.attributes_used + n;
  if (c.attributes.size() < total) c.attributes.resize(total);
  // The cold attributes move behind room for the inline ones (swaps: no allocation).
  std::rotate(c.attributes.begin(), c.attributes.begin() + c.attributes_used,
              c.attributes.begin() + total);
  for (std::uint32_t i = 0; i < n; ++i) assign_inline(c.attributes[i], r.attributes[i]);
  c.attributes_used = total;
  r.inline_used = 0;
  r.inline_room = 0;  // every later attribute goes to the cold list, after these
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
      if (auto* i = std::get_if<std::int64_t>(&out)) {
        *i = a.as_int();
      } else {
        out.emplace<std::int64_t>(a.as_int());
      }
      return;
    case T::kDouble:
      if (auto* d = std::get_if<double>(&out)) {
        *d = a.as_double();
      } else {
        out.emplace<double>(a.as_double());
      }
      return;
    case T::kString: {
      const std::string_view v = redact ? kRedactedValue : a.as_string();
      const std::string_view cut = v.substr(0, cut_length(v, len_limit));
      if (auto* s = std::get_if<std::string>(&out)) {
        s->assign(cut);
      } else {
        out.emplace<std::string>(cut);
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
        v.push_back(redact ? std::string(kRedactedValue) : truncated_string(e, len_limit));
      }
      return;
    }
    case T::kStringViewArray: {
      auto& v = out.emplace<std::vector<std::string>>();
      v.reserve(a.as_string_view_array().size());
      for (auto e : a.as_string_view_array()) {
        v.push_back(redact ? std::string(kRedactedValue) : truncated_string(e, len_limit));
      }
      return;
    }
  }
}

void put_list_attribute(std::vector<KeyValue>& list, std::uint32_t& used, std::uint32_t& dropped,
                        std::uint32_t count_limit, std::uint32_t others, const Pipeline& p,
                        std::string_view key, const AttributeArg& value) {
  const bool redact = is_string_attribute(value.type()) && p.redacted(key);
  for (std::uint32_t i = 0; i < used; ++i) {
    if (list[i].key == key) {
      assign_attribute_value(list[i].value, value, p.limits.attribute_value_length, redact);
      return;
    }
  }
  if (used + others >= count_limit) {
    ++dropped;
    return;
  }
  KeyValue& kv = used < list.size() ? list[used] : list.emplace_back();
  kv.key.assign(key);
  assign_attribute_value(kv.value, value, p.limits.attribute_value_length, redact);
  ++used;
}

SpanCold& SpanRecord::use_cold() {
  if (cold == nullptr) cold = new SpanCold();
  cold_used = true;
  return *cold;
}

SpanContext SpanRecord::context() {
  ensure_ids(*this, t_ids);
  SpanContext c;
  c.trace_id = trace_id;
  c.span_id = span_id;
  c.trace_flags = trace_flags;
  c.is_remote = is_remote;
  if (const SpanCold* cp = cold_part()) c.trace_state = cp->trace_state;
  return c;
}

void reset_record(SpanRecord& r) noexcept {
  if (!r.cold_used) return;
  SpanCold& c = *r.cold;
  c.name.clear();
  c.group.clear();
  c.trace_state.clear();
  c.attributes_used = 0;  // the elements stay, for reuse
  c.dropped_events_count = 0;
  c.dropped_links_count = 0;
  c.events.clear();
  c.links.clear();
  c.status_message.clear();
  r.cold_used = false;
}

SpanRecord* copy_record(const SpanRecord& r) {
  auto* copy = new SpanRecord();
  try {
    const SpanCold* cold = r.cold_part();
    if (cold != nullptr) copy->cold = new SpanCold(*cold);
  } catch (...) {
    delete copy;
    throw;
  }
  copy->trace_id = r.trace_id;
  copy->span_id = r.span_id;
  copy->parent_span_id = r.parent_span_id;
  copy->start_ticks = r.start_ticks;
  copy->end_ticks = r.end_ticks;
  copy->unix_times = r.unix_times;
  copy->site = r.site;
  copy->owner = r.owner;
  copy->pipeline = r.pipeline;
  copy->cold_used = copy->cold != nullptr;
  copy->thread_id = r.thread_id;
  copy->dropped_attributes_count = r.dropped_attributes_count;
  copy->trace_flags = r.trace_flags;
  copy->is_remote = r.is_remote;
  copy->parent_is_remote = r.parent_is_remote;
  copy->kind = r.kind;
  copy->status_code = r.status_code;
  copy->recording = r.recording;
  copy->exception_recorded = r.exception_recorded;
  copy->status_final = r.status_final;
  copy->orphaned = r.orphaned;
  copy->truncated = r.truncated;
  copy->inline_used = r.inline_used;
  copy->inline_room = r.inline_room;
  std::copy_n(r.attributes, r.inline_used, copy->attributes);
  return copy;
}

void copy_attributes(const SpanRecord& r, std::vector<KeyValue>& out) {
  const SpanCold* cold = r.cold_part();
  const std::uint32_t n_cold = cold != nullptr ? cold->attributes_used : 0;
  out.resize(r.inline_used + n_cold);
  for (std::uint32_t i = 0; i < r.inline_used; ++i) assign_inline(out[i], r.attributes[i]);
  for (std::uint32_t i = 0; i < n_cold; ++i) out[r.inline_used + i] = cold->attributes[i];
}

void materialize(const SpanRecord& r, const TickConverter& clock, SpanData& out) {
  const SpanCold* cold = r.cold_part();
  out.name.assign(r.name());
  out.group.assign(r.group());
  out.context.trace_id = r.trace_id;
  out.context.span_id = r.span_id;
  out.context.trace_flags = r.trace_flags;
  out.context.is_remote = r.is_remote;
  out.context.trace_state.assign(r.trace_state());
  out.parent_span_id = r.parent_span_id;
  out.parent_is_remote = r.parent_is_remote;
  out.kind = r.kind;
  out.start_time_unix_nano = start_unix_nano(r, clock);
  out.end_time_unix_nano = end_unix_nano(r, clock);
  copy_attributes(r, out.attributes);
  out.dropped_attributes_count = r.dropped_attributes_count;
  if (cold != nullptr) {
    out.events = cold->events;
    out.links = cold->links;
    out.dropped_events_count = cold->dropped_events_count;
    out.dropped_links_count = cold->dropped_links_count;
    out.status_message = cold->status_message;
  } else {
    out.events.clear();
    out.links.clear();
    out.dropped_events_count = 0;
    out.dropped_links_count = 0;
    out.status_message.clear();
  }
  out.status_code = r.status_code;
  out.thread_id = r.thread_id;
  out.truncated = r.truncated;
}

void put_span_attribute_slow(SpanRecord& r, std::string_view key, const AttributeArg& value) {
  const Pipeline& p = *r.pipeline;
  const bool redact = is_string_attribute(value.type()) && p.redacted(key);
  const std::size_t len_limit = p.limits.attribute_value_length;
  for (std::uint32_t i = 0; i < r.inline_used; ++i) {
    InlineAttribute& slot = r.attributes[i];
    if (slot.key_view() != key) continue;
    if (store_inline(slot, value, len_limit, redact)) return;
    move_inline_attributes(r);  // the new value does not fit: replace it among the others
    break;
  }
  if (append_inline(r, key, value, redact)) return;
  SpanCold& c = r.use_cold();
  put_list_attribute(c.attributes, c.attributes_used, r.dropped_attributes_count,
                     p.limits.attribute_count, r.inline_used, p, key, value);
  r.inline_room = r.inline_used;  // later attributes follow this one in the cold list
}

}  // namespace nemo::lens::detail
