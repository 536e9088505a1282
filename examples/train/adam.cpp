#include "adam.hpp"

#include <cmath>

namespace lens_train {

void Adam::step(std::span<float> params, std::span<const float> grads, float lr) noexcept {
  ++steps_;
  const auto t = static_cast<double>(steps_);
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(kBeta1), t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(kBeta2), t));
  const float step_size = lr / correction1;
  const float inv_sqrt_correction2 = 1.0f / std::sqrt(correction2);
  for (std::size_t k = 0; k < params.size(); ++k) {
    const float g = grads[k];
    m_[k] = kBeta1 * m_[k] + (1.0f - kBeta1) * g;
    v_[k] = kBeta2 * v_[k] + (1.0f - kBeta2) * g * g;
    params[k] -= step_size * m_[k] / (std::sqrt(v_[k]) * inv_sqrt_correction2 + kEpsilon);
  }
}

}  // namespace lens_train
