// Deterministic random numbers for the training demo. The same seed gives the same numbers on every
// rank, and any sample of the data set can be drawn on its own (seed it with mix(seed, index)), so
// ranks agree on the task without communicating.
//
//   lens_train::Rng rng(lens_train::mix(seed, sample_index));
//   const float x = rng.normal();
#pragma once

#include <cmath>
#include <cstdint>
#include <numbers>

namespace lens_train {

/// Combines two values into a well-spread 64-bit seed (the SplitMix64 finaliser of a ^ rotated b).
constexpr std::uint64_t mix(std::uint64_t a, std::uint64_t b) noexcept {
  std::uint64_t z = a ^ (b * 0x9E3779B97F4A7C15ULL + 0x632BE59BD9B4E019ULL + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

/// SplitMix64: a small, fast generator; plenty for synthetic data and weight initialisation.
/// Not thread-safe (one per thread).
class Rng {
 public:
  explicit Rng(std::uint64_t seed) noexcept : state_(seed) {}

  /// The next 64 random bits.
  std::uint64_t next() noexcept {
    std::uint64_t z = (state_ += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
  }

  /// Uniform in [0, 1).
  double uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

  /// Uniform integer in [0, n), n > 0.
  std::uint64_t below(std::uint64_t n) noexcept { return next() % n; }

  /// Standard normal (Box-Muller; one value per call).
  double normal() noexcept {
    const double u1 = 1.0 - uniform();  // (0, 1]: log is finite
    const double u2 = uniform();
    return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  }

 private:
  std::uint64_t state_;
};

}  // namespace lens_train
