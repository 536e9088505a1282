// The log processor of a set-up: queues log records and exports them in batches from a background
// thread through a LogExporter (OTLP, console, file, or the program's own). Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "export/export_ledger.hpp"
#include "export/periodic_worker.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/telemetry_data.hpp"
#include "tracing/mpmc_queue.hpp"
#include "tracing/record_exporter.hpp"

namespace nemo::lens::detail {

/// OTEL_BLRP_MAX_QUEUE_SIZE (2048), OTEL_BLRP_SCHEDULE_DELAY (1000 ms),
/// OTEL_BLRP_MAX_EXPORT_BATCH_SIZE (512), OTEL_BLRP_EXPORT_TIMEOUT (30000 ms).
struct LogSettings {
  std::size_t max_queue_size = 2048;
  std::chrono::milliseconds schedule_delay{1'000};
  std::size_t max_export_batch_size = 512;
  std::chrono::milliseconds export_timeout{30'000};
};
LogSettings log_settings_from_env();

/// The log exporter config.exporter names: "otlp" (the LOGS_ variants of the OTLP variables),
/// "console" or "file" (OTLP JSON Lines in <PREFIX>_LOGS_EXPORT_PATH, default
/// "lens-logs-rank{rank}.jsonl"). Throws ConfigError.
std::shared_ptr<LogExporter> make_log_exporter(const NemoLensConfig& config, int rank);

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
  /// Exports everything queued before the call, and waits for the exporter's outage buffer to
  /// drain (the built-in OTLP exporter); false when `deadline` passed first.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Asks for the queue's export without waiting; the ticket is for wait_flushed().
  std::uint64_t request_flush() noexcept { return worker_.request_flush(); }
  /// Waits for the flush `ticket`, then for the outage buffer; false when `deadline` passed first.
  bool wait_flushed(std::uint64_t ticket, std::chrono::steady_clock::time_point deadline) noexcept;
  /// Starts exporting what is queued for the last time, by export_cutoff(deadline) (an export in
  /// flight is interrupted then), without waiting.
  void begin_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Waits until the thread stopped or `deadline`; when it did not stop in time, closes the
  /// counts (what the thread held and what is still queued count as dropped) and returns false.
  bool finish_shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// begin_shutdown() then finish_shutdown(). Idempotent.
  bool shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Records handed to enqueue(), exported (taken by the receiver), waiting in the exporter's
  /// outage buffer, and dropped (queue full, export failed, the buffer could not take them or
  /// still held them at shutdown's deadline, or shutdown came first). Final once shutdown()
  /// returned: emitted = exported + dropped.
  std::uint64_t emitted() const noexcept { return emitted_.load(std::memory_order_relaxed); }
  std::uint64_t dropped() const noexcept;
  std::uint64_t buffered() const noexcept;
  std::uint64_t exported() const noexcept;
  /// True in a forked child (see MetricReader::forked).
  bool forked() const noexcept;

 private:
  void drain(std::chrono::steady_clock::time_point deadline) noexcept;
  // The exporter (null once shut down) and what its outage buffer holds or dropped.
  std::shared_ptr<LogExporter> exporter() const noexcept;
  DeferredCounts deferred() const noexcept;

  LogSettings settings_;
  LogLimits limits_;
  int owner_pid_;
  mutable std::mutex exporter_mu_;  // exporter_'s end at shutdown, against readers of its counts
  std::shared_ptr<LogExporter> exporter_;
  DeferredCounts final_deferred_;  // the exporter's counts when it ended
  Resource resource_;
  MpmcQueue<LogRecordData*> queue_;
  std::atomic<std::uint64_t> emitted_{0}, dropped_{0};  // dropped_: queue full
  ExportLedger ledger_;
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
