// The JSON writer the exporters share: appends JSON tokens to a std::string without allocating
// anything but the string's own growth. Internal.
//
//   std::string out;
//   out += '{';
//   json::append_key(out, "name");
//   json::append_string(out, span.name);  // escaped, invalid UTF-8 replaced by U+FFFD
//   out += '}';
#pragma once

#include <charconv>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "nemo/lens/attributes.hpp"
#include "strings.hpp"

namespace nemo::lens::detail::json {

/// The longest line of OTLP/JSON that lens writes (the `file` exporter, `lens collect`) and that
/// `lens report` reads: every line lens writes is one lens report can read.
inline constexpr std::size_t kMaxLineBytes = std::size_t{256} << 20;

/// Appends `s` as is (for keys and punctuation known to need no escaping).
inline void append_raw(std::string& out, std::string_view s) { out.append(s.data(), s.size()); }

/// Appends `s` as a quoted JSON string (RFC 8259): `"` and `\` escaped, control characters as
/// \b \f \n \r \t or \u00XX, valid UTF-8 copied as is, every maximal invalid subpart replaced by
/// U+FFFD. Runs of bytes that need nothing are copied in one append.
inline void append_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out.push_back('"');
  const auto* p = reinterpret_cast<const unsigned char*>(s.data());
  const auto* const end = p + s.size();
  const auto* run = p;  // start of the bytes not yet appended
  auto flush = [&](const unsigned char* upto) {
    out.append(reinterpret_cast<const char*>(run), static_cast<std::size_t>(upto - run));
  };
  while (p < end) {
    const unsigned char c = *p;
    if (c >= 0x20 && c < 0x80) {
      if (c != '"' && c != '\\') {
        ++p;
        continue;
      }
      flush(p);
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
      run = ++p;
    } else if (c >= 0x80) {
      const Utf8Step step = utf8_step(p, end);
      if (step.valid) {
        p += step.length;
        continue;
      }
      flush(p);
      append_raw(out, "\xEF\xBF\xBD");  // U+FFFD REPLACEMENT CHARACTER
      p += step.length;
      run = p;
    } else {
      flush(p);
      switch (c) {
        case '\b':
          append_raw(out, "\\b");
          break;
        case '\f':
          append_raw(out, "\\f");
          break;
        case '\n':
          append_raw(out, "\\n");
          break;
        case '\r':
          append_raw(out, "\\r");
          break;
        case '\t':
          append_raw(out, "\\t");
          break;
        default: {
          const char esc[6] = {'\\', 'u', '0', '0', kHex[c >> 4], kHex[c & 0xF]};
          out.append(esc, sizeof esc);
        }
      }
      run = ++p;
    }
  }
  flush(p);
  out.push_back('"');
}

/// Appends `"key":` for a key that needs no escaping (a literal of the encoder).
inline void append_key(std::string& out, std::string_view key) {
  out.push_back('"');
  append_raw(out, key);
  append_raw(out, "\":");
}

/// Appends `v` as a JSON number.
inline void append_int(std::string& out, std::int64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// Appends `v` as a JSON number.
inline void append_uint(std::string& out, std::uint64_t v) {
  char buf[24];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<std::size_t>(r.ptr - buf));
}

/// Appends `v` as a JSON string of decimal digits (protobuf's JSON form of 64-bit integers).
inline void append_quoted_int(std::string& out, std::int64_t v) {
  out.push_back('"');
  append_int(out, v);
  out.push_back('"');
}

/// Appends `v` as a JSON string of decimal digits.
inline void append_quoted_uint(std::string& out, std::uint64_t v) {
  out.push_back('"');
  append_uint(out, v);
  out.push_back('"');
}

