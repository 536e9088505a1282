// Ready-made training instruments with the dl.* names, recorded by one call per step.
//
//   static const nemo::lens::TrainingMetrics training;   // after or before setup_telemetry()
//   nemo::lens::StepMetrics step;
//   step.duration_s = seconds;  step.loss = loss;  step.learning_rate = lr;
//   step.tokens_per_second = tokens / seconds;  step.grad_norm = norm;
//   training.record_step(step);                            // what is NaN is left out
#pragma once

#include <initializer_list>
#include <limits>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/metrics.hpp"

namespace nemo::lens {

/// One training step's measurements; NaN (the default) for what the caller does not have.
struct StepMetrics {
  /// Wall time of the step, in seconds: into the dl.step.duration histogram.
  double duration_s = std::numeric_limits<double>::quiet_NaN();
  /// Throughput: the dl.throughput.tokens and dl.throughput.samples gauges.
  double tokens_per_second = std::numeric_limits<double>::quiet_NaN();
  double samples_per_second = std::numeric_limits<double>::quiet_NaN();
  /// The dl.loss, dl.learning_rate and dl.grad_norm gauges.
  double loss = std::numeric_limits<double>::quiet_NaN();
  double learning_rate = std::numeric_limits<double>::quiet_NaN();
  double grad_norm = std::numeric_limits<double>::quiet_NaN();
};

/// The dl.* training instruments of a meter: dl.steps (counter, {step}), dl.step.duration
/// (histogram, s, bounds from 1 ms to 10 min), dl.throughput.tokens ({token}/s),
/// dl.throughput.samples ({sample}/s), dl.loss (1), dl.learning_rate (1), dl.grad_norm (1),
/// the last five gauges. Creating it twice gives the same instruments. Thread-safe.
class NEMO_LENS_API TrainingMetrics {
 public:
  /// Creates (or finds) the instruments on `meter`.
  explicit TrainingMetrics(Meter& meter = get_meter());
  /// Records one step: counts it, its duration, and every measurement that is not NaN, with
  /// `attributes` on each. Never throws; costs one relaxed load when metrics are off.
  void record_step(const StepMetrics& step,
                   std::initializer_list<Attribute> attributes = {}) const noexcept;

 private:
  Counter<std::int64_t> steps_;
  Histogram<double> duration_;
  Gauge<double> tokens_, samples_, loss_, learning_rate_, grad_norm_;
};

}  // namespace nemo::lens
