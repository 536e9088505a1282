// The metrics section of `lens report`: the OTLP metrics found in the input lines
// (resourceMetrics), aggregated per metric name and rank, and each series over time. Memory grows
// with the number of distinct series (metric, rank, attribute set), their histogram buckets and
// the points kept for their curves (at most kMaxSeriesPoints each), never with the number of lines.
//
//   MetricAggregator metrics;
//   reader.read(file, [&](const ParsedRequest& r) { metrics.add(r); }, ...);
//   std::vector<MetricRow> rows = metrics.finish();  // by name, then rank
//
// Per series (one attribute set of one metric of one rank): a sum is its last cumulative value
// (the point with the latest timeUnixNano) plus the sum of its delta points; a histogram the
// same, bucket by bucket. A row adds up its series; a gauge row lists each series' latest value
// (and, as its value, the latest point of any series). Each series' points, by time, are in
// MetricRow::timeseries. Rules and limits: docs/report.md.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "common/span_reader.hpp"

namespace nemo::lens::cli {

/// A gauge series' latest value.
struct SeriesValue {
  std::string attributes;  // the series: "key=value" pairs sorted by key, joined by ", "
  bool is_int = false;
  std::int64_t int_value = 0;
  double value = 0;
};

/// One point of a time series. Gauges: the point's value. Sums: the sum's value as of time_ns
/// (the latest cumulative point then, plus the delta points up to then), so a series' last point
/// is the row's value. Histograms and summaries: what was recorded in the interval ending at
/// time_ns (a delta point; a cumulative point minus the series' previous one, or the whole point
/// after a reset).
struct SeriesPoint {
  std::uint64_t time_ns = 0;
  bool is_int = false;
  std::int64_t int_value = 0;
  double value = 0;
  std::uint64_t count = 0;
  std::optional<double> sum, p50, p95;
};

/// The points of one series (one attribute set) of a metric of one rank in one run, by time.
/// Runs are apart so that two jobs of one receiver's files are two curves, not one joined up.
struct TimeSeries {
  std::string attributes;  // as SeriesValue::attributes
  std::string run_id;      // the resource's nemo.run.id (empty without one)
  std::vector<SeriesPoint> points;
};

/// One metric of one rank, over every point read.
struct MetricRow {
  std::string name;
  std::string unit;
  MetricType type = MetricType::kNone;
  std::optional<std::int64_t> rank;  // dl.rank of the resource
  std::string instance_id;           // service.instance.id (the first seen): the rank's label
                                     // without dl.rank
  /// Sums and histograms: "cumulative" (unspecified counts as cumulative), "delta", or "mixed"
  /// when both were seen; empty for gauges and summaries.
  std::string temporality;
  bool monotonic = false;    // sums
  std::uint64_t series = 0;  // distinct attribute sets
  /// The attributes of the one series when there is exactly one (empty otherwise, or when that
  /// series has none).
  std::string attributes;
  /// Gauges: each series' latest value, by attributes (a gauge's series are not added up).
  std::vector<SeriesValue> by_series;
  std::uint64_t points = 0;  // data points read
  /// Every series over time, by attributes (see SeriesPoint; at most
  /// MetricAggregator::kMaxSeriesPoints points each).
  std::vector<TimeSeries> timeseries;
  // Gauges and sums: the value (an integer when every point contributing to it was asInt).
  bool has_value = false;
  bool is_int = false;
  std::int64_t int_value = 0;
  double value = 0;
  // Histograms, exponential histograms and summaries.
  std::uint64_t count = 0;
  std::optional<double> sum, mean, p50, p95, max;
};

/// "sum", "gauge", "histogram", "exponential_histogram", "summary" (or "none").
const char* metric_type_name(MetricType type);

/// The buckets of exponential histograms (OTLP ExponentialHistogram), merged at the finest scale
/// they share. With base = 2^(2^-scale), positive bucket k holds the values in
/// (base^k, base^(k+1)], negative bucket k those in [-base^(k+1), -base^k); zero_count the values
/// within zero_threshold of 0.
struct ExponentialHistogram {
  /// At most this many buckets on either side: a merge that would span more lowers the scale
  /// (each step halves the number of buckets) instead of growing without bound.
  static constexpr std::int64_t kMaxBuckets = 320;
  /// OTLP's range of scales. A point of a finer scale is read at kMaxScale; one of a coarser
  /// scale (whose bounds pass the range of a double) keeps its count and sum but no buckets, as
  /// does one whose bucket indices pass the 32-bit range.
  static constexpr std::int32_t kMinScale = -10;
  static constexpr std::int32_t kMaxScale = 20;

  bool empty = true;  // nothing merged yet
  std::int32_t scale = 0;
  std::uint64_t zero_count = 0;
  double zero_threshold = 0;
  std::map<std::int32_t, std::uint64_t> positive, negative;  // bucket index -> count (non-zero)

