// Logs: records carry the ids of the span they were written in (and none outside one), severity,
// attributes with redaction; logs off and non-exporting ranks export nothing; a full queue drops
// and counts without blocking; the file exporter writes OTLP JSON Lines per rank.
#include "nemo/lens/logs.hpp"

#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>

#include "nemo/lens/lens.hpp"
#include "nemo/lens/telemetry_data.hpp"
#include "scoped_env.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

using lens_test::ScopedEnv;

class Logs : public ::testing::Test {
 protected:
  void TearDown() override { handle_.shutdown(); }

  void start(bool logs_enabled = true, int rank = 0, int world_size = 1,
             const std::string& strategy = "all_ranks") {
    NemoLensConfig c = lens_test::enabled_config("all");
    c.logs_enabled = logs_enabled;
    c.export_strategy = strategy;
    SetupOptions o;
    o.exporter = spans_;
    o.log_exporter = logs_;
    o.allow_reinit = true;
    handle_ = setup_telemetry(c, rank, world_size, o);
  }

  std::vector<LogRecordData> records() {
    EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    return logs_->records();
  }

  ScopedEnv env_;
  std::shared_ptr<InMemorySpanExporter> spans_ = std::make_shared<InMemorySpanExporter>();
  std::shared_ptr<InMemoryLogExporter> logs_ = std::make_shared<InMemoryLogExporter>();
  TelemetryHandle handle_;
};

TEST_F(Logs, ARecordInsideASpanCarriesItsIdsOutsideNone) {
  start();
  SpanContext inside;
  {
    LENS_SPAN(span, "checkpoint", "save");
    inside = span.context();
    log(Severity::kInfo, "saved", {{"path", "/ckpt/7"}, {"bytes", 4096}});
  }
  log(Severity::kWarn, "outside");
  const auto r = records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].body, "saved");
  EXPECT_EQ(r[0].trace_id, inside.trace_id);
  EXPECT_EQ(r[0].span_id, inside.span_id);
  EXPECT_EQ(r[0].trace_flags, 3);  // sampled, random trace id
  EXPECT_EQ(r[0].severity_number, 9);
  EXPECT_EQ(r[0].severity_text, "INFO");
  EXPECT_EQ(r[0].scope_name, "nemo.lens");
  ASSERT_EQ(r[0].attributes.size(), 2u);
  EXPECT_EQ(r[0].attributes[1].key, "bytes");
  EXPECT_EQ(std::get<std::int64_t>(r[0].attributes[1].value), 4096);
  EXPECT_GT(r[0].time_unix_nano, 0);
  EXPECT_EQ(r[1].body, "outside");
  EXPECT_FALSE(r[1].trace_id.is_valid());
  EXPECT_FALSE(r[1].span_id.is_valid());
  EXPECT_EQ(r[1].severity_number, 13);
  EXPECT_EQ(r[1].severity_text, "WARN");
}

TEST_F(Logs, SeveritiesHaveOpenTelemetrysNumbersAndTexts) {
  start();
  const std::pair<Severity, std::pair<int, const char*>> cases[] = {
      {Severity::kTrace, {1, "TRACE"}},  {Severity::kDebug, {5, "DEBUG"}},
      {Severity::kInfo, {9, "INFO"}},    {Severity::kWarn, {13, "WARN"}},
      {Severity::kError, {17, "ERROR"}}, {Severity::kFatal, {21, "FATAL"}}};
  for (const auto& [s, expected] : cases) log(s, "m");
  const auto r = records();
  ASSERT_EQ(r.size(), 6u);
  for (std::size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(r[i].severity_number, cases[i].second.first);
    EXPECT_EQ(r[i].severity_text, cases[i].second.second);
    EXPECT_EQ(severity_text(cases[i].first), cases[i].second.second);
  }
}

TEST_F(Logs, AttributesAreRedactedAndLimitedAsForSpans) {
  env_.set("OTEL_ATTRIBUTE_COUNT_LIMIT", "2");
  env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "12");
  start();
  log(Severity::kInfo, "login",
      {{"password", "hunter2"}, {"user", "alice-with-a-long-name"}, {"extra", 1}});
  const auto r = records();
  ASSERT_EQ(r.size(), 1u);
  ASSERT_EQ(r[0].attributes.size(), 2u);
  EXPECT_EQ(std::get<std::string>(r[0].attributes[0].value), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(r[0].attributes[1].value), "alice-with-a");
  EXPECT_EQ(r[0].dropped_attributes_count, 1u);
}

