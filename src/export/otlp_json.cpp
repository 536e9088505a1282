// The OTLP/JSON encoding of a batch of spans (opentelemetry-proto's ExportTraceServiceRequest in
// the OTLP specification's JSON Protobuf Encoding). See append_otlp_json in exporters.hpp for the
// shape and the fields left out.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/exporters.hpp"
#include "export/json_writer.hpp"
#include "export/otlp_common.hpp"
#include "export/protobuf_wire.hpp"
#include "export/record_encoding.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/version.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

// Span.flags / Link.flags bits above the W3C trace flags (trace.proto's SpanFlags).
constexpr std::uint32_t kContextHasIsRemote = 0x100;
constexpr std::uint32_t kContextIsRemote = 0x200;

static_assert(kInstrumentationScope == "nemo.lens", "the scope name is spelled out below");

// The span attributes the encoder adds from SpanData fields that OTLP has no slot for.
constexpr std::string_view kGroupKey = semconv::kNemoSpanGroup;
constexpr std::string_view kThreadIdKey = semconv::kThreadId;
static_assert(kGroupKey == "nemo.span.group" && kThreadIdKey == "thread.id",
              "the keys are spelled out below");

std::uint32_t flags_of(std::uint8_t trace_flags, bool is_remote) {
  return trace_flags | kContextHasIsRemote | (is_remote ? kContextIsRemote : 0U);
}

using otlp::append_attributes_json;
using otlp::append_key_value_json;
using otlp::append_time_json;
using otlp::has_attribute;
using otlp::time_of;

