// The GPU-time variables: <PREFIX>_GPU_TIME, _GPU_TIME_WAIT_MS and _GPU_KERNEL_SPANS (docs/gpu.md).
// Shared by the library and the lens tool (`lens config`). Internal.
#pragma once

#include <chrono>
#include <optional>
#include <string>

#include "nemo/lens/config.hpp"
#include "nemo/lens/groups.hpp"

namespace nemo::lens::detail {

/// What <PREFIX>_GPU_TIME and <PREFIX>_GPU_TIME_WAIT_MS say.
struct GpuSettings {
  /// The spec as given (trimmed); empty: GPU time is off.
  std::string spec;
  /// The groups whose recorded spans carry their GPU time; empty: off.
  GroupSet groups;
  /// How long an ended span of those groups waits for its GPU activity before it is exported
  /// anyway; unset: twice the export interval (OTEL_BSP_SCHEDULE_DELAY).
  std::optional<std::chrono::milliseconds> wait;
  /// <PREFIX>_GPU_KERNEL_SPANS as given (trimmed); empty: off.
  std::string kernel_spans_spec;
  /// Of `groups`, those whose spans also export each kernel, copy and memset attributed to them as
  /// a child span (the groups the spec names that are GPU-timed).
  GroupSet kernel_spans;

  bool on() const noexcept { return !groups.empty(); }
};

/// Reads the variables of `config` (with its fallback prefix). A spec the group catalog does not
/// know (GPU_TIME or GPU_KERNEL_SPANS), or a wait that is not a whole number of milliseconds in
/// [0, 86400000], throws
/// ConfigError naming the variable and the value.
GpuSettings gpu_settings(const NemoLensConfig& config);

/// The wait in force: `settings.wait`, or twice `export_interval`.
std::chrono::milliseconds gpu_wait(const GpuSettings& settings,
                                   std::chrono::milliseconds export_interval) noexcept;

}  // namespace nemo::lens::detail
