#include "report/report_metrics.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <utility>

namespace nemo::lens::cli {

const char* metric_type_name(MetricType type) {
  switch (type) {
    case MetricType::kGauge:
      return "gauge";
    case MetricType::kSum:
      return "sum";
    case MetricType::kHistogram:
      return "histogram";
    case MetricType::kExponentialHistogram:
      return "exponential_histogram";
    case MetricType::kSummary:
      return "summary";
    case MetricType::kNone:
      break;
  }
  return "none";
}

// ---- ExponentialHistogram ----

ExponentialHistogram ExponentialHistogram::of(const MetricPoint& point) {
  ExponentialHistogram h;
  if (point.scale < kMinScale) return h;  // base 2^(2^10) and beyond: no usable bounds
  // A finer scale than OTLP's 20 is read at 20: its bucket k is bucket floor(k / 2^(s - 20)).
  const std::int32_t shift = point.scale > kMaxScale ? point.scale - kMaxScale : 0;
  h.scale = point.scale - shift;
  h.zero_count = point.zero_count;
  h.zero_threshold = point.zero_threshold;
  for (auto [from, to] :
       {std::pair{&point.positive, &h.positive}, {&point.negative, &h.negative}}) {
    for (std::size_t i = 0; i < from->counts.size(); ++i) {
      if (from->counts[i] == 0) continue;
      const std::int64_t k = static_cast<std::int64_t>(from->offset) + static_cast<std::int64_t>(i);
      const std::int64_t at = shift >= 63 ? (k < 0 ? -1 : 0) : k >> shift;
      if (!std::in_range<std::int32_t>(at)) return ExponentialHistogram{};  // past the last index
      (*to)[static_cast<std::int32_t>(at)] += from->counts[i];
    }
  }
  h.empty = false;
  h.fit();
  return h;
}

void ExponentialHistogram::downscale(std::int32_t by) {
  if (by <= 0) return;
  for (auto* side : {&positive, &negative}) {
    std::map<std::int32_t, std::uint64_t> coarser;
    // An arithmetic shift is floor(k / 2^by), for negative indices too.
    for (const auto& [k, c] : *side) coarser[by >= 31 ? (k < 0 ? -1 : 0) : k >> by] += c;
    *side = std::move(coarser);
  }
  scale -= by;
}

void ExponentialHistogram::fit() {
  auto span = [](const std::map<std::int32_t, std::uint64_t>& side) -> std::int64_t {
    return side.empty() ? 0
                        : static_cast<std::int64_t>(side.rbegin()->first) - side.begin()->first + 1;
  };
  while (std::max(span(positive), span(negative)) > kMaxBuckets) downscale(1);
}

void ExponentialHistogram::merge(const ExponentialHistogram& other) {
  if (other.empty) return;
  if (empty) {
    *this = other;
    return;
  }
  ExponentialHistogram incoming = other;
  downscale(scale - std::min(scale, incoming.scale));
  incoming.downscale(incoming.scale - scale);
  zero_count += incoming.zero_count;
  zero_threshold = std::max(zero_threshold, incoming.zero_threshold);
  for (const auto& [k, c] : incoming.positive) positive[k] += c;
  for (const auto& [k, c] : incoming.negative) negative[k] += c;
  fit();
}

bool ExponentialHistogram::subtract(const ExponentialHistogram& earlier) {
  if (earlier.empty) return true;
  if (empty) return false;
  ExponentialHistogram result = *this, old = earlier;
  result.downscale(result.scale - std::min(result.scale, old.scale));
  old.downscale(old.scale - result.scale);
  if (old.zero_count > result.zero_count) return false;
  result.zero_count -= old.zero_count;
  for (auto [from, to] :
       {std::pair{&old.positive, &result.positive}, std::pair{&old.negative, &result.negative}}) {
    for (const auto& [k, c] : *from) {
      auto it = to->find(k);
      if (it == to->end() || it->second < c) return false;
      if ((it->second -= c) == 0) to->erase(it);
    }
  }
  *this = std::move(result);
  return true;
}

std::uint64_t ExponentialHistogram::total() const {
  std::uint64_t n = zero_count;
  for (const auto& [k, c] : positive) n += c;
  for (const auto& [k, c] : negative) n += c;
  return n;
}

namespace {
// base^x for base = 2^(2^-scale).
double power_of_base(double x, std::int32_t scale) { return std::exp2(std::ldexp(x, -scale)); }
}  // namespace

std::optional<double> ExponentialHistogram::quantile(double q, std::optional<double> min,
                                                     std::optional<double> max) const {
  const std::uint64_t n = total();
  if (n == 0) return std::nullopt;
  const double rank = q * static_cast<double>(n);
  std::uint64_t below = 0;
  std::optional<double> estimate;
  // Whether the bucket of `c` values after `below` holds the rank (the last one always does);
  // `fraction` is how far into it.
  double fraction = 0;
  auto holds = [&](std::uint64_t c) {
    if (c == 0) return false;
    if (static_cast<double>(below + c) < rank && below + c < n) {
      below += c;
      return false;
    }
    fraction = std::clamp((rank - static_cast<double>(below)) / static_cast<double>(c), 0.0, 1.0);
    return true;
  };
  // In value order: the most negative bucket (the highest index) first.
  for (auto it = negative.rbegin(); it != negative.rend() && !estimate; ++it) {
    if (holds(it->second)) estimate = -power_of_base(it->first + 1 - fraction, scale);
  }
  if (!estimate && holds(zero_count)) estimate = 0.0;
  for (auto it = positive.begin(); it != positive.end() && !estimate; ++it) {
    if (holds(it->second)) estimate = power_of_base(it->first + fraction, scale);
  }
  if (!estimate) return std::nullopt;
  if (min) estimate = std::max(*estimate, *min);
  if (max) estimate = std::min(*estimate, *max);
  return estimate;
}

std::optional<double> ExponentialHistogram::max_estimate() const {
  if (!positive.empty()) return power_of_base(positive.rbegin()->first + 1, scale);
  if (zero_count > 0) return 0.0;
  if (!negative.empty()) return -power_of_base(negative.begin()->first, scale);
  return std::nullopt;
}

// ---- BucketHistogram ----

BucketHistogram BucketHistogram::of(const MetricPoint& point) {
  BucketHistogram h;
  h.empty = false;
  h.count = point.count;
  h.has_sum = point.sum.has_value();
  h.sum = point.sum.value_or(0);
  h.min = point.min;
  h.max = point.max;
  h.bounds = point.explicit_bounds;
  h.counts = point.bucket_counts;
  if (point.scale != 0 || point.zero_count != 0 || !point.positive.counts.empty() ||
      !point.negative.counts.empty()) {
    h.exponential = ExponentialHistogram::of(point);
  }
  return h;
}

void BucketHistogram::merge(const BucketHistogram& other) {
  if (other.empty) return;
  if (empty) {
    *this = other;
    return;
  }
  if (other.count > 0) {
    if (count == 0) {
      min = other.min;
      max = other.max;
    } else {
      min = min && other.min ? std::optional(std::min(*min, *other.min)) : std::nullopt;
      max = max && other.max ? std::optional(std::max(*max, *other.max)) : std::nullopt;
    }
  }
  count += other.count;
  has_sum = has_sum && other.has_sum;
  sum += other.sum;
  exponential.merge(other.exponential);
  if (other.counts.empty()) return;
  if (counts.empty()) {
    bounds = other.bounds;
    counts = other.counts;
    return;
  }
  if (bounds == other.bounds) {
    for (std::size_t i = 0; i < counts.size(); ++i) counts[i] += other.counts[i];
    return;
  }
  // Other bounds: each bucket goes to the one of ours that holds its upper bound.
  for (std::size_t i = 0; i < other.counts.size(); ++i) {
    std::size_t j = bounds.size();  // the overflow bucket
    if (i < other.bounds.size()) {
      j = static_cast<std::size_t>(std::lower_bound(bounds.begin(), bounds.end(), other.bounds[i]) -
                                   bounds.begin());
    }
    counts[j] += other.counts[i];
  }
}

bool BucketHistogram::subtract(const BucketHistogram& earlier) {
  if (earlier.empty) return true;
  if (empty || earlier.count > count || earlier.bounds != bounds ||
      earlier.counts.size() != counts.size()) {
    return false;
  }
  std::vector<std::uint64_t> left = counts;
  for (std::size_t i = 0; i < left.size(); ++i) {
    if (earlier.counts[i] > left[i]) return false;
    left[i] -= earlier.counts[i];
  }
  ExponentialHistogram exp = exponential;
  if (!exp.subtract(earlier.exponential)) return false;
  counts = std::move(left);
  exponential = std::move(exp);
  count -= earlier.count;
  has_sum = has_sum && earlier.has_sum;
  sum -= earlier.sum;
  return true;
}

std::optional<double> BucketHistogram::quantile(double q) const {
  if (counts.empty() && !exponential.empty) return exponential.quantile(q, min, max);
  std::uint64_t total = 0;
  for (const std::uint64_t c : counts) total += c;
  if (total == 0) return std::nullopt;
  const double rank = q * static_cast<double>(total);
  std::uint64_t below = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    const std::uint64_t c = counts[i];
    if (c == 0) continue;
    if (static_cast<double>(below + c) < rank && below + c < total) {
      below += c;
      continue;
    }
    double lower = 0, upper = 0;
    if (i > 0) {
      lower = bounds[i - 1];
    } else if (min) {
      lower = *min;
    } else if (!bounds.empty()) {
      lower = bounds[0] > 0 ? 0 : bounds[0];
    } else {
      return std::nullopt;  // one bucket, no extremes: nothing to place the values by
    }
    if (i < bounds.size()) {
      upper = bounds[i];
    } else if (max) {
      upper = *max;
    } else if (!bounds.empty()) {
      upper = bounds.back();
    } else {
      return std::nullopt;
    }
    if (min) lower = std::max(lower, *min);
    if (max) upper = std::min(upper, *max);
    if (upper < lower) upper = lower;
    const double fraction =
        std::clamp((rank - static_cast<double>(below)) / static_cast<double>(c), 0.0, 1.0);
    return lower + (upper - lower) * fraction;
  }
  return std::nullopt;
}

