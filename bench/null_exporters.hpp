// Exporters that discard everything: what the benchmarks export to, so that only the caller's
// cost is measured.
#pragma once

#include "nemo/lens/lens.hpp"

namespace lens_bench {

class NullSpanExporter : public nemo::lens::SpanExporter {
 public:
  nemo::lens::ExportResult export_spans(std::span<const nemo::lens::SpanData* const>,
                                        const nemo::lens::Resource&,
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
