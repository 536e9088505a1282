// The OTLP protobuf encoding of a batch of spans (opentelemetry-proto's
// collector/trace/v1 ExportTraceServiceRequest), written by hand straight from SpanData. The
// tests decode it with the distribution's protobuf library and .proto files written from the
// specification. Field numbers are those of opentelemetry-proto v1.
#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/otlp.hpp"
#include "export/otlp_common.hpp"
#include "export/protobuf_wire.hpp"
#include "export/record_encoding.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/version.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

// Field numbers, by message.
namespace request {
constexpr std::uint32_t kResourceSpans = 1;
}
namespace resource_spans {
constexpr std::uint32_t kResource = 1, kScopeSpans = 2;
}
namespace scope_spans {
constexpr std::uint32_t kScope = 1, kSpans = 2;
}
namespace span {
constexpr std::uint32_t kTraceId = 1, kSpanId = 2, kTraceState = 3, kParentSpanId = 4, kName = 5,
                        kKind = 6, kStartTime = 7, kEndTime = 8, kAttributes = 9,
                        kDroppedAttributes = 10, kEvents = 11, kDroppedEvents = 12, kLinks = 13,
                        kDroppedLinks = 14, kStatus = 15, kFlags = 16;
}
namespace event {
constexpr std::uint32_t kTime = 1, kName = 2, kAttributes = 3, kDroppedAttributes = 4;
}
namespace link {
constexpr std::uint32_t kTraceId = 1, kSpanId = 2, kTraceState = 3, kAttributes = 4,
                        kDroppedAttributes = 5, kFlags = 6;
}
namespace status {
constexpr std::uint32_t kMessage = 2, kCode = 3;
}
namespace key_value = otlp::key_value;
namespace any_value = otlp::any_value;
using otlp::attributes_bound;
using otlp::bytes_of;
using otlp::has_attribute;
using otlp::kMessageOverhead;
using otlp::string_bound;
using otlp::string_field;
using otlp::time_of;

constexpr std::uint32_t kContextHasIsRemote = 0x100;
constexpr std::uint32_t kContextIsRemote = 0x200;
constexpr std::string_view kGroupKey = semconv::kNemoSpanGroup;
constexpr std::string_view kThreadIdKey = semconv::kThreadId;

std::uint32_t flags_of(std::uint8_t trace_flags, bool is_remote) {
  return trace_flags | kContextHasIsRemote | (is_remote ? kContextIsRemote : 0U);
}

// What append_span() reads of a span: a SpanData, or a lens record read where it lies.
class DataSpan {
 public:
  explicit DataSpan(const SpanData& s) : s_(s) {}
  const TraceId& trace_id() const { return s_.context.trace_id; }
  const SpanId& span_id() const { return s_.context.span_id; }
  std::string_view trace_state() const { return s_.context.trace_state; }
  std::uint8_t trace_flags() const { return s_.context.trace_flags; }
  const SpanId& parent_span_id() const { return s_.parent_span_id; }
  bool parent_is_remote() const { return s_.parent_is_remote; }
  std::string_view name() const { return s_.name; }
  std::string_view group() const { return s_.group; }
  SpanKind kind() const { return s_.kind; }
  std::int64_t start() const { return s_.start_time_unix_nano; }
  std::int64_t end() const { return s_.end_time_unix_nano; }
  std::size_t attributes_bound() const { return otlp::attributes_bound(s_.attributes); }
  void write_attributes(pb::Writer& w) const {
    otlp::key_values(w, span::kAttributes, s_.attributes);
  }
  bool has_attribute(std::string_view key) const { return otlp::has_attribute(s_.attributes, key); }
  std::uint32_t dropped_attributes() const { return s_.dropped_attributes_count; }
  const std::vector<SpanEvent>& events() const { return s_.events; }
  std::uint32_t dropped_events() const { return s_.dropped_events_count; }
  const std::vector<SpanLink>& links() const { return s_.links; }
  std::uint32_t dropped_links() const { return s_.dropped_links_count; }
  std::string_view status_message() const { return s_.status_message; }
  StatusCode status_code() const { return s_.status_code; }
  std::int64_t thread_id() const { return s_.thread_id; }

