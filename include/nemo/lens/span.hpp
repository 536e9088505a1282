// Spans: RAII scopes that record a name, a start and end time, attributes, events, links and a
// status, nest under the thread's current span and are exported when they end.
//
//   {
//     auto span = nemo::lens::managed_span("step", "train_step", {{"iteration", it}});
//     span.set_attribute("loss", loss);          // no-op when the group is off
//   }                                             // ends here; an escaping exception marks it
//   ERROR auto job = nemo::lens::span_cm("pretrain");  // ungated; job.end() or scope exit ends it
//   auto timed_save = nemo::lens::trace_fn("checkpoint", "save", [&] { save(); });
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>

#include "nemo/lens/attributes.hpp"
#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/exporter.hpp"

namespace nemo::lens {

namespace detail {
struct SpanRecord;
struct SpanSite;
struct SpanAccess;
}  // namespace detail

/// A span in progress, or an empty handle that records nothing (its group is off, tracing is not
/// set up, the span was sampled out, or it has ended). Movable, not copyable. Every method is
/// noexcept and costs nothing on an empty handle. A span is the current span of the thread that
/// started it from start until it ends, wherever the handle has moved (unless started with
/// SpanStartOptions::current = false); spans may end in any order.
/// A handle may be used from another thread than the one that started it, but not from two threads
/// at once.
class NEMO_LENS_API Span {
 public:
  /// An empty handle.
  Span() noexcept = default;
  Span(Span&& other) noexcept
      : rec_(std::exchange(other.rec_, nullptr)),
        uncaught_(other.uncaught_),
        token_(other.token_),
        nvtx_(other.nvtx_) {}
  /// Ends the span this handle holds, then takes over `other`'s.
  Span& operator=(Span&& other) noexcept;
  Span(const Span&) = delete;
  Span& operator=(const Span&) = delete;
  /// Ends the span. When the scope is left by an exception thrown after the span started, the span
  /// gets status ERROR and an "exception" event first.
  ~Span() {
    if (rec_ != nullptr) finish_scope();
  }

  /// Whether the span records (false for an empty or ended handle, or a sampled-out span).
  explicit operator bool() const noexcept { return is_recording(); }
  /// Whether the span records.
  bool is_recording() const noexcept;

  /// Sets (or replaces) an attribute. String values under a redacted key become "[REDACTED]".
  Span& set_attribute(std::string_view key, const AttributeArg& value) noexcept;
  /// Sets several attributes.
  Span& set_attributes(std::initializer_list<Attribute> attributes) noexcept;
  /// Adds a timestamped event.
  Span& add_event(std::string_view name, std::initializer_list<Attribute> attributes = {}) noexcept;
  /// Adds a timestamped event with attributes known only at run time (the keys and values are
  /// copied).
  Span& add_event(std::string_view name, std::span<const Attribute> attributes) noexcept;
  /// Links this span to another span's context (ignored when the context is invalid).
  Span& add_link(const SpanContext& target,
                 std::initializer_list<Attribute> attributes = {}) noexcept;
  /// Sets the status. An OK status is final; UNSET never replaces another status.
  Span& set_status(StatusCode code, std::string_view message = {}) noexcept;
  /// Sets the kind (internal by default).
  Span& set_kind(SpanKind kind) noexcept;
  /// Records `e` as an "exception" event (exception.type demangled, exception.message) and sets
  /// status ERROR with the message.
  Span& record_exception(const std::exception& e) noexcept;
  /// Records an exception known by its type name and message (e.g. one raised in another
  /// language) as an "exception" event, and sets status ERROR with the message.
  Span& record_exception(std::string_view type, std::string_view message) noexcept;
  /// The span's context; invalid for an empty handle.
  SpanContext context() const noexcept;
  /// Ends the span now (idempotent); the handle becomes empty.
  void end() noexcept {
    if (rec_ != nullptr) finish(false);
  }
  /// Ends the span at `end_unix_nano` (Unix nanoseconds; 0 or less: now), a time that may be
  /// past, as OpenTelemetry's end(end_time). An end before the span's start is clamped to the
  /// start and counted (TelemetryStats::spans_end_clamped). Idempotent.
  void end(std::int64_t end_unix_nano) noexcept;
  /// Ends the span at a system_clock time (see end(std::int64_t)).
  void end(std::chrono::system_clock::time_point t) noexcept {
    end(std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count());
  }

 private:
  friend struct detail::SpanAccess;
  Span(detail::SpanRecord* rec, std::uint32_t token, int uncaught) noexcept
      : rec_(rec), uncaught_(uncaught), token_(token) {}
  void finish(bool unwinding) noexcept;
  // finish(), unwinding when more exceptions are in flight than at the start. Only the
  // destructor calls it: it may leave the handle as it was.
  void finish_scope() noexcept;

