// The wire reader's error paths (out of line, so that the decoding loops stay small), its long
// varints, and the check of a repeated scalar field, packed or not.
#include "common/transcode/wire_reader.hpp"

#include <string>
#include <utility>

namespace lens_cli::transcode {

bool WireReader::fail(std::string message, const Byte* at) {
  error = std::move(message);
  error += " at byte ";
  error += std::to_string(offset(at));
  return false;
}

std::string WireReader::field_of(const Field& f, const char* message) {
  return "field " + std::to_string(f.number) + " of " + message;
}

bool WireReader::bad_field(const Field& f, const char* message, std::uint64_t length,
                           const Byte* end) {
  switch (f.wire) {
    case kFixed64:
    case kFixed32:
      return fail("truncated " + std::string(f.wire == kFixed64 ? "fixed64 " : "fixed32 ") +
                      field_of(f, message),
                  f.tag);
    case kLen: {
      const Byte* const data = f.data;  // just past the length
      const Byte* length_at = data - 1;
      while (length_at > f.tag + 1 && (length_at[-1] & 0x80) != 0) --length_at;
      return fail(field_of(f, message) + " has length " + std::to_string(length) +
                      " but its message has " +
                      std::to_string(static_cast<std::size_t>(end - data)) + " bytes left",
                  length_at);
    }
    case 3:
    case 4:
      return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) +
                      " (group), which OTLP does not use",
                  f.tag);
    default:
      return fail(field_of(f, message) + " has invalid wire type " + std::to_string(f.wire), f.tag);
  }
}

bool WireReader::bad_tag(std::uint64_t tag, const char* message, const Byte* at) {
  return fail("invalid field number " + std::to_string(tag >> 3) + " in " + message, at);
}

bool WireReader::bad_wire(const Field& f, std::uint32_t wire, const char* message) {
  return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) + ", expected " +
                  std::to_string(wire),
              f.tag);
}

bool WireReader::bad_id(const Field& f, std::size_t size, const char* what) {
  return fail(std::string(what) + " is " + std::to_string(f.size) + " bytes long, expected " +
                  std::to_string(size) + " (or 0)",
              f.tag);
}

bool WireReader::too_deep(const Field& m) {
  return fail("messages nested deeper than " + std::to_string(kMaxDepth), m.tag);
}

bool WireReader::long_varint(const Byte*& p, const Byte* end, std::uint64_t& v) {
  const Byte* const start = p;
  std::uint64_t result = 0;
  for (int i = 0; i < 10; ++i) {
    if (p == end) return fail("truncated varint", start);
    const Byte b = *p++;
    result |= std::uint64_t{static_cast<Byte>(b & 0x7F)} << (7 * i);  // bits past 64 dropped
    if (b < 0x80) {
      v = result;
      return true;
    }
  }
  return fail("varint longer than 10 bytes", start);
}

bool WireReader::bad_repeated_wire(const Field& f, std::uint32_t element_wire,
                                   const char* message) {
  return fail(field_of(f, message) + " has wire type " + std::to_string(f.wire) + ", expected " +
                  std::to_string(element_wire) + " (or 2, packed)",
              f.tag);
}

bool WireReader::bad_packed_size(const Field& f, const char* message) {
  return fail("packed " + field_of(f, message) + " is " + std::to_string(f.size) +
                  " bytes long, not a multiple of 8",
              f.tag);
}

bool WireReader::check_repeated_scalar(const Field& f, std::uint32_t element_wire,
                                       const char* message) {
  if (f.wire == element_wire) return true;
  if (f.wire != kLen) return bad_repeated_wire(f, element_wire, message);
  if (element_wire == kFixed64) return f.size % 8 == 0 || bad_packed_size(f, message);
  const Byte* p = f.data;
  const Byte* const end = p + f.size;
  std::uint64_t ignored = 0;
  while (p < end) {
    if (!varint(p, end, ignored)) return false;
  }
  return true;
}

}  // namespace lens_cli::transcode
