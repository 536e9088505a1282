// Metrics: exact values after known recordings (from several threads, in both temporalities),
// read through an in-memory exporter and through the file exporter; gauges and observable
// callbacks; instrument names; metrics off and non-exporting ranks.
#include "nemo/lens/metrics.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <latch>
#include <limits>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "metrics/instruments.hpp"
#include "nemo/lens/telemetry_data.hpp"
#include "scoped_env.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

using lens_test::ScopedEnv;

// A set-up exporting metrics into memory; the periodic reader is slowed down so that only
// force_flush() collects.
class Metrics : public ::testing::Test {
 protected:
  void SetUp() override { env_.set("OTEL_METRIC_EXPORT_INTERVAL", "3600000"); }
  void TearDown() override { handle_.shutdown(); }

  void start(int rank = 0, int world_size = 1, const std::string& strategy = "all_ranks",
             bool metrics_enabled = true) {
    NemoLensConfig c = lens_test::enabled_config("default");
    c.export_strategy = strategy;
    c.metrics_enabled = metrics_enabled;
    SetupOptions o;
    o.exporter = std::make_shared<InMemorySpanExporter>();
    o.metric_exporter = memory_;
    o.allow_reinit = true;
    handle_ = setup_telemetry(c, rank, world_size, o);
  }

  // The metric `name` after a collection now.
  MetricData collect(const std::string& name) {
    EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    auto m = memory_->latest(name);
    EXPECT_TRUE(m.has_value()) << name << " not exported";
    return m.value_or(MetricData{});
  }

  ScopedEnv env_;
  std::shared_ptr<InMemoryMetricExporter> memory_ = std::make_shared<InMemoryMetricExporter>();
  TelemetryHandle handle_;
};

// The point of `m` whose attributes contain key=value (or the one without attributes when key
// is empty).
template <class Point>
const Point* point(const std::vector<Point>& points, const std::string& key = "",
                   const AttributeValue& value = AttributeValue{}) {
  for (const Point& p : points) {
    if (key.empty() && p.attributes.empty()) return &p;
    for (const KeyValue& kv : p.attributes) {
      if (kv.key == key && kv.value == value) return &p;
    }
  }
  return nullptr;
}

std::int64_t int_value(const NumberPoint* p) {
  return p != nullptr ? std::get<std::int64_t>(p->value) : -1;
}

TEST_F(Metrics, CountersFromSeveralThreadsLoseNoIncrement) {
  start();
  auto& meter = get_meter("metrics_test");
  const auto tokens = meter.create_counter<std::int64_t>("test.tokens", "{token}", "tokens seen");
  const auto loss = meter.create_counter<double>("test.loss_sum");
  constexpr int kThreads = 4, kAdds = 20000;
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      for (int i = 0; i < kAdds; ++i) {
        tokens.add(3, {{"dataset", t % 2 == 0 ? "web" : "code"}});
        loss.add(0.5);
      }
    });
  }
  for (auto& th : threads) th.join();
  const MetricData m = collect("test.tokens");
  EXPECT_EQ(m.scope_name, "metrics_test");
  EXPECT_EQ(m.unit, "{token}");
  EXPECT_EQ(m.description, "tokens seen");
  EXPECT_EQ(m.kind, MetricKind::kSum);
  EXPECT_TRUE(m.monotonic);
  EXPECT_EQ(m.temporality, Temporality::kCumulative);
  ASSERT_EQ(m.number_points.size(), 2u);
  EXPECT_EQ(int_value(point(m.number_points, "dataset", std::string("web"))), 2 * kAdds * 3);
  EXPECT_EQ(int_value(point(m.number_points, "dataset", std::string("code"))), 2 * kAdds * 3);
  const MetricData l = collect("test.loss_sum");
  ASSERT_EQ(l.number_points.size(), 1u);
  EXPECT_DOUBLE_EQ(std::get<double>(l.number_points[0].value), kThreads * kAdds * 0.5);
  EXPECT_GT(l.number_points[0].time_unix_nano, l.number_points[0].start_time_unix_nano);
}

TEST_F(Metrics, AttributeOrderAndRepeatsDoNotMakeNewSets) {
  start();
  const auto c = get_meter("metrics_test").create_counter<std::int64_t>("test.order");
  c.add(1, {{"a", 1}, {"b", "x"}});
  c.add(2, {{"b", "x"}, {"a", 1}});
  c.add(4, {{"a", 7}, {"b", "x"}, {"a", 1}});  // the last value of a repeated key wins
  const MetricData m = collect("test.order");
  ASSERT_EQ(m.number_points.size(), 1u);
  EXPECT_EQ(std::get<std::int64_t>(m.number_points[0].value), 7);
  ASSERT_EQ(m.number_points[0].attributes.size(), 2u);
  EXPECT_EQ(m.number_points[0].attributes[0].key, "a");
}

