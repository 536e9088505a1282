// Exporters that discard everything: what the benchmarks export to, so that only the caller's
// cost is measured.
#pragma once

#include "nemo/lens/lens.hpp"
#include "tracing/record_exporter.hpp"

namespace lens_bench {

/// Takes the pipeline's records as the OTLP exporter does (a RecordSpanExporter), so that the
/// exporter thread spends nothing on them: it keeps up with the fastest producer, and a span
/// figure is not flattered by spans dropped for a full queue.
class NullSpanExporter : public nemo::lens::SpanExporter,
                         public nemo::lens::detail::RecordSpanExporter {
 public:
  nemo::lens::ExportResult export_spans(std::span<const nemo::lens::SpanData* const>,
                                        const nemo::lens::Resource&,
                                        std::chrono::steady_clock::time_point) noexcept override {
    return nemo::lens::ExportResult::kSuccess;
  }
  bool encodes_records() const noexcept override { return true; }
  nemo::lens::ExportResult export_records(std::span<const nemo::lens::detail::SpanRecord* const>,
                                          const nemo::lens::Resource&,
                                          const nemo::lens::detail::TickConverter&,
                                          std::chrono::steady_clock::time_point) noexcept override {
    return nemo::lens::ExportResult::kSuccess;
  }
};

class NullMetricExporter : public nemo::lens::MetricExporter {
 public:
  bool export_metrics(std::span<const nemo::lens::MetricData>, const nemo::lens::Resource&,
                      std::chrono::steady_clock::time_point) noexcept override {
    return true;
  }
};

class NullLogExporter : public nemo::lens::LogExporter {
 public:
  bool export_logs(std::span<const nemo::lens::LogRecordData>, const nemo::lens::Resource&,
                   std::chrono::steady_clock::time_point) noexcept override {
    return true;
  }
};

}  // namespace lens_bench