 private:
  const SpanData& s_;
};

// A record: what materialize() would make of it, read without making it. Inline attributes come
// first, then the cold part's, as in materialize().
class RecordSpan {
 public:
  RecordSpan(const SpanRecord& r, const TickConverter& clock, const RecordIds& ids)
      : r_(r), c_(r.cold_part()), clock_(clock), ids_(ids) {}
  const TraceId& trace_id() const { return ids_.trace_id; }
  const SpanId& span_id() const { return ids_.span_id; }
  std::string_view trace_state() const { return r_.trace_state(); }
  std::uint8_t trace_flags() const { return r_.trace_flags; }
  const SpanId& parent_span_id() const { return r_.parent_span_id; }
  bool parent_is_remote() const { return r_.parent_is_remote; }
  std::string_view name() const { return r_.name(); }
  std::string_view group() const { return r_.group(); }
  SpanKind kind() const { return r_.kind; }
  std::int64_t start() const { return start_unix_nano(r_, clock_); }
  std::int64_t end() const { return end_unix_nano(r_, clock_); }
  std::size_t attributes_bound() const {
    // An inline attribute's key and value are short: one bound serves every slot.
    constexpr std::size_t kInlineBound = 2 * kMessageOverhead +
                                         (3 * InlineAttribute::kKeyCapacity + 16) +
                                         (3 * InlineAttribute::kStringCapacity + 16);
    return r_.inline_used * kInlineBound + otlp::attributes_bound(cold_attributes());
  }
  void write_attributes(pb::Writer& w) const {
    for (std::uint32_t i = 0; i < r_.inline_used; ++i) {
      const InlineAttribute& a = r_.attributes[i];
      const auto mark = w.begin_message(span::kAttributes);
      string_field(w, key_value::kKey, a.key_view());
      const auto value_mark = w.begin_message(key_value::kValue);
      switch (a.type) {
        case InlineAttribute::kBool:
          w.varint_field(any_value::kBool, a.b ? 1 : 0);
          break;
        case InlineAttribute::kInt:
          w.varint_field(any_value::kInt, static_cast<std::uint64_t>(a.i));
          break;
        case InlineAttribute::kDouble:
          w.double_field(any_value::kDouble, a.d);
          break;
        default:
          string_field(w, any_value::kString, inline_string(a));
      }
      w.end_message(value_mark);
      w.end_message(mark);
    }
    otlp::key_values(w, span::kAttributes, cold_attributes());
  }
  bool has_attribute(std::string_view key) const {
    for (std::uint32_t i = 0; i < r_.inline_used; ++i) {
      if (r_.attributes[i].key_view() == key) return true;
    }
    return otlp::has_attribute(cold_attributes(), key);
  }
  std::uint32_t dropped_attributes() const { return r_.dropped_attributes_count; }
  const std::vector<SpanEvent>& events() const { return c_ != nullptr ? c_->events : kNoEvents; }
  std::uint32_t dropped_events() const { return c_ != nullptr ? c_->dropped_events_count : 0; }
  const std::vector<SpanLink>& links() const { return c_ != nullptr ? c_->links : kNoLinks; }
  std::uint32_t dropped_links() const { return c_ != nullptr ? c_->dropped_links_count : 0; }
  std::string_view status_message() const {
    return c_ != nullptr ? std::string_view(c_->status_message) : std::string_view();
  }
  StatusCode status_code() const { return r_.status_code; }
  std::int64_t thread_id() const { return r_.thread_id; }

 private:
  static std::string_view inline_string(const InlineAttribute& a) { return {a.s, a.string_size}; }
  // The attributes after the inline ones: the cold list's used prefix.
  std::span<const KeyValue> cold_attributes() const {
    if (c_ == nullptr) return {};
    return {c_->attributes.data(), c_->attributes_used};
  }
  static inline const std::vector<SpanEvent> kNoEvents;
  static inline const std::vector<SpanLink> kNoLinks;
  const SpanRecord& r_;
  const SpanCold* c_;
  const TickConverter& clock_;
  const RecordIds ids_;  // export_ids(): made for the batch when the span had none
};