void append_span(std::string& out, const SpanData& span) {
  json::append_raw(out, "{\"traceId\":");
  json::append_hex(out, span.context.trace_id.bytes);
  json::append_raw(out, ",\"spanId\":");
  json::append_hex(out, span.context.span_id.bytes);
  if (!span.context.trace_state.empty()) {
    json::append_raw(out, ",\"traceState\":");
    json::append_string(out, span.context.trace_state);
  }
  if (span.parent_span_id.is_valid()) {
    json::append_raw(out, ",\"parentSpanId\":");
    json::append_hex(out, span.parent_span_id.bytes);
  }
  json::append_raw(out, ",\"flags\":");
  json::append_uint(out, flags_of(span.context.trace_flags, span.parent_is_remote));
  json::append_raw(out, ",\"name\":");
  json::append_string(out, span.name);
  json::append_raw(out, ",\"kind\":");
  json::append_uint(out, static_cast<std::uint32_t>(span.kind));
  json::append_raw(out, ",\"startTimeUnixNano\":");
  append_time_json(out, span.start_time_unix_nano);
  json::append_raw(out, ",\"endTimeUnixNano\":");
  append_time_json(out, span.end_time_unix_nano);

  // The span's own attributes, then the group and thread id unless it already carries those keys
  // (keys must stay unique; an explicit attribute wins).
  json::append_raw(out, ",\"attributes\":[");
  bool first = true;
  for (const KeyValue& kv : span.attributes) {
    if (!first) out.push_back(',');
    first = false;
    append_key_value_json(out, kv.key, kv.value);
  }
  if (!span.group.empty() && !has_attribute(span.attributes, kGroupKey)) {
    if (!first) out.push_back(',');
    first = false;
    json::append_raw(out, "{\"key\":\"nemo.span.group\",\"value\":{\"stringValue\":");
    json::append_string(out, span.group);
    json::append_raw(out, "}}");
  }
  if (span.thread_id != 0 && !has_attribute(span.attributes, kThreadIdKey)) {
    if (!first) out.push_back(',');
    json::append_raw(out, "{\"key\":\"thread.id\",\"value\":{\"intValue\":");
    json::append_quoted_int(out, span.thread_id);
    json::append_raw(out, "}}");
  }
  out.push_back(']');
  if (span.dropped_attributes_count != 0) {
    json::append_raw(out, ",\"droppedAttributesCount\":");
    json::append_uint(out, span.dropped_attributes_count);
  }

  if (!span.events.empty()) {
    json::append_raw(out, ",\"events\":[");
    first = true;
    for (const SpanEvent& event : span.events) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"timeUnixNano\":");
      append_time_json(out, event.time_unix_nano);
      json::append_raw(out, ",\"name\":");
      json::append_string(out, event.name);
      out.push_back(',');
      append_attributes_json(out, event.attributes, event.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (span.dropped_events_count != 0) {
    json::append_raw(out, ",\"droppedEventsCount\":");
    json::append_uint(out, span.dropped_events_count);
  }

  if (!span.links.empty()) {
    json::append_raw(out, ",\"links\":[");
    first = true;
    for (const SpanLink& link : span.links) {
      if (!first) out.push_back(',');
      first = false;
      json::append_raw(out, "{\"traceId\":");
      json::append_hex(out, link.context.trace_id.bytes);
      json::append_raw(out, ",\"spanId\":");
      json::append_hex(out, link.context.span_id.bytes);
      if (!link.context.trace_state.empty()) {
        json::append_raw(out, ",\"traceState\":");
        json::append_string(out, link.context.trace_state);
      }
      json::append_raw(out, ",\"flags\":");
      json::append_uint(out, flags_of(link.context.trace_flags, link.context.is_remote));
      out.push_back(',');
      append_attributes_json(out, link.attributes, link.dropped_attributes_count);
      out.push_back('}');
    }
    out.push_back(']');
  }
  if (span.dropped_links_count != 0) {
    json::append_raw(out, ",\"droppedLinksCount\":");
    json::append_uint(out, span.dropped_links_count);
  }

  json::append_raw(out, ",\"status\":{\"code\":");
  json::append_uint(out, static_cast<std::uint32_t>(span.status_code));
  if (!span.status_message.empty()) {
    json::append_raw(out, ",\"message\":");
    json::append_string(out, span.status_message);
  }
  json::append_raw(out, "}}");
}

// ---- Records of the common shape, from bytes made once per site and batch ----------------------
//
// As in otlp_proto.cpp: a LENS_SPAN's span (a site, nothing in the cold part, no dropped
// attribute) is written with plain stores, its site's and thread's constant parts copied from
// SiteBytesCache, to the byte what append_span() writes for the SpanData materialize() makes of
// it (record_encoding_test compares the two); any other span is made SpanData and written by
// append_span().

// Appends the literal `s` (its size known when compiled: a few moves, no call).
template <std::size_t N>
char* put(char* p, const char (&s)[N]) {
  std::memcpy(p, s, N - 1);
  return p + (N - 1);
}

// The most append_site_span_json() writes besides the site's bytes, each of the three copies of
// those writing up to 15 bytes past their end, the numbers up to json::kSlack.
constexpr std::size_t kInlineAttributeJsonBound =
    sizeof("{\"key\":\"") + InlineAttribute::kKeyCapacity +
    sizeof("\",\"value\":{\"stringValue\":\"") + json::kMaxDoubleSize + sizeof("\"}},");
// The fixed part: the ids, a parent, the flags, both times and the punctuation (about 250 bytes).
constexpr std::size_t kSiteSpanJsonBound =
    320 + SpanRecord::kInlineAttributes * kInlineAttributeJsonBound + 3 * 15 + json::kSlack;

// The bytes of r's site and thread: `,"name":<name>,"kind":`, the nemo.span.group attribute (none
// without a group) and the thread.id attribute (none without a thread id), as append_span()
// writes them.
const SiteBytes* site_bytes(SiteBytesCache& sites, const SpanRecord& r) {
  return sites.find(r, [&r](std::string& out, std::size_t(&ends)[3]) {
    const std::string_view name = r.site->name;
    const std::string_view group = r.site->gate.group;
    // Within kMaxBytes even with every byte escaped as \u00XX.
    if (name.size() + group.size() > SiteBytesCache::kMaxBytes / 8) return false;
    json::append_raw(out, ",\"name\":");
    json::append_string(out, name);
    json::append_raw(out, ",\"kind\":");
    ends[0] = out.size();
    if (!group.empty()) {
      json::append_raw(out, "{\"key\":\"nemo.span.group\",\"value\":{\"stringValue\":");
      json::append_string(out, group);
      json::append_raw(out, "}}");
    }
    ends[1] = out.size();
    if (r.thread_id != 0) {
      json::append_raw(out, "{\"key\":\"thread.id\",\"value\":{\"intValue\":");
      json::append_quoted_int(out, r.thread_id);
      json::append_raw(out, "}}");
    }
    ends[2] = out.size();
    return true;
  });
}

// What append_site_span() remembers from span to span of a request: the digits of the last time
// written above its last eight (they change every 0.1 s), and the last inline keys found to need
// no escaping, by slot.
struct JsonRun {
  std::uint64_t time_high = 0;  // 0: none yet (a time of 0 .. 99,999,999 is written whole)
  std::size_t time_high_size = 0;
  char time_high_text[24];  // 12 digits at most, and the bytes a copy of 16 reads
  struct Key {
    std::size_t size = SIZE_MAX;  // none yet
    char bytes[InlineAttribute::kKeyCapacity];
  };
  Key plain_keys[SpanRecord::kInlineAttributes];
};

// Writes `t` (Unix nanoseconds) as write_uint() does, its digits above the last eight copied
// from the run when they are the last time's.
char* write_time(char* p, std::uint64_t t, JsonRun& run) {
  constexpr std::uint64_t k8 = 100000000;
  if (t < k8) return json::write_uint(p, t);
  const std::uint64_t high = t / k8;
  if (high != run.time_high) {
    run.time_high = high;
    run.time_high_size =
        static_cast<std::size_t>(json::write_uint(run.time_high_text, high) - run.time_high_text);
  }
  std::memcpy(p, run.time_high_text, 16);
  p += run.time_high_size;
  json::store_bytes(
      p, json::digits8(static_cast<std::uint32_t>(t - high * k8)) + 0x3030303030303030ULL);
  return p + 8;
}

// Whether `key` (an inline key, whose slot is i) needs no escaping: the run's memory of slot i,
// else is_plain(), remembered when it does not.
bool plain_key(std::string_view key, std::uint32_t i, JsonRun& run) {
  JsonRun::Key& k = run.plain_keys[i];
  if (k.size == key.size() && equal_short(key, std::string_view(k.bytes, k.size))) return true;
  if (!json::is_plain(key)) return false;
  k.size = key.size();
  std::memcpy(k.bytes, key.data(), key.size());
  return true;
}

// Writes the span of `r` (after a ',' unless `first`) as append_span() writes what materialize()
// makes of it with `ids`, when `r` has the common shape and its inline keys and strings need no
// escaping. False, nothing written, otherwise.
bool append_site_span(pb::Writer& w, const SpanRecord& r, const RecordIds& ids,
                      const TickConverter& clock, SiteBytesCache& sites, JsonRun& run, bool first) {
  if (r.site == nullptr || r.cold_used || r.dropped_attributes_count != 0) return false;
  const SiteBytes* b = site_bytes(sites, r);
  if (b == nullptr) return false;
  w.reserve(kSiteSpanJsonBound + b->size[0] + b->size[1] + b->size[2]);
  char* p = w.cursor();
  if (!first) *p++ = ',';
  p = put(p, "{\"traceId\":\"");
  p = json::write_hex(p, ids.trace_id.bytes.data(), 16);
  p = put(p, "\",\"spanId\":\"");
  p = json::write_hex(p, ids.span_id.bytes.data(), 8);
  if (r.parent_span_id.is_valid()) {
    p = put(p, "\",\"parentSpanId\":\"");
    p = json::write_hex(p, r.parent_span_id.bytes.data(), 8);
  }
  p = put(p, "\",\"flags\":");
  p = json::write_uint(p, flags_of(r.trace_flags, r.parent_is_remote));
  p = copy_padded(p, sites.at(b->at[0]), b->size[0]);        // ,"name":...,"kind":
  *p++ = static_cast<char>('0' + static_cast<int>(r.kind));  // 0 .. 5
  p = put(p, ",\"startTimeUnixNano\":\"");
  p = write_time(p, time_of(start_unix_nano(r, clock)), run);
  p = put(p, "\",\"endTimeUnixNano\":\"");
  p = write_time(p, time_of(end_unix_nano(r, clock)), run);
  p = put(p, "\",\"attributes\":[");
  char* const attributes = p;
  bool has_group = false, has_thread_id = false;
  for (std::uint32_t i = 0; i < r.inline_used; ++i) {
    const InlineAttribute& a = r.attributes[i];
    const std::string_view key = a.key_view();
    if (NEMO_LENS_UNLIKELY(!plain_key(key, i, run))) return false;
    has_group |= key.size() == kGroupKey.size() && key == kGroupKey;
    has_thread_id |= key.size() == kThreadIdKey.size() && key == kThreadIdKey;
    if (i != 0) *p++ = ',';
    p = put(p, "{\"key\":\"");
    // The key's room and the bytes after it in the slot: one fixed-size copy.
    std::memcpy(p, reinterpret_cast<const char*>(&a) + offsetof(InlineAttribute, key), 24);
    p += key.size();
    switch (a.type) {
      case InlineAttribute::kBool:
        p = a.b ? put(p, "\",\"value\":{\"boolValue\":true}}")
                : put(p, "\",\"value\":{\"boolValue\":false}}");
        break;
      case InlineAttribute::kInt:
        p = put(p, "\",\"value\":{\"intValue\":\"");
        p = json::write_int(p, a.i);
        p = put(p, "\"}}");
        break;
      case InlineAttribute::kDouble:
        p = put(p, "\",\"value\":{\"doubleValue\":");
        p = json::write_double(p, a.d);
        p = put(p, "}}");
        break;
      default: {
        const std::string_view v(a.s, a.string_size);
        if (NEMO_LENS_UNLIKELY(!json::is_plain(v))) return false;
        p = put(p, "\",\"value\":{\"stringValue\":\"");
        std::memcpy(p, a.s, InlineAttribute::kStringCapacity);
        p += v.size();
        p = put(p, "\"}}");
      }
    }
  }
  // The attributes the encoder adds, each after a ',' unless it comes first.
  if (!has_group && b->size[1] != 0) {
    if (p != attributes) *p++ = ',';
    p = copy_padded(p, sites.at(b->at[1]), b->size[1]);
  }
  if (!has_thread_id && b->size[2] != 0) {
    if (p != attributes) *p++ = ',';
    p = copy_padded(p, sites.at(b->at[2]), b->size[2]);
  }
  p = put(p, "],\"status\":{\"code\":");
  *p++ = static_cast<char>('0' + static_cast<int>(r.status_code));  // 0 .. 2
  p = put(p, "}}");
  w.set_cursor(p);
  return true;
}

// The request around the spans: what comes before the first and after the last.
void append_request_head(std::string& out, const Resource& resource) {
  json::append_raw(out, "{\"resourceSpans\":[{\"resource\":{");
  append_attributes_json(out, resource.attributes, 0);
  json::append_raw(
      out,
      "},\"scopeSpans\":[{\"scope\":{\"name\":\"nemo.lens\",\"version\":\"" NEMO_LENS_VERSION_STRING
      "\"},\"spans\":[");
}
constexpr std::string_view kRequestTail = "]}]}]}";

}  // namespace

