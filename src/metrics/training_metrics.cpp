// TrainingMetrics: the dl.* instruments and their one-call-per-step recording.
#include "nemo/lens/training_metrics.hpp"

#include <cmath>
#include <vector>

#include "nemo/lens/semconv.hpp"

namespace nemo::lens {

namespace {
// From a millisecond to ten minutes: steps of small and large models alike.
const std::vector<double>& duration_bounds() {
  static const std::vector<double> bounds = {0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1,
                                             2.5,   5,     10,   30,    60,   120, 300,  600};
  return bounds;
}
}  // namespace

TrainingMetrics::TrainingMetrics(Meter& meter)
    : steps_(
          meter.create_counter<std::int64_t>(semconv::kDlSteps, "{step}", "Training steps done")),
      duration_(meter.create_histogram<double>(semconv::kDlStepDuration, "s",
                                               "Wall time of a training step", duration_bounds())),
      tokens_(meter.create_gauge<double>(semconv::kDlThroughputTokens, "{token}/s",
                                         "Tokens processed per second in the last step")),
      samples_(meter.create_gauge<double>(semconv::kDlThroughputSamples, "{sample}/s",
                                          "Samples processed per second in the last step")),
      loss_(meter.create_gauge<double>(semconv::kDlLoss, "1", "Training loss of the last step")),
      learning_rate_(meter.create_gauge<double>(semconv::kDlLearningRate, "1",
                                                "Learning rate of the last step")),
      grad_norm_(meter.create_gauge<double>(semconv::kDlGradNorm, "1",
                                            "Gradient norm of the last step")) {}

void TrainingMetrics::record_step(const StepMetrics& step,
                                  std::initializer_list<Attribute> attributes) const noexcept {
  if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
  steps_.add(1, attributes);
  if (!std::isnan(step.duration_s)) duration_.record(step.duration_s, attributes);
  if (!std::isnan(step.tokens_per_second)) tokens_.set(step.tokens_per_second, attributes);
  if (!std::isnan(step.samples_per_second)) samples_.set(step.samples_per_second, attributes);
  if (!std::isnan(step.loss)) loss_.set(step.loss, attributes);
  if (!std::isnan(step.learning_rate)) learning_rate_.set(step.learning_rate, attributes);
  if (!std::isnan(step.grad_norm)) grad_norm_.set(step.grad_norm, attributes);
}

}  // namespace nemo::lens
