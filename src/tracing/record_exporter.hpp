// An exporter that encodes the pipeline's span records itself (the OTLP exporter over protobuf),
// so that the pipeline skips making SpanData of them. Internal.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "nemo/lens/exporter.hpp"
#include "tracing/clock.hpp"

namespace nemo::lens::detail {

struct SpanRecord;

class RecordSpanExporter {
 public:
  virtual ~RecordSpanExporter() = default;
  /// Whether the pipeline should call export_records() rather than SpanExporter::export_spans()
  /// (asked once, when the pipeline starts).
  virtual bool encodes_records() const noexcept = 0;
  /// As SpanExporter::export_spans(), for the records of ended spans, whose times `clock`
  /// converts. Same threading contract. A span whose ids nothing asked for has none yet: read
  /// them with export_ids(). Write nothing into a record: the thread that reuses it would have to
  /// get its lines back from this one's core.
  virtual ExportResult export_records(std::span<const SpanRecord* const> records,
                                      const Resource& resource, const TickConverter& clock,
                                      std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

/// Items of one signal that an exporter accepted before the receiver had them (the OTLP
/// exporters' outage buffer, BufferedDelivery), so that their fate is known later.
struct DeferredCounts {
  /// Accepted and not yet delivered or dropped (in the outage buffer, or being sent).
  std::uint64_t pending = 0;
  /// Accepted, then dropped: refused for good, unreadable from the spool, or still waiting when
  /// shutdown's deadline came.
  std::uint64_t dropped = 0;
};

/// An exporter that may accept a batch before the receiver has it (the OTLP exporter's outage
/// buffer), and so learns later whether it was delivered. The pipeline counts the batches it
/// accepted as exported, less what this reports as still pending or dropped.
class DeferredSpanExporter {
 public:
  virtual ~DeferredSpanExporter() = default;
  /// Thread-safe; may be called at any time.
  virtual DeferredCounts deferred_spans() const noexcept = 0;
};

}  // namespace nemo::lens::detail
