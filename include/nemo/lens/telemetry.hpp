// Start-up: setup_telemetry() turns a configuration into the process's telemetry state — whether
// this rank exports, which span groups are on — and returns a handle to flush and shut it down.
//
//   auto cfg = nemo::lens::NemoLensConfig::from_env();
//   auto telemetry = nemo::lens::setup_telemetry(cfg, rank, world_size);
//   if (telemetry.is_exporting()) std::printf("rank %d exports\n", rank);
//   /* ... the job ... */
//   nemo::lens::capture("loss spike");   // the flight recorder's spans, if it records
//   telemetry.shutdown();
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nemo/lens/config.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/exporter.hpp"
#include "nemo/lens/groups.hpp"
#include "nemo/lens/strategies.hpp"
#include "nemo/lens/telemetry_data.hpp"

namespace nemo::lens {

/// Optional inputs to setup_telemetry().
struct SetupOptions {
  /// Extra resource attributes, applied last (they override detected ones).
  std::vector<KeyValue> resource_attributes;
  /// An exporter used instead of the one config.exporter names. In a forked child it keeps being
  /// used as is, so it must tolerate fork (the built-in exporters are re-created instead).
  std::shared_ptr<SpanExporter> exporter;
  /// A metric exporter used instead of the one config.exporter names (e.g. InMemoryMetricExporter).
  std::shared_ptr<MetricExporter> metric_exporter;
  /// A log exporter used instead of the one config.exporter names (e.g. InMemoryLogExporter).
  std::shared_ptr<LogExporter> log_exporter;
  /// Attribute keys whose string values are exported as "[REDACTED]", replacing the default set
  /// (prompt, input_text, output_text, text, password, token, secret, key) and
  /// `<PREFIX>_REDACTED_KEYS`.
  std::optional<std::vector<std::string>> redacted_keys;
  /// A strategy used instead of the one config.export_strategy names.
  ExportStrategy strategy;
  /// Permits a second enabled set-up while one is active (the active one is shut down first).
  /// Meant for tests.
  bool allow_reinit = false;
};

/// Counters of one set-up's span pipeline, since it started.
struct TelemetryStats {
  /// Spans started (recording or sampled out).
  std::uint64_t spans_started = 0;
  /// Spans ended.
  std::uint64_t spans_ended = 0;
  /// Spans handed to the exporter successfully (including any the receiver then rejected). For
  /// the OTLP exporter: taken by the receiver; spans waiting in its outage buffer are not counted
  /// here until they are.
  std::uint64_t spans_exported = 0;
  /// Spans waiting in the OTLP exporter's outage buffer (in memory or spooled to disk) for a
  /// receiver that is away, or being sent from it. 0 once shutdown() returned: what was still
  /// waiting then is counted in spans_dropped_export_failed.
  std::uint64_t spans_buffered = 0;
  /// Of spans_exported, those the receiver reported rejecting (OTLP partial success).
  std::uint64_t spans_rejected = 0;
  /// Spans dropped because the ending thread's queue was full (the caller never waits).
  std::uint64_t spans_dropped_queue_full = 0;
  /// Spans lost because the exporter failed: the receiver refused them for good, the outage
  /// buffer was full, or they still waited in it at shutdown's deadline.
  std::uint64_t spans_dropped_export_failed = 0;
  /// Spans dropped because they ended while the pipeline was shutting down, or did not fit the
  /// queue as truncated copies.
  std::uint64_t spans_dropped_shutdown = 0;
  /// Open spans exported as truncated at shutdown.
  std::uint64_t spans_truncated = 0;
  /// Spans given an end time before their start (Span::end(time), OpenTelemetry's end_time):
  /// exported ending at their start.
  std::uint64_t spans_end_clamped = 0;
  /// export_spans() calls made.
  std::uint64_t export_requests = 0;
  /// Wake-up calls for the exporter thread made by threads that ended spans, at a full batch: a
  /// system call on that thread each when the exporter thread sleeps. None while spans come
  /// faster than a batch per wake-up (the exporter thread then naps between drains), unless a
  /// thread's queue is half full at a batch's end.
  std::uint64_t exporter_wakeups = 0;
  /// Metric data points collected for export. After shutdown() returned, collected = exported +
  /// dropped.
  std::uint64_t metric_points_collected = 0;
  /// Metric data points exported (for OTLP: taken by the receiver).
  std::uint64_t metric_points_exported = 0;
  /// Metric data points waiting in the OTLP exporter's outage buffer for a receiver that is away,
  /// or being sent from it; 0 once shutdown() returned (what still waited is dropped).
  std::uint64_t metric_points_buffered = 0;
  /// Metric data points lost: their export failed, the outage buffer could not take them or
  /// still held them at shutdown's deadline, or shutdown's time ran out first.
  std::uint64_t metric_points_dropped = 0;
  /// Collections whose export failed.
  std::uint64_t metric_exports_failed = 0;
  /// Measurements dropped: negative counter increments, NaN, out of memory (process-wide).
  std::uint64_t metric_measurements_dropped = 0;
  /// Log records emitted while logs were recorded. After shutdown() returned, emitted = exported +
  /// dropped.
  std::uint64_t log_records_emitted = 0;
  /// Log records exported (for OTLP: taken by the receiver).
  std::uint64_t log_records_exported = 0;
  /// Log records waiting in the OTLP exporter's outage buffer, or being sent from it; 0 once
  /// shutdown() returned.
  std::uint64_t log_records_buffered = 0;
  /// Log records lost: the queue was full, their export failed, the outage buffer could not take
  /// them or still held them at shutdown's deadline, or shutdown's time ran out first.
  std::uint64_t log_records_dropped = 0;
  /// Spans exported with their GPU time (<PREFIX>_GPU_TIME: gpu.busy, gpu.kernels, ...).
  std::uint64_t gpu_spans_timed = 0;
  /// Of gpu_spans_timed, those exported before all their GPU activity was known: they waited
  /// <PREFIX>_GPU_TIME_WAIT_MS, or a flush or shutdown's deadline came first.
  std::uint64_t gpu_spans_incomplete = 0;
  /// GPU activity records that came after the span they belong to was exported (not counted in
  /// its gpu.busy).
  std::uint64_t gpu_activities_late = 0;
  /// GPU activity records of launches no span accounts for: made outside every GPU-timed span (no
  /// span of a <PREFIX>_GPU_TIME group open on any thread), or counted in gpu_launches_dropped.
  std::uint64_t gpu_activities_unattributed = 0;
  /// GPU launches not tracked: more were queued for the exporter thread, or waited for their
  /// activity records, than lens keeps (docs/gpu.md, Bounds). The spans they belonged to leave
  /// without their GPU time.
  std::uint64_t gpu_launches_dropped = 0;
  /// GPU activity records lost: more were queued for the exporter thread than lens keeps, or
  /// CUPTI dropped them (its buffers were full). Their spans leave without them (and wait for
  /// them first, then counted incomplete).
  std::uint64_t gpu_activities_dropped = 0;
  /// GPU activity records without a usable time (a zero start, or an end before the start, which
  /// CUPTI gives for work it could not time): they count as come for their span, which gets no
  /// time from them.
  std::uint64_t gpu_activities_invalid = 0;
  /// Kernel spans exported (<PREFIX>_GPU_KERNEL_SPANS): a child span per kernel, copy and memset
  /// of a span of those groups. Counted in spans_exported too, not in spans_started.
  std::uint64_t gpu_kernel_spans = 0;
  /// Kernel spans not exported: more than 1,024 under one span, or no memory for them.
  std::uint64_t gpu_kernel_spans_dropped = 0;
  /// Ended GPU-timed spans held now, waiting for their activity records (at most
  /// <PREFIX>_GPU_TIME_WAIT_MS each): exported once those came. A gauge, not a running count.
  std::uint64_t gpu_spans_waiting = 0;
  /// The flight recorder (<PREFIX>_RECORD_GROUPS, docs/flight-recorder.md): spans of recorded
  /// groups kept in its per-thread rings instead of exported.
  std::uint64_t spans_recorded = 0;
  /// Of spans_recorded, those overwritten by newer ones before a capture took them.
  std::uint64_t spans_record_overwritten = 0;
  /// Recorded spans that captures handed to export (spans_exported counts them once exported).
  std::uint64_t spans_captured = 0;
  /// Captures made (slow_step, hang, error, manual): each marks its spans with one
  /// lens.capture.id.
  std::uint64_t record_captures = 0;
  /// Recorded spans in the rings now (a gauge, not a running count).
  std::uint64_t record_spans_held = 0;
  /// Memory the rings and the spans they hold take now, in bytes (a gauge).
  std::uint64_t record_memory_bytes = 0;
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

