// The control variables (see settings.hpp).
#include "control/settings.hpp"

#include <unistd.h>

#include "env.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

TrackOpen parse_track_open(std::string_view variable, std::string_view value) {
  static constexpr TrackOpen kModes[] = {TrackOpen::kAll, TrackOpen::kEnabled, TrackOpen::kOff};
  return kModes[parse_choice(variable, value, {"all", "enabled", "off"})];
}

std::string_view track_open_name(TrackOpen mode) noexcept {
  switch (mode) {
    case TrackOpen::kAll:
      return "all";
    case TrackOpen::kEnabled:
      return "enabled";
    case TrackOpen::kOff:
      break;
  }
  return "off";
}

std::string default_control_dir(std::optional<std::string_view> xdg_runtime_dir, unsigned uid) {
  if (xdg_runtime_dir && !xdg_runtime_dir->empty()) {
    std::string dir(*xdg_runtime_dir);
    while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
    return dir + "/lens";
  }
  return "/tmp/lens-" + std::to_string(uid);
}

std::string default_control_dir() {
  return default_control_dir(env_trimmed("XDG_RUNTIME_DIR"), ::geteuid());
}

ControlSettings control_settings(const NemoLensConfig& config) {
  ControlSettings s;
  if (auto v = config.env("CONTROL")) {
    auto b = parse_bool(*v);
    if (!b) {
      throw ConfigError("Invalid boolean for " + *config.env_variable("CONTROL") + ": '" + *v +
                        "'. Expected one of 1/0, true/false, yes/no, on/off (any case).");
    }
    s.endpoint = *b;
  }
  s.dir = config.env("CONTROL_DIR").value_or(default_control_dir());
  if (auto v = config.env("TRACK_OPEN")) {
    s.track_open = parse_track_open(*config.env_variable("TRACK_OPEN"), *v);
  }
  if (auto v = config.env("HANG_TIMEOUT")) {
    const std::string lower = to_lower(*v);
    if (lower != "off") {
      auto d = parse_double(*v);
      if (!d || !(*d >= 0) || *d > 1e9) {
        throw ConfigError("Invalid value for " + *config.env_variable("HANG_TIMEOUT") + ": '" + *v +
                          "'. Expected a number of seconds >= 0 (0 or off: no watchdog).");
      }
      s.hang_timeout_s = *d;
    }
  }
  if (s.hang_timeout_s > 0 && s.track_open == TrackOpen::kOff) {
    throw ConfigError("Invalid combination: " + *config.env_variable("HANG_TIMEOUT") +
                      " needs open spans to be tracked, but " + *config.env_variable("TRACK_OPEN") +
                      " is off. Set it to enabled or all, or switch the watchdog off.");
  }
  return s;
}

}  // namespace nemo::lens::detail
