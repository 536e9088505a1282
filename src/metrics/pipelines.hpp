// The metric reader and the log processor of a set-up: each a background thread that exports
// through a MetricExporter or LogExporter (OTLP, console, file, or the program's own). Internal.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "metrics/instruments.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/telemetry_data.hpp"
#include "tracing/mpmc_queue.hpp"

namespace nemo::lens::detail {

/// OTEL_METRIC_EXPORT_INTERVAL (default 10000 ms, NeMo Lens' value), OTEL_METRIC_EXPORT_TIMEOUT
/// (30000 ms) and the temporality preference. Throws ConfigError naming the variable.
struct MetricSettings {
  std::chrono::milliseconds interval{10'000};
  std::chrono::milliseconds timeout{30'000};
  TemporalityPreference temporality;
};
MetricSettings metric_settings_from_env();

/// OTEL_BLRP_MAX_QUEUE_SIZE (2048), OTEL_BLRP_SCHEDULE_DELAY (1000 ms),
/// OTEL_BLRP_MAX_EXPORT_BATCH_SIZE (512), OTEL_BLRP_EXPORT_TIMEOUT (30000 ms).
struct LogSettings {
  std::size_t max_queue_size = 2048;
  std::chrono::milliseconds schedule_delay{1'000};
  std::size_t max_export_batch_size = 512;
  std::chrono::milliseconds export_timeout{30'000};
};
LogSettings log_settings_from_env();

/// The exporters config.exporter names, for metrics and logs: "otlp" (the METRICS_/LOGS_
/// variants of the OTLP variables), "console" (one OTLP/JSON line per export on stdout) or "file"
/// (OTLP JSON Lines in <PREFIX>_METRICS_EXPORT_PATH, default "lens-metrics-rank{rank}.jsonl", and
/// <PREFIX>_LOGS_EXPORT_PATH, default "lens-logs-rank{rank}.jsonl"). Throw ConfigError.
std::shared_ptr<MetricExporter> make_metric_exporter(const NemoLensConfig& config, int rank);
std::shared_ptr<LogExporter> make_log_exporter(const NemoLensConfig& config, int rank);

/// The thread of the metric reader and of the log processor: runs `round` every `period`, when
/// woken, at each flush (which waits for a round started after it) and once more at stop, followed
/// by `last`. The owner must stop it before its own members go.
class PeriodicWorker {
 public:
  PeriodicWorker(std::chrono::milliseconds period, std::function<void()> round,
                 std::function<void()> last);
  ~PeriodicWorker();
  /// Runs a round now; false when `deadline` passed before it ended.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// A last round, `last`, then the thread ends. Idempotent; false when `deadline` passed first
  /// (the thread is then left to finish).
  bool stop(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for a round soon, without ever waiting (a busy thread runs another round anyway).
  void wake() noexcept;

 private:
  void run() noexcept;

  const std::chrono::milliseconds period_;
  const std::function<void()> round_, last_;
  std::mutex mu_;  // guards the fields below
  std::condition_variable cv_;
  std::uint64_t requested_ = 0, done_ = 0;  // flush tickets
  bool stop_ = false, stopped_ = false, wake_ = false;
  std::thread thread_;
};

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

/// Attribute limits and redaction of log records (those of spans: OTEL_ATTRIBUTE_COUNT_LIMIT,
/// OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT, the redacted keys).
struct LogLimits {
  std::uint32_t attribute_count = 128;
  std::size_t attribute_value_length = SIZE_MAX;
  std::vector<std::string> redacted_keys;
};

/// Queues log records (never blocking the caller: a full queue drops and counts) and exports them
/// in batches from its thread. Never destroyed once published in g_log_processor: a thread may
/// still be logging into it.
class LogProcessor {
 public:
  LogProcessor(LogSettings settings, LogLimits limits, std::shared_ptr<LogExporter> exporter,
               Resource resource);
  ~LogProcessor();
  const LogLimits& limits() const noexcept { return limits_; }
  /// Whether `key` is a redacted attribute key.
  bool redacted(std::string_view key) const noexcept;
  /// Takes ownership of `record`; false (record freed, counted) when the queue is full.
  bool enqueue(LogRecordData* record) noexcept;
  /// Exports everything queued before the call; false when `deadline` passed first.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Exports what is queued, then stops the thread. Idempotent.
  bool shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  std::uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  std::uint64_t exported() const noexcept { return exported_.load(std::memory_order_relaxed); }
  /// True in a forked child (see MetricReader::forked).
  bool forked() const noexcept;

 private:
  void drain(std::chrono::steady_clock::time_point deadline) noexcept;

  LogSettings settings_;
  LogLimits limits_;
  int owner_pid_;
  std::shared_ptr<LogExporter> exporter_;
  Resource resource_;
  MpmcQueue<LogRecordData*> queue_;
  std::atomic<std::uint64_t> dropped_{0}, exported_{0};
  PeriodicWorker worker_;  // last: its thread uses the members above
};

/// emit_log() with the ids of `context` (none when it is invalid) rather than the current span's:
/// for records about another thread's span (the hang watchdog's).
void emit_log_for(Severity severity, std::string_view message,
                  std::initializer_list<Attribute> attributes, std::string_view scope,
                  const SpanContext& context) noexcept;

/// The log processor records go to (null when logs are off or this rank does not export them).
extern std::atomic<LogProcessor*> g_log_processor;

}  // namespace nemo::lens::detail
