// The spdlog sink: an spdlog logger's records become lens log records with the current span's
// ids, the logger's name as scope, mapped severities and the source location.
#include "nemo/lens/spdlog_sink.hpp"

#include <gtest/gtest.h>
#include <spdlog/spdlog.h>

#include "nemo/lens/lens.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

TEST(SpdlogSink, RecordsCarryTheSpanLoggerSeverityAndSourceLocation) {
  lens_test::ScopedEnv env;
  auto logs = std::make_shared<InMemoryLogExporter>();
  NemoLensConfig c = lens_test::enabled_config("all");
  c.logs_enabled = true;
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  o.log_exporter = logs;
  o.allow_reinit = true;
  auto h = setup_telemetry(c, 0, 1, o);
  auto logger = std::make_shared<spdlog::logger>("trainer", std::make_shared<spdlog_sink_mt>());
  logger->set_level(spdlog::level::trace);
  SpanContext ctx;
  {
    LENS_SPAN(step, "step", "train_step");
    ctx = step.context();
    SPDLOG_LOGGER_WARN(logger, "loss spike at {}", 42);
  }
  logger->critical("out of memory");
  logger->debug("details");
  ASSERT_TRUE(h.force_flush());
  const auto r = logs->records();
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].body, "loss spike at 42");
  EXPECT_EQ(r[0].scope_name, "trainer");
  EXPECT_EQ(r[0].severity_text, "WARN");
  EXPECT_EQ(r[0].trace_id, ctx.trace_id);
  EXPECT_EQ(r[0].span_id, ctx.span_id);
  ASSERT_EQ(r[0].attributes.size(), 3u);
  EXPECT_EQ(r[0].attributes[0].key, "code.filepath");
  EXPECT_NE(std::get<std::string>(r[0].attributes[0].value).find("spdlog_sink_test.cpp"),
            std::string::npos);
  EXPECT_GT(std::get<std::int64_t>(r[0].attributes[1].value), 0);
  EXPECT_EQ(r[1].severity_number, 21);
  EXPECT_FALSE(r[1].span_id.is_valid());
  EXPECT_TRUE(r[1].attributes.empty());
  EXPECT_EQ(r[2].severity_text, "DEBUG");
  h.shutdown();
  logger->error("after shutdown: dropped at the gate");
  EXPECT_EQ(logs->records().size(), 3u);
}

}  // namespace
}  // namespace nemo::lens