TEST_F(Logs, LogsOffOrANonExportingRankExportNothing) {
  start(/*logs_enabled=*/false);
  log(Severity::kError, "not exported");
  EXPECT_TRUE(records().empty());
  EXPECT_FALSE(detail::g_logs_recording.load());
  start(true, 0, 2, "single_rank");  // rank 1 exports
  log(Severity::kError, "not exported either");
  EXPECT_TRUE(records().empty());
}

// Blocks every export until released.
class StalledLogExporter : public LogExporter {
 public:
  bool export_logs(std::span<const LogRecordData> records, const Resource&,
                   std::chrono::steady_clock::time_point) noexcept override {
    std::unique_lock lock(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(lock, [&] { return released_; });
    exported_ += records.size();
    return true;
  }
  void wait_entered() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return entered_; });
  }
  void release() {
    std::lock_guard lock(mu_);
    released_ = true;
    cv_.notify_all();
  }
  std::size_t exported() {
    std::lock_guard lock(mu_);
    return exported_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool entered_ = false, released_ = false;
  std::size_t exported_ = 0;
};

TEST(LogQueue, AFullQueueDropsAndCountsWithoutBlocking) {
  ScopedEnv env;
  env.set("OTEL_BLRP_MAX_QUEUE_SIZE", "8");
  env.set("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", "1");
  auto stalled = std::make_shared<StalledLogExporter>();
  NemoLensConfig c = lens_test::enabled_config("default");
  c.logs_enabled = true;
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.log_exporter = stalled;
  o.allow_reinit = true;
  auto h = setup_telemetry(c, 0, 1, o);
  log(Severity::kInfo, "first");  // a full batch of one: the thread takes it and stalls
  stalled->wait_entered();
  for (int i = 0; i < 20; ++i) log(Severity::kInfo, "queued or dropped");
  EXPECT_EQ(h.stats().log_records_dropped, 12u);  // 8 fit in the queue
  stalled->release();
  EXPECT_TRUE(h.force_flush(std::chrono::seconds(10)));
  EXPECT_EQ(stalled->exported(), 9u);
  EXPECT_EQ(h.stats().log_records_exported, 9u);
  h.shutdown();
}

TEST(LogFiles, TheFileExporterWritesOtlpJsonLinesPerRank) {
  ScopedEnv env;
  char tmpl[] = "/tmp/lens_logs_XXXXXX";
  ASSERT_NE(::mkdtemp(tmpl), nullptr);
  const std::string dir = tmpl;
  env.set("NEMO_LENS_LOGS_EXPORT_PATH", dir + "/logs-{rank}.jsonl");
  // Metrics are on by default: their file goes into the same directory, not the working one.
  env.set("NEMO_LENS_METRICS_EXPORT_PATH", dir + "/metrics-{rank}.jsonl");
  NemoLensConfig c = lens_test::enabled_config("all");
  c.exporter = "file";
  c.logs_enabled = true;
  c.export_strategy = "all_ranks";
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.allow_reinit = true;
  auto h = setup_telemetry(c, 1, 2, o);
  SpanContext ctx;
  {
    auto s = span_cm("step");
    ctx = s.context();
    log(Severity::kError, "nan loss", {{"iteration", 12}});
  }
  h.shutdown();
  std::ifstream in(dir + "/logs-1.jsonl");
  std::string line;
  ASSERT_TRUE(std::getline(in, line));
  const auto j = nlohmann::json::parse(line);
  const auto& rec = j.at("resourceLogs").at(0).at("scopeLogs").at(0).at("logRecords").at(0);
  EXPECT_EQ(rec.at("body").at("stringValue"), "nan loss");
  EXPECT_EQ(rec.at("severityNumber"), 17);
  EXPECT_EQ(rec.at("severityText"), "ERROR");
  EXPECT_EQ(rec.at("traceId"), ctx.trace_id.to_hex());
  EXPECT_EQ(rec.at("spanId"), ctx.span_id.to_hex());
  std::remove((dir + "/logs-1.jsonl").c_str());
  ::rmdir(dir.c_str());
}

}  // namespace
}  // namespace nemo::lens
