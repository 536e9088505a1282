// An exporter that encodes each batch as OTLP protobuf straight from the pipeline's records, as
// the OTLP exporter does, and discards the bytes: the exporter thread's own work without a
// transport (otlp_bench, export_instructions). After each batch it reads the calling thread's CPU
// clock: the exporter thread's CPU time so far (drain, encoding, recycling), which over the spans
// exported is the exporter's cost per span.
#pragma once

#include <time.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

#include "export/otlp.hpp"
#include "nemo/lens/lens.hpp"
#include "tracing/record_exporter.hpp"

namespace lens_bench {

class EncodingNullExporter : public nemo::lens::SpanExporter,
                             public nemo::lens::detail::RecordSpanExporter {
 public:
  nemo::lens::ExportResult export_spans(std::span<const nemo::lens::SpanData* const>,
                                        const nemo::lens::Resource&,
                                        std::chrono::steady_clock::time_point) noexcept override {
    return nemo::lens::ExportResult::kFailure;  // never called: encodes_records()
  }
  bool encodes_records() const noexcept override { return true; }
  nemo::lens::ExportResult export_records(
      std::span<const nemo::lens::detail::SpanRecord* const> records,
      const nemo::lens::Resource& resource, const nemo::lens::detail::TickConverter& clock,
      std::chrono::steady_clock::time_point) noexcept override {
    try {
      bytes_ += nemo::lens::detail::write_otlp_proto_records(encoded_, records, resource, clock);
    } catch (...) {
      return nemo::lens::ExportResult::kFailure;
    }
    timespec cpu{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &cpu);
    thread_cpu_ns_.store(cpu.tv_sec * 1'000'000'000LL + cpu.tv_nsec, std::memory_order_relaxed);
    return nemo::lens::ExportResult::kSuccess;
  }
  /// The protobuf bytes encoded so far (read after the exporter thread stopped).
  std::size_t bytes() const { return bytes_; }
  /// The exporter thread's CPU time when its last batch was encoded.
  std::int64_t thread_cpu_ns() const { return thread_cpu_ns_.load(std::memory_order_relaxed); }

 private:
  std::string encoded_;
  std::size_t bytes_ = 0;
  std::atomic<std::int64_t> thread_cpu_ns_{0};
};

}  // namespace lens_bench