std::optional<double> BucketHistogram::max_estimate() const {
  if (max) return max;
  if (counts.empty() && !exponential.empty) return exponential.max_estimate();
  for (std::size_t i = counts.size(); i-- > 0;) {
    if (counts[i] == 0) continue;
    if (i < bounds.size()) return bounds[i];
    if (!bounds.empty()) return bounds.back();
    return std::nullopt;
  }
  return std::nullopt;
}

// ---- MetricAggregator ----

void MetricAggregator::Number::add(const MetricPoint& p) {
  Number n;
  n.is_int = p.is_int;
  n.int_value = p.int_value;
  n.value = p.value;
  add(n);
}

void MetricAggregator::Number::add(const Number& n) {
  value += n.value;
  if (is_int && n.is_int) {
    std::int64_t sum = 0;
    if (__builtin_add_overflow(int_value, n.int_value, &sum)) {
      is_int = false;
    } else {
      int_value = sum;
    }
  } else {
    is_int = false;
  }
}

void MetricAggregator::add(const ParsedRequest& request, std::optional<std::string_view> run_id) {
  for (const MetricRecord& m : request.metrics) {
    if (m.type == MetricType::kNone) continue;
    const SpanResource& r = request.resources[m.resource];
    if (run_id && r.run_id != *run_id) continue;
    const int rank_class = r.rank ? 0 : !r.instance_id.empty() ? 1 : 2;
    State& s =
        metrics_[Key{m.name, rank_class, r.rank.value_or(0),
                     rank_class == 1 ? r.instance_id : std::string(), static_cast<int>(m.type)}];
    if (!m.unit.empty()) s.unit = m.unit;
    if (s.instance_id.empty()) s.instance_id = r.instance_id;
    const bool delta =
        m.temporality == 1 && m.type != MetricType::kGauge && m.type != MetricType::kSummary;
    if (m.type == MetricType::kSum || m.type == MetricType::kHistogram ||
        m.type == MetricType::kExponentialHistogram) {
      s.temporalities |= delta ? 2u : 4u;
    }
    if (m.type == MetricType::kSum) s.monotonic = m.monotonic;
    for (const MetricPoint& p : m.points) {
      ++s.points;
      Series& series = s.series[p.series];
      if (m.type == MetricType::kGauge || m.type == MetricType::kSum) {
        if (!p.has_value) continue;
        Number n;
        n.add(p);
        std::vector<Sample>& samples = series.samples[r.run_id];
        samples.push_back({p.time_ns, delta, n, {}});
        if (samples.size() > kMaxSeriesPoints) thin(samples, true);
        if (delta) {
          series.has_delta = true;
          series.delta.add(n);
          continue;
        }
        if (!series.has_latest || p.time_ns >= series.latest_time) {
          series.has_latest = true;
          series.latest_time = p.time_ns;
          series.latest = n;
        }
        if (m.type == MetricType::kGauge && (!s.has_latest || p.time_ns >= s.latest_time)) {
          s.has_latest = true;
          s.latest_time = p.time_ns;
          s.latest = n;
        }
        continue;
      }
      BucketHistogram h = BucketHistogram::of(p);
      std::vector<Sample>& samples = series.samples[r.run_id];
      samples.push_back({p.time_ns, delta, {}, h});
      if (samples.size() > kMaxSeriesPoints) thin(samples, false);
      if (delta) {
        series.has_delta = true;
        series.delta_histogram.merge(h);
      } else if (!series.has_latest || p.time_ns >= series.latest_time) {
        series.has_latest = true;
        series.latest_time = p.time_ns;
        series.latest_histogram = std::move(h);
      }
    }
  }
}

