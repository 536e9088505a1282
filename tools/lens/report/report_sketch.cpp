#include "report/report_sketch.hpp"

#include <algorithm>
#include <cmath>

namespace nemo::lens::cli {
namespace {

// gamma = (1 + a) / (1 - a): a value in (gamma^(i-1), gamma^i] is represented by
// 2 gamma^i / (gamma + 1), which is within a of it.
const double kGamma = (1 + DurationSketch::kRelativeError) / (1 - DurationSketch::kRelativeError);
const double kLogGamma = std::log(kGamma);

int bucket_index(std::uint64_t ns) {
  return static_cast<int>(std::ceil(std::log(static_cast<double>(ns)) / kLogGamma));
}

double bucket_value(int index) { return 2 * std::exp(index * kLogGamma) / (kGamma + 1); }

}  // namespace

void DurationSketch::add(std::uint64_t ns) {
  if (count_ == 0 || ns < min_) min_ = ns;
  max_ = std::max(max_, ns);
  ++count_;
  sum_ += ns;
  if (!bucketed_) {
    exact_.push_back(ns);
    if (exact_.size() > kExactLimit) switch_to_buckets();
    return;
  }
  add_to_bucket(ns, 1);
}

void DurationSketch::add_to_bucket(std::uint64_t ns, std::uint64_t n) {
  if (ns == 0) {
    zeros_ += n;
    return;
  }
  add_to_index(bucket_index(ns), n);
}

void DurationSketch::add_to_index(int index, std::uint64_t n) {
  if (buckets_.empty()) {
    first_index_ = index;
    buckets_.push_back(0);
  } else if (index < first_index_) {
    buckets_.insert(buckets_.begin(), static_cast<std::size_t>(first_index_ - index), 0);
    first_index_ = index;
  } else if (index >= first_index_ + static_cast<int>(buckets_.size())) {
    buckets_.resize(static_cast<std::size_t>(index - first_index_ + 1), 0);
  }
  buckets_[static_cast<std::size_t>(index - first_index_)] += n;
}

void DurationSketch::switch_to_buckets() {
  bucketed_ = true;
  for (std::uint64_t v : exact_) add_to_bucket(v, 1);
  exact_.clear();
  exact_.shrink_to_fit();
}

void DurationSketch::merge(const DurationSketch& other) {
  if (other.count_ == 0) return;
  if (count_ == 0 || other.min_ < min_) min_ = other.min_;
  max_ = std::max(max_, other.max_);
  count_ += other.count_;
  sum_ += other.sum_;
  if (!bucketed_ && !other.bucketed_ && exact_.size() + other.exact_.size() <= kExactLimit) {
    exact_.insert(exact_.end(), other.exact_.begin(), other.exact_.end());
    return;
  }
  if (!bucketed_) switch_to_buckets();
  if (!other.bucketed_) {
    for (std::uint64_t v : other.exact_) add_to_bucket(v, 1);
    return;
  }
  zeros_ += other.zeros_;
  for (std::size_t i = 0; i < other.buckets_.size(); ++i) {
    if (other.buckets_[i] != 0)
      add_to_index(other.first_index_ + static_cast<int>(i), other.buckets_[i]);
  }
}

double DurationSketch::order_statistic(std::uint64_t k,
                                       const std::vector<std::uint64_t>& sorted) const {
  if (!bucketed_) return static_cast<double>(sorted[k]);
  if (k < zeros_) return 0.0;
  std::uint64_t seen = zeros_;
  for (std::size_t i = 0; i < buckets_.size(); ++i) {
    seen += buckets_[i];
    if (k < seen) {
      const double v = bucket_value(first_index_ + static_cast<int>(i));
      return std::clamp(v, static_cast<double>(min_), static_cast<double>(max_));
    }
  }
  return static_cast<double>(max_);
}

double DurationSketch::quantile(double q) const {
  if (count_ == 0) return 0.0;
  q = std::clamp(q, 0.0, 1.0);
  std::vector<std::uint64_t> sorted;
  if (!bucketed_) {
    sorted = exact_;
    std::sort(sorted.begin(), sorted.end());
  }
  const double position = q * static_cast<double>(count_ - 1);
  const auto lo = static_cast<std::uint64_t>(std::floor(position));
  const std::uint64_t hi = std::min(lo + 1, count_ - 1);
  const double v_lo = order_statistic(lo, sorted);
  if (hi == lo || position == static_cast<double>(lo)) return v_lo;
  const double v_hi = order_statistic(hi, sorted);
  return v_lo + (position - static_cast<double>(lo)) * (v_hi - v_lo);
}

}  // namespace nemo::lens::cli
