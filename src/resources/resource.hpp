// Resource detection: the attributes describing this process, applied in DESIGN order (service,
// rank, run, user, W&B, deployment, SLURM, Kubernetes, host, process, GPU, then
// OTEL_RESOURCE_ATTRIBUTES, then the caller's). Later sources override earlier ones. Internal.
#pragma once

#include <string>
#include <vector>

#include "nemo/lens/config.hpp"
#include "nemo/lens/exporter.hpp"

namespace nemo::lens::detail {

/// Detects the resource for `config` (run_id already filled in) on `rank` of `world_size`.
/// Throws ConfigError for a malformed OTEL_RESOURCE_ATTRIBUTES.
Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra);

/// The files detect_resource() looks at. Tests point them elsewhere.
struct ResourcePaths {
  /// Present inside a Kubernetes pod: NeMo Lens's second sign of Kubernetes, besides
  /// KUBERNETES_SERVICE_HOST.
  std::string kubernetes_secrets = "/var/run/secrets/kubernetes.io";
};

/// detect_resource() with the files at `paths`.
Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra, const ResourcePaths& paths);

}  // namespace nemo::lens::detail