TEST_F(Metrics, DeltaTemporalityReportsTheChangeSinceTheLastCollection) {
  env_.set("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta");
  start();
  auto& meter = get_meter("metrics_test");
  const auto c = meter.create_counter<std::int64_t>("test.delta_counter");
  const auto h =
      meter.create_histogram<double>("test.delta_hist", "s", "", std::vector<double>{1, 2});
  const auto u = meter.create_up_down_counter<std::int64_t>("test.delta_updown");
  c.add(5);
  h.record(0.5);
  h.record(1.5);
  u.add(10);
  MetricData first = collect("test.delta_counter");
  EXPECT_EQ(first.temporality, Temporality::kDelta);
  EXPECT_EQ(int_value(point(first.number_points)), 5);
  c.add(2);
  h.record(3);
  u.add(-4);
  const MetricData second = collect("test.delta_counter");
  EXPECT_EQ(int_value(point(second.number_points)), 2);
  EXPECT_EQ(second.number_points[0].start_time_unix_nano, first.number_points[0].time_unix_nano);
  const MetricData hist = collect("test.delta_hist");
  ASSERT_EQ(hist.histogram_points.size(), 1u);
  // The second collection (above) held only the 3; this third one has nothing new.
  const auto all = memory_->collections();
  const HistogramPoint* second_hist = nullptr;
  for (const auto& m : all[all.size() - 2]) {
    if (m.name == "test.delta_hist") second_hist = &m.histogram_points.at(0);
  }
  ASSERT_NE(second_hist, nullptr);
  EXPECT_EQ(second_hist->count, 1u);
  EXPECT_EQ(second_hist->bucket_counts, (std::vector<std::uint64_t>{0, 0, 1}));
  EXPECT_DOUBLE_EQ(second_hist->sum, 3.0);
  EXPECT_EQ(second_hist->min, 3.0);
  // Up-down counters stay cumulative under the delta preference (the OTel rule).
  const MetricData updown = collect("test.delta_updown");
  EXPECT_EQ(updown.temporality, Temporality::kCumulative);
  EXPECT_EQ(int_value(point(updown.number_points)), 6);
}

// A second reader (Python's OpenTelemetry MetricReader) reads cumulative totals whenever it
// collects, from another thread, and leaves the set-up's delta bookkeeping as it was.
TEST_F(Metrics, ASnapshotReadsCumulativeTotalsAndLeavesTheDeltasAlone) {
  env_.set("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE", "delta");
  start();
  auto& meter = get_meter("metrics_test");
  const auto c = meter.create_counter<std::int64_t>("test.snapshot_counter");
  const auto h =
      meter.create_histogram<double>("test.snapshot_hist", "s", "", std::vector<double>{1});
  c.add(5, {{"k", "a"}});
  h.record(0.5);
  EXPECT_EQ(int_value(point(collect("test.snapshot_counter").number_points, "k", "a")), 5);
  c.add(2, {{"k", "a"}});
  h.record(4);
  std::vector<MetricData> snapshot;
  std::thread([&] { snapshot = detail::snapshot_metrics(1000, 2000); }).join();
  const MetricData* counter = nullptr;
  const MetricData* hist = nullptr;
  for (const MetricData& m : snapshot) {
    if (m.name == "test.snapshot_counter") counter = &m;
    if (m.name == "test.snapshot_hist") hist = &m;
  }
  ASSERT_NE(counter, nullptr);
  ASSERT_NE(hist, nullptr);
  EXPECT_EQ(counter->temporality, Temporality::kCumulative);
  EXPECT_TRUE(counter->monotonic);
  const NumberPoint* p = point(counter->number_points, "k", "a");
  EXPECT_EQ(int_value(p), 7);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->start_time_unix_nano, 1000);
  EXPECT_EQ(p->time_unix_nano, 2000);
  ASSERT_EQ(hist->histogram_points.size(), 1u);
  EXPECT_EQ(hist->histogram_points[0].count, 2u);
  EXPECT_EQ(hist->histogram_points[0].bucket_counts, (std::vector<std::uint64_t>{1, 1}));
  // The set-up's reader still reports only what changed since its own last collection.
  EXPECT_EQ(int_value(point(collect("test.snapshot_counter").number_points, "k", "a")), 2);
  const auto latest_hist = memory_->latest("test.snapshot_hist");  // the same collection's
  ASSERT_TRUE(latest_hist.has_value());
  EXPECT_EQ(latest_hist->histogram_points.at(0).count, 1u);
}

