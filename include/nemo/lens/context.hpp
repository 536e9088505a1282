// Span identity: W3C-compatible trace and span ids and the context that links a span to its
// parent, to spans of other processes (propagation) and to lateral spans (links).
//
//   nemo::lens::SpanContext ctx = nemo::lens::current_span_context();
//   if (ctx.is_valid()) std::printf("trace %s span %s\n", ctx.trace_id.to_hex().c_str(),
//                                    ctx.span_id.to_hex().c_str());
#pragma once

#include <array>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// A 128-bit trace id. All-zero is invalid.
struct NEMO_LENS_API TraceId {
  std::array<std::uint8_t, 16> bytes{};

  /// Whether any byte is non-zero. Inline: it is on every span's start.
  bool is_valid() const noexcept {
    std::uint64_t w[2];
    std::memcpy(w, bytes.data(), 16);
    return (w[0] | w[1]) != 0;
  }
  /// 32 lower-case hex characters.
  std::string to_hex() const;
  /// Parses exactly 32 hex characters (either case); empty optional otherwise.
  static std::optional<TraceId> from_hex(std::string_view hex) noexcept;
  friend bool operator==(const TraceId&, const TraceId&) = default;
};

/// A 64-bit span id. All-zero is invalid.
struct NEMO_LENS_API SpanId {
  std::array<std::uint8_t, 8> bytes{};

  /// Whether any byte is non-zero. Inline: it is on every span's start and in every encoded span.
  bool is_valid() const noexcept {
    std::uint64_t w;
    std::memcpy(&w, bytes.data(), 8);
    return w != 0;
  }
  /// 16 lower-case hex characters.
  std::string to_hex() const;
  /// Parses exactly 16 hex characters (either case); empty optional otherwise.
  static std::optional<SpanId> from_hex(std::string_view hex) noexcept;
  friend bool operator==(const SpanId&, const SpanId&) = default;
};

/// The identity of a span as other spans and processes see it.
struct NEMO_LENS_API SpanContext {
  TraceId trace_id;
  SpanId span_id;
  /// W3C trace flags; bit 0 is "sampled".
  std::uint8_t trace_flags = 0;
  /// Whether this context came from another process.
  bool is_remote = false;
  /// The W3C tracestate header value carried along, if any.
  std::string trace_state;

  /// Both ids valid.
  bool is_valid() const noexcept { return trace_id.is_valid() && span_id.is_valid(); }
  /// The sampled flag.
  bool is_sampled() const noexcept { return (trace_flags & 0x01) != 0; }
  friend bool operator==(const SpanContext&, const SpanContext&) = default;
};

/// The context of the calling thread's current span, or an invalid context when there is none.
/// Spans the flight recorder records without exporting them are left out, as the exported trace
/// leaves them out: inside one, this is its nearest exported ancestor, the span the program would
/// see without the recorder (and the parent an exported span started there takes). Carriers
/// (inject_context(), serialize_context(), child_environment()) and logs name this span. Never
/// throws; cost: a thread-local lookup.
NEMO_LENS_API SpanContext current_span_context() noexcept;

namespace detail {
/// For the Python package: the context of the calling thread's latest open span, recorded only
/// (flight recorder) or exported, or an invalid context.
NEMO_LENS_API SpanContext innermost_span_context() noexcept;
}  // namespace detail

}  // namespace nemo::lens
