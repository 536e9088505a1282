// Protocol Buffers wire format: just enough to write and read OTLP messages by hand. Internal.
//
// Writing: Writer appends fields to a std::string through a raw cursor, after one bounds check per
// span rather than one per byte. A nested message is opened with begin_message() (tag and room for
// the length the caller expects) and closed with end_message(), which writes the real length,
// moving the content only when the guess was wrong, so every length is the canonical (shortest)
// varint. Reading: Reader walks one message's fields and never reads past
// its end; any malformation sets an error instead of throwing.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "strings.hpp"

namespace nemo::lens::detail::pb {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

/// Appends fields to a std::string through a raw cursor. reserve(n) makes room for the next n
/// bytes at most (callers bound what they write); the writes themselves check nothing. finish()
/// trims the string to what was written.
class Writer {
 public:
  explicit Writer(std::string& out) : out_(out), used_(out.size()) {}
  /// Writes over `buffer` from `at` on rather than appending: the string only grows (when the
  /// writes need room), and finish() leaves its size as it is, the bytes past size() as they
  /// were. A buffer kept from message to message is then never filled with zeros again (a
  /// std::string can only grow by filling): for a batch of spans, the room reserved for it, 256
  /// bytes per span.
  struct Overwrite {};
  Writer(std::string& buffer, std::size_t at, Overwrite) : out_(buffer), used_(at), trim_(false) {}
  ~Writer() { finish(); }
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  void reserve(std::size_t n) {
    if (static_cast<std::size_t>(end_ - p_) >= n) return;
    const std::size_t used = size();
    if (out_.size() < used + n) out_.resize(std::max(used + n, 2 * out_.size()));
    base_ = out_.data();
    p_ = base_ + used;
    end_ = base_ + out_.size();
  }

  /// The number of bytes in the string up to the cursor.
  std::size_t size() const { return p_ == nullptr ? used_ : static_cast<std::size_t>(p_ - base_); }

  void finish() {
    if (trim_) {
      if (p_ != nullptr) out_.resize(size());
      used_ = out_.size();
    } else {
      used_ = size();
    }
    base_ = p_ = end_ = nullptr;
  }

  /// The cursor, for a caller that writes through it at most the bytes it reserve()d itself and
  /// then moves it with set_cursor(). Valid until the next reserve().
  char* cursor() const { return p_; }
  void set_cursor(char* p) { p_ = p; }

  // The writes go through a local copy of the cursor: a char store may alias anything, so stores
  // through p_ itself would make the compiler reload and store p_ around every byte.
  void varint(std::uint64_t v) {
    char* p = p_;
    while (v >= 0x80) {
      *p++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *p++ = static_cast<char>(v);
    p_ = p;
  }

  void tag(std::uint32_t field, WireType type) { varint((field << 3) | type); }

  void varint_field(std::uint32_t field, std::uint64_t v) {
    tag(field, kVarint);
    varint(v);
  }

  // Fixed-width fields are little-endian whatever the host: one store where the host is too (GCC
  // does not merge the byte loop into one).
  void fixed64_field(std::uint32_t field, std::uint64_t v) {
    tag(field, kFixed64);
    if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap64(v);
    std::memcpy(p_, &v, 8);
    p_ += 8;
  }

  void fixed32_field(std::uint32_t field, std::uint32_t v) {
    tag(field, kFixed32);
    if constexpr (std::endian::native != std::endian::little) v = __builtin_bswap32(v);
    std::memcpy(p_, &v, 4);
    p_ += 4;
  }

  void double_field(std::uint32_t field, double v) {
    std::uint64_t bits = 0;
    std::memcpy(&bits, &v, sizeof bits);
    fixed64_field(field, bits);
  }

  void bytes_field(std::uint32_t field, std::string_view bytes) {
    tag(field, kLengthDelimited);
    varint(bytes.size());
    // Most fields are short (ids, names, keys): copied inline, not through a call to memcpy.
    if (bytes.size() <= 24) {
      copy_small(p_, bytes.data(), bytes.size());
    } else {
      std::memcpy(p_, bytes.data(), bytes.size());
    }
    p_ += bytes.size();
  }

  /// An open nested message: where its content starts and the bytes set aside for its length.
  struct Mark {
    std::size_t content;
    std::size_t reserved;
  };

  /// Opens a nested message `field`, setting aside `length_bytes` for its length: the size of the
  /// varint its length will most likely need (1 below 128 bytes, 2 below 16 KiB, 3 below 2 MiB).
  Mark begin_message(std::uint32_t field, std::size_t length_bytes = 1) {
    tag(field, kLengthDelimited);
    p_ += length_bytes;
    return {size(), length_bytes};
  }

  /// Closes the message opened at `mark`, writing its length as the shortest varint; the content
  /// moves only when the guess of begin_message() was wrong (then up to 4 bytes more are needed,
  /// reserved here).
  void end_message(Mark mark) {
    const std::size_t length = size() - mark.content;
    std::size_t n = 1;
    for (std::size_t v = length; v >= 0x80; v >>= 7) ++n;
    if (n > mark.reserved) reserve(n - mark.reserved);
    char* content = base_ + mark.content;
    char* start = content - mark.reserved;
    if (n != mark.reserved) {
      std::memmove(start + n, content, length);
      p_ = start + n + length;
    }
    char* q = start;
    std::size_t v = length;
    while (v >= 0x80) {
      *q++ = static_cast<char>((v & 0x7f) | 0x80);
      v >>= 7;
    }
    *q = static_cast<char>(v);
  }

 private:
  std::string& out_;
  std::size_t used_;
  bool trim_ = true;  // false: the Overwrite constructor's
  char* base_ = nullptr;  // out_.data() while writing
  char* p_ = nullptr;
  char* end_ = nullptr;
};

/// Reads the fields of one message. next() returns false at the end or on an error (error()
/// then says what was wrong); the value of the current field is in the accessors below.
class Reader {
 public:
  explicit Reader(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}

