// Call-site macros. Each expansion owns a static gate that resolves its group once; afterwards a
// disabled site costs a load and an unlikely branch, and its attribute arguments are not
// evaluated. Define NEMO_LENS_DISABLE before including lens to compile every macro to nothing.
//
//   using nemo::lens::MegatronSpanGroup;
//   LENS_SPAN(span, MegatronSpanGroup::LAYER, "layer_forward", {"layer", i}, {"bytes", n});
//   if (LENS_GROUP_ENABLED(MegatronSpanGroup::LAYER)) record_layer_statistics();
#pragma once

#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/span.hpp"

#define NEMO_LENS_DETAIL_CONCAT2(a, b) a##b
#define NEMO_LENS_DETAIL_CONCAT(a, b) NEMO_LENS_DETAIL_CONCAT2(a, b)

#if defined(NEMO_LENS_DISABLE)

/// Compiled out: always false, and the group expression is not evaluated.
#define LENS_GROUP_ENABLED(group) false

/// Compiled out: declares an empty span named `var`; no argument is evaluated.
#define LENS_SPAN(var, group, ...) ::nemo::lens::Span var

#else

/// Whether `group` (a compile-time string: a literal or a SpanGroup constant) is enabled, cached
/// at this call site. Sees every later set_enabled_span_groups(). Thread-safe; never throws.
#define LENS_GROUP_ENABLED(group)                                                         \
  ([]() noexcept -> bool {                                                                \
    static constinit ::nemo::lens::detail::SiteGate lens_site_gate_{                      \
        (group), &::nemo::lens::detail::g_unresolved_flag};                               \
    return ::nemo::lens::detail::site_enabled(lens_site_gate_);                           \
  }())


/// Declares `var`, a Span of `group` (a compile-time string) named `name` (a compile-time string)
/// with optional `{"key", value}` attributes. When the group is off, `var` is an empty handle and
/// the attribute expressions are not evaluated. Ends at scope exit. Use only at block scope.
#define LENS_SPAN(var, group, name, ...) \
  NEMO_LENS_DETAIL_SPAN(NEMO_LENS_DETAIL_CONCAT(lens_span_site_, __COUNTER__), var, group, name, \
                        __VA_ARGS__)

#define NEMO_LENS_DETAIL_SPAN(site, var, group, name, ...)                                \
  static constinit ::nemo::lens::detail::SpanSite site{                                 \
      {(group), &::nemo::lens::detail::g_unresolved_flag}, (name)};                      \
  ::nemo::lens::Span var = ::nemo::lens::detail::span_site_enabled(site.gate)            \
                               ? ::nemo::lens::detail::start_site_span(site, {__VA_ARGS__}) \
                               : ::nemo::lens::Span()

#endif
