// Instruments and their aggregation: every attribute set an instrument records with has one cell of
// atomics, found through an append-only lock-free table, so recording takes no lock shared with
// the reader and allocates only the first time a set is seen. The reader collects every meter's
// instruments into MetricData. Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "nemo/lens/metrics.hpp"
#include "nemo/lens/telemetry_data.hpp"

namespace nemo::lens::detail {

enum class InstrumentKind : std::uint8_t {
  kCounter,
  kUpDownCounter,
  kHistogram,
  kGauge,
  kObservableGauge,
  kObservableCounter,
};

/// Which temporality each kind is exported with
/// (OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: cumulative, delta or lowmemory).
struct TemporalityPreference {
  Temporality counter = Temporality::kCumulative;
  Temporality histogram = Temporality::kCumulative;
  Temporality observable_counter = Temporality::kCumulative;
  Temporality up_down_counter = Temporality::kCumulative;
};

/// Reads OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE. Throws ConfigError for another value.
TemporalityPreference temporality_preference_from_env();

/// Collects every instrument of every meter: observable callbacks run first. `start` is the
/// start time of cumulative points (the set-up's); delta points start at the previous collection.
/// Reader thread only (one collection at a time). May throw std::bad_alloc.
std::vector<MetricData> collect_metrics(const TemporalityPreference& preference,
                                        std::int64_t start_unix_nano, std::int64_t now_unix_nano);

/// Every instrument of every meter as cumulative points (gauges: their last value) at
/// `now_unix_nano`, cumulative points starting at `start_unix_nano`: what a reader other than the
/// set-up's own reads when it collects (an OpenTelemetry MetricReader given to Python's
/// setup_telemetry). Observable callbacks run first. Changes no state of the set-up's reader (its
/// delta bookkeeping), so it may run on any thread, beside the reader thread. May throw
/// std::bad_alloc.
NEMO_LENS_API std::vector<MetricData> snapshot_metrics(std::int64_t start_unix_nano,
                                                       std::int64_t now_unix_nano);

/// Forgets every recorded value (a new set-up starts from zero). Recording must be off.
void reset_metric_values() noexcept;

/// Records dropped since start: negative counter increments, NaN, sets over the cardinality limit
/// that went to the overflow set are not drops.
std::uint64_t dropped_measurements() noexcept;

}  // namespace nemo::lens::detail
