// Shutdown under a receiver that accepts, reads and never answers (a black hole), with spans,
// metrics and logs exported together over OTLP/HTTP and over gRPC. shutdown_scenario runs as a
// child process so that its exit is measured too (the in-process races, under TSan, are in
// otlp_concurrency_test): shutdown returns within its timeout, the counts
// of every signal add up exactly when it returns and never change afterwards, the summary line is
// lens' last word, and the process exits within the documented bound (docs/otlp.md).
#include <gtest/gtest.h>
#include <time.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "http_test_server.hpp"
#include "lens_collect.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;
using lens_test::BlackHole;
using lens_test::ChildProcess;
using lens_test::ScopedEnv;

// How long after main() returns (or shutdown() returned) the process may take to exit: the bound
// docs/otlp.md documents.
constexpr std::int64_t kExitBoundMs = 500;

std::int64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<std::int64_t>(now.tv_sec) * 1'000'000'000LL + now.tv_nsec;
}

struct Outcome {
  std::vector<Json> lines;  // the scenario's report
  std::string stderr_text;
  int status = -1;
  std::int64_t exited_ns = 0;  // CLOCK_MONOTONIC when the child was reaped
};

// Runs the scenario against `hole` with `protocol`, then reads its report.
Outcome run_scenario(const BlackHole& hole, const std::string& protocol, const std::string& timeout,
                     std::chrono::milliseconds wait_limit) {
  ScopedEnv env;
  env.set("NEMO_LENS_ENABLED", "1");
  env.set("NEMO_LENS_SPAN_GROUPS", "all");
  env.set("NEMO_LENS_EXPORTER", "otlp");
  env.set("NEMO_LENS_METRICS_ENABLED", "1");
  env.set("NEMO_LENS_LOGS_ENABLED", "1");
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:" + std::to_string(hole.port()));
  env.set("OTEL_EXPORTER_OTLP_TIMEOUT", "60000");  // without the interrupt: a minute per export
  env.set("OTEL_BSP_SCHEDULE_DELAY", "200");
  env.set("OTEL_METRIC_EXPORT_INTERVAL", "200");
  env.set("OTEL_BLRP_SCHEDULE_DELAY", "200");
  const std::string out = lens_test::temp_path("shutdown_" + protocol.substr(0, 4) + timeout);
  Outcome o;
  {
    ChildProcess child({SHUTDOWN_SCENARIO, "1500", timeout}, out);
    o.status = child.wait(wait_limit);
    o.exited_ns = monotonic_ns();
    o.stderr_text = child.stderr_text();
  }
  std::ifstream in(out);
  for (std::string line; std::getline(in, line);) o.lines.push_back(Json::parse(line));
  std::remove(out.c_str());
  return o;
}

// The lines of `text` that lens printed ("lens: ...").
std::vector<std::string> lens_lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("lens: ", 0) == 0) lines.push_back(line);
  }
  return lines;
}

std::uint64_t u(const Json& stats, const char* key) { return stats.at(key).get<std::uint64_t>(); }

// Every signal's count adds up: nothing is in flight or uncounted.
void expect_identity(const Json& s) {
  EXPECT_GT(u(s, "spans_ended"), 1000u) << s;
  EXPECT_EQ(u(s, "spans_ended") + u(s, "spans_truncated"),
            u(s, "spans_exported") + u(s, "spans_dropped_queue_full") +
                u(s, "spans_dropped_export_failed") + u(s, "spans_dropped_shutdown"))
      << s;
  EXPECT_GT(u(s, "metric_points_collected"), 0u) << s;
  EXPECT_EQ(u(s, "metric_points_collected"),
            u(s, "metric_points_exported") + u(s, "metric_points_dropped"))
      << s;
  EXPECT_GT(u(s, "log_records_emitted"), 100u) << s;
  EXPECT_EQ(u(s, "log_records_emitted"), u(s, "log_records_exported") + u(s, "log_records_dropped"))
      << s;
  // Nothing got through the black hole.
  EXPECT_EQ(u(s, "spans_exported"), 0u);
  EXPECT_EQ(u(s, "metric_points_exported"), 0u);
  EXPECT_EQ(u(s, "log_records_exported"), 0u);
}