void MetricAggregator::thin(std::vector<Sample>& samples, bool numbers) {
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
  std::vector<Sample> kept;
  kept.reserve(samples.size() / 2 + 1);
  for (std::size_t i = 0; i < samples.size(); i += 2) {
    if (i + 1 == samples.size()) {
      kept.push_back(std::move(samples[i]));
      break;
    }
    Sample& earlier = samples[i];
    Sample& later = samples[i + 1];
    // Two delta points hold the values of both intervals; a cumulative point (or a gauge's)
    // already includes (or replaces) the one before it.
    if (earlier.delta && later.delta) {
      if (numbers) {
        earlier.number.add(later.number);
      } else {
        earlier.histogram.merge(later.histogram);
      }
      earlier.time_ns = later.time_ns;
      kept.push_back(std::move(earlier));
    } else {
      kept.push_back(std::move(later));
    }
  }
  samples = std::move(kept);
}

std::vector<SeriesPoint> MetricAggregator::points_of(std::vector<Sample> samples, MetricType type) {
  // Stable: of two points at one time, the one read last is the later, as for the row's value.
  std::stable_sort(samples.begin(), samples.end(),
                   [](const Sample& a, const Sample& b) { return a.time_ns < b.time_ns; });
  std::vector<SeriesPoint> points;
  points.reserve(samples.size());
  if (type == MetricType::kGauge || type == MetricType::kSum) {
    bool has_cumulative = false;
    Number cumulative, deltas;
    for (const Sample& s : samples) {
      Number v;
      if (type == MetricType::kGauge) {
        v = s.number;
      } else {
        if (s.delta) {
          deltas.add(s.number);
        } else {
          cumulative = s.number;
          has_cumulative = true;
        }
        if (has_cumulative) v.add(cumulative);
        v.add(deltas);
      }
      SeriesPoint& p = points.emplace_back();
      p.time_ns = s.time_ns;
      p.is_int = v.is_int;
      p.int_value = v.int_value;
      p.value = v.is_int ? static_cast<double>(v.int_value) : v.value;
    }
    return points;
  }
  const BucketHistogram* previous = nullptr;  // the previous cumulative point
  for (const Sample& s : samples) {
    BucketHistogram interval = s.histogram;
    if (!s.delta) {
      if (previous != nullptr && !interval.subtract(*previous)) interval = s.histogram;
      previous = &s.histogram;
    }
    SeriesPoint& p = points.emplace_back();
    p.time_ns = s.time_ns;
    p.count = interval.count;
    if (interval.has_sum) p.sum = interval.sum;
    p.p50 = interval.quantile(0.5);
    p.p95 = interval.quantile(0.95);
  }
  return points;
}

