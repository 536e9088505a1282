// The protobuf wire format as OTLP uses it, read for `lens collect`: fields read one at a time
// from a message's bytes and checked (lengths, wire types, field numbers, depth), with errors that
// name the message, the field and the byte offset, which the receiver's 400 replies carry (the
// Reader of the library's src/export/protobuf_wire.hpp names neither). What the fields mean is
// protobuf_to_json's business.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace lens_cli::transcode {

using Byte = unsigned char;

constexpr int kMaxDepth = 32;  // nested messages, the request's elements being depth 1

constexpr std::uint32_t kVarint = 0;
constexpr std::uint32_t kFixed64 = 1;
constexpr std::uint32_t kLen = 2;
constexpr std::uint32_t kFixed32 = 5;

constexpr std::size_t kTraceIdSize = 16;
constexpr std::size_t kSpanIdSize = 8;

// One decoded field: its number, wire type and payload.
struct Field {
  std::uint32_t number = 0;
  std::uint32_t wire = 0;
  std::uint64_t value = 0;     // varint, fixed64 or fixed32 payload
  const Byte* data = nullptr;  // length-delimited payload
  std::size_t size = 0;
  const Byte* tag = nullptr;  // where the field starts

  std::string_view text() const { return {reinterpret_cast<const char*>(data), size}; }
  std::span<const std::uint8_t> bytes() const { return {data, size}; }
};

// Where the occurrences of one repeated field lie in its message: from the first one's tag to
// the end of the last one (other fields may sit in between).
struct Repeated {
  const Byte* first = nullptr;
  const Byte* end = nullptr;

  void note(const Field& f, const Byte* after) {
    if (first == nullptr) first = f.tag;
    end = after;
  }
  bool empty() const { return first == nullptr; }
};

inline std::uint64_t load_le(const Byte* p, int n) {
  std::uint64_t v = 0;
  for (int i = n - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads fields from a request's bytes; the first failure sets `error`, the caller stops.
class WireReader {
 public:
  explicit WireReader(std::string_view input)
      : base_(reinterpret_cast<const Byte*>(input.data())) {}

  std::string error;

 protected:
  const Byte* base_;

  std::size_t offset(const Byte* at) const { return static_cast<std::size_t>(at - base_); }

  // The error paths: out of line, so that the decoding loops stay small.
  [[gnu::cold, gnu::noinline]] bool fail(std::string message, const Byte* at);

  static std::string field_of(const Field& f, const char* message);

  [[gnu::cold, gnu::noinline]] bool bad_field(const Field& f, const char* message,
                                              std::uint64_t length, const Byte* end);

  [[gnu::cold, gnu::noinline]] bool bad_tag(std::uint64_t tag, const char* message, const Byte* at);

  [[gnu::cold, gnu::noinline]] bool bad_wire(const Field& f, std::uint32_t wire,
                                             const char* message);

  [[gnu::cold, gnu::noinline]] bool bad_id(const Field& f, std::size_t size, const char* what);

  [[gnu::cold, gnu::noinline]] bool too_deep(const Field& m);

  // Varints of more than one byte, and the errors.
  [[gnu::noinline]] bool long_varint(const Byte*& p, const Byte* end, std::uint64_t& v);

  bool varint(const Byte*& p, const Byte* end, std::uint64_t& v) {
    if (p < end && *p < 0x80) [[likely]] {
      v = *p++;
      return true;
    }
    return long_varint(p, end, v);
  }

  // Reads the field at `p` (p < end) and moves `p` past it.
  bool next(const Byte*& p, const Byte* end, Field& f, const char* message) {
    f.tag = p;
    std::uint64_t tag = 0;
    if (!varint(p, end, tag)) return false;
    if (tag > 0xFFFFFFFFU || (tag >> 3) == 0) [[unlikely]] {
      return bad_tag(tag, message, f.tag);
    }
    f.number = static_cast<std::uint32_t>(tag >> 3);
    f.wire = static_cast<std::uint32_t>(tag & 7);
    switch (f.wire) {
      case kVarint:
        return varint(p, end, f.value);
      case kFixed64:
        if (end - p < 8) [[unlikely]] {
          return bad_field(f, message, 0, end);
        }
        f.value = load_le(p, 8);
        p += 8;
        return true;
      case kFixed32:
        if (end - p < 4) [[unlikely]] {
          return bad_field(f, message, 0, end);
        }
        f.value = load_le(p, 4);
        p += 4;
        return true;
      case kLen: {
        std::uint64_t n = 0;
        if (!varint(p, end, n)) return false;
        f.data = p;
        if (n > static_cast<std::size_t>(end - p)) [[unlikely]] {
          return bad_field(f, message, n, end);
        }
        f.size = static_cast<std::size_t>(n);
        p += f.size;
        return true;
      }
      default:
        return bad_field(f, message, 0, end);
    }
  }

  bool expect(const Field& f, std::uint32_t wire, const char* message) {
    if (f.wire == wire) [[likely]] {
      return true;
    }
    return bad_wire(f, wire, message);
  }

  bool check_id(const Field& f, std::size_t size, const char* what) {
    if (f.size == 0 || f.size == size) [[likely]] {
      return true;
    }
    return bad_id(f, size, what);
  }

  // ---- repeated scalars and the scalar types of metrics ----

  // A double carried in a fixed64 payload.
  static double as_double(std::uint64_t bits) {
    double d = 0;
    static_assert(sizeof d == sizeof bits);
    std::memcpy(&d, &bits, sizeof d);
    return d;
  }

  // A sint32's varint: zigzag-decoded from its low 32 bits.
  static std::int32_t zigzag32(std::uint64_t varint_value) {
    const auto n = static_cast<std::uint32_t>(varint_value);
    return static_cast<std::int32_t>((n >> 1) ^ (~(n & 1) + 1));
  }

  [[gnu::cold, gnu::noinline]] bool bad_repeated_wire(const Field& f, std::uint32_t element_wire,
                                                      const char* message);

  [[gnu::cold, gnu::noinline]] bool bad_packed_size(const Field& f, const char* message);

  // Checks one occurrence of a repeated scalar field whose elements have wire type
  // `element_wire` (kFixed64 or kVarint): unpacked, or packed in a length-delimited run.
  bool check_repeated_scalar(const Field& f, std::uint32_t element_wire, const char* message);
};

}  // namespace lens_cli::transcode
