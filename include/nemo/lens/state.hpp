// Which span groups are enabled right now. setup_telemetry() sets them from the resolved spec;
// a program (or `lens ctl`) may change them at any time, and every site sees the change.
//
//   if (nemo::lens::is_span_group_enabled("layer")) { /* compute an expensive attribute */ }
//   nemo::lens::set_enabled_span_groups({"job", "step"});
//   for (const auto& g : nemo::lens::enabled_span_groups()) std::puts(g.c_str());
#pragma once

#include <string_view>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/groups.hpp"

namespace nemo::lens {

/// Whether `group` is enabled. Exact match against the enabled names; a name no catalog knows is
/// off unless it was enabled explicitly. Before set-up every group is off. Takes no lock and never
/// waits: safe from any thread. Cost: one hash of the name and
/// a table probe (see bench/ for the figure). Instrumentation sites should use LENS_SPAN or
/// LENS_GROUP_ENABLED, which cache the lookup.
NEMO_LENS_API bool is_span_group_enabled(std::string_view group) noexcept;

/// Replaces the enabled set. Lock-protected against other writers; readers never wait and see
/// either the old or the new state of each group, never a group that is in both sets switching
/// off in between. Typically called once by setup_telemetry(). Names are used as given. Each
/// distinct set ever published is kept for the life of the process (readers may still hold it),
/// so switching back and forth between a few sets costs no memory after the first switch.
NEMO_LENS_API void set_enabled_span_groups(GroupSet groups);

/// The enabled set as last published by set_enabled_span_groups(): always one whole published set.
/// Lock-free; allocates the returned copy.
NEMO_LENS_API GroupSet enabled_span_groups();

}  // namespace nemo::lens