TEST_F(Metrics, HistogramBucketsAreExactFromSeveralThreads) {
  start();
  const auto h = get_meter("metrics_test").create_histogram<double>("test.step_time", "ms");
  constexpr int kThreads = 4;
  // Each thread records the same values: on boundaries (inclusive upper bounds), inside, above.
  const std::vector<double> values = {0, 5, 5.5, 10, 99, 100, 101, 10000, 12000};
  std::latch go(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      go.arrive_and_wait();
      for (int rep = 0; rep < 1000; ++rep) {
        for (double v : values) h.record(v, {{"phase", "train"}});
      }
    });
  }
  for (auto& th : threads) th.join();
  const MetricData m = collect("test.step_time");
  ASSERT_EQ(m.histogram_points.size(), 1u);
  const HistogramPoint& p = m.histogram_points[0];
  // Default bounds 0,5,10,25,50,75,100,250,500,750,1000,2500,5000,7500,10000.
  ASSERT_EQ(p.explicit_bounds.size(), 15u);
  ASSERT_EQ(p.bucket_counts.size(), 16u);
  const std::uint64_t n = kThreads * 1000;
  std::vector<std::uint64_t> expected(16, 0);
  expected[0] = n;      // 0
  expected[1] = n;      // 5
  expected[2] = 2 * n;  // 5.5, 10
  expected[6] = 2 * n;  // 99, 100
  expected[7] = n;      // 101
  expected[14] = n;     // 10000
  expected[15] = n;     // 12000
  EXPECT_EQ(p.bucket_counts, expected);
  EXPECT_EQ(p.count, 9 * n);
  EXPECT_DOUBLE_EQ(p.sum, n * (0 + 5 + 5.5 + 10 + 99 + 100 + 101 + 10000 + 12000));
  EXPECT_EQ(p.min, 0.0);
  EXPECT_EQ(p.max, 12000.0);
}

TEST_F(Metrics, GaugesKeepTheLastValueAndObservablesRunAtCollection) {
  start();
  auto& meter = get_meter("metrics_test");
  const auto lr = meter.create_gauge<double>("test.learning_rate");
  lr.set(0.1);
  lr.set(0.05);
  int calls = 0;
  auto queue = meter.create_observable_gauge<std::int64_t>(
      "test.queue_depth", [&](ObserverResult<std::int64_t>& r) {
        ++calls;
        r.observe(10 * calls, {{"queue", "a"}});
        r.observe(7, {{"queue", "b"}});
      });
  auto bytes = meter.create_observable_counter<double>(
      "test.bytes_total", [&](ObserverResult<double>& r) { r.observe(1.5 * calls); });
  const MetricData g = collect("test.learning_rate");
  EXPECT_EQ(g.kind, MetricKind::kGauge);
  ASSERT_EQ(g.number_points.size(), 1u);
  EXPECT_EQ(std::get<double>(g.number_points[0].value), 0.05);
  EXPECT_EQ(g.number_points[0].start_time_unix_nano, 0);
  const MetricData q = memory_->latest("test.queue_depth").value();
  EXPECT_EQ(int_value(point(q.number_points, "queue", std::string("a"))), 10);
  EXPECT_EQ(int_value(point(q.number_points, "queue", std::string("b"))), 7);
  const MetricData b = memory_->latest("test.bytes_total").value();
  EXPECT_EQ(b.kind, MetricKind::kSum);
  EXPECT_TRUE(b.monotonic);
  queue.unregister();
  const MetricData q2 = collect("test.queue_depth");
  EXPECT_EQ(calls, 1) << "unregistered: not called again";
  EXPECT_EQ(int_value(point(q2.number_points, "queue", std::string("a"))), 10);
  bytes.unregister();
}

