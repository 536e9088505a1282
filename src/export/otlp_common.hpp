// What the OTLP encodings of the three signals (spans: otlp_proto.cpp and otlp_json.cpp; metrics:
// otlp_metrics.cpp; logs: otlp_logs.cpp) share: the common messages of opentelemetry-proto
// (Resource, InstrumentationScope, KeyValue and AnyValue) in protobuf and in OTLP/JSON, timestamps,
// ids, and the size bounds the protobuf writer needs. Internal.
//
// Protobuf: pb::Writer writes through a raw cursor, so every caller reserve()s an upper bound of
// what it writes first; string_bound() and attributes_bound() are those bounds. Strings go through
// string_field(), which repairs invalid UTF-8 with U+FFFD (proto3 strings must be valid UTF-8).
// JSON: the rules of append_otlp_json (exporters.hpp): lowerCamelCase keys, 64-bit integers as
// decimal strings, doubles in the shortest round-trip form, NaN and the infinities as strings.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "export/json_writer.hpp"
#include "nemo/lens/detail/export.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/exporter.hpp"
#include "strings.hpp"

namespace nemo::lens::detail::otlp {

// Field numbers of the common messages (common/v1, resource/v1).
namespace key_value {
inline constexpr std::uint32_t kKey = 1, kValue = 2;
}
namespace any_value {
inline constexpr std::uint32_t kString = 1, kBool = 2, kInt = 3, kDouble = 4, kArray = 5;
}
namespace array_value {
inline constexpr std::uint32_t kValues = 1;
}
namespace scope {
inline constexpr std::uint32_t kName = 1, kVersion = 2;
}
namespace resource {
inline constexpr std::uint32_t kAttributes = 1;
}

/// Room for a nested message's tag and the worst-case growth of its length (end_message may need
/// up to 4 bytes more than begin_message set aside).
inline constexpr std::size_t kMessageOverhead = 8;

/// A fixed64 timestamp: negative values (never produced by the engine) are clamped to 0.
inline std::uint64_t time_of(std::int64_t unix_nano) {
  return static_cast<std::uint64_t>(std::max<std::int64_t>(unix_nano, 0));
}

/// The bytes of an id, for a bytes field.
template <std::size_t N>
std::string_view bytes_of(const std::array<std::uint8_t, N>& a) {
  return {reinterpret_cast<const char*>(a.data()), N};
}

/// True when an attribute list has `key`.
inline bool has_attribute(std::span<const KeyValue> kvs, std::string_view key) {
  for (const KeyValue& kv : kvs) {
    if (kv.key == key) return true;
  }
  return false;
}

// ---- Protobuf ----------------------------------------------------------------------------------

/// The most a string field can take: repairing invalid UTF-8 triples a string at most (one byte
/// becomes U+FFFD's three), plus tag and length.
inline std::size_t string_bound(std::string_view s) { return 3 * s.size() + 16; }

/// The most an AnyValue's content takes (std::visit on an AttributeValue).
struct ValueBound {
  std::size_t operator()(bool) const { return 16; }
  std::size_t operator()(std::int64_t) const { return 16; }
  std::size_t operator()(double) const { return 16; }
  std::size_t operator()(const std::string& v) const { return string_bound(v); }
  template <class Vector>
  std::size_t operator()(const Vector& v) const {
    std::size_t n = kMessageOverhead;
    for (const auto& element : v) n += kMessageOverhead + (*this)(element);
    return n;
  }
};

/// The most key_values() writes for `attributes`.
inline std::size_t attributes_bound(std::span<const KeyValue> attributes) {
  std::size_t n = 0;
  for (const KeyValue& kv : attributes) {
    n += 2 * kMessageOverhead + string_bound(kv.key) + std::visit(ValueBound{}, kv.value);
  }
  return n;
}

/// The most resource_field() writes.
inline std::size_t resource_bound(const Resource& r) {
  return kMessageOverhead + attributes_bound(r.attributes);
}

/// The most scope_field() writes.
inline std::size_t scope_bound(std::string_view name, std::string_view version) {
  return kMessageOverhead + string_bound(name) + string_bound(version);
}

/// Whether every byte of `s` is ASCII.
inline bool is_ascii(std::string_view s) {
  // The words' OR, masked once: a byte's high bit is its own in every word it is read in.
  return (or_marked_words(s, 0, [](std::uint64_t w) { return w; }) & 0x8080808080808080ULL) == 0;
}

/// A proto3 string field: valid UTF-8, repaired with U+FFFD where it is not.
inline void string_field(pb::Writer& w, std::uint32_t field, std::string_view s) {
  if (NEMO_LENS_UNLIKELY(!is_ascii(s))) {
    w.bytes_field(field, valid_utf8(s));  // rare: only non-ASCII strings are checked further
    return;
  }
  w.bytes_field(field, s);
}

/// Writes one AnyValue's oneof field into an open AnyValue message (std::visit on an
/// AttributeValue). Every member is written, false and 0 included: a oneof member has presence.
struct AnyValueProto {
  pb::Writer& w;

  void operator()(bool v) const { w.varint_field(any_value::kBool, v ? 1 : 0); }
  void operator()(std::int64_t v) const {
    w.varint_field(any_value::kInt, static_cast<std::uint64_t>(v));
  }
  void operator()(double v) const { w.double_field(any_value::kDouble, v); }
  void operator()(const std::string& v) const { string_field(w, any_value::kString, v); }
  void operator()(const std::vector<bool>& v) const { array(v); }
  void operator()(const std::vector<std::int64_t>& v) const { array(v); }
  void operator()(const std::vector<double>& v) const { array(v); }
  void operator()(const std::vector<std::string>& v) const { array(v); }

