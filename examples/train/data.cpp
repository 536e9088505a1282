#include "data.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

#include "rng.hpp"

namespace lens_train {

namespace {
// Stream identifiers, so that the teacher, the samples and the shuffles draw independent numbers.
constexpr std::uint64_t kTeacherStream = 0x7EAC4E5;
constexpr std::uint64_t kSampleStream = 0x5A3F1E;
constexpr std::uint64_t kShuffleStream = 0x5E1F;
constexpr std::uint64_t kCalibrationFirst = 1ULL << 62;  // sample indices no data set reaches
constexpr int kCalibrationSamples = 4096;
}  // namespace

TeacherTask::TeacherTask(std::uint64_t seed, int input_dim, int classes)
    : seed_(seed), input_dim_(input_dim), classes_(classes) {
  if (input_dim <= 0 || classes < 2) throw std::invalid_argument("bad teacher task shape");
  Rng rng(mix(seed, kTeacherStream));
  // Pre-activations of about one standard deviation: tanh bends there, so the boundaries curve.
  const double gain1 = 1.0 / std::sqrt(static_cast<double>(input_dim));
  const double gain2 = 1.0 / std::sqrt(static_cast<double>(kHidden));
  w1_.resize(static_cast<std::size_t>(kHidden) * input_dim);
  for (float& w : w1_) w = static_cast<float>(rng.normal() * gain1);
  w2_.resize(static_cast<std::size_t>(classes) * kHidden);
  for (float& w : w2_) w = static_cast<float>(rng.normal() * gain2);

  // Centre every class score on held-aside inputs, so that no class dominates the labels.
  b2_.assign(static_cast<std::size_t>(classes), 0.0);
  std::vector<double> mean(static_cast<std::size_t>(classes), 0.0);
  std::vector<double> s(static_cast<std::size_t>(classes));
  std::vector<float> x(static_cast<std::size_t>(input_dim));
  for (int k = 0; k < kCalibrationSamples; ++k) {
    features(kCalibrationFirst + static_cast<std::uint64_t>(k), x.data());
    scores(x.data(), s.data());
    for (int c = 0; c < classes; ++c) mean[c] += s[c] / kCalibrationSamples;
  }
  for (int c = 0; c < classes; ++c) b2_[c] = -mean[c];
}

void TeacherTask::features(std::uint64_t index, float* x) const {
  Rng rng(mix(mix(seed_, kSampleStream), index));
  for (int i = 0; i < input_dim_; ++i) x[i] = static_cast<float>(rng.normal());
}

void TeacherTask::scores(const float* x, double* out) const {
  double hidden[kHidden];
  for (int h = 0; h < kHidden; ++h) {
    const float* w = w1_.data() + static_cast<std::size_t>(h) * input_dim_;
    double acc = 0.0;
    for (int i = 0; i < input_dim_; ++i) acc += static_cast<double>(w[i]) * x[i];
    hidden[h] = std::tanh(acc);
  }
  for (int c = 0; c < classes_; ++c) {
    const float* w = w2_.data() + static_cast<std::size_t>(c) * kHidden;
    double acc = b2_[c];
    for (int h = 0; h < kHidden; ++h) acc += static_cast<double>(w[h]) * hidden[h];
    out[c] = acc;
  }
}

int TeacherTask::sample(std::uint64_t index, float* x) const {
  features(index, x);
  std::vector<double> s(static_cast<std::size_t>(classes_));
  scores(x, s.data());
  return static_cast<int>(std::max_element(s.begin(), s.end()) - s.begin());
}

Dataset load_shard(const TeacherTask& task, std::uint64_t first, std::uint64_t count, int rank,
                   int world_size) {
  const auto r = static_cast<std::uint64_t>(rank);
  const auto n = static_cast<std::uint64_t>(world_size);
  const std::uint64_t mine = count / n + (r < count % n ? 1 : 0);
  Dataset shard;
  shard.features.resize(static_cast<int>(mine), task.input_dim());
  shard.labels.resize(mine);
  for (std::uint64_t k = 0; k < mine; ++k) {
    const int row = static_cast<int>(k);
    shard.labels[k] = task.sample(first + r + k * n, shard.features.row(row));
  }
  return shard;
}

BatchSampler::BatchSampler(const Dataset& shard, std::uint64_t seed, int rank)
    : shard_(shard), seed_(seed), rank_(rank), order_(shard.size()) {
  if (shard.size() == 0) throw std::invalid_argument("a batch sampler needs a non-empty shard");
}

void BatchSampler::shuffle_for_epoch(std::uint64_t epoch) {
  if (epoch == epoch_) return;
  std::iota(order_.begin(), order_.end(), 0u);
  Rng rng(mix(mix(mix(seed_, kShuffleStream), static_cast<std::uint64_t>(rank_)), epoch));
  for (std::size_t i = order_.size(); i > 1; --i) std::swap(order_[i - 1], order_[rng.below(i)]);
  epoch_ = epoch;
}

void BatchSampler::fill(std::int64_t step, int batch, Matrix& x, std::vector<int>& labels) {
  const int dim = shard_.features.cols;
  x.resize(batch, dim);
  labels.resize(static_cast<std::size_t>(batch));
  const std::uint64_t n = shard_.size();
  const std::uint64_t first =
      static_cast<std::uint64_t>(step - 1) * static_cast<std::uint64_t>(batch);
  for (int b = 0; b < batch; ++b) {
    const std::uint64_t position = first + static_cast<std::uint64_t>(b);
    shuffle_for_epoch(position / n);
    const std::uint32_t row = order_[position % n];
    std::copy_n(shard_.features.row(static_cast<int>(row)), dim, x.row(b));
    labels[static_cast<std::size_t>(b)] = shard_.labels[row];
  }
}

}  // namespace lens_train
