// W3C Trace Context and Baggage headers, the binary context form and linked spans.
#include "nemo/lens/propagation.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "env.hpp"
#include "inherited_context.hpp"
#include "strings.hpp"

namespace nemo::lens {

using detail::hex_digit;
using detail::valid_utf8;

namespace {

constexpr std::string_view kTraceParentHeader = "traceparent";
constexpr std::string_view kTraceStateHeader = "tracestate";
constexpr std::string_view kBaggageHeader = "baggage";

// The trace flags W3C Trace Context Level 2 defines: sampled (bit 0) and random (bit 1). Others
// are dropped, as the specification asks of a version 00 traceparent.
constexpr std::uint8_t kDefinedFlags = 0x03;

// traceparent: "vv-<32 hex>-<16 hex>-ff"; the offsets of its fields.
constexpr std::size_t kTraceParentSize = 55;
constexpr std::size_t kTraceIdAt = 3;
constexpr std::size_t kSpanIdAt = 36;
constexpr std::size_t kFlagsAt = 53;

constexpr std::size_t kMaxTraceStateMembers = 32;
// The combined length the specification asks every vendor to propagate; the OpenTelemetry JS
// TraceState keeps no more, nor does lens.
constexpr std::size_t kMaxTraceStateChars = 512;
// Members longer than this are the first to go when a trace state is cut.
constexpr std::size_t kLongTraceStateMember = 128;
constexpr std::size_t kMaxTraceStateKey = 256;
constexpr std::size_t kMaxTraceStateValue = 256;

// The baggage-string grammar allows at most 180 list-members, and the OpenTelemetry JS propagator
// reads and writes at most that many in at most 8192 bytes (the size every platform must
// propagate). JS also skips members over 4096 bytes; lens does not, since the specification
// requires a lone member of up to 8192 bytes to be propagated.
constexpr std::size_t kMaxBaggageMembers = 180;
constexpr std::size_t kMaxBaggageBytes = 8192;

constexpr std::uint8_t kBinaryVersion = 1;
constexpr std::size_t kBinaryFixedSize = 1 + 16 + 8 + 1;
constexpr std::size_t kBinaryLengthSize = 2;

bool is_ows(char c) noexcept { return c == ' ' || c == '\t'; }

std::string_view trim_ows(std::string_view s) noexcept {
  while (!s.empty() && is_ows(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_ows(s.back())) s.remove_suffix(1);
  return s;
}

char ascii_lower(char c) noexcept {
  return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c;
}

// Calls f(part) for each part of `s` between `sep`s (empty parts included) until f returns false.
template <class F>
void for_each_part(std::string_view s, char sep, F&& f) {
  for (;;) {
    const std::size_t end = s.find(sep);
    if (!f(s.substr(0, end)) || end == std::string_view::npos) return;
    s.remove_prefix(end + 1);
  }
}

// Whether header name `key` is `name` (lower case) in any case.
bool same_header(std::string_view key, std::string_view name) noexcept {
  return key.size() == name.size() &&
         std::equal(key.begin(), key.end(), name.begin(),
                    [](char a, char b) { return ascii_lower(a) == b; });
}

// The value of header `name` (lower case): the exact spelling first, else any case.
const std::string* find_header(const Carrier& carrier, std::string_view name) noexcept {
  if (auto it = carrier.find(name); it != carrier.end()) return &it->second;
  for (const auto& [key, value] : carrier) {
    if (same_header(key, name)) return &value;
  }
  return nullptr;
}

// Removes header `name` in every spelling, as find_header() would see it.
void erase_header(Carrier& carrier, std::string_view name) noexcept {
  for (auto it = carrier.begin(); it != carrier.end();) {
    it = same_header(it->first, name) ? carrier.erase(it) : std::next(it);
  }
}

// Sets header `name`, replacing it in whatever spelling it was received.
void set_header(Carrier& carrier, std::string_view name, std::string value) {
  erase_header(carrier, name);
  carrier.emplace(std::string(name), std::move(value));
}

// ---- traceparent ----

int lower_hex_digit(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

template <std::size_t N>
bool parse_lower_hex(std::string_view hex, std::array<std::uint8_t, N>& out) noexcept {
  for (std::size_t i = 0; i < N; ++i) {
    const int hi = lower_hex_digit(hex[2 * i]);
    const int lo = lower_hex_digit(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return false;
    out[i] = static_cast<std::uint8_t>(hi << 4 | lo);
  }
  return true;
}

// A valid traceparent's trace id, span id and sampled flag; false for anything else.
bool parse_trace_parent(std::string_view header, SpanContext& ctx) noexcept {
  const std::string_view v = trim_ows(header);
  if (v.size() < kTraceParentSize) return false;
  std::array<std::uint8_t, 1> version{};
  if (!parse_lower_hex(v.substr(0, 2), version) || v[2] != '-' || version[0] == 0xff) return false;
  // Version 00 ends after the flags; a later version may append fields after a '-'.
  if (version[0] == 0x00 ? v.size() != kTraceParentSize
                         : v.size() > kTraceParentSize && v[kTraceParentSize] != '-') {
    return false;
  }
  if (v[kSpanIdAt - 1] != '-' || v[kFlagsAt - 1] != '-') return false;
  TraceId trace_id;
  SpanId span_id;
  std::array<std::uint8_t, 1> flags{};
  if (!parse_lower_hex(v.substr(kTraceIdAt, 32), trace_id.bytes) ||
      !parse_lower_hex(v.substr(kSpanIdAt, 16), span_id.bytes) ||
      !parse_lower_hex(v.substr(kFlagsAt, 2), flags) || !trace_id.is_valid() ||
      !span_id.is_valid()) {
    return false;
  }
  ctx.trace_id = trace_id;
  ctx.span_id = span_id;
  ctx.trace_flags = flags[0] & kDefinedFlags;
  ctx.is_remote = true;
  return true;
}

std::string format_trace_parent(const SpanContext& ctx) {
  std::string out = "00-";
  out += ctx.trace_id.to_hex();
  out += '-';
  out += ctx.span_id.to_hex();
  static constexpr char kHex[] = "0123456789abcdef";
  const std::uint8_t flags = ctx.trace_flags & kDefinedFlags;
  out += '-';
  out += kHex[flags >> 4];
  out += kHex[flags & 0xF];
  return out;
}

// ---- tracestate ----

bool is_lcalpha(char c) noexcept { return c >= 'a' && c <= 'z'; }
bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }
bool is_trace_state_key_char(char c) noexcept {
  return is_lcalpha(c) || is_digit(c) || c == '_' || c == '-' || c == '*' || c == '/' || c == '@';
}

// Trace Context Level 2: key = (lcalpha / DIGIT) 0*255(keychar), '@' among the keychars. This
// covers Level 1's simple keys and tenant@system keys, and allows '@' anywhere after the first
// character ("foo@", "a@b@c"), as the current test suite of the specification expects.
bool is_trace_state_key(std::string_view key) noexcept {
  return !key.empty() && key.size() <= kMaxTraceStateKey &&
         (is_lcalpha(key.front()) || is_digit(key.front())) &&
         std::all_of(key.begin() + 1, key.end(), is_trace_state_key_char);
}

// 1 to 256 characters in 0x20-0x7E except ',' and '=', the last not a space.
bool is_trace_state_value(std::string_view value) noexcept {
  if (value.empty() || value.size() > kMaxTraceStateValue || value.back() == ' ') return false;
  return std::all_of(value.begin(), value.end(),
                     [](char c) { return c >= 0x20 && c <= 0x7E && c != ',' && c != '='; });
}

struct TraceStateMember {
  std::string_view key;
  std::string_view value;
  std::size_t size() const noexcept { return key.size() + 1 + value.size(); }
};

enum class TraceStateMode {
  // A received header: a malformed member or a 33rd member makes the whole list invalid (the
  // specification allows dropping either the member or the header; its test suite, at its
  // default strictness, expects the header dropped).
  kStrict,
  // Our own context (possibly set by hand): malformed members are dropped, the others kept.
  kSanitize,
};

// The non-empty members of a tracestate value, in order, repeated keys included (uniqueness is
// the sender's duty, and a list passed on unchanged must not be rewritten); false when the list
// is invalid (strict mode only).
bool parse_trace_state(std::string_view header, TraceStateMode mode,
                       std::vector<TraceStateMember>& out) {
  out.clear();
  bool valid = true;
  for_each_part(header, ',', [&](std::string_view part) {
    const std::string_view m = trim_ows(part);
    if (m.empty()) return true;
    const std::size_t eq = m.find('=');
    TraceStateMember member;
    bool ok = eq != std::string_view::npos;
    if (ok) {
      member = {m.substr(0, eq), m.substr(eq + 1)};
      ok = is_trace_state_key(member.key) && is_trace_state_value(member.value);
    }
    if (ok) {
      out.push_back(member);
      ok = mode == TraceStateMode::kSanitize || out.size() <= kMaxTraceStateMembers;
    }
    if (!ok && mode == TraceStateMode::kStrict) valid = false;
    return valid;
  });
  return valid;
}

std::size_t joined_size(const std::vector<TraceStateMember>& members) noexcept {
  std::size_t n = members.empty() ? 0 : members.size() - 1;
  for (const auto& m : members) n += m.size();
  return n;
}

// Drops whole members until at most `max_members` remain in at most `max_bytes`: members longer
// than 128 characters first (the last one first), then from the end.
void cut_trace_state(std::vector<TraceStateMember>& members, std::size_t max_members,
                     std::size_t max_bytes) {
  while (!members.empty() && (members.size() > max_members || joined_size(members) > max_bytes)) {
    auto long_member = std::find_if(members.rbegin(), members.rend(),
                                    [](const auto& m) { return m.size() > kLongTraceStateMember; });
    if (long_member != members.rend()) {
      members.erase(std::next(long_member).base());
    } else {
      members.pop_back();
    }
  }
}

std::string join_trace_state(const std::vector<TraceStateMember>& members) {
  std::string out;
  out.reserve(joined_size(members));
  for (const auto& m : members) {
    if (!out.empty()) out += ',';
    out.append(m.key).append("=").append(m.value);
  }
  return out;
}

// ctx.trace_state as it is sent: its valid members within the limits.
std::string outgoing_trace_state(std::string_view trace_state, std::size_t max_chars) {
  std::vector<TraceStateMember> members;
  parse_trace_state(trace_state, TraceStateMode::kSanitize, members);
  cut_trace_state(members, kMaxTraceStateMembers, max_chars);
  return join_trace_state(members);
}

// A received tracestate normalised and cut to 512 characters; empty when it is invalid.
std::string incoming_trace_state(std::string_view header) {
  std::vector<TraceStateMember> members;
  if (!parse_trace_state(header, TraceStateMode::kStrict, members)) return {};
  cut_trace_state(members, kMaxTraceStateMembers, kMaxTraceStateChars);
  return join_trace_state(members);
}

// ---- baggage ----

// RFC 7230 tchar: a byte of a token.
bool is_tchar(char c) noexcept {
  constexpr std::string_view kSymbols = "!#$%&'*+-.^_`|~";
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || is_digit(c) ||
         (c != '\0' && kSymbols.find(c) != std::string_view::npos);
}

// US-ASCII except controls, space, '"', ',', ';' and '\'.
bool is_baggage_octet(char ch) noexcept {
  const auto c = static_cast<unsigned char>(ch);
  return c == 0x21 || (c >= 0x23 && c <= 0x2B) || (c >= 0x2D && c <= 0x3A) ||
         (c >= 0x3C && c <= 0x5B) || (c >= 0x5D && c <= 0x7E);
}

// Decodes %XX escapes (either case); false for a '%' not followed by two hex digits.
bool percent_decode(std::string_view in, std::string& out) {
  out.clear();
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (in.size() - i < 3) return false;
    const int hi = hex_digit(in[i + 1]);
    const int lo = hex_digit(in[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out += static_cast<char>(hi << 4 | lo);
    i += 2;
  }
  return true;
}

// Appends `in` with every byte for which keep(byte) is false, and '%', as "%XX".
template <class Keep>
void percent_encode(std::string_view in, Keep keep, std::string& out) {
  constexpr char kHexUpper[] = "0123456789ABCDEF";
  for (char ch : in) {
    if (keep(ch) && ch != '%') {
      out += ch;
    } else {
      const auto c = static_cast<unsigned char>(ch);
      out += '%';
      out += kHexUpper[c >> 4];
      out += kHexUpper[c & 0xF];
    }
  }
}

// One list-member: key and value OWS-trimmed and percent-decoded; properties (after the first
// ';') are not represented and not checked, as the JS propagator keeps them as opaque text. False
// for a member to skip: no '=', an empty key, a bad percent escape, or a key that does not decode
// to UTF-8 (the JS propagator's decodeURIComponent rejects those). Key and value characters
// outside the grammar (a key with '(' or a space, a value with '"') are kept, as the JS
// propagator keeps them; the specification leaves a malformed member's fate open.
bool parse_baggage_member(std::string_view m, std::string& key, std::string& value) {
  const std::string_view key_value = m.substr(0, m.find(';'));
  const std::size_t eq = key_value.find('=');
  if (eq == std::string_view::npos) return false;
  const std::string_view raw_key = trim_ows(key_value.substr(0, eq));
  const std::string_view raw_value = trim_ows(key_value.substr(eq + 1));
  if (raw_key.empty() || !percent_decode(raw_key, key) || key.empty()) return false;
  if (valid_utf8(key) != key) return false;
  if (!percent_decode(raw_value, value)) return false;
  // Octets that are not UTF-8 become U+FFFD, as the specification requires of values.
  value = valid_utf8(value);
  return true;
}

Baggage parse_baggage(std::string_view header) {
  Baggage out;
  std::size_t bytes = 0;
  std::string key;
  std::string value;
  for_each_part(header, ',', [&](std::string_view part) {
    if (out.size() == kMaxBaggageMembers) return false;
    const std::string_view m = trim_ows(part);
    if (m.empty() || !parse_baggage_member(m, key, value)) return true;
    // The member as received, with the comma before it: reading stops at the first member that
    // would take the accepted members past 8192 bytes.
    const std::size_t size = (out.empty() ? 0 : 1) + part.size();
    if (bytes + size > kMaxBaggageBytes) return false;
    bytes += size;
    out.emplace_back(key, value);
    return true;
  });
  return out;
}

std::string format_baggage(const Baggage& baggage) {
  std::string out;
  std::string member;
  std::size_t members = 0;
  for (const auto& [key, value] : baggage) {
    if (members == kMaxBaggageMembers) break;
    if (key.empty()) continue;
    // Keys are written as tokens: their other bytes are escaped (a reader that decodes keys, as
    // lens and the JS propagator do, gets the key back).
    member.clear();
    percent_encode(key, is_tchar, member);
    member += '=';
    percent_encode(value, is_baggage_octet, member);
    ++members;
    const std::size_t size = out.size() + (out.empty() ? 0 : 1) + member.size();
    if (size > kMaxBaggageBytes) continue;
    if (!out.empty()) out += ',';
    out += member;
  }
  return out;
}

}  // namespace

void inject_context(Carrier& carrier) noexcept {
  const SpanContext ctx = current_span_context();
  if (ctx.is_valid()) inject_context(ctx, carrier);
}

void inject_context(const SpanContext& ctx, Carrier& carrier, const Baggage& baggage) noexcept {
  const bool write_trace = ctx.is_valid();
  const bool write_baggage = !baggage.empty();
  try {
    std::string trace_parent;
    std::string trace_state;
    std::string baggage_header;
    if (write_trace) {
      trace_parent = format_trace_parent(ctx);
      trace_state = outgoing_trace_state(ctx.trace_state, kMaxTraceStateChars);
    }
    if (write_baggage) baggage_header = format_baggage(baggage);
    if (write_trace) {
      set_header(carrier, kTraceParentHeader, std::move(trace_parent));
      if (trace_state.empty()) {
        erase_header(carrier, kTraceStateHeader);
      } else {
        set_header(carrier, kTraceStateHeader, std::move(trace_state));
      }
    }
    if (write_baggage) {
      if (baggage_header.empty()) {
        erase_header(carrier, kBaggageHeader);
      } else {
        set_header(carrier, kBaggageHeader, std::move(baggage_header));
      }
    }
  } catch (...) {
    if (write_trace) {
      erase_header(carrier, kTraceParentHeader);
      erase_header(carrier, kTraceStateHeader);
    }
    if (write_baggage) erase_header(carrier, kBaggageHeader);
  }
}

ExtractedContext extract_context(const Carrier& carrier) noexcept {
  try {
    ExtractedContext out;
    const std::string* trace_parent = find_header(carrier, kTraceParentHeader);
    // A tracestate is read only along with a valid traceparent.
    if (trace_parent != nullptr && parse_trace_parent(*trace_parent, out.context)) {
      if (const std::string* trace_state = find_header(carrier, kTraceStateHeader)) {
        out.context.trace_state = incoming_trace_state(*trace_state);
      }
    }
    if (const std::string* baggage = find_header(carrier, kBaggageHeader)) {
      out.baggage = parse_baggage(*baggage);
    }
    return out;
  } catch (...) {
    return {};  // out of memory
  }
}

namespace detail {

namespace {
std::mutex g_inherited_mu;
InheritedContext& inherited_storage() {
  static auto* c = new InheritedContext();  // immortal: read by child_environment() at any time
  return *c;
}
}  // namespace

InheritedContext read_inherited_context() {
  InheritedContext out;
  Carrier carrier;
  const auto traceparent = env_trimmed("TRACEPARENT");
  const auto tracestate = env_trimmed("TRACESTATE");
  const auto baggage = env_trimmed("BAGGAGE");
  if (traceparent) carrier[std::string(kTraceParentHeader)] = *traceparent;
  if (tracestate) carrier[std::string(kTraceStateHeader)] = *tracestate;
  if (baggage) carrier[std::string(kBaggageHeader)] = *baggage;
  ExtractedContext e = extract_context(carrier);
  if (traceparent && !e.context.is_valid()) {
    std::fprintf(stderr,
                 "lens: ignoring TRACEPARENT='%s': not a W3C traceparent "
                 "(00-<32 hex trace id>-<16 hex span id>-<2 hex flags>); spans start new traces\n",
                 traceparent->c_str());
  }
  if (tracestate && e.context.is_valid() && e.context.trace_state.empty()) {
    std::fprintf(stderr, "lens: ignoring TRACESTATE='%s': not a valid W3C tracestate\n",
                 tracestate->c_str());
  }
  if (baggage && e.baggage.empty()) {
    std::fprintf(stderr, "lens: ignoring BAGGAGE='%s': no valid W3C baggage member\n",
                 baggage->c_str());
  }
  out.context = std::move(e.context);
  out.baggage = std::move(e.baggage);
  return out;
}

void set_inherited_context(InheritedContext context) {
  std::lock_guard lock(g_inherited_mu);
  inherited_storage() = std::move(context);
}

InheritedContext inherited_context() {
  std::lock_guard lock(g_inherited_mu);
  return inherited_storage();
}

}  // namespace detail

Carrier child_environment() noexcept {
  try {
    const detail::InheritedContext inherited = detail::inherited_context();
    SpanContext ctx = current_span_context();
    if (!ctx.is_valid()) ctx = inherited.context;
    Carrier headers;
    inject_context(ctx, headers, inherited.baggage);
    Carrier env;
    for (auto& [name, value] : headers) {
      std::string var = name;
      for (char& c : var) c = static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
      env.emplace(std::move(var), std::move(value));
    }
    return env;
  } catch (...) {
    return {};  // out of memory
  }
}

std::string serialize_context(const SpanContext& ctx) {
  std::string out;
  if (!ctx.is_valid()) return out;
  const std::string trace_state = outgoing_trace_state(ctx.trace_state, kMaxSerializedTraceState);
  out.reserve(kBinaryFixedSize + kBinaryLengthSize + trace_state.size());
  out += static_cast<char>(kBinaryVersion);
  out.append(reinterpret_cast<const char*>(ctx.trace_id.bytes.data()), ctx.trace_id.bytes.size());
  out.append(reinterpret_cast<const char*>(ctx.span_id.bytes.data()), ctx.span_id.bytes.size());
  out += static_cast<char>(ctx.trace_flags & kDefinedFlags);
  if (!trace_state.empty()) {
    out += static_cast<char>(trace_state.size() & 0xFF);
    out += static_cast<char>(trace_state.size() >> 8);
    out += trace_state;
  }
  return out;
}

namespace {

// NeMo Lens' carrier bytes: the UTF-8 JSON of a W3C carrier object; its context, or an invalid
// one for anything else.
SpanContext deserialize_json_carrier(std::string_view bytes) noexcept {
  try {
    const nlohmann::json j = nlohmann::json::parse(bytes, nullptr, /*allow_exceptions=*/false);
    if (!j.is_object()) return {};
    Carrier carrier;
    for (const auto& [key, value] : j.items()) {
      if (value.is_string()) carrier[key] = value.get<std::string>();
    }
    return extract_context(carrier).context;
  } catch (...) {
    return {};  // out of memory, or not UTF-8 the parser accepts
  }
}

// Appends `s`, printable ASCII (a traceparent, a validated tracestate), as a JSON string the way
// Python's json.dumps writes it.
void append_python_json_string(std::string& out, std::string_view s) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      out += "\\u00";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  out += '"';
}

}  // namespace

std::string serialize_context_json(const SpanContext& ctx) {
  std::string out;
  if (!ctx.is_valid()) return out;
  Carrier carrier;
  inject_context(ctx, carrier);
  // The members in the order OpenTelemetry Python's propagator writes them, with json.dumps'
  // default separators.
  out += '{';
  for (std::string_view name : {kTraceParentHeader, kTraceStateHeader}) {
    const std::string* value = find_header(carrier, name);
    if (value == nullptr) continue;
    if (out.size() > 1) out += ", ";
    append_python_json_string(out, name);
    out += ": ";
    append_python_json_string(out, *value);
  }
  out += '}';
  return out;
}

SpanContext deserialize_context(std::string_view bytes) noexcept {
  const std::size_t first = bytes.find_first_not_of(" \t\r\n");
  if (first != std::string_view::npos && bytes[first] == '{') {
    return deserialize_json_carrier(bytes);
  }
  if (bytes.size() < kBinaryFixedSize || static_cast<std::uint8_t>(bytes[0]) != kBinaryVersion) {
    return {};
  }
  SpanContext ctx;
  std::size_t at = 1;
  std::memcpy(ctx.trace_id.bytes.data(), bytes.data() + at, ctx.trace_id.bytes.size());
  at += ctx.trace_id.bytes.size();
  std::memcpy(ctx.span_id.bytes.data(), bytes.data() + at, ctx.span_id.bytes.size());
  at += ctx.span_id.bytes.size();
  ctx.trace_flags = static_cast<std::uint8_t>(bytes[at]) & kDefinedFlags;
  if (!ctx.is_valid()) return {};
  if (bytes.size() > kBinaryFixedSize) {
    if (bytes.size() < kBinaryFixedSize + kBinaryLengthSize) return {};
    const std::size_t length =
        static_cast<std::uint8_t>(bytes[kBinaryFixedSize]) |
        static_cast<std::size_t>(static_cast<std::uint8_t>(bytes[kBinaryFixedSize + 1])) << 8;
    if (length == 0 || length > kMaxSerializedTraceState ||
        bytes.size() != kBinaryFixedSize + kBinaryLengthSize + length) {
      return {};
    }
    try {
      ctx.trace_state = incoming_trace_state(bytes.substr(kBinaryFixedSize + kBinaryLengthSize));
    } catch (...) {
      ctx.trace_state.clear();  // out of memory: the context without its trace state
    }
  }
  ctx.is_remote = true;
  return ctx;
}

Span create_linked_span(std::string_view name, const SpanContext& target,
                        std::initializer_list<Attribute> attributes) noexcept {
  SpanStartOptions options;
  options.link = &target;
  return start_span(name, options, attributes);
}

Span create_linked_span(std::string_view name, const Carrier& carrier,
                        std::initializer_list<Attribute> attributes) noexcept {
  const ExtractedContext extracted = extract_context(carrier);
  return create_linked_span(name, extracted.context, attributes);
}

Span create_linked_span(std::string_view group, std::string_view name, const SpanContext& target,
                        std::initializer_list<Attribute> attributes) noexcept {
  SpanStartOptions options;
  options.group = group;
  options.link = &target;
  return start_span(name, options, attributes);
}

}  // namespace nemo::lens
