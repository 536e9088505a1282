// The verbs of the lens command, one folder each, as main() lists them. Each folder defines its
// verb's Command; common/ (what the verbs share) knows none of them.
#pragma once

#include "common/cli.hpp"

namespace nemo::lens::cli {

/// The "groups" verb.
const Command& groups_command();
/// The "config" verb.
const Command& config_command();
/// The "collect" verb.
const Command& collect_command();
/// The "report" verb.
const Command& report_command();
/// The "convert" verb.
const Command& convert_command();
/// The "ctl" verb.
const Command& ctl_command();

}  // namespace nemo::lens::cli
