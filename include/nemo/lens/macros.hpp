// Call-site macros. Each expansion owns a static gate that resolves its group once; afterwards a
// disabled site costs a load and an unlikely branch. Define NEMO_LENS_DISABLE before including
// lens to compile every macro to nothing.
//
//   if (LENS_GROUP_ENABLED(nemo::lens::MegatronSpanGroup::LAYER)) {
//     record_layer_statistics();   // runs only while "layer" is enabled
//   }
#pragma once

#include "nemo/lens/detail/gate.hpp"

#if defined(NEMO_LENS_DISABLE)

/// Compiled out: always false, and the group expression is not evaluated.
#define LENS_GROUP_ENABLED(group) false

#else

/// Whether `group` (a compile-time string: a literal or a SpanGroup constant) is enabled, cached
/// at this call site. Sees every later set_enabled_span_groups(). Thread-safe; never throws.
#define LENS_GROUP_ENABLED(group)                                                         \
  ([]() noexcept -> bool {                                                                \
    static constinit ::nemo::lens::detail::SiteGate lens_site_gate_{                      \
        (group), &::nemo::lens::detail::g_unresolved_flag};                               \
    return ::nemo::lens::detail::site_enabled(lens_site_gate_);                           \
  }())

#endif
