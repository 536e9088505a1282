// The call-site gate behind LENS_SPAN and LENS_GROUP_ENABLED. Internal: not part of the documented
// API; use the macros.
//
// Each site owns a static SiteGate holding a pointer to its group's flag. The pointer starts at a
// sentinel flag that reads "true", so the first pass takes the slow path, which interns the group
// name and repoints the site at the real flag. Afterwards the disabled path is a load of the
// pointer, a relaxed load of the flag and an unlikely branch.
//
// A group has two flags: "enabled" (LENS_GROUP_ENABLED, is_span_group_enabled) and "site", which is
// also on when the group's open spans are tracked for `lens ctl dump` without being exported
// (<PREFIX>_TRACK_OPEN). LENS_SPAN sites read the site flag.
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

/// Resolves a LENS_SPAN site: like resolve_site(), but points it at the group's site flag and
/// returns that flag's value.
NEMO_LENS_API bool resolve_span_site(SiteGate& site) noexcept;

/// For the Python package: whether the spans of `site`'s group are recorded only, for the flight
/// recorder (<PREFIX>_RECORD_GROUPS), and not exported.
NEMO_LENS_API bool site_records_only(const SiteGate& site) noexcept;

/// Whether the site's group is enabled. After the first call: two loads and a branch.
inline bool site_enabled(SiteGate& site) noexcept {
  // Relaxed is enough for both loads: every flag lives in a statically initialised array, so there
  // is no construction to synchronise with, and a group switch only needs to become visible soon.
  const std::atomic<bool>* flag = site.flag.load(std::memory_order_relaxed);
  if (NEMO_LENS_LIKELY(!flag->load(std::memory_order_relaxed))) return false;
  if (NEMO_LENS_UNLIKELY(flag == &g_unresolved_flag)) return resolve_site(site);
  return true;
}

/// Whether a LENS_SPAN site must start something: its group is enabled, or its open spans are
/// tracked. The same two loads and a branch as site_enabled().
inline bool span_site_enabled(SiteGate& site) noexcept {
  const std::atomic<bool>* flag = site.flag.load(std::memory_order_relaxed);  // as above
  if (NEMO_LENS_LIKELY(!flag->load(std::memory_order_relaxed))) return false;
  if (NEMO_LENS_UNLIKELY(flag == &g_unresolved_flag)) return resolve_span_site(site);
  return true;
}

}  // namespace nemo::lens::detail