// The summary is the last line lens printed, and it tells the final counts.
void expect_summary_last(const std::string& stderr_text, const Json& s) {
  const std::vector<std::string> lines = lens_lines(stderr_text);
  ASSERT_FALSE(lines.empty()) << stderr_text;
  const std::string& last = lines.back();
  EXPECT_NE(last.find("at shutdown:"), std::string::npos) << stderr_text;
  const std::uint64_t dropped = u(s, "spans_dropped_queue_full") +
                                u(s, "spans_dropped_export_failed") +
                                u(s, "spans_dropped_shutdown");
  EXPECT_NE(last.find("dropped " + std::to_string(dropped) + " of " +
                      std::to_string(u(s, "spans_ended")) + " spans"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("dropped " + std::to_string(u(s, "metric_points_dropped")) + " of " +
                      std::to_string(u(s, "metric_points_collected")) + " metric data points"),
            std::string::npos)
      << last;
  EXPECT_NE(last.find("dropped " + std::to_string(u(s, "log_records_dropped")) + " of " +
                      std::to_string(u(s, "log_records_emitted")) + " log records"),
            std::string::npos)
      << last;
  int summaries = 0;
  for (const auto& l : lines) summaries += l.find("at shutdown:") != std::string::npos;
  EXPECT_EQ(summaries, 1) << stderr_text;
}

void explicit_shutdown_holds(const std::string& protocol) {
  BlackHole hole;
  const Outcome o = run_scenario(hole, protocol, "3000", 30s);
  ASSERT_EQ(o.status, 0) << o.stderr_text;
  ASSERT_EQ(o.lines.size(), 3u) << o.stderr_text;
  EXPECT_TRUE(hole.wait_for_bytes(1, 1s)) << "nothing reached the black hole";
  const Json& first = o.lines[0];
  // Within its timeout (plus scheduling slack), although every export hangs.
  EXPECT_LE(first.at("shutdown_ms").get<std::int64_t>(), 3000 + 250) << first;
  EXPECT_TRUE(first.at("returned").get<bool>()) << "the built-in exporters are interrupted in time";
  expect_identity(first.at("stats"));
  EXPECT_EQ(o.lines[1].at("later"), first.at("stats")) << "counts changed after shutdown returned";
  expect_summary_last(o.stderr_text, first.at("stats"));
  const std::int64_t exit_ms =
      (o.exited_ns - o.lines[2].at("exiting_ns").get<std::int64_t>()) / 1'000'000;
  EXPECT_LE(exit_ms, kExitBoundMs) << "the process waited on a lens thread at exit";
}

void exit_without_shutdown_is_bounded(const std::string& protocol) {
  BlackHole hole;
  const Outcome o = run_scenario(hole, protocol, "exit", 30s);
  ASSERT_EQ(o.status, 0) << o.stderr_text;
  ASSERT_EQ(o.lines.size(), 1u) << o.stderr_text;
  // The exit handler's shutdown has 5 s for every signal together, then the process ends.
  const std::int64_t exit_ms =
      (o.exited_ns - o.lines[0].at("exiting_ns").get<std::int64_t>()) / 1'000'000;
  EXPECT_LE(exit_ms, 5000 + kExitBoundMs) << o.stderr_text;
  const std::vector<std::string> lines = lens_lines(o.stderr_text);
  ASSERT_FALSE(lines.empty()) << o.stderr_text;
  EXPECT_NE(lines.back().find("at shutdown:"), std::string::npos) << o.stderr_text;
}

TEST(ShutdownBlackHole, HttpEverySignalCountedAtReturnAndPromptExit) {
  explicit_shutdown_holds("http/protobuf");
}

TEST(ShutdownBlackHole, HttpExitWithoutShutdownIsBounded) {
  exit_without_shutdown_is_bounded("http/protobuf");
}

#ifdef LENS_WITH_GRPC
TEST(ShutdownBlackHole, GrpcEverySignalCountedAtReturnAndPromptExit) {
  explicit_shutdown_holds("grpc");
}

TEST(ShutdownBlackHole, GrpcExitWithoutShutdownIsBounded) {
  exit_without_shutdown_is_bounded("grpc");
}
#endif

}  // namespace
