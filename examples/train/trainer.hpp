// One rank's share of the training job: the model, its optimizer, its shards of the data and the
// stages of a run (restore, load data, step, evaluate, save), each a span of its lens group.
//
//   lens_train::Trainer trainer(options, world);
//   trainer.load_data();
//   for (std::int64_t step = 1; step <= options.steps; ++step) loss = trainer.train_step(step);
//   trainer.evaluate(options.steps);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "adam.hpp"
#include "collectives.hpp"
#include "data.hpp"
#include "mlp.hpp"
#include "options.hpp"

namespace lens_train {

// The task: 32 input features, 8 classes; 16384 training and 2048 held-out samples in all.
inline constexpr int kInputDim = 32;
inline constexpr int kClasses = 8;
inline constexpr std::uint64_t kTrainSamples = 16384;
inline constexpr std::uint64_t kEvalSamples = 2048;

/// Layer widths: the input, three hidden layers of --hidden units, the classes.
std::vector<int> model_dims(const TrainOptions& options);

/// One rank's model, optimizer, data and the buffers a step reuses. Methods that communicate are
/// collectives: every rank calls them in the same order. Not thread-safe.
class Trainer {
 public:
  /// Builds the model and initialises it from --seed, the same on every rank (a `model_init`
  /// span). `options` must outlive the trainer.
  Trainer(const TrainOptions& options, const World& world);

  /// Where a resumed run starts: the step of the checkpoint it restored and that file.
  struct Restored {
    std::int64_t step = 0;  // 0: no checkpoint, a fresh start
    std::string path;
  };

  /// Restores the latest checkpoint of --checkpoint-dir, if any. Rank 0 reads the file and
  /// broadcasts its bytes, so ranks agree even without a shared file system. Throws
  /// CheckpointError on every rank for a bad checkpoint or one from another --seed or model.
  Restored load_latest_checkpoint();

  /// Loads this rank's shards of the training and held-out sets.
  void load_data();

  /// One training step (1-based `step`, after load_data()): batch, forward and backward over the
  /// microbatches, all-reduce, optimizer. Returns the loss averaged over all ranks.
  float train_step(std::int64_t step);

  /// Loss and accuracy on the held-out set, averaged over all ranks.
  struct Evaluation {
    double loss = 0;
    double accuracy = 0;
    std::int64_t samples = 0;
  };
  Evaluation evaluate(std::int64_t step);

  /// A checkpoint written: its file and size (on rank 0; empty on the others).
  struct Saved {
    std::string path;
    std::size_t bytes = 0;
  };

  /// Rank 0 writes a checkpoint of the state after `step` into --checkpoint-dir; every rank waits
  /// for the outcome, so that all of them stop together (CheckpointError) when it failed.
  Saved save_checkpoint(std::int64_t step);

  /// Whether all ranks hold the same parameters; `checksum` receives this rank's.
  bool parameters_in_sync(std::uint64_t* checksum) const {
    return lens_train::parameters_in_sync(model_.parameters(), checksum);
  }

  const std::vector<int>& layer_widths() const noexcept { return model_.dims(); }
  std::size_t parameter_count() const noexcept { return model_.parameters().size(); }
  float last_learning_rate() const noexcept { return last_lr_; }
  float last_grad_norm() const noexcept { return last_grad_norm_; }

 private:
  /// Forward and backward passes over the step's batch in --microbatches parts, accumulating the
  /// gradients of the batch's mean loss. Returns this rank's mean loss.
  float forward_backward(std::int64_t step);

  /// Clips the averaged gradients and takes one Adam step.
  void optimizer_step(std::int64_t step, float lr);

  const TrainOptions& options_;
  World world_;
  Mlp model_;
  Adam adam_;
  Dataset train_shard_;
  Dataset eval_shard_;
  std::unique_ptr<BatchSampler> sampler_;
  Activations acts_;
  Matrix batch_;
  std::vector<int> labels_;
  Matrix microbatch_;
  Matrix dlogits_;
  std::vector<float> reduce_buffer_;
  float last_lr_ = 0;
  float last_grad_norm_ = 0;
};

}  // namespace lens_train
