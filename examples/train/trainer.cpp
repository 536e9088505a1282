#include "trainer.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <span>
#include <thread>
#include <utility>

#include "checkpoint.hpp"
#include "nemo/lens/lens.hpp"

namespace lens_train {

using nemo::lens::MegatronSpanGroup;

namespace {

constexpr int kEvalChunk = 128;  // rows per forward pass when evaluating
constexpr int kWarmupSteps = 10;
constexpr float kMaxGradNorm = 1.0f;

/// The learning rate of step `step` (1-based): a linear warm-up over kWarmupSteps, then
/// inverse-square-root decay. It depends on the step alone, so a resumed run follows the same
/// schedule as one that never stopped.
float learning_rate(const TrainOptions& options, std::int64_t step) {
  const double s = static_cast<double>(step);
  const double factor = std::min(s / kWarmupSteps, std::sqrt(kWarmupSteps / s));
  return static_cast<float>(options.lr * factor);
}

/// Scales `gradients` so that their L2 norm is at most `max_norm`; returns the norm before.
float clip_gradients(std::span<float> gradients, float max_norm) {
  double sum = 0.0;
  for (const float g : gradients) sum += static_cast<double>(g) * g;
  const auto norm = static_cast<float>(std::sqrt(sum));
  if (norm > max_norm) {
    const float scale = max_norm / norm;
    for (float& g : gradients) g *= scale;
  }
  return norm;
}

/// Copies rows [first, first + count) of `from` into `to`.
void copy_rows(const Matrix& from, int first, int count, Matrix& to) {
  to.resize(count, from.cols);
  std::copy_n(from.row(first), static_cast<std::size_t>(count) * from.cols, to.data.begin());
}

}  // namespace

std::vector<int> model_dims(const TrainOptions& options) {
  return {kInputDim, options.hidden, options.hidden, options.hidden, kClasses};
}

Trainer::Trainer(const TrainOptions& options, const World& world)
    : options_(options),
      world_(world),
      model_(model_dims(options)),
      adam_(model_.parameters().size()) {
  LENS_SPAN(span, MegatronSpanGroup::MODEL_INIT, "model_init", {"hidden", options.hidden},
            {"layers", model_.num_layers()});
  model_.init(options.seed);  // the same seed on every rank: the same initial weights
  span.set_attributes({{"parameters", static_cast<std::int64_t>(model_.parameters().size())},
                       {"optimizer", "adam"}});
}

Trainer::Restored Trainer::load_latest_checkpoint() {
  LENS_SPAN(span, MegatronSpanGroup::LOAD_CHECKPOINT, "load_checkpoint",
            {"checkpoint_dir", options_.checkpoint_dir});
  std::string path;
  std::string error;
  std::vector<std::byte> bytes;
  if (world_.is_root()) {
    try {
      if (auto latest = find_latest_checkpoint(options_.checkpoint_dir)) {
        path = latest->string();
        bytes = read_file(*latest);
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
  }
  broadcast_string(error);
  if (!error.empty()) throw CheckpointError(error);
  broadcast_string(path);
  if (path.empty()) {
    span.set_attribute("found", false);
    return {};
  }
  broadcast_bytes(bytes);
  TrainingState state = decode_checkpoint(bytes);
  if (state.seed != options_.seed) {
    throw CheckpointError(path + " was written with --seed " + std::to_string(state.seed) +
                          ", this run has --seed " + std::to_string(options_.seed));
  }
  if (state.dims != model_.dims()) {
    throw CheckpointError(path + " holds another model (check --hidden)");
  }
  std::copy(state.parameters.begin(), state.parameters.end(), model_.parameters().begin());
  adam_.first_moment() = std::move(state.adam_m);
  adam_.second_moment() = std::move(state.adam_v);
  adam_.set_steps(state.adam_steps);
  span.set_attributes({{"found", true},
                       {"path", path},
                       {"bytes", static_cast<std::int64_t>(bytes.size())},
                       {"iteration", state.step}});
  return {state.step, path};
}

void Trainer::load_data() {
  LENS_SPAN(span, MegatronSpanGroup::DATA_LOADING, "load_shard", {"shard", world_.rank},
            {"shards", world_.size});
  const TeacherTask task(options_.seed, kInputDim, kClasses);
  train_shard_ = load_shard(task, 0, kTrainSamples, world_.rank, world_.size);
  eval_shard_ = load_shard(task, kTrainSamples, kEvalSamples, world_.rank, world_.size);
  sampler_ = std::make_unique<BatchSampler>(train_shard_, options_.seed, world_.rank);
  span.set_attributes(
      {{"train_samples", static_cast<std::int64_t>(train_shard_.size())},
       {"eval_samples", static_cast<std::int64_t>(eval_shard_.size())},
       {"bytes", static_cast<std::int64_t>(train_shard_.bytes() + eval_shard_.bytes())}});
}

float Trainer::train_step(std::int64_t step) {
  {
    LENS_SPAN(span, MegatronSpanGroup::DATA_LOADING, "next_batch", {"iteration", step},
              {"samples", options_.batch});
    sampler_->fill(step, options_.batch, batch_, labels_);
  }
  const float local_loss = forward_backward(step);
  const float loss = allreduce_mean(model_.gradients(), local_loss, reduce_buffer_, world_, step);
  optimizer_step(step, learning_rate(options_, step));
  return loss;
}

float Trainer::forward_backward(std::int64_t step) {
  LENS_SPAN(span, MegatronSpanGroup::FORWARD_BACKWARD, "forward_backward", {"iteration", step},
            {"microbatches", options_.microbatches});
  const auto started = std::chrono::steady_clock::now();
  model_.zero_gradients();
  const int rows = options_.batch / options_.microbatches;
  const float grad_scale = 1.0f / static_cast<float>(options_.batch);  // mean over the batch
  double loss_sum = 0.0;
  for (int m = 0; m < options_.microbatches; ++m) {
    LENS_SPAN(micro, MegatronSpanGroup::MICROBATCH, "microbatch", {"iteration", step},
              {"microbatch", m}, {"samples", rows});
    copy_rows(batch_, m * rows, rows, microbatch_);
    const std::span<const int> labels(labels_.data() + static_cast<std::size_t>(m) * rows,
                                      static_cast<std::size_t>(rows));
    // --stall-step: once, on the stall rank, in the second microbatch (the only one if one).
    const bool stall = step == options_.stall_step && world_.rank == options_.stall_rank &&
                       m == std::min(1, options_.microbatches - 1);
    const Matrix& logits = model_.forward(microbatch_, acts_,
                                          std::chrono::milliseconds(stall ? options_.stall_ms : 0));
    const LossResult result = softmax_cross_entropy(logits, labels, grad_scale, &dlogits_);
    model_.backward(dlogits_, acts_);
    micro.set_attribute("loss", result.loss_sum / rows);
    loss_sum += result.loss_sum;
  }
  const auto loss = static_cast<float>(loss_sum / options_.batch);
  span.set_attribute("loss", loss);
  if (world_.rank == options_.slow_rank) {
    // A straggler (--slow-rank): as if this rank's device were slower, its compute takes
    // slow_factor as long; the other ranks wait for it in the all-reduce.
    const auto took = std::chrono::steady_clock::now() - started;
    std::this_thread::sleep_for(
        std::chrono::duration_cast<std::chrono::nanoseconds>(took * (options_.slow_factor - 1)));
  }
  return loss;
}

void Trainer::optimizer_step(std::int64_t step, float lr) {
  LENS_SPAN(span, MegatronSpanGroup::OPTIMIZER, "optimizer_step", {"iteration", step},
            {"learning_rate", lr});
  last_grad_norm_ = clip_gradients(model_.gradients(), kMaxGradNorm);
  adam_.step(model_.parameters(), model_.gradients(), lr);
  last_lr_ = lr;
  span.set_attribute("grad_norm", last_grad_norm_);
}

Trainer::Evaluation Trainer::evaluate(std::int64_t step) {
  LENS_SPAN(span, MegatronSpanGroup::EVALUATE, "evaluate", {"iteration", step});
  double totals[3] = {0.0, 0.0, 0.0};  // loss sum, correct, samples
  const int n = static_cast<int>(eval_shard_.size());
  for (int first = 0; first < n; first += kEvalChunk) {
    const int rows = std::min(kEvalChunk, n - first);
    copy_rows(eval_shard_.features, first, rows, microbatch_);
    const std::span<const int> labels(eval_shard_.labels.data() + first,
                                      static_cast<std::size_t>(rows));
    const LossResult result =
        softmax_cross_entropy(model_.forward(microbatch_, acts_), labels, 0, nullptr);
    totals[0] += result.loss_sum;
    totals[1] += static_cast<double>(result.correct);
    totals[2] += rows;
  }
  {
    LENS_SPAN(comm, MegatronSpanGroup::COMMUNICATION, "allreduce_eval", {"iteration", step},
              {"bytes", static_cast<std::int64_t>(sizeof(totals))});
    allreduce_sum(totals);
  }
  Evaluation result;
  result.samples = static_cast<std::int64_t>(totals[2]);
  result.loss = totals[0] / std::max(totals[2], 1.0);
  result.accuracy = totals[1] / std::max(totals[2], 1.0);
  span.set_attributes({{"eval_loss", result.loss},
                       {"eval_accuracy", result.accuracy},
                       {"samples", result.samples}});
  return result;
}

Trainer::Saved Trainer::save_checkpoint(std::int64_t step) {
  LENS_SPAN(span, MegatronSpanGroup::CHECKPOINT, "save_checkpoint", {"iteration", step});
  Saved saved;
  std::string error;
  if (world_.is_root()) {
    try {
      TrainingState state;
      state.step = step;
      state.seed = options_.seed;
      state.dims = model_.dims();
      state.parameters.assign(model_.parameters().begin(), model_.parameters().end());
      state.adam_m = adam_.first_moment();
      state.adam_v = adam_.second_moment();
      state.adam_steps = adam_.steps();
      const std::vector<std::byte> bytes = encode_checkpoint(state);
      const std::filesystem::path path =
          std::filesystem::path(options_.checkpoint_dir) / checkpoint_file_name(step);
      write_file_atomically(path, bytes);
      span.set_attributes(
          {{"path", path.string()}, {"bytes", static_cast<std::int64_t>(bytes.size())}});
      saved = {path.string(), bytes.size()};
    } catch (const std::exception& e) {
      error = e.what();
      span.set_status(nemo::lens::StatusCode::kError, error);
    }
  }
  broadcast_string(error);
  if (!error.empty()) throw CheckpointError(error);
  return saved;
}

}  // namespace lens_train