  bool next() {
    if (p_ == end_ || error_ != nullptr) return false;
    std::uint64_t key = 0;
    if (!read_varint(key)) return false;
    field_ = static_cast<std::uint32_t>(key >> 3);
    type_ = static_cast<std::uint32_t>(key & 7);
    if (field_ == 0 || (key >> 3) > 0x1fffffff) return fail("invalid field number");
    switch (type_) {
      case kVarint:
        return read_varint(varint_);
      case kFixed64:
        if (end_ - p_ < 8) return fail("truncated fixed64");
        fixed_ = 0;
        for (int i = 0; i < 8; ++i) fixed_ |= static_cast<std::uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
        p_ += 8;
        return true;
      case kFixed32:
        if (end_ - p_ < 4) return fail("truncated fixed32");
        fixed_ = 0;
        for (int i = 0; i < 4; ++i) fixed_ |= static_cast<std::uint64_t>(static_cast<unsigned char>(p_[i])) << (8 * i);
        p_ += 4;
        return true;
      case kLengthDelimited: {
        std::uint64_t length = 0;
        if (!read_varint(length)) return false;
        if (length > static_cast<std::uint64_t>(end_ - p_)) return fail("length past the end");
        bytes_ = std::string_view(p_, static_cast<std::size_t>(length));
        p_ += length;
        return true;
      }
      default:
        return fail("unsupported wire type");
    }
  }

  std::uint32_t field() const { return field_; }
  std::uint32_t wire_type() const { return type_; }
  std::uint64_t varint() const { return varint_; }
  std::uint64_t fixed() const { return fixed_; }
  std::string_view bytes() const { return bytes_; }
  /// Null when the message was read to its end without a problem.
  const char* error() const { return error_; }

 private:
  bool fail(const char* what) {
    error_ = what;
    return false;
  }
  bool read_varint(std::uint64_t& v) {
    v = 0;
    for (int shift = 0; shift < 70; shift += 7) {
      if (p_ == end_) return fail("truncated varint");
      const auto byte = static_cast<unsigned char>(*p_++);
      v |= static_cast<std::uint64_t>(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) return true;
    }
    return fail("varint longer than 10 bytes");
  }

  const char* p_;
  const char* end_;
  const char* error_ = nullptr;
  std::uint32_t field_ = 0;
  std::uint32_t type_ = 0;
  std::uint64_t varint_ = 0;
  std::uint64_t fixed_ = 0;
  std::string_view bytes_;
};

}  // namespace nemo::lens::detail::pb
