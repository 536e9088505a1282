// The scalar conversions of the JSON Lines reader: ids, decimal strings, error excerpts, and an
// OTLP AnyValue as plain JSON. Shared by the span and the metric line readers.
#pragma once

#include <charconv>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>

namespace nemo::lens::cli::reader {

using ojson = nlohmann::ordered_json;

// 16 hex digits as a 64-bit value.
std::optional<std::uint64_t> parse_span_id(std::string_view s);

// The 32 hex digits of a checked trace id (is_trace_id) as one 64-bit key: its two halves mixed,
// the same for either case. Distinct traces share a key with probability 2^-64.
std::uint64_t trace_key_of(std::string_view trace_id);
// 32 hex digits, not all zero.
bool is_trace_id(std::string_view s);

// The whole of `s` as a decimal T, or nothing.
template <class T>
std::optional<T> parse_decimal(std::string_view s) {
  T v{};
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// Printable text for an error message: at most 40 bytes, control characters as '?'.
std::string excerpt(std::string_view s);

// An OTLP AnyValue (as parsed JSON) as plain JSON: stringValue and bytesValue a string,
// boolValue a boolean, intValue an integer, doubleValue a number (or the string "NaN",
// "Infinity", "-Infinity"), arrayValue an array, kvlistValue an object, an empty one null.
// Returns an error message, empty on success.
std::string plain_value(const ojson& any, ojson& out, int depth);

}  // namespace nemo::lens::cli::reader
