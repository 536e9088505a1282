// Recording from several threads while the reader collects and new attribute sets appear, and
// logging while the log processor exports: exact totals at the end. Run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

TEST(MetricsConcurrency, RecordsWhileTheReaderCollectsAreAllCounted) {
  lens_test::ScopedEnv env;
  env.set("OTEL_METRIC_EXPORT_INTERVAL", "1");  // the reader collects all the time
  env.set("OTEL_BLRP_SCHEDULE_DELAY", "1");
  auto metrics = std::make_shared<InMemoryMetricExporter>();
  auto logs = std::make_shared<InMemoryLogExporter>();
  NemoLensConfig c = lens_test::enabled_config("default");
  c.logs_enabled = true;
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.metric_exporter = metrics;
  o.log_exporter = logs;
  o.allow_reinit = true;
  auto h = setup_telemetry(c, 0, 1, o);
  auto& meter = get_meter("concurrency");
  const auto counter = meter.create_counter<std::int64_t>("conc.counter");
  const auto hist = meter.create_histogram<double>("conc.hist", "", "", std::vector<double>{10});
  const auto gauge = meter.create_gauge<std::int64_t>("conc.gauge");
  constexpr int kThreads = 3, kRecords = 3000;
  std::latch go(kThreads + 1);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      go.arrive_and_wait();
      for (int i = 0; i < kRecords; ++i) {
        counter.add(1, {{"set", i % 50}});  // new sets appear while the reader walks them
        hist.record(i % 20);
        gauge.set(i, {{"thread", t}});
        if (i % 100 == 0) log(Severity::kInfo, "tick", {{"i", i}});
      }
    });
  }
  go.arrive_and_wait();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(h.force_flush(std::chrono::seconds(10)));
  for (auto& th : threads) th.join();
  ASSERT_TRUE(h.force_flush(std::chrono::seconds(10)));
  const auto m = metrics->latest("conc.counter").value();
  std::int64_t total = 0;
  for (const auto& p : m.number_points) total += std::get<std::int64_t>(p.value);
  EXPECT_EQ(total, kThreads * kRecords);
  EXPECT_EQ(m.number_points.size(), 50u);
  const auto hp = metrics->latest("conc.hist").value().histogram_points.at(0);
  EXPECT_EQ(hp.count, static_cast<std::uint64_t>(kThreads * kRecords));
  EXPECT_EQ(hp.bucket_counts, (std::vector<std::uint64_t>{kThreads * kRecords * 11 / 20,
                                                          kThreads * kRecords * 9 / 20}));
  EXPECT_EQ(logs->records().size(), static_cast<std::size_t>(kThreads * kRecords / 100));
  h.shutdown();
}

}  // namespace
}  // namespace nemo::lens
