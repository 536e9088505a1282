// For libraries that instrument their code with lens but must build without it. Copy this one
// header into your project and include it instead of <nemo/lens/lens.hpp>: when lens is
// installed (and NEMO_LENS_DISABLE is not defined) it is lens; otherwise it defines no-op
// versions of the instrumentation API in namespace nemo::lens, so the same code compiles and
// costs nothing.
//
//   #include "nemo/lens/fallback.hpp"
//   if (LENS_GROUP_ENABLED("step")) { /* ... */ }
//   if (nemo::lens::is_span_group_enabled("layer")) { /* ... */ }
//   static_assert(NEMO_LENS_AVAILABLE == 0 || NEMO_LENS_AVAILABLE == 1);
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

#include <string_view>

namespace nemo::lens {
// Its own inline namespace, so the no-op never shares a linker name with the real function when
// code built with and without lens ends up in one program.
inline namespace fallback_noop {
/// No-op: every group is off without lens.
inline bool is_span_group_enabled(std::string_view) noexcept { return false; }
}  // namespace fallback_noop
}  // namespace nemo::lens

#if !defined(LENS_GROUP_ENABLED)
/// No-op: always false; the group expression is not evaluated.
#define LENS_GROUP_ENABLED(group) false
#endif
#endif
