// The NVTX variable <PREFIX>_NVTX and what it gives in this process (docs/nvtx.md). Shared by the
// library and the lens tool (`lens config`). Internal.
#pragma once

#include <cstdint>
#include <string_view>

#include "nemo/lens/config.hpp"

namespace nemo::lens::detail {

/// <PREFIX>_NVTX.
enum class NvtxMode : std::uint8_t {
  kAuto,  // emit when an NVTX tool is attached (NVTX_INJECTION64_PATH is set)
  kOn,    // always emit (NVTX's no-op stubs when no tool is attached)
  kOff,   // never emit
};

/// Parses "auto", "on" or "off" (case-insensitive, trimmed); throws ConfigError naming `variable`.
NvtxMode parse_nvtx_mode(std::string_view variable, std::string_view value);
/// "auto", "on" or "off".
std::string_view nvtx_mode_name(NvtxMode mode) noexcept;
/// Reads <PREFIX>_NVTX of `config` (with its fallback prefix); auto when unset. Throws ConfigError.
NvtxMode nvtx_mode(const NemoLensConfig& config);

/// Whether lens was built with NVTX support (NEMO_LENS_WITH_NVTX).
bool nvtx_built() noexcept;
/// Whether an NVTX tool is attached to this process: NVTX_INJECTION64_PATH is set and not blank.
bool nvtx_tool_attached() noexcept;
/// Whether `mode` emits ranges in this process: built with NVTX, and on, or auto with a tool.
bool nvtx_emits(NvtxMode mode) noexcept;

}  // namespace nemo::lens::detail
