// The NVTX variable (see settings.hpp).
#include "nvtx/settings.hpp"

#include <string>

#include "env.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

NvtxMode parse_nvtx_mode(std::string_view variable, std::string_view value) {
  const std::string v = to_lower(trim(value));
  if (v == "auto") return NvtxMode::kAuto;
  if (v == "on") return NvtxMode::kOn;
  if (v == "off") return NvtxMode::kOff;
  throw ConfigError("Invalid value for " + std::string(variable) + ": '" + std::string(value) +
                    "'. Expected one of auto, on, off.");
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
