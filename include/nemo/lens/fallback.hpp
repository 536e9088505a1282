// For libraries that instrument their code with lens but must build without it. Copy this one
// header into your project and include it instead of <nemo/lens/lens.hpp>: when lens is
// installed (and NEMO_LENS_DISABLE is not defined) it is lens; otherwise it defines no-op
// versions of the instrumentation API in namespace nemo::lens, so the same code compiles and
// costs nothing.
//
//   #include "nemo/lens/fallback.hpp"
//   LENS_SPAN(span, "step", "train_step", {"iteration", it});
//   auto save = nemo::lens::trace_fn("checkpoint", "save", [&] { write_checkpoint(); });
//   if (nemo::lens::is_span_group_enabled("layer")) { /* ... */ }
//   span.set_attribute("loss", loss);
#pragma once

#if !defined(NEMO_LENS_DISABLE) && !defined(NEMO_LENS_FORCE_FALLBACK) && \
    defined(__has_include)
#if __has_include(<nemo/lens/lens.hpp>)
#include <nemo/lens/lens.hpp>
/// 1 when the real lens is in use, 0 when the no-op fallback is.
#define NEMO_LENS_AVAILABLE 1
#endif
#endif

#if !defined(NEMO_LENS_AVAILABLE)
/// 1 when the real lens is in use, 0 when the no-op fallback is.
#define NEMO_LENS_AVAILABLE 0

#include <cstdint>
#include <exception>
#include <initializer_list>
#include <string_view>
#include <type_traits>
#include <utility>

namespace nemo::lens {
// Its own inline namespace, so no no-op ever shares a linker name with the real library when code
// built with and without lens ends up in one program.
inline namespace fallback_noop {

/// No-op: every group is off without lens.
inline bool is_span_group_enabled(std::string_view) noexcept { return false; }

/// The span kinds of the real API.
enum class SpanKind : std::uint8_t { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };
/// The status codes of the real API.
enum class StatusCode : std::uint8_t { kUnset = 0, kOk = 1, kError = 2 };

/// Accepts any `{"key", value}` pair and discards it.
struct Attribute {
  template <class V>
  Attribute(std::string_view, V&&) noexcept {}  // NOLINT(google-explicit-constructor)
};

/// A span that records nothing; every method is a no-op, so instrumented code compiles unchanged.
class Span {
 public:
  explicit operator bool() const noexcept { return false; }
  bool is_recording() const noexcept { return false; }
  template <class V>
  Span& set_attribute(std::string_view, V&&) noexcept { return *this; }
  Span& set_attributes(std::initializer_list<Attribute>) noexcept { return *this; }
  Span& add_event(std::string_view, std::initializer_list<Attribute> = {}) noexcept { return *this; }
  Span& set_status(StatusCode, std::string_view = {}) noexcept { return *this; }
  Span& set_kind(SpanKind) noexcept { return *this; }
  Span& record_exception(const std::exception&) noexcept { return *this; }
  void end() noexcept {}
};

/// No-op: an empty span.
inline Span managed_span(std::string_view, std::string_view,
                         std::initializer_list<Attribute> = {}) noexcept {
  return {};
}
/// No-op: an empty span.
inline Span span_cm(std::string_view, std::initializer_list<Attribute> = {}) noexcept { return {}; }
/// No-op: returns (a copy of) `f` itself.
template <class F>
std::decay_t<F> trace_fn(std::string_view, std::string_view, F&& f) {
  return std::forward<F>(f);
}

}  // namespace fallback_noop
}  // namespace nemo::lens

#if !defined(LENS_GROUP_ENABLED)
/// No-op: always false; the group expression is not evaluated.
#define LENS_GROUP_ENABLED(group) false
#endif
#if !defined(LENS_SPAN)
/// No-op: declares an empty span; no argument is evaluated.
#define LENS_SPAN(var, group, ...) ::nemo::lens::Span var
#endif
#endif