// An upper bound of the bytes append_span() writes for `s`.
template <class Span>
std::size_t span_bound(const Span& s) {
  std::size_t n = 160 + string_bound(s.name()) + string_bound(s.trace_state()) +
                  string_bound(s.status_message()) + s.attributes_bound() + 2 * kMessageOverhead +
                  string_bound(kGroupKey) + string_bound(s.group()) + 2 * kMessageOverhead +
                  string_bound(kThreadIdKey) + 16;
  for (const SpanEvent& e : s.events()) {
    n += kMessageOverhead + 32 + string_bound(e.name) + attributes_bound(e.attributes);
  }
  for (const SpanLink& l : s.links()) {
    n += kMessageOverhead + 64 + string_bound(l.context.trace_state) +
         attributes_bound(l.attributes);
  }
  return n;
}

// One of the two span attributes the encoder adds (as otlp::key_value_field), with `write_value`
// writing the AnyValue's field (no AttributeValue is built for them).
template <class WriteValue>
void added_attribute(pb::Writer& w, std::string_view key, WriteValue write_value) {
  const auto mark = w.begin_message(span::kAttributes);
  w.bytes_field(key_value::kKey, key);  // one of the constant ASCII keys below
  const auto value_mark = w.begin_message(key_value::kValue);
  write_value();
  w.end_message(value_mark);
  w.end_message(mark);
}

template <class Span>
void append_span(pb::Writer& w, const Span& s) {
  w.reserve(span_bound(s));
  const auto mark = w.begin_message(scope_spans::kSpans, 2);  // 128 B .. 16 KiB
  w.bytes_field(span::kTraceId, bytes_of(s.trace_id().bytes));
  w.bytes_field(span::kSpanId, bytes_of(s.span_id().bytes));
  if (!s.trace_state().empty()) string_field(w, span::kTraceState, s.trace_state());
  if (s.parent_span_id().is_valid())
    w.bytes_field(span::kParentSpanId, bytes_of(s.parent_span_id().bytes));
  string_field(w, span::kName, s.name());
  w.varint_field(span::kKind, static_cast<std::uint64_t>(s.kind()));
  w.fixed64_field(span::kStartTime, time_of(s.start()));
  w.fixed64_field(span::kEndTime, time_of(s.end()));
  s.write_attributes(w);
  if (!s.group().empty() && !s.has_attribute(kGroupKey)) {
    added_attribute(w, kGroupKey, [&] { string_field(w, any_value::kString, s.group()); });
  }
  if (s.thread_id() != 0 && !s.has_attribute(kThreadIdKey)) {
    added_attribute(w, kThreadIdKey, [&] {
      w.varint_field(any_value::kInt, static_cast<std::uint64_t>(s.thread_id()));
    });
  }
  if (s.dropped_attributes() != 0) w.varint_field(span::kDroppedAttributes, s.dropped_attributes());
  for (const SpanEvent& e : s.events()) {
    const auto event_mark = w.begin_message(span::kEvents);
    w.fixed64_field(event::kTime, time_of(e.time_unix_nano));
    string_field(w, event::kName, e.name);
    otlp::key_values(w, event::kAttributes, e.attributes);
    if (e.dropped_attributes_count != 0) {
      w.varint_field(event::kDroppedAttributes, e.dropped_attributes_count);
    }
    w.end_message(event_mark);
  }
  if (s.dropped_events() != 0) w.varint_field(span::kDroppedEvents, s.dropped_events());
  for (const SpanLink& l : s.links()) {
    const auto link_mark = w.begin_message(span::kLinks);
    w.bytes_field(link::kTraceId, bytes_of(l.context.trace_id.bytes));
    w.bytes_field(link::kSpanId, bytes_of(l.context.span_id.bytes));
    if (!l.context.trace_state.empty()) string_field(w, link::kTraceState, l.context.trace_state);
    otlp::key_values(w, link::kAttributes, l.attributes);
    if (l.dropped_attributes_count != 0) {
      w.varint_field(link::kDroppedAttributes, l.dropped_attributes_count);
    }
    w.fixed32_field(link::kFlags, flags_of(l.context.trace_flags, l.context.is_remote));
    w.end_message(link_mark);
  }
  if (s.dropped_links() != 0) w.varint_field(span::kDroppedLinks, s.dropped_links());
  const auto status_mark = w.begin_message(span::kStatus);
  if (!s.status_message().empty()) string_field(w, status::kMessage, s.status_message());
  if (s.status_code() != StatusCode::kUnset) {
    w.varint_field(status::kCode, static_cast<std::uint64_t>(s.status_code()));
  }
  w.end_message(status_mark);
  w.fixed32_field(span::kFlags, flags_of(s.trace_flags(), s.parent_is_remote()));
  w.end_message(mark);
}

