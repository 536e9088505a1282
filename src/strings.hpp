// Small string helpers shared by the library's configuration code. Internal.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens::detail {

/// `s` without leading and trailing ASCII whitespace.
std::string_view trim(std::string_view s) noexcept;

/// `s` with ASCII letters lower-cased.
std::string to_lower(std::string_view s);

/// "['a', 'b']": the Python-style list NeMo Lens prints in its error messages.
std::string quoted_list(const std::vector<std::string>& items);

/// The value of a hex digit (either case), or -1.
int hex_digit(char c) noexcept;

/// `s` split at every `sep` (empty parts kept).
std::vector<std::string_view> split(std::string_view s, char sep);


/// One step of UTF-8 decoding: the length of the valid sequence at the start of the input, or of
/// its maximal invalid subpart (Unicode's "maximal subpart" rule, so each subpart becomes exactly
/// one U+FFFD).
struct Utf8Step {
  std::size_t length;
  bool valid;
};

/// Decodes the sequence starting with the non-ASCII byte at `p` (p < end). Rejects overlong
/// forms, surrogates (U+D800..U+DFFF), values above U+10FFFF and truncated sequences.
inline Utf8Step utf8_step(const unsigned char* p, const unsigned char* end) noexcept {
  const unsigned char c = *p;
  std::size_t continuation;
  unsigned char lo = 0x80;
  unsigned char hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    continuation = 1;
  } else if (c == 0xE0) {
    continuation = 2;
    lo = 0xA0;  // no overlong 3-byte forms
  } else if (c == 0xED) {
    continuation = 2;
    hi = 0x9F;  // no surrogates
  } else if (c >= 0xE1 && c <= 0xEF) {
    continuation = 2;
  } else if (c == 0xF0) {
    continuation = 3;
    lo = 0x90;  // no overlong 4-byte forms
  } else if (c == 0xF4) {
    continuation = 3;
    hi = 0x8F;  // nothing above U+10FFFF
  } else if (c >= 0xF1 && c <= 0xF3) {
    continuation = 3;
  } else {
    return {1, false};  // a continuation byte, C0/C1 (always overlong) or F5..FF
  }
  for (std::size_t i = 1; i <= continuation; ++i) {
    if (p + i >= end) return {i, false};
    const unsigned char b = p[i];
    const unsigned char min = i == 1 ? lo : static_cast<unsigned char>(0x80);
    const unsigned char max = i == 1 ? hi : static_cast<unsigned char>(0xBF);
    if (b < min || b > max) return {i, false};
  }
  return {continuation + 1, true};
}

/// `s` with each maximal invalid UTF-8 subpart replaced by U+FFFD (as JSON output and W3C Baggage
/// require).
std::string valid_utf8(std::string_view s);

}  // namespace nemo::lens::detail
