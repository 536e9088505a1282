// Durations summarised in memory that does not grow with their number, for `lens report`: count,
// sum, minimum and maximum exactly, percentiles exactly up to kExactLimit values and then from a
// log-bucketed histogram whose estimates are within kRelativeError of the exact value (the
// DDSketch construction: bucket i holds the values in (gamma^(i-1), gamma^i]).
//
//   DurationSketch steps;
//   for (std::uint64_t ns : durations) steps.add(ns);
//   double p95 = steps.quantile(0.95);   // within 1 % of the exact 95th percentile
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace nemo::lens::cli {

/// A summary of non-negative durations (nanoseconds). Not thread-safe. Memory: at most
/// kExactLimit values, then one 8-byte counter per bucket between the smallest and the largest
/// value (about 115 buckets per factor of 10; 1 ns to 10^6 s is under 1800 buckets).
class DurationSketch {
 public:
  /// Up to this many values the sketch keeps them all and its percentiles are exact.
  static constexpr std::size_t kExactLimit = 256;
  /// The largest relative error of a percentile once the sketch has switched to buckets.
  static constexpr double kRelativeError = 0.01;

  /// Adds one value.
  void add(std::uint64_t ns);

  /// Adds every value `other` holds (the result is the sketch of both sets of values).
  void merge(const DurationSketch& other);

  std::uint64_t count() const { return count_; }
  /// The sum of the values (wraps after 584 years in total).
  std::uint64_t sum() const { return sum_; }
  /// The smallest value, 0 when empty.
  std::uint64_t min() const { return count_ == 0 ? 0 : min_; }
  /// The largest value, 0 when empty.
  std::uint64_t max() const { return max_; }
  /// sum() / count(), 0 when empty.
  double mean() const { return count_ == 0 ? 0.0 : static_cast<double>(sum_) / count_; }

  /// The q-quantile (0 <= q <= 1) by linear interpolation between the two order statistics
  /// around q * (count - 1) (numpy's default "linear" method): the median of {1, 2, 3, 4} is 2.5.
  /// Exact while count() <= kExactLimit, else within kRelativeError of the exact value. 0 when
  /// empty.
  double quantile(double q) const;

  /// Whether the percentiles come from buckets (more than kExactLimit values were added).
  bool is_bucketed() const { return bucketed_; }
  /// The number of bucket counters held (memory check in tests).
  std::size_t bucket_count() const { return buckets_.size(); }

 private:
  void add_to_bucket(std::uint64_t ns, std::uint64_t n);
  void add_to_index(int index, std::uint64_t n);
  void switch_to_buckets();
  // The k-th smallest value (0-based): exact, or the representative of its bucket clamped to
  // [min, max].
  double order_statistic(std::uint64_t k, const std::vector<std::uint64_t>& sorted) const;

  std::uint64_t count_ = 0;
  std::uint64_t sum_ = 0;
  std::uint64_t min_ = 0;
  std::uint64_t max_ = 0;
  bool bucketed_ = false;
  std::vector<std::uint64_t> exact_;    // the values, while !bucketed_
  std::uint64_t zeros_ = 0;             // values equal to 0, once bucketed_
  int first_index_ = 0;                 // the bucket index of buckets_[0]
  std::vector<std::uint64_t> buckets_;  // counts of buckets first_index_, first_index_ + 1, ...
};

}  // namespace nemo::lens::cli