// ---- Records of the common shape, from bytes made once per site and batch ----------------------
//
// Most spans are a LENS_SPAN's: a site's name and group, a thread, a few inline attributes, nothing
// in the cold part. Of such a span's encoding, the name field and the two attributes the encoder
// adds (nemo.span.group, thread.id) are the same for every span of the site and thread:
// SiteBytesCache keeps them, made once per request with the general code above, and
// append_site_span() copies them and writes the rest with plain stores, to the byte what
// append_span() writes (record_encoding_test compares the two).

// Tags of the fields append_site_span() writes: (field << 3) | wire type, one byte each but the
// span's flags' (two).
constexpr char kTagTraceId = 0x0a, kTagSpanId = 0x12, kTagParentSpanId = 0x22, kTagKind = 0x30,
               kTagStartTime = 0x39, kTagEndTime = 0x41, kTagAttribute = 0x4a, kTagStatus = 0x7a,
               kTagKey = 0x0a, kTagValue = 0x12, kTagString = 0x0a, kTagBool = 0x10, kTagInt = 0x18,
               kTagDouble = 0x21, kTagStatusCode = 0x18, kTagSpan = 0x12;
constexpr char kTagFlags[2] = {static_cast<char>(0x85), 0x01};
static_assert(offsetof(InlineAttribute, key) + 24 <= sizeof(InlineAttribute));
static_assert(span::kFlags == 16 && scope_spans::kSpans == 2 && span::kAttributes == 9 &&
              span::kStatus == 15 && status::kCode == 3 && span::kKind == 6);

// The most an inline attribute takes as a KeyValue: tag and length, the key's tag, length and
// InlineAttribute::kKeyCapacity bytes (24 copied), the value's tag and length and the longest
// AnyValue (a string's 2 + 16 bytes; a negative int's 11).
constexpr std::size_t kInlineKeyValueBound = 2 + 2 + 24 + 2 + 18;
// The most append_site_span() writes besides the site's bytes, and the up to 15 bytes each of its
// copies of them may write past their end.
constexpr std::size_t kSiteSpanBound =
    3 + 28 + 10 + 2 + 18 + SpanRecord::kInlineAttributes * kInlineKeyValueBound + 4 + 6 + 3 * 15;