  template <class Vector>
  void array(const Vector& v) const {
    const auto array_mark = w.begin_message(any_value::kArray, 2);
    for (const auto& element : v) {
      const auto mark = w.begin_message(array_value::kValues);
      (*this)(element);
      w.end_message(mark);
    }
    w.end_message(array_mark);
  }
};

/// One KeyValue as message field `field`.
inline void key_value_field(pb::Writer& w, std::uint32_t field, std::string_view key,
                            const AttributeValue& value) {
  const auto mark = w.begin_message(field);
  string_field(w, key_value::kKey, key);
  const auto value_mark = w.begin_message(key_value::kValue);
  std::visit(AnyValueProto{w}, value);
  w.end_message(value_mark);
  w.end_message(mark);
}

/// Every attribute of `kvs` as repeated KeyValue field `field`, in order.
inline void key_values(pb::Writer& w, std::uint32_t field, std::span<const KeyValue> kvs) {
  for (const KeyValue& kv : kvs) key_value_field(w, field, kv.key, kv.value);
}

/// A Resource as message field `field` (always written, empty when it has no attributes).
/// `length_bytes`: see pb::Writer::begin_message.
inline void resource_field(pb::Writer& w, std::uint32_t field, const Resource& r,
                           std::size_t length_bytes = 2) {
  const auto mark = w.begin_message(field, length_bytes);
  key_values(w, resource::kAttributes, r.attributes);
  w.end_message(mark);
}

/// An InstrumentationScope as message field `field` (always written); name and version are left
/// out when empty.
inline void scope_field(pb::Writer& w, std::uint32_t field, std::string_view name,
                        std::string_view version) {
  const auto mark = w.begin_message(field);
  if (!name.empty()) string_field(w, scope::kName, name);
  if (!version.empty()) string_field(w, scope::kVersion, version);
  w.end_message(mark);
}

// ---- OTLP/JSON ---------------------------------------------------------------------------------

/// A fixed64 timestamp as a JSON string of decimal digits, negative values clamped to "0".
inline void append_time_json(std::string& out, std::int64_t unix_nano) {
  json::append_quoted_uint(out, time_of(unix_nano));
}

/// Appends an AnyValue (std::visit on an AttributeValue): {"stringValue":...}, {"intValue":"42"},
/// {"arrayValue":{"values":[...]}}, ...
struct AnyValueJson {
  std::string& out;

  void operator()(bool v) const {
    json::append_raw(out, v ? std::string_view("{\"boolValue\":true}")
                            : std::string_view("{\"boolValue\":false}"));
  }
  void operator()(std::int64_t v) const {
    json::append_raw(out, "{\"intValue\":");
    json::append_quoted_int(out, v);
    out.push_back('}');
  }
  void operator()(double v) const {
    json::append_raw(out, "{\"doubleValue\":");
    json::append_double(out, v);
    out.push_back('}');
  }
  void operator()(const std::string& v) const {
    json::append_raw(out, "{\"stringValue\":");
    json::append_string(out, v);
    out.push_back('}');
  }
  void operator()(const std::vector<bool>& v) const { array(v); }
  void operator()(const std::vector<std::int64_t>& v) const { array(v); }
  void operator()(const std::vector<double>& v) const { array(v); }
  void operator()(const std::vector<std::string>& v) const { array(v); }

  template <class Vector>
  void array(const Vector& v) const {
    json::append_raw(out, "{\"arrayValue\":{\"values\":[");
    bool first = true;
    for (const auto& element : v) {
      if (!first) out.push_back(',');
      first = false;
      (*this)(element);  // exact overloads: no conversion, no copy
    }
    json::append_raw(out, "]}}");
  }
};

/// {"key":...,"value":AnyValue}
inline void append_key_value_json(std::string& out, std::string_view key,
                                  const AttributeValue& value) {
  json::append_raw(out, "{\"key\":");
  json::append_string(out, key);
  json::append_raw(out, ",\"value\":");
  std::visit(AnyValueJson{out}, value);
  out.push_back('}');
}

/// `"attributes":[...]` (possibly []), followed by `,"droppedAttributesCount":N` when N > 0.
inline void append_attributes_json(std::string& out, const std::vector<KeyValue>& attributes,
                                   std::uint32_t dropped) {
  json::append_raw(out, "\"attributes\":[");
  bool first = true;
  for (const KeyValue& kv : attributes) {
    if (!first) out.push_back(',');
    first = false;
    append_key_value_json(out, kv.key, kv.value);
  }
  out.push_back(']');
  if (dropped != 0) {
    json::append_raw(out, ",\"droppedAttributesCount\":");
    json::append_uint(out, dropped);
  }
}

/// An InstrumentationScope object: {"name":...,"version":...}, each left out when empty ({}
/// when both are).
inline void append_scope_json(std::string& out, std::string_view name, std::string_view version) {
  out.push_back('{');
  if (!name.empty()) {
    json::append_raw(out, "\"name\":");
    json::append_string(out, name);
  }
  if (!version.empty()) {
    json::append_raw(out, name.empty() ? "\"version\":" : ",\"version\":");
    json::append_string(out, version);
  }
  out.push_back('}');
}

}  // namespace nemo::lens::detail::otlp
