#include "common/json_output.hpp"

#include <charconv>
#include <cmath>

namespace nemo::lens::cli {

std::string json_string(std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(s.size() + 2);
  out += '"';
  for (char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += "\\u00";
          out += kHex[(c >> 4) & 0xf];
          out += kHex[c & 0xf];
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string format_number(double v) {
  char buf[64];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  if (ec != std::errc()) return "nan";  // cannot happen: 64 bytes fit any double
  return std::string(buf, end);
}

std::string json_number(double v) { return std::isfinite(v) ? format_number(v) : "null"; }

std::string json_number(int v) { return std::to_string(v); }

JsonObject& JsonObject::add(std::string_view key, std::string_view json) {
  if (!members_.empty()) members_ += ',';
  members_ += json_string(key);
  members_ += ':';
  members_ += json;
  return *this;
}

}  // namespace nemo::lens::cli