inline void store64(char* p, std::uint64_t v) {
  if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap64(v);
  std::memcpy(p, &v, 8);
}
inline void store32(char* p, std::uint32_t v) {
  if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

// The bytes of r's site and thread: the name field, the nemo.span.group KeyValue (none without a
// group) and the thread.id KeyValue (none without a thread id), as append_span() writes them.
const SiteBytes* site_bytes(SiteBytesCache& sites, const SpanRecord& r) {
  return sites.find(r, [&r](std::string& out, std::size_t(&ends)[3]) {
    const std::string_view name = r.site->name;
    const std::string_view group = r.site->gate.group;
    // Within kMaxBytes even with every byte repaired to U+FFFD's three.
    if (name.size() + group.size() > SiteBytesCache::kMaxBytes / 4) return false;
    pb::Writer w(out);
    w.reserve(SiteBytesCache::kMaxBytes);
    string_field(w, span::kName, name);
    ends[0] = w.size();
    if (!group.empty()) {
      added_attribute(w, kGroupKey, [&] { string_field(w, any_value::kString, group); });
    }
    ends[1] = w.size();
    if (r.thread_id != 0) {
      added_attribute(w, kThreadIdKey, [&] {
        w.varint_field(any_value::kInt, static_cast<std::uint64_t>(r.thread_id));
      });
    }
    ends[2] = w.size();
    return true;
  });
}

// Writes the span of `r` as append_span(w, RecordSpan(r, clock, ids)) would, when `r` has the
// common shape: a site, nothing in the cold part, no dropped attribute, inline keys and strings of
// ASCII. False, nothing written, otherwise.
bool append_site_span(pb::Writer& w, const SpanRecord& r, const RecordIds& ids,
                      const TickConverter& clock, SiteBytesCache& sites) {
  if (r.site == nullptr || r.cold_used || r.dropped_attributes_count != 0) return false;
  const SiteBytes* b = site_bytes(sites, r);
  if (b == nullptr) return false;
  w.reserve(kSiteSpanBound + b->size[0] + b->size[1] + b->size[2]);
  char* const start = w.cursor();
  char* p = start;
  // The span, its length in two bytes (128 B .. 16 KiB: the bound is below), shortened at the end
  // if it fits one.
  p[0] = kTagSpan;
  p += 3;
  char* const content = p;
  p[0] = kTagTraceId;
  p[1] = 16;
  std::memcpy(p + 2, ids.trace_id.bytes.data(), 16);
  p[18] = kTagSpanId;
  p[19] = 8;
  std::memcpy(p + 20, ids.span_id.bytes.data(), 8);
  p += 28;
  if (r.parent_span_id.is_valid()) {
    p[0] = kTagParentSpanId;
    p[1] = 8;
    std::memcpy(p + 2, r.parent_span_id.bytes.data(), 8);
    p += 10;
  }
  p = copy_padded(p, sites.at(b->at[0]), b->size[0]);  // the name field
  p[0] = kTagKind;
  p[1] = static_cast<char>(r.kind);  // 0 .. 5
  p[2] = kTagStartTime;
  store64(p + 3, time_of(start_unix_nano(r, clock)));
  p[11] = kTagEndTime;
  store64(p + 12, time_of(end_unix_nano(r, clock)));
  p += 20;
  bool has_group = false, has_thread_id = false;
  for (std::uint32_t i = 0; i < r.inline_used; ++i) {
    const InlineAttribute& a = r.attributes[i];
    const std::string_view key = a.key_view();
    if (NEMO_LENS_UNLIKELY(!otlp::is_ascii(key))) return false;
    has_group |= key.size() == kGroupKey.size() && key == kGroupKey;
    has_thread_id |= key.size() == kThreadIdKey.size() && key == kThreadIdKey;
    // KeyValue: tag, length, the key field, the value field (tag, length, AnyValue). Every length
    // is below 128: one byte.
    char* const kv = p;
    p[0] = kTagAttribute;
    p[2] = kTagKey;
    p[3] = static_cast<char>(key.size());
    // The key's room and the bytes after it in the slot: one fixed-size copy.
    std::memcpy(p + 4, reinterpret_cast<const char*>(&a) + offsetof(InlineAttribute, key), 24);
    p += 4 + key.size();
    p[0] = kTagValue;
    char* const value = p + 2;
    switch (a.type) {
      case InlineAttribute::kBool:
        value[0] = kTagBool;
        value[1] = a.b ? 1 : 0;
        p = value + 2;
        break;
      case InlineAttribute::kInt: {
        value[0] = kTagInt;
        auto v = static_cast<std::uint64_t>(a.i);
        p = value + 1;
        while (v >= 0x80) {
          *p++ = static_cast<char>((v & 0x7f) | 0x80);
          v >>= 7;
        }
        *p++ = static_cast<char>(v);
        break;
      }
      case InlineAttribute::kDouble: {
        value[0] = kTagDouble;
        std::uint64_t bits = 0;
        std::memcpy(&bits, &a.d, 8);
        store64(value + 1, bits);
        p = value + 9;
        break;
      }
      default: {
        const std::string_view v(a.s, a.string_size);
        if (NEMO_LENS_UNLIKELY(!otlp::is_ascii(v))) return false;
        value[0] = kTagString;
        value[1] = static_cast<char>(v.size());
        std::memcpy(value + 2, a.s, InlineAttribute::kStringCapacity);
        p = value + 2 + v.size();
      }
    }
    value[-1] = static_cast<char>(p - value);
    kv[1] = static_cast<char>(p - (kv + 2));
  }
  if (NEMO_LENS_LIKELY(!has_group && !has_thread_id)) {
    p = copy_padded(p, sites.at(b->at[1]), b->size[1] + b->size[2]);  // adjacent
  } else {
    if (!has_group) p = copy_padded(p, sites.at(b->at[1]), b->size[1]);
    if (!has_thread_id) p = copy_padded(p, sites.at(b->at[2]), b->size[2]);
  }
  p[0] = kTagStatus;
  if (r.status_code == StatusCode::kUnset) {
    p[1] = 0;
    p += 2;
  } else {
    p[1] = 2;
    p[2] = kTagStatusCode;
    p[3] = static_cast<char>(r.status_code);
    p += 4;
  }
  std::memcpy(p, kTagFlags, 2);
  store32(p + 2, flags_of(r.trace_flags, r.parent_is_remote));
  p += 6;
  const auto length = static_cast<std::size_t>(p - content);
  if (length < 0x80) {
    start[1] = static_cast<char>(length);
    std::memmove(start + 2, content, length);
    --p;
  } else {
    start[1] = static_cast<char>((length & 0x7f) | 0x80);
    start[2] = static_cast<char>(length >> 7);
  }
  w.set_cursor(p);
  return true;
}
static_assert(kSiteSpanBound + SiteBytesCache::kMaxBytes < 0x4000,
              "append_site_span() writes a two-byte length");

// One ExportTraceServiceRequest written by `w`; `write_span(w, i)` writes the span of element i
// (non-null).
template <class Element, class WriteSpan>
void write_request(pb::Writer& w, std::span<const Element* const> spans, const Resource& resource,
                   WriteSpan write_span) {
  w.reserve(256 + attributes_bound(resource.attributes) + 256 * spans.size());
  const auto rs_mark = w.begin_message(request::kResourceSpans, 3);  // up to 2 MiB
  otlp::resource_field(w, resource_spans::kResource, resource);
  const auto ss_mark = w.begin_message(resource_spans::kScopeSpans, 3);
  otlp::scope_field(w, scope_spans::kScope, kInstrumentationScope, NEMO_LENS_VERSION_STRING);
  for (std::size_t i = 0; i < spans.size(); ++i) {
    // The spans were written on other cores: ask for the next ones' lines while this one is
    // encoded.
    if (i + 4 < spans.size() && spans[i + 4] != nullptr) {
      const char* next = reinterpret_cast<const char*>(spans[i + 4]);
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
      __builtin_prefetch(next + 128);
    }
    if (spans[i] != nullptr) write_span(w, i);
  }
  w.end_message(ss_mark);
  w.end_message(rs_mark);
  w.finish();
}

void write_records_request(pb::Writer& w, std::span<const SpanRecord* const> records,
                           const Resource& resource, const TickConverter& clock) {
  BatchIds ids(records);
  SiteBytesCache sites;
  write_request(w, records, resource, [&](pb::Writer& writer, std::size_t i) {
    const SpanRecord& r = *records[i];
    const RecordIds& span_ids = ids.of(i);
    if (!append_site_span(writer, r, span_ids, clock, sites)) {
      append_span(writer, RecordSpan(r, clock, span_ids));
    }
  });
}

}  // namespace

void append_otlp_proto(std::string& out, std::span<const SpanData* const> spans,
                       const Resource& resource) {
  pb::Writer w(out);
  write_request(w, spans, resource, [&spans](pb::Writer& writer, std::size_t i) {
    append_span(writer, DataSpan(*spans[i]));
  });
}

void append_otlp_proto_records(std::string& out, std::span<const SpanRecord* const> records,
                               const Resource& resource, const TickConverter& clock) {
  pb::Writer w(out);
  write_records_request(w, records, resource, clock);
}

std::size_t write_otlp_proto_records(std::string& buffer,
                                     std::span<const SpanRecord* const> records,
                                     const Resource& resource, const TickConverter& clock) {
  pb::Writer w(buffer, 0, pb::Writer::Overwrite{});
  write_records_request(w, records, resource, clock);
  return w.size();
}

}  // namespace nemo::lens::detail