  // A recording (or sampled-out) span's record; or, with a low bit set, the thread state that
  // started a span without a record: bit 0, its open-span registry holds the span's light entry
  // (tracked for `lens ctl dump`, not exported); bit 1, the span has only an NVTX range.
  detail::SpanRecord* rec_ = nullptr;
  int uncaught_ = 0;
  std::uint32_t token_ = 0;  // the light entry's token
  std::uint32_t nvtx_ = 0;   // without a record: the NVTX range's handle (0: none)
};

/// Options for start_span().
struct SpanStartOptions {
  /// The span group; empty for an ungated span. A non-empty group that is off gives an empty span.
  std::string_view group;
  SpanKind kind = SpanKind::kInternal;
  /// An explicit parent (e.g. extracted from another process); when null the thread's current span
  /// is the parent, or without one the context the process inherited (TRACEPARENT).
  const SpanContext* parent = nullptr;
  /// Ignore the thread's current span: the span starts a new trace, or continues the context this
  /// process inherited through TRACEPARENT at set-up (child_environment()).
  bool root = false;
  /// False: the span does not become its thread's current span, so spans started meanwhile do
  /// not take it as their parent (OpenTelemetry's tracer.start_span; lens' Python start_span).
  /// It is open otherwise: ended as truncated at shutdown, listed by `lens ctl dump`.
  bool current = true;
  /// A span to link to (ignored when null or invalid).
  const SpanContext* link = nullptr;
  /// The span's start in Unix nanoseconds, when it began before this call (from a CUDA event, a
  /// queue's timestamp, a log); 0 or less: now. Its end is then taken in Unix nanoseconds too.
  std::int64_t start_time_unix_nano = 0;
  /// Sets start_time_unix_nano from a system_clock time.
  SpanStartOptions& start_at(std::chrono::system_clock::time_point t) noexcept {
    start_time_unix_nano =
        std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
    return *this;
  }
};

/// Starts a span with full control over parent, kind and links. Never throws.
NEMO_LENS_API Span start_span(std::string_view name, const SpanStartOptions& options,
                              std::initializer_list<Attribute> attributes = {}) noexcept;

/// Makes `ctx` (a span of another process or of another tracer, e.g. extracted from a carrier) the
/// calling thread's current span until the returned handle ends: spans this thread starts meanwhile
/// without an explicit parent are its children. Records and exports nothing; the handle is not
/// recording (operator bool is false) but context() is `ctx`. An invalid `ctx` gives an empty
/// handle. Works whether or not tracing is set up. Never throws.
NEMO_LENS_API Span attach_context(const SpanContext& ctx) noexcept;

namespace detail {
/// managed_span(): start_span() with only a group, its common case (a pair this thread started
/// before) taken without the options' generality.
NEMO_LENS_API Span start_managed_span(std::string_view group, std::string_view name,
                                      std::initializer_list<Attribute> attributes) noexcept;
}  // namespace detail

/// Starts a span of `group` when that group is enabled; otherwise returns an empty handle after one
/// lookup of the group by name. Prefer LENS_SPAN at hot sites: it caches the lookup.
inline Span managed_span(std::string_view group, std::string_view name,
                         std::initializer_list<Attribute> attributes = {}) noexcept {
  return detail::start_managed_span(group, name, attributes);
}

/// Starts an ungated span: it records whenever tracing is set up on an exporting rank.
inline Span span_cm(std::string_view name,
                    std::initializer_list<Attribute> attributes = {}) noexcept {
  return start_span(name, SpanStartOptions{}, attributes);
}

/// Wraps `f` so that every call runs inside managed_span(group, name). An exception leaving `f` is
/// recorded on the span (type and message) and rethrown. The wrapper owns copies of the names.
template <class F>
auto trace_fn(std::string_view group, std::string_view name, F&& f) {
  struct Names {
    std::string group, name;
  };
  return [names = std::make_shared<const Names>(Names{std::string(group), std::string(name)}),
          fn = std::forward<F>(f)](auto&&... args) mutable -> decltype(auto) {
    Span span = managed_span(names->group, names->name);
    try {
      return fn(std::forward<decltype(args)>(args)...);
    } catch (const std::exception& e) {
      span.record_exception(e);
      throw;
    }
  };
}

namespace detail {

/// A LENS_SPAN call site: its gate and its span name. Constant-initialised.
struct SpanSite {
  SiteGate gate;
  std::string_view name;
  /// The name registered with NVTX, once a span of this site opened an NVTX range.
  mutable std::atomic<const void*> nvtx_name{nullptr};
  /// The attribute keys the site's spans start with, checked once per pipeline (the library's
  /// SiteKeys), once a span of this site recorded attributes.
  mutable std::atomic<const void*> keys{nullptr};
};

/// Starts the span of an enabled LENS_SPAN site.
NEMO_LENS_API Span start_site_span(const SpanSite& site,
                                   std::initializer_list<Attribute> attributes) noexcept;

}  // namespace detail

}  // namespace nemo::lens
