// Small string helpers shared by the library's configuration code and hot paths. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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

/// The length of the longest prefix of `s` of at most `limit` bytes that ends at a UTF-8 character
/// boundary.
inline std::size_t cut_length(std::string_view s, std::size_t limit) noexcept {
  if (s.size() <= limit) return s.size();
  std::size_t n = limit;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return n;
}

/// The 8 or 4 bytes at `p`, in host order (unaligned loads).
[[gnu::always_inline]] inline std::uint64_t load64(const char* p) noexcept {
  std::uint64_t w;
  std::memcpy(&w, p, 8);
  return w;
}
[[gnu::always_inline]] inline std::uint64_t load32(const char* p) noexcept {
  std::uint32_t w;
  std::memcpy(&w, p, 4);
  return w;
}

/// Copies n <= 24 bytes with a few overlapping word moves (no call to memcpy).
[[gnu::always_inline]] inline void copy_small(char* dst, const char* src, std::size_t n) noexcept {
  if (n >= 8) {
    std::uint64_t a, b;
    std::memcpy(&a, src, 8);
    std::memcpy(&b, src + n - 8, 8);
    if (n > 16) std::memcpy(dst + 8, src + 8, 8);
    std::memcpy(dst, &a, 8);
    std::memcpy(dst + n - 8, &b, 8);
  } else if (n >= 4) {
    std::uint32_t a, b;
    std::memcpy(&a, src, 4);
    std::memcpy(&b, src + n - 4, 4);
    std::memcpy(dst, &a, 4);
    std::memcpy(dst + n - 4, &b, 4);
  } else {
    for (std::size_t i = 0; i < n; ++i) dst[i] = src[i];
  }
}

/// Copies n <= 16 bytes into dst, which has room for 16, with one 16-byte move when the 16 bytes
/// from src lie in src's page (reading past the end of the source there cannot fault; the bytes
/// past n in dst are then unspecified); false, nothing copied, when they do not. Under ASan and
/// TSan, which would report the bytes read past the end, copy_small() and true.
[[gnu::always_inline]] inline bool copy_within_page(char* dst, const char* src,
                                                    std::size_t n) noexcept {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  copy_small(dst, src, n);
  return true;
#else
  (void)n;
  constexpr std::uintptr_t kPage = 4096;  // the smallest page of the platforms lens runs on
  if ((reinterpret_cast<std::uintptr_t>(src) & (kPage - 1)) > kPage - 16) return false;
  char block[16];
  std::memcpy(block, src, 16);
  std::memcpy(dst, block, 16);
  return true;
#endif
}

/// a == b without a call into the C library: strings of up to 16 bytes with two overlapping word
/// loads each, longer ones a word at a time.
[[gnu::always_inline]] inline bool equal_short(std::string_view a, std::string_view b) noexcept {
  const std::size_t n = a.size();
  if (n != b.size()) return false;
  if (n > 16) {
    for (std::size_t i = 0; i + 8 < n; i += 8) {
      if (load64(a.data() + i) != load64(b.data() + i)) return false;
    }
    return load64(a.data() + n - 8) == load64(b.data() + n - 8);  // the tail, overlapping
  }
  if (n >= 8) {
    return ((load64(a.data()) ^ load64(b.data())) |
            (load64(a.data() + n - 8) ^ load64(b.data() + n - 8))) == 0;
  }
  if (__builtin_expect(n >= 4, 1)) {  // names are rarely shorter: their byte loop out of line
    return ((load32(a.data()) ^ load32(b.data())) |
            (load32(a.data() + n - 4) ^ load32(b.data() + n - 4))) == 0;
  }
  for (std::size_t i = 0; i < n; ++i) {
    if (a[i] != b[i]) return false;
  }
  return true;
}

/// A hash of a short string (names, attribute keys and values): eight bytes per multiply and no
/// variable-length copies, for lookups that must stay near 10 ns. Not for untrusted input tables
/// (no seed).
[[gnu::always_inline]] inline std::uint64_t hash_short_string(std::string_view s) noexcept {
  const char* p = s.data();
  const std::size_t n = s.size();
  auto mix = [](std::uint64_t h, std::uint64_t w) {
    h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
    return h ^ (h >> 31);
  };
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  if (n >= 8) {
    std::size_t i = 0;
    for (; i + 8 <= n; i += 8) h = mix(h, load64(p + i));
    if (i != n) h = mix(h, load64(p + n - 8));  // the tail, overlapping the last word
  } else if (n >= 4) {
    h = mix(h, load32(p) | (load32(p + n - 4) << 32));
  } else if (n != 0) {
    const auto b = [&](std::size_t i) { return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i])); };
    h = mix(h, b(0) | (b(n / 2) << 8) | (b(n - 1) << 16));
  }
  return h ^ (h >> 32);
}

/// The OR of `mark(w)` over the bytes of `s` read as 64-bit words, for a check of every byte that
/// `mark` makes on a word at once, each byte's verdict in bits of its own (so that a byte read
/// twice changes nothing): whole words, the last one overlapping the one before; 4 to 7 bytes as
/// their first four and last four; 1 to 3 as their first, middle and last byte, the rest of the
/// word `fill`'s. `mark` must leave `fill`'s bytes unmarked (`fill` is the word of "").
template <class Mark>
[[gnu::always_inline]] inline std::uint64_t or_marked_words(std::string_view s, std::uint64_t fill,
                                                            Mark mark) noexcept {
  const char* p = s.data();
  const std::size_t n = s.size();
  if (n >= 8) {
    std::uint64_t marked = 0;
    for (std::size_t i = 0; i + 8 <= n; i += 8) marked |= mark(load64(p + i));
    return marked | mark(load64(p + n - 8));
  }
  if (n >= 4) return mark(load32(p) | (load32(p + n - 4) << 32));
  if (n != 0) {
    const auto b = [&](std::size_t i) {
      return static_cast<std::uint64_t>(static_cast<unsigned char>(p[i]));
    };
    return mark((fill & ~std::uint64_t{0xffffff}) | b(0) | (b(n / 2) << 8) | (b(n - 1) << 16));
  }
  return mark(fill);
}

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
