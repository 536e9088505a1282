// libFuzzer target: W3C header extraction (extract_context) and what inject_context writes back.
//
// Input: header values separated by '\n': `traceparent`, then `tracestate`, then `baggage` (which
// takes the rest of the input, '\n' included); a header without a line is absent. Properties,
// each checked against the documented rules rather than the implementation:
//   - extraction never crashes; a valid context is remote, keeps the ids and the sampled and
//     random flags of the `traceparent` text, and a trace state of at most 32 members in at most
//     512 characters, each of the Level 2 grammar; baggage keys are non-empty, keys and values
//     valid UTF-8, at most 180 members;
//   - header names match in any case: the values under mixed-case names extract the same;
//   - what lens writes reads back the same: inject_context(ctx, carrier, baggage), into an empty
//     carrier and over the received headers (with and without the trace state), then
//     extract_context gives ctx's ids, flags and trace state, and the baggage members the
//     documented limits keep (no empty key; of the first 180 members, those that fit in 8192
//     bytes, a member dropped whole);
//   - the binary form of an extracted context deserialises to the same context.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz_check.hpp"
#include "nemo/lens/propagation.hpp"

namespace {

using nemo::lens::Baggage;
using nemo::lens::Carrier;
using nemo::lens::ExtractedContext;
using nemo::lens::SpanContext;

constexpr std::string_view kHeaderNames[] = {"traceparent", "tracestate", "baggage"};
constexpr std::size_t kMaxBaggageMembers = 180;
constexpr std::size_t kMaxBaggageBytes = 8192;
constexpr std::size_t kMaxTraceStateMembers = 32;
constexpr std::size_t kMaxTraceStateChars = 512;

// The header values: the first two lines, then the rest.
std::vector<std::string_view> split_values(std::string_view input) {
  std::vector<std::string_view> values;
  while (values.size() + 1 < std::size(kHeaderNames)) {
    const std::size_t end = input.find('\n');
    if (end == std::string_view::npos) break;
    values.push_back(input.substr(0, end));
    input.remove_prefix(end + 1);
  }
  values.push_back(input);
  return values;
}

// A deterministic pseudo-random mixed-case spelling of `name` (at least one upper-case letter).
std::string mixed_case(std::string_view name, std::uint32_t& state) {
  std::string out(name);
  bool any_upper = false;
  for (char& c : out) {
    state ^= state << 13;
    state ^= state >> 17;
    state ^= state << 5;
    if ((state & 1) != 0) {
      c = static_cast<char>(c - 'a' + 'A');
      any_upper = true;
    }
  }
  if (!any_upper) out[0] = static_cast<char>(out[0] - 'a' + 'A');
  return out;
}

std::uint32_t fnv1a(std::string_view s) {
  std::uint32_t h = 2166136261u;
  for (char c : s) h = (h ^ static_cast<std::uint8_t>(c)) * 16777619u;
  return h == 0 ? 1 : h;
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// RFC 7230 tchar.
bool is_tchar(char c) {
  constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  const bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
  return alnum || (c != '\0' && kSymbols.find(c) != std::string_view::npos);
}

// A Level 2 tracestate member: key (a-z / 0-9) *255(a-z / 0-9 / _ - * / @), '=', value of 1 to
// 256 characters in 0x20-0x7E except ',' and '=', the last not a space.
bool is_trace_state_member(std::string_view m) {
  const std::size_t eq = m.find('=');
  if (eq == std::string_view::npos || eq == 0 || eq > 256) return false;
  const std::string_view key = m.substr(0, eq);
  const std::string_view value = m.substr(eq + 1);
  auto lc_or_digit = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
  if (!lc_or_digit(key[0])) return false;
  for (char c : key.substr(1)) {
    if (!lc_or_digit(c) && c != '_' && c != '-' && c != '*' && c != '/' && c != '@') return false;
  }
  if (value.empty() || value.size() > 256 || value.back() == ' ') return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7E || c == ',' || c == '=') return false;
  }
  return true;
}

