#include "nemo/lens/context.hpp"

#include "strings.hpp"

namespace nemo::lens {

namespace {

constexpr char kHex[] = "0123456789abcdef";

template <std::size_t N>
std::string to_hex(const std::array<std::uint8_t, N>& bytes) {
  std::string out(2 * N, '0');
  for (std::size_t i = 0; i < N; ++i) {
    out[2 * i] = kHex[bytes[i] >> 4];
    out[2 * i + 1] = kHex[bytes[i] & 0xf];
  }
  return out;
}

template <std::size_t N>
bool from_hex(std::string_view hex, std::array<std::uint8_t, N>& out) noexcept {
  if (hex.size() != 2 * N) return false;
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = detail::hex_digit(hex[2 * i]);
    const int lo = detail::hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

}  // namespace

std::string TraceId::to_hex() const { return nemo::lens::to_hex(bytes); }
std::optional<TraceId> TraceId::from_hex(std::string_view hex) noexcept {
  TraceId id;
  if (!nemo::lens::from_hex(hex, id.bytes)) return std::nullopt;
  return id;
}

std::string SpanId::to_hex() const { return nemo::lens::to_hex(bytes); }
std::optional<SpanId> SpanId::from_hex(std::string_view hex) noexcept {
  SpanId id;
  if (!nemo::lens::from_hex(hex, id.bytes)) return std::nullopt;
  return id;
}

}  // namespace nemo::lens
