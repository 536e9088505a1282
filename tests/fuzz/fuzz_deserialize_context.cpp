// libFuzzer target: the context forms deserialize_context reads: the binary form
// (serialize_context) and NeMo Lens' JSON carrier bytes (serialize_context_json).
//
// Input: the message bytes. Properties of the binary form, checked against the documented format
// (version 1: 26 bytes, or 28 + N with a little-endian trace-state length 1 <= N <= 512):
//   - deserialisation never crashes; the context is valid exactly when the version, the length
//     and the ids are; a valid context is remote, has the message's ids and only the sampled and
//     random flags;
//   - a trace state that survives is valid `tracestate` text: extracting it again keeps it;
//   - serialize_context of a valid context deserialises to an equal context, and serialising
//     that again gives the same bytes.
// Of the JSON form (a first non-blank byte '{'): never crashes; a valid context is remote and
// survives serialize_context_json -> deserialize_context unchanged, and the binary form too.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "nemo/lens/propagation.hpp"

namespace {

using nemo::lens::SpanContext;

constexpr std::size_t kFixedSize = 26;
constexpr std::size_t kMaxTraceState = 512;

bool all_zero(std::string_view bytes) {
  return std::all_of(bytes.begin(), bytes.end(), [](char c) { return c == 0; });
}

// Whether `bytes` is a well-formed message, from the documented layout alone.
bool well_formed(std::string_view bytes) {
  if (bytes.size() < kFixedSize || bytes[0] != 1) return false;
  if (all_zero(bytes.substr(1, 16)) || all_zero(bytes.substr(17, 8))) return false;
  if (bytes.size() == kFixedSize) return true;
  if (bytes.size() < kFixedSize + 2) return false;
  const std::size_t n = static_cast<std::uint8_t>(bytes[26]) |
                        static_cast<std::size_t>(static_cast<std::uint8_t>(bytes[27])) << 8;
  return n >= 1 && n <= kMaxTraceState && bytes.size() == kFixedSize + 2 + n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const SpanContext ctx = nemo::lens::deserialize_context(bytes);
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && bytes[first] == '{') {
    if (!ctx.is_valid()) return 0;
    LENS_FUZZ_CHECK(ctx.is_remote);
    LENS_FUZZ_CHECK((ctx.trace_flags & ~3) == 0);
    const std::string text = nemo::lens::serialize_context_json(ctx);
    LENS_FUZZ_CHECK(nemo::lens::deserialize_context(text) == ctx);
    LENS_FUZZ_CHECK(nemo::lens::deserialize_context(nemo::lens::serialize_context(ctx)) == ctx ||
                    ctx.trace_state.size() > kMaxTraceState);  // the binary form cuts it
    return 0;
  }
  LENS_FUZZ_CHECK(ctx.is_valid() == well_formed(bytes));
  if (!ctx.is_valid()) return 0;

  LENS_FUZZ_CHECK(ctx.is_remote);
  LENS_FUZZ_CHECK(ctx.trace_flags == (static_cast<std::uint8_t>(bytes[25]) & 3));
  LENS_FUZZ_CHECK(std::equal(ctx.trace_id.bytes.begin(), ctx.trace_id.bytes.end(),
                             reinterpret_cast<const std::uint8_t*>(bytes.data()) + 1));
  LENS_FUZZ_CHECK(std::equal(ctx.span_id.bytes.begin(), ctx.span_id.bytes.end(),
                             reinterpret_cast<const std::uint8_t*>(bytes.data()) + 17));
  LENS_FUZZ_CHECK(ctx.trace_state.size() <= kMaxTraceState);
  if (bytes.size() == kFixedSize) LENS_FUZZ_CHECK(ctx.trace_state.empty());

  if (!ctx.trace_state.empty()) {
    // Valid, normalised `tracestate` text: the header form keeps it unchanged.
    nemo::lens::Carrier carrier;
    nemo::lens::inject_context(ctx, carrier);
    const nemo::lens::ExtractedContext in = nemo::lens::extract_context(carrier);
    LENS_FUZZ_CHECK(in.context.trace_state == ctx.trace_state);
  }

  const std::string again = nemo::lens::serialize_context(ctx);
  const SpanContext back = nemo::lens::deserialize_context(again);
  LENS_FUZZ_CHECK(back == ctx);
  LENS_FUZZ_CHECK(nemo::lens::serialize_context(back) == again);
  LENS_FUZZ_CHECK(again.substr(0, kFixedSize - 1) == bytes.substr(0, kFixedSize - 1));
  if (ctx.trace_state.empty()) LENS_FUZZ_CHECK(again.size() == kFixedSize);
  return 0;
}
