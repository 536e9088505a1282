// The control variables: <PREFIX>_CONTROL, _CONTROL_DIR, _TRACK_OPEN and _HANG_TIMEOUT
// (docs/control.md). Shared by the library and the lens tool (`lens config`, `lens ctl`). Internal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "nemo/lens/config.hpp"

namespace nemo::lens::detail {

/// Which open spans the registry keeps (<PREFIX>_TRACK_OPEN).
enum class TrackOpen : std::uint8_t {
  kOff,      // none
  kEnabled,  // spans of the enabled groups (on a rank that does not export: of the groups it would)
  kAll,      // spans of every group, enabled or not
};

/// Parses "all", "enabled" or "off" (case-insensitive); throws ConfigError naming `variable`.
TrackOpen parse_track_open(std::string_view variable, std::string_view value);
/// "all", "enabled" or "off".
std::string_view track_open_name(TrackOpen mode) noexcept;

/// The control variables of a configuration.
struct ControlSettings {
  bool endpoint = true;
  std::string dir;  // where the socket goes
  TrackOpen track_open = TrackOpen::kEnabled;
  double hang_timeout_s = 0;  // 0: no watchdog
};

/// Reads the control variables of `config`. Throws ConfigError naming the variable, its value and
/// what is valid.
ControlSettings control_settings(const NemoLensConfig& config);

/// `<xdg_runtime_dir>/lens` when it is given and not empty, else `/tmp/lens-<uid>`.
std::string default_control_dir(std::optional<std::string_view> xdg_runtime_dir, unsigned uid);
/// default_control_dir() for this process's XDG_RUNTIME_DIR and effective uid.
std::string default_control_dir();

}  // namespace nemo::lens::detail
