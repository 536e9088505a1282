// The JSON writer the exporters share: appends JSON tokens to a std::string without allocating
// anything but the string's own growth. Internal.
//
//   std::string out;
//   out += '{';
//   json::append_key(out, "name");
//   json::append_string(out, span.name);  // escaped, invalid UTF-8 replaced by U+FFFD
//   out += '}';
#pragma once

#include <bit>
#include <charconv>
#include <cstring>
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

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

/// The bytes of `w` that append_string() would not copy as they are (below 0x20, '"', '\\',
/// 0x80 and up), as their high bits; 0 when there is none. A borrow can only mark bytes above one
/// that is marked already, so the answer is exact.
inline std::uint64_t unplain_bytes(std::uint64_t w) {
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL, kHigh = 0x8080808080808080ULL;
  const std::uint64_t quote = w ^ (kOnes * '"'), backslash = w ^ (kOnes * '\\');
  return (w | ((w - kOnes * 0x20) & ~w) | ((quote - kOnes) & ~quote) |
          ((backslash - kOnes) & ~backslash)) &
         kHigh;
}

/// Whether append_string() writes `s` as it is between its quotes: every byte printable ASCII
/// (0x20 .. 0x7f) other than '"' and '\\'.
inline bool is_plain(std::string_view s) {
  constexpr std::uint64_t kFill = 0x6161616161616161ULL;  // "aaaaaaaa"
  return or_marked_words(s, kFill, unplain_bytes) == 0;
}

/// Appends `"key":` for a key that needs no escaping (a literal of the encoder).
inline void append_key(std::string& out, std::string_view key) {
  out.push_back('"');
  append_raw(out, key);
  append_raw(out, "\":");
}

// ---- Writing through a raw cursor ----------------------------------------------------------------
//
// The write_* functions write at `p` and return the end of what they wrote; each may also write
// up to kSlack bytes past that end (whole words), which the caller's room must allow for.

/// The bytes a write_* function may write past the end it returns.
inline constexpr std::size_t kSlack = 8;
/// The most write_uint() and write_int() write (a sign and 20 digits), kSlack aside.
inline constexpr std::size_t kMaxIntegerSize = 21;

/// The 8 decimal digits of `v` < 100,000,000, leading zeros included, as digit values 0 .. 9 in
/// the bytes of one word, the most significant digit in the lowest byte: two 4-digit halves, split
/// into 2-digit lanes, then into digits, a few multiplies for all eight (no division).
inline std::uint64_t digits8(std::uint32_t v) {
  const std::uint64_t hi = v / 10000, lo = v % 10000;
  std::uint64_t m = hi | (lo << 32);                               // two lanes below 10000
  const std::uint64_t hundreds = ((m * 10486) >> 20) & 0x0000007F0000007FULL;  // lane / 100
  m = hundreds | ((m - hundreds * 100) << 16);                     // four lanes below 100
  const std::uint64_t tens = ((m * 103) >> 10) & 0x000F000F000F000FULL;        // lane / 10
  return tens | ((m - tens * 10) << 8);                            // eight digits
}

/// Stores the 8 bytes of `w` at p, its lowest byte first, whatever the host's byte order.
inline void store_bytes(char* p, std::uint64_t w) {
  if constexpr (std::endian::native != std::endian::little) w = __builtin_bswap64(w);
  std::memcpy(p, &w, 8);
}

/// The decimal digits of `v` < 100,000,000 without leading zeros ("0" for 0).
inline char* write_uint_small(char* p, std::uint32_t v) {
  const std::uint64_t d = digits8(v);
  // Leading zeros: the low bytes of the word that are 0 (all but the last digit for 0).
  const unsigned zeros = d == 0 ? 7 : static_cast<unsigned>(std::countr_zero(d)) / 8;
  store_bytes(p, (d + 0x3030303030303030ULL) >> (8 * zeros));
  return p + (8 - zeros);
}