  /// Exports everything recorded so far — queued spans, a collection of every metric, queued log
  /// records — waiting at most `timeout` for all three together (each signal flushes on its own
  /// thread, at the same time). Returns true when all were done in time (always true when not
  /// exporting). An export still in flight at the timeout goes on under its own export timeout.
  bool force_flush(std::chrono::milliseconds timeout = std::chrono::seconds(30)) noexcept;

  /// Switches every span group off, ends still-open spans as truncated (attribute and event
  /// nemo.span.truncated, innermost first), then shuts the three signals down at the same time,
  /// each on its own thread and each with the whole `timeout`: the spans queued are exported, a
  /// last metric collection is exported, the queued log records are exported. Exports still in
  /// flight shortly before the timeout (a tenth of it, at most 100 ms) are interrupted and what is
  /// left is dropped, so that a hung receiver of one signal takes no time from the others and
  /// shutdown returns within `timeout`. When it returns, no lens thread of this set-up counts,
  /// prints or sends any more: stats() is final (ended = exported + every dropped count, per
  /// signal). Prints a one-line summary to stderr, last, when something was dropped. Idempotent:
  /// later calls return true at once. After it, a new setup_telemetry() is allowed. Returns false
  /// when an exporter thread did not finish in time (a custom exporter that ignores its deadline);
  /// what it held is then counted as dropped at shutdown.
  bool shutdown(std::chrono::milliseconds timeout = std::chrono::seconds(30)) noexcept;