std::vector<MetricRow> MetricAggregator::finish() const {
  std::vector<MetricRow> rows;
  for (const auto& [key, s] : metrics_) {
    MetricRow row;
    const auto& [name, rank_class, rank, instance_id, type] = key;
    row.name = name;
    row.type = static_cast<MetricType>(type);
    if (rank_class == 0) row.rank = rank;
    row.instance_id = rank_class == 1 ? instance_id : s.instance_id;
    row.unit = s.unit;
    row.temporality = s.temporalities == 2u   ? "delta"
                      : s.temporalities == 4u ? "cumulative"
                      : s.temporalities == 6u ? "mixed"
                                              : "";
    row.monotonic = s.monotonic;
    row.series = s.series.size();
    row.points = s.points;
    if (s.series.size() == 1) row.attributes = s.series.begin()->first;
    for (const auto& [attributes, series] : s.series) {
      for (const auto& [run_id, samples] : series.samples) {
        row.timeseries.push_back({attributes, run_id, points_of(samples, row.type)});
      }
    }
    if (row.type == MetricType::kGauge || row.type == MetricType::kSum) {
      Number total;
      if (row.type == MetricType::kGauge) {
        row.has_value = s.has_latest;
        total = s.latest;
        for (const auto& [attributes, series] : s.series) {
          if (!series.has_latest) continue;
          row.by_series.push_back({attributes, series.latest.is_int, series.latest.int_value,
                                   series.latest.is_int
                                       ? static_cast<double>(series.latest.int_value)
                                       : series.latest.value});
        }
      } else {
        for (const auto& [attributes, series] : s.series) {
          if (series.has_latest) total.add(series.latest);
          if (series.has_delta) total.add(series.delta);
          row.has_value = row.has_value || series.has_latest || series.has_delta;
        }
      }
      row.is_int = total.is_int;
      row.int_value = total.int_value;
      row.value = total.is_int ? static_cast<double>(total.int_value) : total.value;
    } else {
      BucketHistogram total;
      for (const auto& [attributes, series] : s.series) {
        if (series.has_latest) total.merge(series.latest_histogram);
        if (series.has_delta) total.merge(series.delta_histogram);
      }
      row.count = total.count;
      if (!total.empty && total.has_sum) {
        row.sum = total.sum;
        if (total.count > 0) row.mean = total.sum / static_cast<double>(total.count);
      }
      row.p50 = total.quantile(0.5);
      row.p95 = total.quantile(0.95);
      row.max = total.max_estimate();
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

}  // namespace nemo::lens::cli