// Well-formed UTF-8 (Unicode table 3-7: no overlong forms, surrogates or code points > U+10FFFF).
bool is_valid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<std::uint8_t>(s[i]);
    std::size_t continuation = 0;
    std::uint8_t lower = 0x80;
    std::uint8_t upper = 0xBF;
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xC2 && c <= 0xDF) {
      continuation = 1;
    } else if (c >= 0xE0 && c <= 0xEF) {
      continuation = 2;
      if (c == 0xE0) lower = 0xA0;
      if (c == 0xED) upper = 0x9F;
    } else if (c >= 0xF0 && c <= 0xF4) {
      continuation = 3;
      if (c == 0xF0) lower = 0x90;
      if (c == 0xF4) upper = 0x8F;
    } else {
      return false;
    }
    if (s.size() - i - 1 < continuation) return false;
    for (std::size_t k = 1; k <= continuation; ++k) {
      const auto b = static_cast<std::uint8_t>(s[i + k]);
      if (b < lower || b > upper) return false;
      lower = 0x80;
      upper = 0xBF;
    }
    i += continuation + 1;
  }
  return true;
}

// W3C baggage-octet: US-ASCII except controls, space, '"', ',', ';' and '\'.
bool is_baggage_octet(std::uint8_t c) {
  return c == 0x21 || (c >= 0x23 && c <= 0x2B) || (c >= 0x2D && c <= 0x3A) ||
         (c >= 0x3C && c <= 0x5B) || (c >= 0x5D && c <= 0x7E);
}

// The size of `s` once injected: bytes for which keep() is false, and '%', take "%XX".
template <class Keep>
std::size_t encoded_size(std::string_view s, Keep keep) {
  std::size_t n = 0;
  for (char c : s) n += keep(c) && c != '%' ? 1 : 3;
  return n;
}

// The members inject_context writes: of the first 180 with a non-empty key, each one that keeps
// the header within 8192 bytes (a member that does not fit dropped whole, later smaller ones may
// still go).
Baggage kept_on_inject(const Baggage& baggage) {
  Baggage kept;
  std::size_t bytes = 0;
  std::size_t counted = 0;
  for (const auto& member : baggage) {
    if (counted == kMaxBaggageMembers) break;
    if (member.first.empty()) continue;
    const std::size_t member_size =
        encoded_size(member.first, is_tchar) + 1 + encoded_size(member.second, [](char c) {
          return is_baggage_octet(static_cast<std::uint8_t>(c));
        });
    ++counted;
    const std::size_t size = bytes + (kept.empty() ? 0 : 1) + member_size;
    if (size > kMaxBaggageBytes) continue;
    bytes = size;
    kept.push_back(member);
  }
  return kept;
}

void check_extracted(const ExtractedContext& in, const Carrier& carrier) {
  const SpanContext& ctx = in.context;
  if (ctx.is_valid()) {
    LENS_FUZZ_CHECK(ctx.is_remote);
    // The ids and flags are those of the traceparent text: "vv-<trace id>-<span id>-ff...", of
    // the flags only the two W3C Level 2 defines (sampled, random).
    const std::string_view tp = trim_ows(carrier.at("traceparent"));
    LENS_FUZZ_CHECK(tp.size() >= 55);
    LENS_FUZZ_CHECK(tp.substr(3, 32) == ctx.trace_id.to_hex());
    LENS_FUZZ_CHECK(tp.substr(36, 16) == ctx.span_id.to_hex());
    const int flags = std::stoi(std::string(tp.substr(53, 2)), nullptr, 16);
    LENS_FUZZ_CHECK(ctx.trace_flags == (flags & 3));
    // Normalised: members joined by ',' only.
    LENS_FUZZ_CHECK(ctx.trace_state.size() <= kMaxTraceStateChars);
    if (!ctx.trace_state.empty()) {
      std::size_t members = 0;
      std::string_view rest = ctx.trace_state;
      for (;;) {
        const std::size_t comma = rest.find(',');
        LENS_FUZZ_CHECK(is_trace_state_member(rest.substr(0, comma)));
        ++members;
        if (comma == std::string_view::npos) break;
        rest.remove_prefix(comma + 1);
      }
      LENS_FUZZ_CHECK(members <= kMaxTraceStateMembers);
    }
  } else {
    LENS_FUZZ_CHECK(ctx.trace_state.empty());  // read only with a valid traceparent
  }
  LENS_FUZZ_CHECK(in.baggage.size() <= kMaxBaggageMembers);
  for (const auto& [key, value] : in.baggage) {
    LENS_FUZZ_CHECK(!key.empty());
    LENS_FUZZ_CHECK(is_valid_utf8(key));
    LENS_FUZZ_CHECK(is_valid_utf8(value));
  }
}

