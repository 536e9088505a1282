// The call-site gate behind LENS_SPAN and LENS_GROUP_ENABLED. Internal: not part of the documented
// API; use the macros.
//
// Each site owns a static SiteGate holding a pointer to its group's enabled flag. The pointer
// starts at a sentinel flag that reads "true", so the first pass takes the slow path, which
// interns the group name and repoints the site at the real flag. Afterwards the disabled path is a
// load of the pointer, a relaxed load of the flag and an unlikely branch.
#pragma once

#include <atomic>
#include <string_view>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens::detail {

/// Per-site gate state. Constant-initialised, so it is usable from static initialisers.
struct SiteGate {
  std::string_view group;
  std::atomic<const std::atomic<bool>*> flag;
};

/// The sentinel every unresolved site points at; it always reads true.
extern NEMO_LENS_API const std::atomic<bool> g_unresolved_flag;

/// Resolves `site` (interning its group) and returns whether the group is enabled now.
NEMO_LENS_API bool resolve_site(SiteGate& site) noexcept;

/// Whether the site's group is enabled. After the first call: two loads and a branch.
inline bool site_enabled(SiteGate& site) noexcept {
  // Relaxed is enough for both loads: every flag lives in a statically initialised array, so there
  // is no construction to synchronise with, and a group switch only needs to become visible soon.
  const std::atomic<bool>* flag = site.flag.load(std::memory_order_relaxed);
  if (NEMO_LENS_LIKELY(!flag->load(std::memory_order_relaxed))) return false;
  if (NEMO_LENS_UNLIKELY(flag == &g_unresolved_flag)) return resolve_site(site);
  return true;
}

}  // namespace nemo::lens::detail