  /// The point's buckets; `empty` when it has none the report can use (see kMinScale).
  static ExponentialHistogram of(const MetricPoint& point);
  /// Adds another histogram's counts, both at the smaller of the two scales (bucket k at scale s
  /// is bucket floor(k / 2^(s - s')) at scale s' < s). The zero threshold is the larger one.
  void merge(const ExponentialHistogram& other);
  /// Takes away the counts of `earlier`, an older cumulative point of the same series (both at
  /// the coarser scale). False, leaving this unchanged, when some bucket would go negative (the
  /// series was reset in between).
  bool subtract(const ExponentialHistogram& earlier);
  /// The number of values in the buckets and the zero bucket.
  std::uint64_t total() const;
  /// The q-quantile (0 <= q <= 1): the bucket holding rank q·total, in value order (negative
  /// buckets, the zero bucket, positive buckets), and within it exponential interpolation: the
  /// value a fraction f of the way through positive bucket k is base^(k+f) (negative buckets
  /// mirrored); the zero bucket's values are 0. Clamped to [min, max] when given. Empty without
  /// counts.
  std::optional<double> quantile(double q, std::optional<double> min,
                                 std::optional<double> max) const;
  /// The upper bound of the highest non-empty bucket (0 for the zero bucket). Empty without counts.
  std::optional<double> max_estimate() const;

 private:
  void downscale(std::int32_t by);
  void fit();
};

/// The distribution a histogram's buckets describe, with what it knows of its extremes. `counts`
/// has one more entry than `bounds` (bucket i holds the values in (bounds[i-1], bounds[i]]), or
/// none at all (summaries: count and sum only; exponential histograms: their buckets in
/// `exponential`).
struct BucketHistogram {
  bool empty = true;  // nothing merged yet
  std::uint64_t count = 0;
  bool has_sum = true;
  double sum = 0;
  std::optional<double> min, max;  // known only when every merged point carried them
  std::vector<double> bounds;
  std::vector<std::uint64_t> counts;
  ExponentialHistogram exponential;

  /// Adds a point's (or another histogram's) counts. Different bounds are re-bucketed into this
  /// one's: each incoming bucket goes whole to the bucket holding its upper bound.
  void merge(const BucketHistogram& other);
  static BucketHistogram of(const MetricPoint& point);
  /// Becomes what was recorded since `earlier`, an older cumulative point of the same series:
  /// count, sum and buckets minus its (min and max stay, as bounds of every value). False,
  /// leaving this unchanged, when that cannot be told: fewer values than `earlier` (a reset),
  /// other bounds, or a bucket that would go negative.
  bool subtract(const BucketHistogram& earlier);

  /// The q-quantile (0 <= q <= 1) estimated from the buckets: the bucket holding rank q·count, by
  /// linear interpolation between its bounds. The first bucket starts at min (else 0, or its
  /// upper bound when that is not positive), the last ends at max (else at the highest bound);
  /// estimates are clamped to [min, max]. Exponential buckets: ExponentialHistogram::quantile.
  /// Empty without buckets or counts.
  std::optional<double> quantile(double q) const;
  /// max when known, else the upper bound of the highest non-empty bucket (the highest bound for
  /// the overflow bucket). Empty without buckets or counts.
  std::optional<double> max_estimate() const;
};

/// Aggregates the metrics of the requests it is given. Not thread-safe.
class MetricAggregator {
 public:
  /// A series keeps at most this many points: one more merges each pair of neighbours into one
  /// at the later time (delta values added, cumulative values and gauges the later one), so a
  /// long run keeps between half and all of this many, evenly over its time.
  static constexpr std::size_t kMaxSeriesPoints = 1024;

  /// Adds the metrics of `request`; with `run_id`, only those whose resource has that nemo.run.id
  /// (an empty one: those without one).
  void add(const ParsedRequest& request, std::optional<std::string_view> run_id = std::nullopt);
  /// The rows by name, then by rank (numeric dl.rank first, then by service.instance.id, then
  /// without either), then type.
  std::vector<MetricRow> finish() const;

 private:
  struct Number {
    bool is_int = true;
    std::int64_t int_value = 0;
    double value = 0;
    void add(const MetricPoint& p);
    void add(const Number& n);
  };
  // A point as read, for the series over time.
  struct Sample {
    std::uint64_t time_ns = 0;
    bool delta = false;
    Number number;
    BucketHistogram histogram;
  };
  struct Series {
    // By run id: in input order, thinned (kMaxSeriesPoints each).
    std::map<std::string, std::vector<Sample>> samples;
    bool has_latest = false;  // the latest cumulative point (gauges: any point)
    std::uint64_t latest_time = 0;
    Number latest;
    BucketHistogram latest_histogram;
    bool has_delta = false;  // the delta points, added up
    Number delta;
    BucketHistogram delta_histogram;
  };
  // name, rank class (0 dl.rank, 1 instance id only, 2 neither), rank, instance id, type
  using Key = std::tuple<std::string, int, std::int64_t, std::string, int>;
  struct State {
    std::string unit;
    std::string instance_id;     // the first service.instance.id seen
    unsigned temporalities = 0;  // bit 1: delta, bit 2: cumulative
    bool monotonic = false;
    std::uint64_t points = 0;
    std::map<std::string, Series> series;  // by attribute set
    // Gauges: the latest point over every series.
    bool has_latest = false;
    std::uint64_t latest_time = 0;
    Number latest;
  };

  static void thin(std::vector<Sample>& samples, bool numbers);
  static std::vector<SeriesPoint> points_of(std::vector<Sample> samples, MetricType type);

  std::map<Key, State> metrics_;
};

}  // namespace nemo::lens::cli
