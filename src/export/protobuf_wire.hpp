// Protocol Buffers wire format: just enough to write and read OTLP messages by hand. Internal.
//
// Writing: fields are appended to a std::string. A nested message is opened with begin_message()
// (tag and a one-byte length placeholder) and closed with end_message(), which writes the real
// length, moving the content when the length needs more than one byte, so every length is the
// canonical (shortest) varint. Reading: Reader walks one message's fields and never reads past
// its end; any malformation sets an error instead of throwing.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace nemo::lens::detail::pb {

enum WireType : std::uint32_t { kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5 };

inline void append_varint(std::string& out, std::uint64_t v) {
  char buf[10];
  std::size_t n = 0;
  while (v >= 0x80) {
    buf[n++] = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  buf[n++] = static_cast<char>(v);
  out.append(buf, n);
}

inline std::size_t varint_size(std::uint64_t v) {
  std::size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

inline void append_tag(std::string& out, std::uint32_t field, WireType type) {
  append_varint(out, (static_cast<std::uint64_t>(field) << 3) | type);
}

inline void append_varint_field(std::string& out, std::uint32_t field, std::uint64_t v) {
  append_tag(out, field, kVarint);
  append_varint(out, v);
}

inline void append_fixed64_field(std::string& out, std::uint32_t field, std::uint64_t v) {
  append_tag(out, field, kFixed64);
  char buf[8];
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(buf, 8);
}

inline void append_fixed32_field(std::string& out, std::uint32_t field, std::uint32_t v) {
  append_tag(out, field, kFixed32);
  char buf[4];
  for (int i = 0; i < 4; ++i) buf[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  out.append(buf, 4);
}

inline void append_double_field(std::string& out, std::uint32_t field, double v) {
  std::uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  append_fixed64_field(out, field, bits);
}

inline void append_bytes_field(std::string& out, std::uint32_t field, std::string_view bytes) {
  append_tag(out, field, kLengthDelimited);
  append_varint(out, bytes.size());
  out.append(bytes);
}

/// Opens a nested message (or packed field) `field`; returns the mark end_message() needs.
inline std::size_t begin_message(std::string& out, std::uint32_t field) {
  append_tag(out, field, kLengthDelimited);
  out.push_back('\0');
  return out.size();
}

/// Closes the message opened at `mark`, writing its length as the shortest varint.
inline void end_message(std::string& out, std::size_t mark) {
  const std::size_t length = out.size() - mark;
  const std::size_t n = varint_size(length);
  if (n > 1) out.insert(mark, n - 1, '\0');  // shifts the content; rare for small messages
  char* p = out.data() + mark - 1;
  std::uint64_t v = length;
  while (v >= 0x80) {
    *p++ = static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  *p = static_cast<char>(v);
}

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
