#include "mlp.hpp"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>
#include <utility>

#include "nemo/lens/lens.hpp"
#include "rng.hpp"

namespace lens_train {

using nemo::lens::MegatronSpanGroup;

namespace {

/// y = x W + b for every row of x; W is [in][out]. Zero inputs (after ReLU) are skipped.
void dense_forward(const Matrix& x, const float* w, const float* b, int out, Matrix& y) {
  y.resize(x.rows, out);
  for (int r = 0; r < x.rows; ++r) {
    const float* xr = x.row(r);
    float* yr = y.row(r);
    std::copy(b, b + out, yr);
    for (int i = 0; i < x.cols; ++i) {
      const float xi = xr[i];
      if (xi == 0.0f) continue;
      const float* wi = w + static_cast<std::size_t>(i) * out;
      for (int o = 0; o < out; ++o) yr[o] += xi * wi[o];
    }
  }
}

void relu_inplace(Matrix& m) noexcept {
  for (float& v : m.data) v = std::max(v, 0.0f);
}

/// dW += x^T g and db += column sums of g.
void dense_weight_grads(const Matrix& x, const Matrix& g, float* dw, float* db) {
  const int out = g.cols;
  for (int r = 0; r < g.rows; ++r) {
    const float* xr = x.row(r);
    const float* gr = g.row(r);
    for (int o = 0; o < out; ++o) db[o] += gr[o];
    for (int i = 0; i < x.cols; ++i) {
      const float xi = xr[i];
      if (xi == 0.0f) continue;
      float* dwi = dw + static_cast<std::size_t>(i) * out;
      for (int o = 0; o < out; ++o) dwi[o] += xi * gr[o];
    }
  }
}

/// dx = g W^T, masked by the ReLU that produced x (x > 0).
void dense_input_grads(const Matrix& g, const float* w, const Matrix& x, Matrix& dx) {
  const int out = g.cols;
  dx.resize(g.rows, x.cols);
  for (int r = 0; r < g.rows; ++r) {
    const float* gr = g.row(r);
    const float* xr = x.row(r);
    float* dxr = dx.row(r);
    for (int i = 0; i < x.cols; ++i) {
      if (xr[i] <= 0.0f) {
        dxr[i] = 0.0f;
        continue;
      }
      const float* wi = w + static_cast<std::size_t>(i) * out;
      float acc = 0.0f;
      for (int o = 0; o < out; ++o) acc += gr[o] * wi[o];
      dxr[i] = acc;
    }
  }
}

}  // namespace

Mlp::Mlp(std::vector<int> dims) : dims_(std::move(dims)) {
  if (dims_.size() < 2) throw std::invalid_argument("an MLP needs at least an input and an output");
  std::size_t offset = 0;
  for (std::size_t l = 0; l + 1 < dims_.size(); ++l) {
    if (dims_[l] <= 0 || dims_[l + 1] <= 0) throw std::invalid_argument("layer widths must be > 0");
    Layer layer;
    layer.in = dims_[l];
    layer.out = dims_[l + 1];
    layer.weight = offset;
    offset += static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
    layer.bias = offset;
    offset += static_cast<std::size_t>(layer.out);
    layers_.push_back(layer);
  }
  params_.assign(offset, 0.0f);
  grads_.assign(offset, 0.0f);
}

void Mlp::init(std::uint64_t seed) {
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    Rng rng(mix(seed, 0x1000 + l));
    // He initialisation for the layers followed by ReLU; the output layer starts small, so that
    // the first predictions are close to uniform (loss about log(classes)).
    const bool output = l + 1 == layers_.size();
    const double stddev = output ? 0.5 / std::sqrt(layer.in) : std::sqrt(2.0 / layer.in);
    float* w = params_.data() + layer.weight;
    const std::size_t n = static_cast<std::size_t>(layer.in) * static_cast<std::size_t>(layer.out);
    for (std::size_t k = 0; k < n; ++k) w[k] = static_cast<float>(rng.normal() * stddev);
    std::fill_n(params_.data() + layer.bias, layer.out, 0.0f);
  }
}

const Matrix& Mlp::forward(const Matrix& input, Activations& acts,
                           std::chrono::milliseconds stall) const {
  acts.input = &input;
  acts.outputs.resize(layers_.size());
  for (std::size_t l = 0; l < layers_.size(); ++l) {
    const Layer& layer = layers_[l];
    LENS_SPAN(span, MegatronSpanGroup::LAYER, "layer_forward", {"layer", l},
              {"samples", input.rows});
    const Matrix& x = l == 0 ? input : acts.outputs[l - 1];
    dense_forward(x, params_.data() + layer.weight, params_.data() + layer.bias, layer.out,
                  acts.outputs[l]);
    if (l + 1 < layers_.size()) relu_inplace(acts.outputs[l]);
    if (l + 1 == layers_.size() && stall.count() > 0) std::this_thread::sleep_for(stall);
  }
  return acts.outputs.back();
}

void Mlp::backward(const Matrix& dlogits, Activations& acts) {
  acts.grad = dlogits;
  for (std::size_t l = layers_.size(); l-- > 0;) {
    const Layer& layer = layers_[l];
    LENS_SPAN(span, MegatronSpanGroup::LAYER, "layer_backward", {"layer", l},
              {"samples", dlogits.rows});
    const Matrix& x = l == 0 ? *acts.input : acts.outputs[l - 1];
    dense_weight_grads(x, acts.grad, grads_.data() + layer.weight, grads_.data() + layer.bias);
    if (l > 0) {
      dense_input_grads(acts.grad, params_.data() + layer.weight, x, acts.grad_next);
      std::swap(acts.grad, acts.grad_next);
    }
  }
}

void Mlp::zero_gradients() noexcept { std::fill(grads_.begin(), grads_.end(), 0.0f); }

std::int64_t Mlp::forward_macs_per_sample() const noexcept {
  std::int64_t macs = 0;
  for (const Layer& layer : layers_) macs += static_cast<std::int64_t>(layer.in) * layer.out;
  return macs;
}

LossResult softmax_cross_entropy(const Matrix& logits, std::span<const int> labels,
                                 float grad_scale, Matrix* dlogits) {
  LossResult result;
  if (dlogits != nullptr) dlogits->resize(logits.rows, logits.cols);
  for (int r = 0; r < logits.rows; ++r) {
    const float* z = logits.row(r);
    const int label = labels[static_cast<std::size_t>(r)];
    const float* top = std::max_element(z, z + logits.cols);
    if (top - z == label) ++result.correct;
    double sum = 0.0;
    for (int c = 0; c < logits.cols; ++c) sum += std::exp(static_cast<double>(z[c] - *top));
    result.loss_sum += std::log(sum) - static_cast<double>(z[label] - *top);
    if (dlogits == nullptr) continue;
    float* d = dlogits->row(r);
    for (int c = 0; c < logits.cols; ++c) {
      const double p = std::exp(static_cast<double>(z[c] - *top)) / sum;
      d[c] = static_cast<float>(p - (c == label ? 1.0 : 0.0)) * grad_scale;
    }
  }
  return result;
}

}  // namespace lens_train
