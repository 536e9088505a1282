// Context propagation between processes: W3C Trace Context (`traceparent`, `tracestate`) and W3C
// Baggage headers in a string map for HTTP-style transports, a compact binary form for MPI and
// NCCL messages, and spans linked to a context that came from another process.
//
//   nemo::lens::Carrier headers;                               // sender
//   nemo::lens::inject_context(headers);                       // the thread's current span
//   send(headers);
//
//   auto in = nemo::lens::extract_context(received_headers);  // receiver
//   nemo::lens::SpanStartOptions options;
//   options.parent = &in.context;                              // continue the sender's trace
//   auto span = nemo::lens::start_span("handle_request", options);
//
//   std::string bytes = nemo::lens::serialize_context();      // e.g. in front of an MPI payload
//   auto peer = nemo::lens::deserialize_context(bytes);
//   auto recv = nemo::lens::create_linked_span("recv_activations", peer);
//
// Every function here is thread-safe: none keeps state, and the current span they read is the
// calling thread's own.
#pragma once

#include <cstddef>
#include <functional>
#include <initializer_list>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nemo/lens/attributes.hpp"
#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/span.hpp"

namespace nemo::lens {

/// Header names and values of a text transport (HTTP headers, gRPC metadata, a JSON object...).
/// inject_context() writes lower-case names; extract_context() finds a name in any case (the
/// lower-case spelling first). A header received several times must be joined with commas into
/// one value before extraction.
using Carrier = std::map<std::string, std::string, std::less<>>;

/// W3C Baggage: application-defined key/value pairs that travel with a request, in order;
/// keys may repeat (the specification asks that duplicates and their order be kept). Keys and
/// values are plain (decoded) UTF-8 text. List-member properties (`;p=v`) are not represented:
/// extraction ignores them.
using Baggage = std::vector<std::pair<std::string, std::string>>;

/// What extract_context() found in a carrier.
struct ExtractedContext {
  /// The remote span (is_remote set), or an invalid context when `traceparent` is missing or
  /// malformed.
  SpanContext context;
  /// The well-formed `baggage` members, values decoded. Independent of `context`.
  Baggage baggage;
};

/// Writes the calling thread's current span (current_span_context()) to `carrier`: `traceparent`,
/// and `tracestate` when the span carries one (a stale `tracestate` entry is removed otherwise).
/// Writes nothing when the thread has no valid current span. Baggage is never written here: lens
/// keeps no per-thread baggage, pass it to the overload below. Cost: a thread-local lookup and a
/// few small allocations.
NEMO_LENS_API void inject_context(Carrier& carrier) noexcept;

/// Writes `ctx` to `carrier` as inject_context(Carrier&) does, then `baggage` when it is not
/// empty (baggage is independent of the trace context: it is written even for an invalid `ctx`;
/// when none of its members can be written, a stale `baggage` entry is removed).
///
/// `traceparent` is version 00 and carries the sampled and random flags of `ctx`. `tracestate`
/// keeps the well-formed members of ctx.trace_state in order (repeated keys included), at most 32
/// in at most 512 characters, cut by whole members (longer than 128 characters first, then from
/// the end, as the specification recommends). `baggage` percent-encodes every key byte that is
/// not an HTTP token character and every value byte outside the W3C baggage-octet range, '%' in
/// both; skips empty keys; then of the first 180 members writes those that fit in 8192 bytes, a
/// member that would not fit dropped whole (a later, smaller one may still go). On out-of-memory
/// the carrier is left without the headers this call would have written.
NEMO_LENS_API void inject_context(const SpanContext& ctx, Carrier& carrier,
                                  const Baggage& baggage = {}) noexcept;

/// Reads `traceparent`, `tracestate` and `baggage` from `carrier` following the W3C Trace Context
/// and Baggage specifications (the trace flags of Level 2). Never throws; anything malformed gives
/// an invalid context, never an exception.
///
/// `traceparent`: surrounding spaces and tabs are ignored; version 00 must be exactly
/// `00-<32 hex>-<16 hex>-<2 hex>` in lower-case hex; version ff is invalid; a higher version is
/// read through its first four fields, which must be followed by the end or '-'; all-zero ids
/// are invalid. The trace flags Level 2 defines are kept: sampled (bit 0) and random (bit 1);
/// the others are dropped.
///
/// `tracestate` (W3C Trace Context Level 2) is read only with a valid `traceparent`. Keys are
/// `(a-z / 0-9) *255(a-z / 0-9 / _ - * / @)`, so both `tenant@system` and keys like `foo@` or
/// `a@b@c`; values 1 to 256 printable characters without ',' or '=', not ending in a space.
/// Empty members are ignored and repeated keys kept as received. The header is dropped as a whole
/// (the context stays valid) when a member is malformed or there are more than 32 members, as the
/// specification's test suite expects (the JS propagator would drop only the bad member and keep
/// the first 32). A list longer than 512 characters is cut by whole members (longer than 128
/// first, then from the end). The context keeps it normalised: members joined by ',' without
/// whitespace.
///
/// `baggage` (W3C Baggage, decoded as the OpenTelemetry JS propagator decodes it where the
/// specification leaves a choice): each member's key and value are OWS-trimmed and
/// percent-decoded, keys included; in values, octets that are not UTF-8 become U+FFFD. A member
/// is skipped when it has no '=', an empty key, a bad percent escape, or a key that is not UTF-8
/// once decoded. Characters outside the grammar are kept (a key `a(b)`, a value with a space
/// inside); properties are ignored; empty values and repeated keys are kept. Reading stops after
/// 180 members, or before the member that would take them past 8192 bytes.
NEMO_LENS_API ExtractedContext extract_context(const Carrier& carrier) noexcept;

/// The environment variables a child process started now should get to continue this trace
/// (OpenTelemetry's environment carriers): `TRACEPARENT` (and `TRACESTATE`) of the calling
/// thread's current span, else of the context this process inherited through them at set-up;
/// `BAGGAGE` as inherited. Empty when there is no context. Add them to the child's environment
/// (e.g. with setenv() before exec, or a launcher's env list). Never throws.
NEMO_LENS_API Carrier child_environment() noexcept;

/// The size limit of the trace state in the binary form, in bytes.
inline constexpr std::size_t kMaxSerializedTraceState = 512;

/// `ctx` in a compact binary form for MPI/NCCL messages; empty for an invalid context.
///
/// Format (version 1), all fields back to back:
///
///   offset  size  field
///   0       1     format version: 1
///   1       16    trace id, byte 0 first
///   17      8     span id, byte 0 first
///   25      1     trace flags (only the bits W3C defines: 0 sampled, 1 random)
///   26      2     optional: trace-state length N, little-endian, 1 <= N <= 512
///   28      N     the trace state (normalised `tracestate` text)
///
/// A message is exactly 26 bytes (no trace state) or 28 + N bytes. A trace state longer than 512
/// bytes is cut by whole members (longer than 128 characters first, then from the end). Throws
/// only std::bad_alloc.
NEMO_LENS_API std::string serialize_context(const SpanContext& ctx = current_span_context());

/// `ctx` as NeMo Lens' Python library sends it between ranks and over NCCL (its
/// `contrib/nccl.py` serialize_context and broadcast_trace_context): the UTF-8 JSON of the W3C
/// carrier, as Python's json.dumps writes it, e.g.
/// `{"traceparent": "00-<trace id>-<span id>-01", "tracestate": "rojo=1"}` (tracestate only
/// when the context has one). Empty for an invalid context. Throws only std::bad_alloc.
NEMO_LENS_API std::string serialize_context_json(const SpanContext& ctx = current_span_context());

/// Reads either form: what serialize_context() writes, or NeMo Lens' JSON carrier bytes (what
/// serialize_context_json() writes; told apart by a leading '{' after optional whitespace, and
/// read as extract_context() reads a carrier: header names in any case, baggage ignored).
/// Binary: a length that matches neither layout, an unknown format version, a trace-state length
/// above 512 or an all-zero id gives an invalid context; a trace state that is not a valid
/// `tracestate` is dropped (the context stays valid). JSON: anything but an object with a valid
/// `traceparent` string gives an invalid context. A valid result has is_remote set. Never throws;
/// safe on arbitrary bytes.
NEMO_LENS_API SpanContext deserialize_context(std::string_view bytes) noexcept;

/// Starts an ungated span (like span_cm) in the thread's current trace, or as a new root when
/// there is none, with a link to `target` (no link when `target` is invalid). Use it where work
/// of one process relates to, but is not a child of, a span of another (a receive matched to a
/// send, a collective that several ranks enter). Never throws.
NEMO_LENS_API Span create_linked_span(std::string_view name, const SpanContext& target,
                                      std::initializer_list<Attribute> attributes = {}) noexcept;

/// create_linked_span() to the context extract_context(carrier) finds.
NEMO_LENS_API Span create_linked_span(std::string_view name, const Carrier& carrier,
                                      std::initializer_list<Attribute> attributes = {}) noexcept;

/// create_linked_span() gated by `group`, like managed_span(): an empty handle when the group is
/// off. The group comes first, as in managed_span(); the two string arguments cannot be taken for
/// the ungated overloads, whose second parameter is a context or a carrier.
NEMO_LENS_API Span create_linked_span(std::string_view group, std::string_view name,
                                      const SpanContext& target,
                                      std::initializer_list<Attribute> attributes = {}) noexcept;

}  // namespace nemo::lens
