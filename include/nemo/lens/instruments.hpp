// NeMo Lens' inference, reinforcement-learning and Gym metrics, with its names and attributes, so
// that a C++ inference server or RL worker records what a Python one records with
// nemo_lens_cpp.instruments (the same three functions).
//
//   nemo::lens::InferenceRecord request;
//   request.request_duration_s = seconds;  request.model = "llama";
//   request.input_tokens = 128;            request.output_tokens = 32;
//   nemo::lens::record_inference_metrics(nemo::lens::get_meter(), request);
//
//   nemo::lens::RlRecord update;  update.reward_mean = 0.7;  update.kl_divergence = 0.01;
//   nemo::lens::record_rl_metrics(nemo::lens::get_meter(), update);
//
// What is NaN (the default) is left out. The instruments are made on a meter's first record.
// Every call is thread-safe, never throws, and costs one relaxed load when metrics are off.
#pragma once

#include <limits>
#include <string_view>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/metrics.hpp"

namespace nemo::lens {

/// One inference request (OpenTelemetry's GenAI conventions).
struct InferenceRecord {
  /// Into gen_ai.server.request.duration (histogram, s).
  double request_duration_s = std::numeric_limits<double>::quiet_NaN();
  /// Into gen_ai.client.token.usage (histogram, {token}) with gen_ai.token.type=input / output.
  double input_tokens = std::numeric_limits<double>::quiet_NaN();
  double output_tokens = std::numeric_limits<double>::quiet_NaN();
  /// gen_ai.request.model on every record when not empty.
  std::string_view model;
  /// gen_ai.provider.name and gen_ai.operation.name on every record.
  std::string_view provider_name = "nemo";
  std::string_view operation_name = "text_completion";
};

/// Records `request`'s duration and token counts on `meter`, as NeMo Lens'
/// record_inference_metrics does.
NEMO_LENS_API void record_inference_metrics(Meter& meter, const InferenceRecord& request) noexcept;

/// One RL update: the rl.* gauges (the last value) and duration histograms (ms).
struct RlRecord {
  double reward_mean = std::numeric_limits<double>::quiet_NaN();    ///< rl.reward.mean
  double kl_divergence = std::numeric_limits<double>::quiet_NaN();  ///< rl.kl_divergence
  double policy_loss = std::numeric_limits<double>::quiet_NaN();    ///< rl.policy_loss
  double value_loss = std::numeric_limits<double>::quiet_NaN();     ///< rl.value_loss
  double entropy = std::numeric_limits<double>::quiet_NaN();        ///< rl.entropy
  double response_length_mean =
      std::numeric_limits<double>::quiet_NaN();                     ///< rl.response_length.mean
  double grad_norm = std::numeric_limits<double>::quiet_NaN();      ///< rl.grad_norm
  double learning_rate = std::numeric_limits<double>::quiet_NaN();  ///< rl.learning_rate
  double throughput_tokens_per_sec =
      std::numeric_limits<double>::quiet_NaN();  ///< rl.throughput.tokens_per_sec
  double generation_duration_ms =
      std::numeric_limits<double>::quiet_NaN();  ///< rl.generation.duration_ms
  double rollout_duration_ms =
      std::numeric_limits<double>::quiet_NaN();  ///< rl.rollout.duration_ms
};

/// Records `update` on `meter`, as NeMo Lens' record_rl_metrics does.
NEMO_LENS_API void record_rl_metrics(Meter& meter, const RlRecord& update) noexcept;

/// NeMo Gym measurements: duration histograms (ms) and two gauges.
struct GymRecord {
  double server_request_duration_ms =
      std::numeric_limits<double>::quiet_NaN();  ///< gym.server.request_duration_ms
  double rollout_duration_ms =
      std::numeric_limits<double>::quiet_NaN();  ///< gym.rollout.duration_ms
  double verify_duration_ms = std::numeric_limits<double>::quiet_NaN();  ///< gym.verify.duration_ms
  double verify_success_rate =
      std::numeric_limits<double>::quiet_NaN();                      ///< gym.verify.success_rate
  double active_servers = std::numeric_limits<double>::quiet_NaN();  ///< gym.servers.active
};

/// Records `measurements` on `meter`, as NeMo Lens' record_gym_metrics does.
NEMO_LENS_API void record_gym_metrics(Meter& meter, const GymRecord& measurements) noexcept;

}  // namespace nemo::lens
