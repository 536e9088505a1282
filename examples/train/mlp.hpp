// A small multi-layer perceptron with hand-written forward and backward passes: dense layers with
// ReLU between them, softmax cross-entropy on top. Parameters and gradients each live in one flat
// buffer, so a data-parallel step all-reduces one contiguous array. Each layer's forward and
// backward is a span of the `layer` group.
//
//   lens_train::Mlp model({32, 128, 128, 128, 8});
//   model.init(seed);
//   lens_train::Activations acts;
//   const lens_train::Matrix& logits = model.forward(x, acts);
//   model.backward(dlogits, acts);   // accumulates into model.gradients()
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lens_train {

/// A row-major matrix of floats: one row per sample.
struct Matrix {
  int rows = 0;
  int cols = 0;
  std::vector<float> data;

  /// Sets the shape, keeping the allocation when it is large enough. Contents are unspecified.
  void resize(int new_rows, int new_cols) {
    rows = new_rows;
    cols = new_cols;
    data.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols));
  }
  float* row(int r) noexcept { return data.data() + static_cast<std::size_t>(r) * cols; }
  const float* row(int r) const noexcept {
    return data.data() + static_cast<std::size_t>(r) * cols;
  }
};

/// What a forward pass keeps for the backward pass: each layer's output (after ReLU for hidden
/// layers), plus scratch space for the gradient flowing backwards. Reused across calls.
struct Activations {
  const Matrix* input = nullptr;
  std::vector<Matrix> outputs;
  Matrix grad;
  Matrix grad_next;
};

/// Dense layers dims[0] -> dims[1] -> ... -> dims.back(), ReLU after every layer but the last.
/// Layer l computes y = x W_l + b_l with W_l stored [in][out] in the flat parameter buffer.
/// Not thread-safe; forward() is const so several threads may run it with their own Activations.
class Mlp {
 public:
  /// Throws std::invalid_argument for fewer than two dims or a non-positive width.
  explicit Mlp(std::vector<int> dims);

  /// He-normal weights and zero biases, drawn from `seed` (the same on every rank).
  void init(std::uint64_t seed);

  /// Forward pass of a batch (input.cols == input_dim()). Keeps what backward() needs in `acts`
  /// (which must outlive that call, as must `input`). Returns the logits, owned by `acts`.
  /// `stall`: the last layer's forward sleeps this long too (lens_train --stall-step: a slow
  /// kernel, for the flight recorder to capture).
  const Matrix& forward(const Matrix& input, Activations& acts,
                        std::chrono::milliseconds stall = {}) const;

  /// Backward pass for the batch of the last forward() with `acts`: adds d(loss)/d(parameters) to
  /// gradients(), given d(loss)/d(logits).
  void backward(const Matrix& dlogits, Activations& acts);

  /// Sets every gradient to zero.
  void zero_gradients() noexcept;

  std::span<float> parameters() noexcept { return params_; }
  std::span<const float> parameters() const noexcept { return params_; }
  std::span<float> gradients() noexcept { return grads_; }
  std::span<const float> gradients() const noexcept { return grads_; }

  const std::vector<int>& dims() const noexcept { return dims_; }
  int num_layers() const noexcept { return static_cast<int>(dims_.size()) - 1; }
  int input_dim() const noexcept { return dims_.front(); }
  int output_dim() const noexcept { return dims_.back(); }

  /// Multiply-adds of one sample's forward pass (backward costs about twice as much).
  std::int64_t forward_macs_per_sample() const noexcept;

 private:
  struct Layer {
    int in = 0;
    int out = 0;
    std::size_t weight = 0;  // offset of W (in x out) in the flat buffers
    std::size_t bias = 0;    // offset of b (out)
  };

  std::vector<int> dims_;
  std::vector<Layer> layers_;
  std::vector<float> params_;
  std::vector<float> grads_;
};

/// Softmax cross-entropy of `logits` against `labels`. Writes d(loss)/d(logits) * `grad_scale`
/// into `dlogits` (pass 1/B to average over a batch of B accumulated in several parts).
struct LossResult {
  double loss_sum = 0;       // summed over the rows
  std::int64_t correct = 0;  // rows whose argmax is the label
};
LossResult softmax_cross_entropy(const Matrix& logits, std::span<const int> labels,
                                 float grad_scale, Matrix* dlogits);

}  // namespace lens_train
