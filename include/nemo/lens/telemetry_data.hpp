// What metric and log exporters receive: the metric points of one collection and log records,
// shaped like OTLP's messages. A custom MetricExporter or LogExporter (SetupOptions) gets these;
// InMemoryMetricExporter and InMemoryLogExporter keep them for tests.
//
//   auto metrics = std::make_shared<nemo::lens::InMemoryMetricExporter>();
//   nemo::lens::SetupOptions options;
//   options.metric_exporter = metrics;
//   auto telemetry = nemo::lens::setup_telemetry(cfg, rank, world_size, options);
//   telemetry.force_flush();  // collects and exports the metrics now
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/exporter.hpp"

namespace nemo::lens {

/// OTLP's AggregationTemporality values.
enum class Temporality : std::uint8_t { kDelta = 1, kCumulative = 2 };

/// Which OTLP data field a metric fills.
enum class MetricKind : std::uint8_t { kSum, kGauge, kHistogram };

/// A NumberDataPoint.
struct NumberPoint {
  std::vector<KeyValue> attributes;
  std::int64_t start_time_unix_nano = 0;  // 0 for gauges (omitted)
  std::int64_t time_unix_nano = 0;
  std::variant<std::int64_t, double> value;  // as_int or as_double
};

/// A HistogramDataPoint with explicit bounds.
struct HistogramPoint {
  std::vector<KeyValue> attributes;
  std::int64_t start_time_unix_nano = 0;
  std::int64_t time_unix_nano = 0;
  std::uint64_t count = 0;
  double sum = 0;
  std::vector<std::uint64_t> bucket_counts;  // explicit_bounds.size() + 1 entries
  std::vector<double> explicit_bounds;
  std::optional<double> min, max;  // absent when count is 0
};

/// One metric of one instrument: its points at one collection.
struct MetricData {
  std::string scope_name;     // the meter's name (InstrumentationScope.name)
  std::string scope_version;  // empty: omitted
  std::string name;
  std::string description;
  std::string unit;
  MetricKind kind = MetricKind::kSum;
  bool monotonic = false;                              // kSum only
  Temporality temporality = Temporality::kCumulative;  // kSum and kHistogram
  std::vector<NumberPoint> number_points;              // kSum, kGauge
  std::vector<HistogramPoint> histogram_points;        // kHistogram
};

/// One log record, as exporters receive it (OTLP's LogRecord).
struct LogRecordData {
  std::string scope_name;  // InstrumentationScope.name ("nemo.lens", or the spdlog logger's name)
  std::int64_t time_unix_nano = 0;
  std::int64_t observed_time_unix_nano = 0;
  std::int32_t severity_number = 0;  // OTLP SeverityNumber, 1 (TRACE) .. 24 (FATAL4)
  std::string severity_text;         // "INFO", "WARN", ...
  std::string body;                  // a string AnyValue
  std::vector<KeyValue> attributes;
  std::uint32_t dropped_attributes_count = 0;
  TraceId trace_id;  // all zero: not inside a span (omitted)
  SpanId span_id;
  std::uint8_t trace_flags = 0;  // the W3C flags of the span's context (LogRecord.flags)
};

/// Receives each collection's metrics (from the reader's thread, one call at a time).
class NEMO_LENS_API MetricExporter {
 public:
  virtual ~MetricExporter() = default;
  /// Exports one collection; true on success. Must return by `deadline` and never throw.
  virtual bool export_metrics(std::span<const MetricData> metrics, const Resource& resource,
                              std::chrono::steady_clock::time_point deadline) noexcept = 0;
  /// Called once at shutdown, after the last export.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) noexcept { (void)deadline; }
};

/// Keeps every collection in memory. Thread-safe.
class NEMO_LENS_API InMemoryMetricExporter : public MetricExporter {
 public:
  bool export_metrics(std::span<const MetricData> metrics, const Resource& resource,
                      std::chrono::steady_clock::time_point deadline) noexcept override;
  /// Every collection exported so far, oldest first.
  std::vector<std::vector<MetricData>> collections() const;
  /// The metric named `name` in the latest collection that has it; empty when none has.
  std::optional<MetricData> latest(std::string_view name) const;

 private:
  mutable std::mutex mu_;
  std::vector<std::vector<MetricData>> collections_;
};

/// Receives batches of log records (from the log pipeline's thread, one call at a time).
class NEMO_LENS_API LogExporter {
 public:
  virtual ~LogExporter() = default;
  /// Exports a batch; true on success. Must return by `deadline` and never throw.
  virtual bool export_logs(std::span<const LogRecordData> records, const Resource& resource,
                           std::chrono::steady_clock::time_point deadline) noexcept = 0;
  /// Called once at shutdown, after the last export.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) noexcept { (void)deadline; }
};

/// Keeps every exported log record in memory. Thread-safe.
class NEMO_LENS_API InMemoryLogExporter : public LogExporter {
 public:
  bool export_logs(std::span<const LogRecordData> records, const Resource& resource,
                   std::chrono::steady_clock::time_point deadline) noexcept override;
  /// Copies of the records exported so far, in export order.
  std::vector<LogRecordData> records() const;

 private:
  mutable std::mutex mu_;
  std::vector<LogRecordData> records_;
};

}  // namespace nemo::lens
