// The metric reader of a set-up: a background thread that collects every meter's instruments and
// exports them through a MetricExporter (OTLP, console, file, or the program's own). Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>

#include "export/export_ledger.hpp"
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
  /// Asks for a collection and export now without waiting; the ticket is for wait_flushed().
  std::uint64_t request_flush() noexcept { return worker_.request_flush(); }
  /// Waits for the flush `ticket`, then for the exporter's outage buffer to drain (the built-in
  /// OTLP exporter); false when `deadline` passed first.
  bool wait_flushed(std::uint64_t ticket, std::chrono::steady_clock::time_point deadline) noexcept;
  /// Starts the last collection and export, which ends by export_cutoff(deadline): an export in
  /// flight is interrupted then (the built-in exporters; a custom one gets the cutoff as its
  /// deadline). Does not wait.
  void begin_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Waits until the thread stopped or `deadline`. When it did not stop in time (a custom exporter
  /// that ignores its deadline), the counts are closed, what the thread held counts as dropped,
  /// and the reader must never be destroyed (its thread still runs): returns false.
  bool finish_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// begin_shutdown() then finish_shutdown(). Idempotent.
  bool shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Collections whose export failed; data points collected for export, exported (taken by the
  /// receiver), waiting in the exporter's outage buffer, and dropped (export failed, the buffer
  /// could not take them or still held them at shutdown's deadline, or shutdown came first).
  /// Final once shutdown() returned: collected = exported + dropped.
  std::uint64_t failed_exports() const noexcept { return ledger_.failed_requests(); }
  std::uint64_t collected_points() const noexcept { return ledger_.taken(); }
  std::uint64_t exported_points() const noexcept;
  std::uint64_t buffered_points() const noexcept;
  std::uint64_t dropped_points() const noexcept;
  /// True in a forked child, where the thread does not exist: the object must be leaked, not
  /// shut down or destroyed.
  bool forked() const noexcept;

 private:
  void collect_and_export(std::chrono::steady_clock::time_point deadline) noexcept;

  MetricSettings settings_;
  std::shared_ptr<MetricExporter> exporter_;
  Resource resource_;
  std::int64_t start_unix_nano_;
  int owner_pid_;
  ExportLedger ledger_;
  PeriodicWorker worker_;  // last: its thread uses the members above
};

}  // namespace nemo::lens::detail
