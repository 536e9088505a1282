// What exporters receive and the interface they implement. The pipeline hands ended spans to one
// exporter on its own background thread, in batches; a program may pass its own exporter through
// SetupOptions::exporter. InMemorySpanExporter keeps spans for tests.
//
//   auto memory = std::make_shared<nemo::lens::InMemorySpanExporter>();
//   nemo::lens::SetupOptions options;
//   options.exporter = memory;
//   auto telemetry = nemo::lens::setup_telemetry(cfg, 0, 1, options);
//   /* ... */ telemetry.force_flush();
//   for (const auto& span : memory->spans()) std::puts(span.name.c_str());
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "nemo/lens/attributes.hpp"
#include "nemo/lens/context.hpp"
#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// The role of a span in a request (OpenTelemetry's SpanKind).
enum class SpanKind : std::uint8_t { kInternal = 1, kServer = 2, kClient = 3, kProducer = 4, kConsumer = 5 };

/// The outcome a span reports (OpenTelemetry's StatusCode).
enum class StatusCode : std::uint8_t { kUnset = 0, kOk = 1, kError = 2 };

/// A timestamped event of a span.
struct SpanEvent {
  std::string name;
  std::int64_t time_unix_nano = 0;
  std::vector<KeyValue> attributes;
  std::uint32_t dropped_attributes_count = 0;
};

/// A link from a span to another span's context.
struct SpanLink {
  SpanContext context;
  std::vector<KeyValue> attributes;
  std::uint32_t dropped_attributes_count = 0;
};

/// An ended span, as exporters see it. Attribute limits and redaction are already applied.
struct NEMO_LENS_API SpanData {
  std::string name;
  /// The span group of the site that started it; empty for ungated spans (span_cm).
  std::string group;
  SpanContext context;
  /// Invalid when the span is a root.
  SpanId parent_span_id;
  bool parent_is_remote = false;
  SpanKind kind = SpanKind::kInternal;
  std::int64_t start_time_unix_nano = 0;
  std::int64_t end_time_unix_nano = 0;
  std::vector<KeyValue> attributes;
  std::uint32_t dropped_attributes_count = 0;
  std::vector<SpanEvent> events;
  std::uint32_t dropped_events_count = 0;
  std::vector<SpanLink> links;
  std::uint32_t dropped_links_count = 0;
  StatusCode status_code = StatusCode::kUnset;
  std::string status_message;
  /// The OS thread id of the thread that started the span.
  std::int64_t thread_id = 0;
  /// Ended by shutdown while still open (also carries nemo.span.truncated=true).
  bool truncated = false;

  /// The attribute named `key`, or null.
  const AttributeValue* attribute(std::string_view key) const noexcept;
};

/// The entity producing telemetry: the process's resource attributes.
struct NEMO_LENS_API Resource {
  std::vector<KeyValue> attributes;
  /// The attribute named `key`, or null.
  const AttributeValue* attribute(std::string_view key) const noexcept;
};

/// The instrumentation scope every lens span carries.
inline constexpr std::string_view kInstrumentationScope = "nemo.lens";

/// The result of one export call.
enum class ExportResult : std::uint8_t {
  kSuccess,
  /// The batch is lost; counted as dropped (export failed).
  kFailure,
};

/// Receives ended spans. Threading contract: every method but rejected_spans() is called from the
/// pipeline's exporter thread, shutdown() once and last; never two methods at once. Methods are
/// noexcept (an exception escaping one terminates the program) and should return by `deadline`.
class NEMO_LENS_API SpanExporter {
 public:
  virtual ~SpanExporter();

  /// Exports one batch. `spans` and what they point to are valid only during the call.
  virtual ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                                    std::chrono::steady_clock::time_point deadline) noexcept = 0;

  /// Pushes out anything the exporter buffers. Returns false when it could not by `deadline`.
  virtual bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept;

  /// Releases the exporter's resources; no export follows.
  virtual void shutdown(std::chrono::steady_clock::time_point deadline) noexcept;

  /// Spans the receiver reported rejecting so far (OTLP partial success) in batches whose export
  /// succeeded. Called from any thread while the exporter runs; 0 unless overridden.
  virtual std::uint64_t rejected_spans() const noexcept;
};

/// Keeps copies of every exported span in memory. Thread-safe: spans() may be called from any
/// thread while the pipeline exports.
class NEMO_LENS_API InMemorySpanExporter : public SpanExporter {
 public:
  ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                            std::chrono::steady_clock::time_point deadline) noexcept override;

  /// Copies of the spans exported so far, in export order.
  std::vector<SpanData> spans() const;
  /// The resource of the most recent export.
  Resource resource() const;
  /// The number of export_spans() calls so far.
  std::size_t export_calls() const;
  /// Forgets the spans exported so far.
  void clear();

 private:
  mutable std::mutex mu_;
  std::vector<SpanData> spans_;
  Resource resource_;
  std::size_t calls_ = 0;
};

}  // namespace nemo::lens
