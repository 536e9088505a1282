// The metric reader of a set-up: a background thread that collects every meter's instruments and
// exports them through a MetricExporter (OTLP, console, file, or the program's own). Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "export/periodic_worker.hpp"
#include "metrics/instruments.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/telemetry_data.hpp"

namespace nemo::lens::detail {

/// OTEL_METRIC_EXPORT_INTERVAL (default 10000 ms, NeMo Lens' value), OTEL_METRIC_EXPORT_TIMEOUT
/// (30000 ms) and the temporality preference. Throws ConfigError naming the variable.
struct MetricSettings {
  std::chrono::milliseconds interval{10'000};
  std::chrono::milliseconds timeout{30'000};
  TemporalityPreference temporality;
};
MetricSettings metric_settings_from_env();

/// The metric exporter config.exporter names: "otlp" (the METRICS_ variants of the OTLP
/// variables), "console" (one OTLP/JSON line per export on stdout) or "file" (OTLP JSON Lines in
/// <PREFIX>_METRICS_EXPORT_PATH, default "lens-metrics-rank{rank}.jsonl"). Throws ConfigError.
std::shared_ptr<MetricExporter> make_metric_exporter(const NemoLensConfig& config, int rank);

/// Collects every meter's instruments each interval (and at flush and shutdown) and exports them.
class MetricReader {
 public:
  MetricReader(MetricSettings settings, std::shared_ptr<MetricExporter> exporter,
               Resource resource);
  ~MetricReader();
  /// Collects and exports now; false when `deadline` passed first.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// A last collection and export, then the thread stops. Idempotent.
  bool shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Collections whose export failed, and data points exported.
  std::uint64_t failed_exports() const noexcept { return failed_.load(std::memory_order_relaxed); }
  std::uint64_t exported_points() const noexcept { return points_.load(std::memory_order_relaxed); }
  /// True in a forked child, where the thread does not exist: the object must be leaked, not
  /// shut down or destroyed.
  bool forked() const noexcept;

 private:
  void collect_and_export() noexcept;

  MetricSettings settings_;
  std::shared_ptr<MetricExporter> exporter_;
  Resource resource_;
  std::int64_t start_unix_nano_;
  int owner_pid_;
  std::atomic<std::uint64_t> failed_{0}, points_{0};
  PeriodicWorker worker_;  // last: its thread uses the members above
};

}  // namespace nemo::lens::detail
