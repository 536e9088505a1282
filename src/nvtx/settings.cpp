// The NVTX variable (see settings.hpp).
#include "nvtx/settings.hpp"

#include "env.hpp"

namespace nemo::lens::detail {

NvtxMode parse_nvtx_mode(std::string_view variable, std::string_view value) {
  static constexpr NvtxMode kModes[] = {NvtxMode::kAuto, NvtxMode::kOn, NvtxMode::kOff};
  return kModes[parse_choice(variable, value, {"auto", "on", "off"})];
}

std::string_view nvtx_mode_name(NvtxMode mode) noexcept {
  switch (mode) {
    case NvtxMode::kOn:
      return "on";
    case NvtxMode::kOff:
      return "off";
    case NvtxMode::kAuto:
      break;
  }
  return "auto";
}

NvtxMode nvtx_mode(const NemoLensConfig& config) {
  if (auto v = config.env("NVTX")) return parse_nvtx_mode(*config.env_variable("NVTX"), *v);
  return NvtxMode::kAuto;
}

bool nvtx_tool_attached() noexcept {
  try {
    return env_trimmed("NVTX_INJECTION64_PATH").has_value();
  } catch (...) {
    return false;
  }
}

bool nvtx_emits(NvtxMode mode) noexcept {
  if (!nvtx_built()) return false;
  return mode == NvtxMode::kOn || (mode == NvtxMode::kAuto && nvtx_tool_attached());
}

bool nvtx_built() noexcept {
#if defined(NEMO_LENS_HAVE_NVTX)
  return true;
#else
  return false;
#endif
}

}  // namespace nemo::lens::detail