/// Appends `v` as the shortest JSON number that reads back as exactly `v`, with ".0" added when
/// it would otherwise look like an integer (so readers keep it a double). NaN and the infinities,
/// which JSON numbers cannot express, become the strings "NaN", "Infinity" and "-Infinity" (the
/// protobuf JSON mapping's spelling).
inline void append_double(std::string& out, double v) {
  if (std::isnan(v)) {
    append_raw(out, "\"NaN\"");
    return;
  }
  if (std::isinf(v)) {
    append_raw(out, v > 0 ? std::string_view("\"Infinity\"") : std::string_view("\"-Infinity\""));
    return;
  }
  char buf[32];
  const auto r = std::to_chars(buf, buf + sizeof buf, v);
  const std::string_view digits(buf, static_cast<std::size_t>(r.ptr - buf));
  append_raw(out, digits);
  if (digits.find_first_of(".e") == std::string_view::npos) append_raw(out, ".0");
}

/// Appends `bytes` as a quoted string of lower-case hex digits.
inline void append_hex(std::string& out, std::span<const std::uint8_t> bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  char buf[2 + 2 * 32];
  std::size_t n = 0;
  buf[n++] = '"';
  for (std::size_t i = 0; i < bytes.size() && i < 32; ++i) {
    buf[n++] = kHex[bytes[i] >> 4];
    buf[n++] = kHex[bytes[i] & 0xF];
  }
  buf[n++] = '"';
  out.append(buf, n);
}

/// Appends attribute values as plain JSON values: true/false, a number, a string, or an array of
/// those. Use with std::visit, or append_plain_value().
struct PlainValueWriter {
  std::string& out;

  void operator()(bool v) const { append_raw(out, v ? "true" : "false"); }
  void operator()(std::int64_t v) const { append_int(out, v); }
  void operator()(double v) const { append_double(out, v); }
  void operator()(const std::string& v) const { append_string(out, v); }
  void operator()(const std::vector<bool>& v) const { array(v); }
  void operator()(const std::vector<std::int64_t>& v) const { array(v); }
  void operator()(const std::vector<double>& v) const { array(v); }
  void operator()(const std::vector<std::string>& v) const { array(v); }

  template <class Vector>
  void array(const Vector& v) const {
    out.push_back('[');
    bool first = true;
    for (const auto& element : v) {
      if (!first) out.push_back(',');
      first = false;
      (*this)(element);  // exact overloads: no conversion, no copy
    }
    out.push_back(']');
  }
};

/// Appends an attribute value as a plain JSON value (see PlainValueWriter).
inline void append_plain_value(std::string& out, const AttributeValue& value) {
  std::visit(PlainValueWriter{out}, value);
}

/// Writes one JSON object whose members may each be left out: key() puts the ',' before every
/// member but the first.
///
///   json::JsonObject o(out);                      // {
///   if (!name.empty()) json::append_string(o.key("name"), name);
///   o.close();                                    // }
class JsonObject {
 public:
  explicit JsonObject(std::string& out) : out_(out) { out_.push_back('{'); }
  /// Appends `"key":` (a literal that needs no escaping) and returns the output for the value.
  std::string& key(std::string_view key) {
    if (!first_) out_.push_back(',');
    first_ = false;
    json::append_key(out_, key);
    return out_;
  }
  void close() { out_.push_back('}'); }

 private:
  std::string& out_;
  bool first_ = true;
};

/// The array counterpart of JsonObject: element() puts the ',' before every element but the first.
///
///   json::JsonArray a(out);                       // [
///   for (const auto& g : groups) json::append_string(a.element(), g);
///   a.close();                                    // ]
class JsonArray {
 public:
  explicit JsonArray(std::string& out) : out_(out) { out_.push_back('['); }
  /// Returns the output for the next element, after a ',' unless it is the first.
  std::string& element() {
    if (!first_) out_.push_back(',');
    first_ = false;
    return out_;
  }
  void close() { out_.push_back(']'); }

 private:
  std::string& out_;
  bool first_ = true;
};

}  // namespace nemo::lens::detail::json
