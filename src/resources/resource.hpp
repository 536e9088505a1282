// Resource detection: the attributes describing this process, applied in DESIGN order (service,
// rank, run, user, W&B, deployment, SLURM, Kubernetes, host, process, GPU, then
// OTEL_RESOURCE_ATTRIBUTES, then the caller's). Later sources override earlier ones. Internal.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "nemo/lens/config.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/exporter.hpp"

namespace nemo::lens::detail {

/// Detects the resource for `config` (run_id already filled in) on `rank` of `world_size`.
/// Throws ConfigError for a malformed OTEL_RESOURCE_ATTRIBUTES. Exported for the Python package
/// (nemo_lens_cpp.resources reports the same SLURM, Kubernetes and host attributes).
NEMO_LENS_API Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra);

/// The files and programs detect_resource() looks at. Tests point them elsewhere.
struct ResourcePaths {
  /// Present inside a Kubernetes pod: NeMo Lens's second sign of Kubernetes, besides
  /// KUBERNETES_SERVICE_HOST.
  std::string kubernetes_secrets = "/var/run/secrets/kubernetes.io";
  /// The program asked for host.gpu.count when CUDA_VISIBLE_DEVICES is unset, as NeMo Lens does:
  /// a name without '/' is looked up on PATH, a path is run as it is. Empty: not run.
  std::string nvidia_smi = "nvidia-smi";
};

/// How long detect_resource() waits for nvidia-smi (started, output read, exited) before it kills
/// it and leaves host.gpu.count out.
inline constexpr int kNvidiaSmiTimeoutMs = 2000;

/// The GPU count in nvidia-smi's answer to `--query-gpu=count --format=csv,noheader`: its
/// non-blank lines (one per GPU), each of which must be a decimal integer. Empty optional for no
/// line or a line that is not an integer. Exposed for tests.
std::optional<std::int64_t> parse_nvidia_smi_gpu_count(std::string_view output);

/// Runs `program` (looked up on PATH when it has no '/') with NeMo Lens's GPU query and returns
/// the count parse_nvidia_smi_gpu_count() reads in its output. Empty optional when the program
/// cannot be started, exits other than with status 0, does not finish within
/// kNvidiaSmiTimeoutMs, writes more than 64 KiB or writes something else. The child is always
/// reaped; on a timeout its process group is killed first. Exposed for tests.
std::optional<std::int64_t> nvidia_smi_gpu_count(const std::string& program);

/// detect_resource() with the files at `paths`.
Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra, const ResourcePaths& paths);

}  // namespace nemo::lens::detail