  /// Whether shutdown() has completed (false for a default-constructed handle).
  bool is_shut_down() const noexcept;

  /// The pipeline's counters (all zero when not exporting).
  TelemetryStats stats() const noexcept;

  /// The resource every export carries (empty when not exporting).
  const Resource& resource() const noexcept;

 private:
  friend NEMO_LENS_API TelemetryHandle setup_telemetry(const NemoLensConfig&, int, int,
                                                       SetupOptions);
  explicit TelemetryHandle(std::shared_ptr<detail::TelemetryState> state) noexcept;
  std::shared_ptr<detail::TelemetryState> state_;
};

/// Sets up telemetry for this process. Disabled config: a no-op handle, every group off. Enabled
/// and this rank exports (per the strategy): the span pipeline starts and the resolved span groups
/// are enabled. Enabled but not exporting: every group off, so gated sites cost only the gate.
/// Reads the OTEL_BSP_*, OTEL_SPAN_*_LIMIT, OTEL_ATTRIBUTE_*, OTEL_TRACES_SAMPLER[_ARG] and
/// OTEL_RESOURCE_ATTRIBUTES variables. Throws SpanGroupError for a bad span_groups spec and
/// ConfigError for a bad field or variable, an unknown strategy or exporter, an invalid
/// rank/world size, or a second enabled set-up while one is active (unless
/// options.allow_reinit); on a throw nothing changes.
NEMO_LENS_API TelemetryHandle setup_telemetry(const NemoLensConfig& config, int rank = 0,
                                              int world_size = 1, SetupOptions options = {});

/// Exports what the flight recorder holds now (<PREFIX>_RECORD_GROUPS, docs/flight-recorder.md):
/// every recorded span in every thread's ring, and the recorded spans open now as truncated
/// copies, each marked lens.capture.reason = `reason` and one new lens.capture.id. They join the
/// trace as if they had been exported (their ids and parents are theirs). Returns how many spans
/// it captured; 0 when the recorder is off (tracing not set up, not on this rank, or no record
/// groups). Thread-safe; never throws; takes each thread's lock briefly, and never waits for the
/// export, which the exporter thread does.
NEMO_LENS_API std::uint64_t capture(std::string_view reason = "manual") noexcept;

}  // namespace nemo::lens