/// The decimal digits of `v`, as std::to_chars writes them.
inline char* write_uint(char* p, std::uint64_t v) {
  constexpr std::uint64_t k8 = 100000000, k16 = k8 * k8;
  constexpr std::uint64_t kAscii = 0x3030303030303030ULL;
  if (v < k8) return write_uint_small(p, static_cast<std::uint32_t>(v));
  if (v < k16) {
    const std::uint64_t hi = v / k8;
    p = write_uint_small(p, static_cast<std::uint32_t>(hi));
    store_bytes(p, digits8(static_cast<std::uint32_t>(v - hi * k8)) + kAscii);
    return p + 8;
  }
  const std::uint64_t top = v / k16, rest = v - top * k16, mid = rest / k8;
  p = write_uint_small(p, static_cast<std::uint32_t>(top));
  store_bytes(p, digits8(static_cast<std::uint32_t>(mid)) + kAscii);
  store_bytes(p + 8, digits8(static_cast<std::uint32_t>(rest - mid * k8)) + kAscii);
  return p + 16;
}

/// The decimal digits of `v`, after a '-' when negative, as std::to_chars writes them.
inline char* write_int(char* p, std::int64_t v) {
  if (v < 0) {
    *p++ = '-';
    return write_uint(p, 0 - static_cast<std::uint64_t>(v));
  }
  return write_uint(p, static_cast<std::uint64_t>(v));
}

/// Appends `v` as a JSON number.
inline void append_int(std::string& out, std::int64_t v) {
  char buf[kMaxIntegerSize + kSlack];
  out.append(buf, static_cast<std::size_t>(write_int(buf, v) - buf));
}

/// Appends `v` as a JSON number.
inline void append_uint(std::string& out, std::uint64_t v) {
  char buf[kMaxIntegerSize + kSlack];
  out.append(buf, static_cast<std::size_t>(write_uint(buf, v) - buf));
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

/// The most write_double() writes.
inline constexpr std::size_t kMaxDoubleSize = 32;

/// `v` as the shortest JSON number that reads back as exactly `v`, with ".0" added when it would
/// otherwise look like an integer (so readers keep it a double). NaN and the infinities, which
/// JSON numbers cannot express, become the strings "NaN", "Infinity" and "-Infinity" (the
/// protobuf JSON mapping's spelling). Writes nothing past the end it returns.
inline char* write_double(char* p, double v) {
  auto literal = [p](std::string_view s) {
    std::memcpy(p, s.data(), s.size());
    return p + s.size();
  };
  if (std::isnan(v)) return literal("\"NaN\"");
  if (std::isinf(v)) return literal(v > 0 ? "\"Infinity\"" : "\"-Infinity\"");
  char* const end = std::to_chars(p, p + kMaxDoubleSize - 2, v).ptr;
  if (std::string_view(p, static_cast<std::size_t>(end - p)).find_first_of(".e") !=
      std::string_view::npos) {
    return end;
  }
  end[0] = '.';
  end[1] = '0';
  return end + 2;
}

/// Appends `v` as write_double() writes it.
inline void append_double(std::string& out, double v) {
  char buf[kMaxDoubleSize];
  out.append(buf, static_cast<std::size_t>(write_double(buf, v) - buf));
}

/// `n` bytes at `bytes` (a multiple of 8: an id's 8 or 16) as 2n lower-case hex digits, no
/// quotes. Writes nothing past the end it returns.
inline char* write_hex(char* p, const std::uint8_t* bytes, std::size_t n) {
#if defined(__SSE2__)
  // Sixteen bytes at a time: the nibbles apart, interleaved, then '0' + n, plus 39 from 10 on.
  const __m128i low_nibble = _mm_set1_epi8(0x0f);
  auto ascii = [](__m128i nibbles) {
    const __m128i letters = _mm_cmpgt_epi8(nibbles, _mm_set1_epi8(9));
    return _mm_add_epi8(_mm_add_epi8(nibbles, _mm_set1_epi8('0')),
                        _mm_and_si128(letters, _mm_set1_epi8('a' - '0' - 10)));
  };
  for (std::size_t i = 0; i + 8 <= n; i += 16) {
    const __m128i v = n - i >= 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i))
                                  : _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + i));
    const __m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low_nibble);
    const __m128i lo = _mm_and_si128(v, low_nibble);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i), ascii(_mm_unpacklo_epi8(hi, lo)));
    if (n - i >= 16) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(p + 2 * i + 16), ascii(_mm_unpackhi_epi8(hi, lo)));
    }
  }
  return p + 2 * n;
#else
  static constexpr char kHex[] = "0123456789abcdef";
  for (std::size_t i = 0; i < n; ++i) {
    p[2 * i] = kHex[bytes[i] >> 4];
    p[2 * i + 1] = kHex[bytes[i] & 0xF];
  }
  return p + 2 * n;
#endif
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
