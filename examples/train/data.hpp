// The synthetic data set: a classification task defined by a fixed random "teacher" network, the
// shard of it each rank loads, and the batches each step draws from that shard. Everything derives
// from one seed, so every rank agrees on the task without communicating.
//
//   lens_train::TeacherTask task(seed, 32, 8);
//   lens_train::Dataset shard = lens_train::load_shard(task, 0, 16384, rank, world_size);
//   lens_train::BatchSampler sampler(shard, seed, rank);
//   sampler.fill(step, 64, x, labels);
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "mlp.hpp"

namespace lens_train {

/// Inputs x ~ N(0, I), labelled with the argmax of a teacher network's class scores
/// (scores = W2 tanh(W1 x) + b2, with b2 chosen so that the classes are about equally frequent).
/// Immutable after construction; sample() is thread-safe.
class TeacherTask {
 public:
  TeacherTask(std::uint64_t seed, int input_dim, int classes);

  /// Writes sample `index`'s features into `x` (input_dim() floats) and returns its label.
  int sample(std::uint64_t index, float* x) const;

  int input_dim() const noexcept { return input_dim_; }
  int classes() const noexcept { return classes_; }

 private:
  static constexpr int kHidden = 64;

  void features(std::uint64_t index, float* x) const;
  void scores(const float* x, double* out) const;

  std::uint64_t seed_;
  int input_dim_;
  int classes_;
  std::vector<float> w1_;  // [kHidden][input_dim]
  std::vector<float> w2_;  // [classes][kHidden]
  std::vector<double> b2_;
};

/// Samples held by one rank.
struct Dataset {
  Matrix features;          // one row per sample
  std::vector<int> labels;  // one per row

  std::size_t size() const noexcept { return labels.size(); }
  std::size_t bytes() const noexcept {
    return features.data.size() * sizeof(float) + labels.size() * sizeof(int);
  }
};

/// The samples of [first, first + count) that belong to `rank`: index i goes to rank
/// (i - first) % world_size.
Dataset load_shard(const TeacherTask& task, std::uint64_t first, std::uint64_t count, int rank,
                   int world_size);

/// Draws batches from a shard in a shuffled order, reshuffled every epoch. Which samples step s
/// sees depends only on (seed, rank, s), so a run resumed at step s sees the same data as a run
/// that was never stopped. Not thread-safe.
class BatchSampler {
 public:
  /// `shard` must outlive the sampler and hold at least one sample.
  BatchSampler(const Dataset& shard, std::uint64_t seed, int rank);

  /// The batch of step `step` (1-based): `batch` samples, into x (batch x input_dim) and labels.
  void fill(std::int64_t step, int batch, Matrix& x, std::vector<int>& labels);

 private:
  void shuffle_for_epoch(std::uint64_t epoch);

  const Dataset& shard_;
  std::uint64_t seed_;
  int rank_;
  std::uint64_t epoch_ = UINT64_MAX;  // the epoch order_ is for
  std::vector<std::uint32_t> order_;
};

}  // namespace lens_train