TEST_F(Metrics, InvalidMeasurementsAreDroppedAndCounted) {
  start();
  auto& meter = get_meter("metrics_test");
  const auto c = meter.create_counter<std::int64_t>("test.monotonic");
  const auto h = meter.create_histogram<double>("test.nan_hist");
  const std::uint64_t before = handle_.stats().metric_measurements_dropped;
  c.add(5);
  c.add(-1);
  h.record(std::nan(""));
  h.record(1.0);
  EXPECT_EQ(int_value(point(collect("test.monotonic").number_points)), 5);
  EXPECT_EQ(collect("test.nan_hist").histogram_points.at(0).count, 1u);
  EXPECT_EQ(handle_.stats().metric_measurements_dropped - before, 2u);
}

TEST_F(Metrics, AttributeSetsBeyondTheCardinalityLimitGoToTheOverflowSet) {
  start();
  const auto c = get_meter("metrics_test").create_counter<std::int64_t>("test.cardinality");
  for (int i = 0; i < 2100; ++i) c.add(1, {{"id", i}});
  const MetricData m = collect("test.cardinality");
  EXPECT_EQ(m.number_points.size(), 2001u);
  const NumberPoint* overflow = point(m.number_points, "otel.metric.overflow", true);
  ASSERT_NE(overflow, nullptr);
  EXPECT_EQ(int_value(overflow), 100);
}

TEST(MetricNames, AreCheckedAtCreation) {
  auto& meter = get_meter("metrics_names");
  EXPECT_THROW(meter.create_counter<std::int64_t>("1tokens"), ConfigError);
  EXPECT_THROW(meter.create_counter<std::int64_t>("tokens count"), ConfigError);
  EXPECT_THROW(meter.create_counter<std::int64_t>(std::string(256, 'a')), ConfigError);
  EXPECT_NO_THROW(meter.create_counter<std::int64_t>(std::string(255, 'a')));
  EXPECT_NO_THROW(meter.create_counter<std::int64_t>("train/tokens.total-count_2"));
  EXPECT_THROW(meter.create_counter<std::int64_t>("units", std::string(64, 's')), ConfigError);
  EXPECT_THROW(meter.create_histogram<double>("hist", "s", "", std::vector<double>{1, 1}),
               ConfigError);
  try {
    meter.create_counter<std::int64_t>("bad name");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'bad name'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("starts with an ASCII letter"), std::string::npos);
  }
}

