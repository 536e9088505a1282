// record_inference_metrics, record_rl_metrics, record_gym_metrics: NeMo Lens' instrument
// families, with the names, units and descriptions nemo_lens_cpp.instruments gives them.
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "nemo/lens/instruments.hpp"
#include "nemo/lens/semconv.hpp"

namespace nemo::lens {

namespace {

bool has(double v) noexcept { return !std::isnan(v); }

struct InferenceInstruments {
  explicit InferenceInstruments(Meter& m)
      : duration(m.create_histogram<double>(semconv::kGenaiServerRequestDuration, "s",
                                            "GenAI server request duration.")),
        tokens(m.create_histogram<double>(semconv::kGenaiClientTokenUsage, "{token}",
                                          "Number of input and output tokens used.")) {}
  Histogram<double> duration, tokens;
};

struct RlInstruments {
  explicit RlInstruments(Meter& m)
      : reward_mean(m.create_gauge<double>(semconv::kRlRewardMean, "",
                                           "Mean reward across rollout batch.")),
        kl_divergence(m.create_gauge<double>(semconv::kRlKlDivergence, "",
                                             "KL divergence between policy and reference.")),
        policy_loss(m.create_gauge<double>(semconv::kRlPolicyLoss, "", "Policy gradient loss.")),
        value_loss(m.create_gauge<double>(semconv::kRlValueLoss, "", "Value function loss.")),
        entropy(m.create_gauge<double>(semconv::kRlEntropy, "", "Policy entropy.")),
        response_length_mean(m.create_gauge<double>(semconv::kRlResponseLengthMean, "",
                                                    "Mean generated response length (tokens).")),
        grad_norm(m.create_gauge<double>(semconv::kRlGradNorm, "",
                                         "Gradient norm of the policy update.")),
        learning_rate(m.create_gauge<double>(semconv::kRlLearningRate, "",
                                             "Current optimizer learning rate.")),
        throughput(m.create_gauge<double>(semconv::kRlThroughputTokensPerSec, "{token}/s",
                                          "Training throughput in tokens per second.")),
        generation(m.create_histogram<double>(semconv::kRlGenerationDurationMs, "ms",
                                              "Duration of text generation in milliseconds.")),
        rollout(m.create_histogram<double>(semconv::kRlRolloutDurationMs, "ms",
                                           "Duration of rollout collection in milliseconds.")) {}
  Gauge<double> reward_mean, kl_divergence, policy_loss, value_loss, entropy, response_length_mean,
      grad_norm, learning_rate, throughput;
  Histogram<double> generation, rollout;
};

struct GymInstruments {
  explicit GymInstruments(Meter& m)
      : request(m.create_histogram<double>(semconv::kGymServerRequestDurationMs, "ms",
                                           "Gym server request duration in milliseconds.")),
        rollout(m.create_histogram<double>(semconv::kGymRolloutDurationMs, "ms",
                                           "Rollout collection duration in milliseconds.")),
        verify(m.create_histogram<double>(semconv::kGymVerifyDurationMs, "ms",
                                          "Verification endpoint duration in milliseconds.")),
        success_rate(m.create_gauge<double>(semconv::kGymVerifySuccessRate, "",
                                            "Fraction of successful verifications.")),
        active(m.create_gauge<double>(semconv::kGymServersActive, "",
                                      "Number of active Gym servers.")) {}
  Histogram<double> request, rollout, verify;
  Gauge<double> success_rate, active;
};

// A family's instruments on `meter`, made on its first use. Meters live as long as the process,
// so their addresses are stable keys; the entries are never freed.
template <class Family>
const Family* family_of(Meter& meter) noexcept {
  thread_local const Meter* last_meter = nullptr;
  thread_local const Family* last = nullptr;
  if (last_meter == &meter) return last;
  static std::mutex mutex;
  static auto* made = new std::map<const Meter*, std::unique_ptr<const Family>>();
  try {
    std::lock_guard<std::mutex> lock(mutex);
    auto& slot = (*made)[&meter];
    if (!slot) slot = std::make_unique<const Family>(meter);
    last_meter = &meter;
    last = slot.get();
    return last;
  } catch (...) {  // out of memory, or a name the meter refused: nothing recorded
    return nullptr;
  }
}

}  // namespace

void record_inference_metrics(Meter& meter, const InferenceRecord& r) noexcept {
  if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
  const InferenceInstruments* i = family_of<InferenceInstruments>(meter);
  if (i == nullptr) return;
  const Attribute operation{semconv::kGenaiOperationName, r.operation_name};
  const Attribute provider{semconv::kGenaiProviderName, r.provider_name};
  const Attribute model{semconv::kGenaiRequestModel, r.model};
  const auto record = [&](const Histogram<double>& h, double v, const Attribute* type) {
    if (!r.model.empty()) {
      if (type != nullptr) {
        h.record(v, {operation, provider, model, *type});
      } else {
        h.record(v, {operation, provider, model});
      }
    } else if (type != nullptr) {
      h.record(v, {operation, provider, *type});
    } else {
      h.record(v, {operation, provider});
    }
  };
  if (has(r.request_duration_s)) record(i->duration, r.request_duration_s, nullptr);
  if (has(r.input_tokens)) {
    const Attribute input{semconv::kGenaiTokenType, std::string_view("input")};
    record(i->tokens, r.input_tokens, &input);
  }
  if (has(r.output_tokens)) {
    const Attribute output{semconv::kGenaiTokenType, std::string_view("output")};
    record(i->tokens, r.output_tokens, &output);
  }
}

void record_rl_metrics(Meter& meter, const RlRecord& r) noexcept {
  if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
  const RlInstruments* i = family_of<RlInstruments>(meter);
  if (i == nullptr) return;
  const std::pair<const Gauge<double>*, double> gauges[] = {
      {&i->reward_mean, r.reward_mean},
      {&i->kl_divergence, r.kl_divergence},
      {&i->policy_loss, r.policy_loss},
      {&i->value_loss, r.value_loss},
      {&i->entropy, r.entropy},
      {&i->response_length_mean, r.response_length_mean},
      {&i->grad_norm, r.grad_norm},
      {&i->learning_rate, r.learning_rate},
      {&i->throughput, r.throughput_tokens_per_sec}};
  for (const auto& [gauge, value] : gauges) {
    if (has(value)) gauge->set(value);
  }
  if (has(r.generation_duration_ms)) i->generation.record(r.generation_duration_ms);
  if (has(r.rollout_duration_ms)) i->rollout.record(r.rollout_duration_ms);
}

void record_gym_metrics(Meter& meter, const GymRecord& r) noexcept {
  if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
  const GymInstruments* i = family_of<GymInstruments>(meter);
  if (i == nullptr) return;
  if (has(r.server_request_duration_ms)) i->request.record(r.server_request_duration_ms);
  if (has(r.rollout_duration_ms)) i->rollout.record(r.rollout_duration_ms);
  if (has(r.verify_duration_ms)) i->verify.record(r.verify_duration_ms);
  if (has(r.verify_success_rate)) i->success_rate.set(r.verify_success_rate);
  if (has(r.active_servers)) i->active.set(r.active_servers);
}

}  // namespace nemo::lens