std::size_t write_otlp_json_records(std::string& buffer, std::size_t at,
                                    std::span<const SpanRecord* const> records,
                                    const Resource& resource, const TickConverter& clock) {
  pb::Writer w(buffer, at, pb::Writer::Overwrite{});
  std::string scratch;  // the request's head, then any span written the general way
  append_request_head(scratch, resource);
  w.reserve(scratch.size() + 512 * records.size());
  std::memcpy(w.cursor(), scratch.data(), scratch.size());
  w.set_cursor(w.cursor() + scratch.size());
  BatchIds ids(records);
  SiteBytesCache sites;
  JsonRun run;
  SpanData data;
  bool first = true;
  for (std::size_t i = 0; i < records.size(); ++i) {
    if (i + 4 < records.size() && records[i + 4] != nullptr) {
      // The spans were written on other cores: ask for the next ones' lines meanwhile.
      const char* next = reinterpret_cast<const char*>(records[i + 4]);
      __builtin_prefetch(next);
      __builtin_prefetch(next + 64);
      __builtin_prefetch(next + 128);
    }
    if (records[i] == nullptr) continue;
    const SpanRecord& r = *records[i];
    const RecordIds& span_ids = ids.of(i);
    if (!append_site_span(w, r, span_ids, clock, sites, run, first)) {
      materialize(r, clock, data);
      data.context.trace_id = span_ids.trace_id;
      data.context.span_id = span_ids.span_id;
      scratch.clear();
      if (!first) scratch.push_back(',');
      append_span(scratch, data);
      w.reserve(scratch.size());
      std::memcpy(w.cursor(), scratch.data(), scratch.size());
      w.set_cursor(w.cursor() + scratch.size());
    }
    first = false;
  }
  w.reserve(kRequestTail.size());
  std::memcpy(w.cursor(), kRequestTail.data(), kRequestTail.size());
  w.set_cursor(w.cursor() + kRequestTail.size());
  return w.size() - at;
}

void append_otlp_json(std::string& out, std::span<const SpanData* const> spans,
                      const Resource& resource) {
  // A typical span with a handful of attributes encodes to 400-600 bytes; reserving once avoids
  // most regrowth on the first batch (exporters reuse their buffer afterwards).
  out.reserve(out.size() + 256 + 64 * resource.attributes.size() + 512 * spans.size());
  append_request_head(out, resource);
  bool first = true;
  for (const SpanData* span : spans) {
    if (span == nullptr) continue;
    if (!first) out.push_back(',');
    first = false;
    append_span(out, *span);
  }
  json::append_raw(out, kRequestTail);
}

}  // namespace nemo::lens::detail
