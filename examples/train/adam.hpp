// Adam (Kingma and Ba, 2015) over one flat parameter buffer, with its state exposed so that a
// checkpoint can save and restore it.
//
//   lens_train::Adam adam(model.parameters().size());
//   adam.step(model.parameters(), model.gradients(), lr);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace lens_train {

/// Adam with bias correction. Deterministic: the same inputs give bit-identical results, which is
/// what keeps data-parallel ranks in sync. Not thread-safe.
class Adam {
 public:
  static constexpr float kBeta1 = 0.9f;
  static constexpr float kBeta2 = 0.999f;
  static constexpr float kEpsilon = 1e-8f;

  /// State for `size` parameters, all moments zero.
  explicit Adam(std::size_t size) : m_(size, 0.0f), v_(size, 0.0f) {}

  /// One update: params -= lr * m_hat / (sqrt(v_hat) + eps). Spans must have the state's size.
  void step(std::span<float> params, std::span<const float> grads, float lr) noexcept;

  /// Updates taken so far (the t of the bias correction).
  std::int64_t steps() const noexcept { return steps_; }
  std::vector<float>& first_moment() noexcept { return m_; }
  std::vector<float>& second_moment() noexcept { return v_; }
  const std::vector<float>& first_moment() const noexcept { return m_; }
  const std::vector<float>& second_moment() const noexcept { return v_; }
  /// Restores the update count from a checkpoint.
  void set_steps(std::int64_t steps) noexcept { steps_ = steps; }

 private:
  std::vector<float> m_;
  std::vector<float> v_;
  std::int64_t steps_ = 0;
};

}  // namespace lens_train
