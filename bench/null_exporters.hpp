// Exporters that discard everything: what the benchmarks export to, so that only the caller's
// cost is measured.
#pragma once

#include "nemo/lens/lens.hpp"
#include "tracing/engine.hpp"
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

/// Reads the lines each span wrote (its fixed fields and inline attributes in use), as an encoder
/// does, and discards the span: the exporter thread's side of handing records between cores, with
/// no encoding or output around it.
class ReadingSpanExporter : public NullSpanExporter {
 public:
  nemo::lens::ExportResult export_records(
      std::span<const nemo::lens::detail::SpanRecord* const> records, const nemo::lens::Resource&,
      const nemo::lens::detail::TickConverter&,
      std::chrono::steady_clock::time_point) noexcept override {
    std::uint64_t sum = 0;
    for (const nemo::lens::detail::SpanRecord* r : records) {
      const auto* words = reinterpret_cast<const volatile std::uint64_t*>(r);
      const std::size_t lines = nemo::lens::detail::record_lines_written(*r);
      for (std::size_t i = 0; i < lines; ++i) sum += words[8 * i];
    }
    sum_ += sum;
    return nemo::lens::ExportResult::kSuccess;
  }

 private:
  std::uint64_t sum_ = 0;
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
