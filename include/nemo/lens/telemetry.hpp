// Start-up: setup_telemetry() turns a configuration into the process's telemetry state — whether
// this rank exports, which span groups are on — and returns a handle to flush and shut it down.
//
//   auto cfg = nemo::lens::NemoLensConfig::from_env();
//   auto telemetry = nemo::lens::setup_telemetry(cfg, rank, world_size);
//   if (telemetry.is_exporting()) std::printf("rank %d exports\n", rank);
//   /* ... the job ... */
//   telemetry.shutdown();
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "nemo/lens/config.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/groups.hpp"
#include "nemo/lens/strategies.hpp"

namespace nemo::lens {

/// Optional inputs to setup_telemetry().
struct SetupOptions {
  /// Extra resource attributes, applied last (they override detected ones).
  std::vector<std::pair<std::string, std::string>> resource_attributes;
  /// A strategy used instead of the one config.export_strategy names.
  ExportStrategy strategy;
  /// Permits a second enabled set-up while one is active (the active one is shut down first).
  /// Meant for tests.
  bool allow_reinit = false;
};

namespace detail {
struct TelemetryState;
}

/// The result of setup_telemetry(). Cheap to copy; every copy refers to the same state. All
/// methods are thread-safe and never throw.
class NEMO_LENS_API TelemetryHandle {
 public:
  /// A handle for "telemetry not set up": not enabled, not exporting.
  TelemetryHandle() = default;

  /// Whether the configuration enabled telemetry.
  bool enabled() const noexcept;

  /// Whether this rank exports: enabled and chosen by the export strategy.
  bool is_exporting() const noexcept;

  /// The configuration set-up used, with run_id filled in.
  const NemoLensConfig& config() const noexcept;

  /// This process's rank and the job's world size, as passed to setup_telemetry().
  int rank() const noexcept;
  /// The job's world size, as passed to setup_telemetry().
  int world_size() const noexcept;

  /// Exports everything recorded so far, waiting at most `timeout`. Returns true when done in
  /// time (always true when not exporting).
  bool force_flush(std::chrono::milliseconds timeout = std::chrono::seconds(30)) noexcept;

  /// Flushes, stops the pipeline and switches every span group off. Idempotent: later calls
  /// return true at once. After it, a new setup_telemetry() is allowed.
  bool shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(30)) noexcept;

  /// Whether shutdown() has completed (false for a default-constructed handle).
  bool is_shut_down() const noexcept;

 private:
  friend NEMO_LENS_API TelemetryHandle setup_telemetry(const NemoLensConfig&, int, int,
                                                       SetupOptions);
  explicit TelemetryHandle(std::shared_ptr<detail::TelemetryState> state) noexcept;
  std::shared_ptr<detail::TelemetryState> state_;
};

/// Sets up telemetry for this process. Disabled config: a no-op handle, every group off. Enabled
/// and this rank exports (per the strategy): the resolved span groups are enabled. Enabled but not
/// exporting: every group off, so gated sites cost only the gate. Throws SpanGroupError for a bad
/// span_groups spec and ConfigError for a bad field, an unknown strategy, an invalid rank/world
/// size, or a second enabled set-up while one is active (unless options.allow_reinit); on a
/// throw nothing changes.
NEMO_LENS_API TelemetryHandle setup_telemetry(const NemoLensConfig& config, int rank = 0,
                                              int world_size = 1, SetupOptions options = {});

}  // namespace nemo::lens