TEST(MetricNames, TheSameInstrumentTwiceIsTheSameOneAnotherKindIsAnError) {
  auto& meter = get_meter("metrics_same");
  EXPECT_EQ(&get_meter("metrics_same"), &meter);
  EXPECT_EQ(meter.name(), "metrics_same");
  meter.create_counter<std::int64_t>("shared");
  EXPECT_NO_THROW(meter.create_counter<std::int64_t>("Shared"));  // case-insensitive
  try {
    meter.create_histogram<double>("shared");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("already exists as a counter of int64"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(meter.create_counter<double>("shared"), ConfigError);
}

TEST_F(Metrics, SameInstrumentCreatedTwiceSharesItsValues) {
  start();
  auto& meter = get_meter("metrics_test");
  meter.create_counter<std::int64_t>("test.twice").add(2);
  meter.create_counter<std::int64_t>("test.twice").add(3);
  EXPECT_EQ(int_value(point(collect("test.twice").number_points)), 5);
}

TEST_F(Metrics, MetricsOffOrANonExportingRankExportNothing) {
  const auto c = get_meter("metrics_test").create_counter<std::int64_t>("test.off");
  start(0, 1, "all_ranks", /*metrics_enabled=*/false);
  c.add(1);
  EXPECT_TRUE(handle_.force_flush());
  EXPECT_TRUE(memory_->collections().empty());
  EXPECT_FALSE(detail::g_metrics_recording.load());
  start(0, 2, "single_rank");  // rank 1 exports
  c.add(1);
  EXPECT_TRUE(handle_.force_flush());
  EXPECT_TRUE(memory_->collections().empty());
  EXPECT_EQ(handle_.stats().metric_points_exported, 0u);
}

TEST_F(Metrics, CreatedBeforeSetUpRecordsOnceEnabledAndAShutdownCollectsLast) {
  const auto c = get_meter("metrics_early").create_counter<std::int64_t>("test.early");
  c.add(100);  // before set-up: a no-op
  start();
  c.add(1);
  handle_.shutdown();
  const auto m = memory_->latest("test.early");
  ASSERT_TRUE(m.has_value());
  EXPECT_EQ(int_value(point(m->number_points)), 1);
  c.add(1);  // after shutdown: a no-op again
  EXPECT_FALSE(detail::g_metrics_recording.load());
}

// Signals each export, so a test waits for the reader's own schedule, not for a guessed time.
class SignallingMetricExporter : public MetricExporter {
 public:
  bool export_metrics(std::span<const MetricData>, const Resource&,
                      std::chrono::steady_clock::time_point) noexcept override {
    std::lock_guard lock(mu_);
    ++exports_;
    cv_.notify_all();
    return true;
  }
  bool wait_for_exports(int n, std::chrono::seconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return exports_ >= n; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  int exports_ = 0;
};

TEST(MetricReader, ExportsOnItsScheduleWithoutAFlush) {
  ScopedEnv env;
  env.set("OTEL_METRIC_EXPORT_INTERVAL", "20");
  auto exporter = std::make_shared<SignallingMetricExporter>();
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.metric_exporter = exporter;
  o.allow_reinit = true;
  auto h = setup_telemetry(lens_test::enabled_config("default"), 0, 1, o);
  get_meter("metrics_test").create_counter<std::int64_t>("test.periodic").add(1);
  EXPECT_TRUE(exporter->wait_for_exports(2, std::chrono::seconds(20)));
  h.shutdown();
}

TEST(MetricFiles, TheFileExporterWritesOtlpJsonLinesPerRank) {
  ScopedEnv env;
  char tmpl[] = "/tmp/lens_metrics_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  env.set("NEMO_LENS_METRICS_EXPORT_PATH", dir + "/metrics-{rank}.jsonl");
  env.set("OTEL_METRIC_EXPORT_INTERVAL", "3600000");
  NemoLensConfig c = lens_test::enabled_config("default");
  c.exporter = "file";
  c.export_strategy = "all_ranks";
  c.run_id = "files";
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.allow_reinit = true;
  auto h = setup_telemetry(c, 3, 4, o);
  const auto c1 = get_meter("metrics_file").create_counter<std::int64_t>("file.steps");
  const auto h1 =
      get_meter("metrics_file")
          .create_histogram<double>("file.step_time", "s", "", std::vector<double>{0.1, 1});
  c1.add(7, {{"phase", "train"}});
  h1.record(0.5);
  h.shutdown();
  std::ifstream in(dir + "/metrics-3.jsonl");
  std::string line, last;
  int lines = 0;
  while (std::getline(in, line)) {
    last = line;
    ++lines;
  }
  ASSERT_GE(lines, 1);
  const auto j = nlohmann::json::parse(last);
  const auto& rm = j.at("resourceMetrics").at(0);
  bool rank_seen = false;
  for (const auto& kv : rm.at("resource").at("attributes")) {
    if (kv.at("key") == "dl.rank") rank_seen = kv.at("value").at("intValue") == "3";
  }
  EXPECT_TRUE(rank_seen) << last;
  std::map<std::string, nlohmann::json> metrics;
  for (const auto& sm : rm.at("scopeMetrics")) {
    for (const auto& m : sm.at("metrics")) metrics[m.at("name")] = m;
  }
  ASSERT_TRUE(metrics.contains("file.steps")) << last;
  const auto& sum = metrics["file.steps"].at("sum");
  EXPECT_EQ(sum.at("isMonotonic"), true);
  EXPECT_EQ(sum.at("aggregationTemporality"), 2);
  EXPECT_EQ(sum.at("dataPoints").at(0).at("asInt"), "7");
  const auto& hist = metrics["file.step_time"].at("histogram").at("dataPoints").at(0);
  EXPECT_EQ(hist.at("count"), "1");
  EXPECT_EQ(hist.at("bucketCounts"), nlohmann::json({"0", "1", "0"}));
  std::remove((dir + "/metrics-3.jsonl").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace nemo::lens

namespace nemo::lens {
namespace {

TEST_F(Metrics, TrainingMetricsRecordOneStepInOneCall) {
  start();
  const TrainingMetrics training(get_meter("metrics_training"));
  StepMetrics step;
  step.duration_s = 0.25;
  step.loss = 2.5;
  step.learning_rate = 3e-4;
  step.tokens_per_second = 8192;  // samples_per_second and grad_norm left NaN: not recorded
  training.record_step(step, {{"phase", "train"}});
  step.duration_s = 0.75;
  step.loss = 2.25;
  training.record_step(step, {{"phase", "train"}});
  EXPECT_EQ(int_value(point(collect("dl.steps").number_points, "phase", std::string("train"))), 2);
  const MetricData d = memory_->latest("dl.step.duration").value();
  EXPECT_EQ(d.unit, "s");
  ASSERT_EQ(d.histogram_points.size(), 1u);
  EXPECT_EQ(d.histogram_points[0].count, 2u);
  EXPECT_DOUBLE_EQ(d.histogram_points[0].sum, 1.0);
  EXPECT_EQ(std::get<double>(memory_->latest("dl.loss").value().number_points.at(0).value), 2.25);
  EXPECT_EQ(
      std::get<double>(memory_->latest("dl.throughput.tokens").value().number_points.at(0).value),
      8192.0);
  EXPECT_FALSE(memory_->latest("dl.grad_norm").has_value()) << "never set: not exported";
  EXPECT_FALSE(memory_->latest("dl.throughput.samples").has_value());
}

// The three NeMo Lens families record its names, units and attributes (as nemo_lens_cpp's
// record_* functions do: tests/python/test_modules.py reads the Python side).
TEST_F(Metrics, InferenceMetricsCarryTheGenAiNamesAndAttributes) {
  start();
  Meter& meter = get_meter("metrics_inference");
  InferenceRecord request;
  request.request_duration_s = 0.5;
  request.model = "llama";
  request.input_tokens = 128;
  request.output_tokens = 32;
  record_inference_metrics(meter, request);
  request.request_duration_s = 1.5;
  request.model = {};  // no gen_ai.request.model on these records
  request.output_tokens = std::numeric_limits<double>::quiet_NaN();
  record_inference_metrics(meter, request);

  const MetricData duration = collect("gen_ai.server.request.duration");
  EXPECT_EQ(duration.unit, "s");
  const HistogramPoint* with_model =
      point(duration.histogram_points, "gen_ai.request.model", std::string("llama"));
  ASSERT_NE(with_model, nullptr);
  EXPECT_EQ(with_model->count, 1u);
  EXPECT_DOUBLE_EQ(with_model->sum, 0.5);
  ASSERT_EQ(duration.histogram_points.size(), 2u);
  for (const HistogramPoint& p : duration.histogram_points) {
    EXPECT_NE(point(std::vector<HistogramPoint>{p}, "gen_ai.operation.name",
                    std::string("text_completion")),
              nullptr);
    EXPECT_NE(point(std::vector<HistogramPoint>{p}, "gen_ai.provider.name", std::string("nemo")),
              nullptr);
  }
  const MetricData tokens = collect("gen_ai.client.token.usage");
  EXPECT_EQ(tokens.unit, "{token}");
  double input = 0, output = 0;
  for (const HistogramPoint& p : tokens.histogram_points) {
    for (const KeyValue& kv : p.attributes) {
      if (kv.key != "gen_ai.token.type") continue;
      (std::get<std::string>(kv.value) == "input" ? input : output) += p.sum;
    }
  }
  EXPECT_DOUBLE_EQ(input, 256.0) << "128 tokens in each of two requests";
  EXPECT_DOUBLE_EQ(output, 32.0) << "the second request had no output count";
}

TEST_F(Metrics, RlAndGymMetricsRecordWhatIsGivenAndLeaveOutNaN) {
  start();
  Meter& meter = get_meter("metrics_rl_gym");
  RlRecord update;
  update.reward_mean = 0.75;
  update.kl_divergence = 0.01;
  update.generation_duration_ms = 850;
  record_rl_metrics(meter, update);
  GymRecord gym;
  gym.server_request_duration_ms = 12.5;
  gym.active_servers = 4;
  record_gym_metrics(meter, gym);

  EXPECT_EQ(std::get<double>(collect("rl.reward.mean").number_points.at(0).value), 0.75);
  EXPECT_EQ(std::get<double>(collect("rl.kl_divergence").number_points.at(0).value), 0.01);
  const MetricData generation = collect("rl.generation.duration_ms");
  EXPECT_EQ(generation.unit, "ms");
  EXPECT_DOUBLE_EQ(generation.histogram_points.at(0).sum, 850.0);
  EXPECT_FALSE(memory_->latest("rl.policy_loss").has_value()) << "NaN: not recorded";
  EXPECT_FALSE(memory_->latest("rl.rollout.duration_ms").has_value());
  EXPECT_DOUBLE_EQ(collect("gym.server.request_duration_ms").histogram_points.at(0).sum, 12.5);
  EXPECT_EQ(std::get<double>(collect("gym.servers.active").number_points.at(0).value), 4.0);
  EXPECT_FALSE(memory_->latest("gym.verify.success_rate").has_value());
}

}  // namespace
}  // namespace nemo::lens