// inject_context(ctx, carrier, baggage) then extract_context(carrier) gives ctx back and `kept`.
// `carrier` holds headers received with ctx and baggage (or nothing): when lens writes nothing, the
// received headers must still extract to them.
void check_round_trip(const SpanContext& ctx, const Baggage& baggage, const Baggage& kept,
                      Carrier carrier) {
  nemo::lens::inject_context(ctx, carrier, baggage);
  const ExtractedContext out = nemo::lens::extract_context(carrier);
  LENS_FUZZ_CHECK(out.context.is_valid() == ctx.is_valid());
  if (ctx.is_valid()) {
    LENS_FUZZ_CHECK(out.context.trace_id == ctx.trace_id);
    LENS_FUZZ_CHECK(out.context.span_id == ctx.span_id);
    LENS_FUZZ_CHECK(out.context.trace_flags == (ctx.trace_flags & 3));
    LENS_FUZZ_CHECK(out.context.trace_state == ctx.trace_state);
    LENS_FUZZ_CHECK(out.context.is_remote);
  }
  LENS_FUZZ_CHECK(out.baggage == kept);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const std::vector<std::string_view> values = split_values(input);
  Carrier lower;
  Carrier mixed;
  std::uint32_t rng = fnv1a(input);
  for (std::size_t i = 0; i < values.size(); ++i) {
    lower.emplace(std::string(kHeaderNames[i]), std::string(values[i]));
    mixed.emplace(mixed_case(kHeaderNames[i], rng), std::string(values[i]));
  }

  const ExtractedContext in = nemo::lens::extract_context(lower);
  check_extracted(in, lower);
  const ExtractedContext in_mixed = nemo::lens::extract_context(mixed);
  LENS_FUZZ_CHECK(in_mixed.context == in.context);
  LENS_FUZZ_CHECK(in_mixed.baggage == in.baggage);

  const Baggage kept = kept_on_inject(in.baggage);
  check_round_trip(in.context, in.baggage, kept, Carrier{});
  // A process that forwards the headers it received writes its context over them.
  check_round_trip(in.context, in.baggage, kept, lower);
  check_round_trip(in.context, in.baggage, kept, mixed);
  SpanContext without_state = in.context;
  without_state.trace_state.clear();
  check_round_trip(without_state, in.baggage, kept, lower);
  check_round_trip(without_state, in.baggage, kept, mixed);

  if (in.context.is_valid()) {
    const SpanContext back =
        nemo::lens::deserialize_context(nemo::lens::serialize_context(in.context));
    LENS_FUZZ_CHECK(back.is_valid());
    LENS_FUZZ_CHECK(back.trace_id == in.context.trace_id);
    LENS_FUZZ_CHECK(back.span_id == in.context.span_id);
    LENS_FUZZ_CHECK(back.trace_flags == in.context.trace_flags);
    LENS_FUZZ_CHECK(back.trace_state == in.context.trace_state);  // at most 512 characters
  }
  return 0;
}
