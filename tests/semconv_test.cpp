// The names lens writes are the constants of <nemo/lens/semconv.hpp>: a resource, spans, events,
// log records and training metrics exported through the public API (the file exporter for the
// names on the wire, the in-memory exporters for the rest) carry exactly those keys.
#include "nemo/lens/semconv.hpp"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "control_client.hpp"
#include "nemo/lens/lens.hpp"
#include "scoped_env.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

using nlohmann::json;

std::vector<json> read_lines(const std::string& path) {
  std::vector<json> out;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(json::parse(line));
  }
  return out;
}

// The OTLP/JSON attribute `key` of a list, or null when absent.
json attribute(const json& list, std::string_view key) {
  for (const json& kv : list) {
    if (kv.at("key") == key) return kv.at("value");
  }
  return nullptr;
}

// Every span of OTLP JSON Lines.
std::vector<json> spans_of(const std::vector<json>& lines) {
  std::vector<json> out;
  for (const json& line : lines) {
    for (const json& rs : line.at("resourceSpans")) {
      for (const json& ss : rs.at("scopeSpans")) {
        for (const json& s : ss.at("spans")) out.push_back(s);
      }
    }
  }
  return out;
}

const json& span_named(const std::vector<json>& spans, const std::string& name) {
  for (const json& s : spans) {
    if (s.at("name") == name) return s;
  }
  throw std::runtime_error("no span named " + name);
}

// A set-up whose spans go to a file: the names as the wire carries them.
class SemconvFile : public ::testing::Test {
 protected:
  TelemetryHandle start(int rank, int world_size) {
    env_.set("NEMO_LENS_EXPORTER", "file");
    env_.set("NEMO_LENS_EXPORT_PATH", traces_);
    env_.set("NEMO_LENS_METRICS_EXPORT_PATH", (dir_.path() / "metrics.jsonl").string());
    NemoLensConfig c = lens_test::enabled_config("all");
    c.exporter = "file";
    c.run_id = "run-7";
    c.user = "team-a";
    c.wandb_entity = "entity";
    c.wandb_project = "project";
    SetupOptions options;
    options.allow_reinit = true;
    return setup_telemetry(c, rank, world_size, options);
  }

  // Exports one span as `rank` of `world_size`; `resource_attributes` gets its resource's.
  void export_one_span(int rank, int world_size, json& resource_attributes) {
    TelemetryHandle handle = start(rank, world_size);
    { auto s = span_cm("one"); }
    ASSERT_TRUE(handle.shutdown());
    const std::vector<json> lines = read_lines(traces_);
    ASSERT_FALSE(lines.empty());
    resource_attributes = lines[0].at("resourceSpans").at(0).at("resource").at("attributes");
  }

  lens_test::ScopedEnv env_;
  lens_test::TempDir dir_;
  const std::string traces_ = (dir_.path() / "traces.jsonl").string();
};

TEST_F(SemconvFile, ResourceCarriesTheConstantsNames) {
  env_.set("DEPLOYMENT_ENV", "prod");
  env_.set("CUDA_VISIBLE_DEVICES", "0,1");
  env_.set("SLURM_JOB_ID", "4711");
  env_.set("SLURM_JOB_NAME", "pretrain");
  env_.set("SLURM_CLUSTER_NAME", "eos");
  env_.set("SLURM_NNODES", "4");
  env_.set("SLURM_NTASKS", "32");
  env_.set("SLURM_NODELIST", "eos[0001-0004]");
  env_.set("SLURM_PARTITION", "batch");
  env_.set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env_.set("K8S_POD_NAME", "pod-3");
  json attrs;
  ASSERT_NO_FATAL_FAILURE(export_one_span(5, 8, attrs));
  EXPECT_EQ(attribute(attrs, semconv::kDlRank), json({{"intValue", "5"}}));
  EXPECT_EQ(attribute(attrs, semconv::kDlWorldSize), json({{"intValue", "8"}}));
  EXPECT_EQ(attribute(attrs, semconv::kNemoRunId), json({{"stringValue", "run-7"}}));
  EXPECT_EQ(attribute(attrs, semconv::kServiceInstanceId), json({{"stringValue", "run-7-rank5"}}));
  EXPECT_EQ(attribute(attrs, semconv::kServiceName), json({{"stringValue", "nemo"}}));
  EXPECT_EQ(attribute(attrs, semconv::kServiceVersion),
            json({{"stringValue", NEMO_LENS_VERSION_STRING}}));
  EXPECT_EQ(attribute(attrs, semconv::kNemoUserId), json({{"stringValue", "team-a"}}));
  EXPECT_EQ(attribute(attrs, semconv::kWandbEntity), json({{"stringValue", "entity"}}));
  EXPECT_EQ(attribute(attrs, semconv::kWandbProject), json({{"stringValue", "project"}}));
  EXPECT_EQ(attribute(attrs, semconv::kDeploymentEnvironment), json({{"stringValue", "prod"}}));
  EXPECT_EQ(attribute(attrs, semconv::kHostGpuCount), json({{"intValue", "2"}}));
  EXPECT_EQ(attribute(attrs, semconv::kProcessPid),
            json({{"intValue", std::to_string(::getpid())}}));
  EXPECT_FALSE(attribute(attrs, semconv::kHostName).is_null());
  EXPECT_EQ(attribute(attrs, semconv::kSlurmJobId), json({{"stringValue", "4711"}}));
  EXPECT_EQ(attribute(attrs, semconv::kSlurmJobName), json({{"stringValue", "pretrain"}}));
  EXPECT_EQ(attribute(attrs, semconv::kSlurmClusterName), json({{"stringValue", "eos"}}));
  // NeMo Lens v0.2.0 writes the counts as the strings SLURM gives.
  EXPECT_EQ(attribute(attrs, semconv::kSlurmNnodes), json({{"stringValue", "4"}}));
  EXPECT_EQ(attribute(attrs, semconv::kSlurmNtasks), json({{"stringValue", "32"}}));
  EXPECT_EQ(attribute(attrs, semconv::kSlurmNodelist), json({{"stringValue", "eos[0001-0004]"}}));
  EXPECT_EQ(attribute(attrs, semconv::kSlurmPartition), json({{"stringValue", "batch"}}));
  EXPECT_FALSE(attribute(attrs, semconv::kNvDlJobUuid).is_null());
  EXPECT_EQ(attribute(attrs, semconv::kK8sPodName), json({{"stringValue", "pod-3"}}));
}

// The decision of docs/resources.md: the rank and world size under both NeMo Lens spellings.
TEST_F(SemconvFile, RankIsWrittenUnderBothDlAndNvDlNames) {
  json attrs;
  ASSERT_NO_FATAL_FAILURE(export_one_span(3, 4, attrs));
  EXPECT_EQ(semconv::kNvDlRank, "nv.dl.rank");
  EXPECT_EQ(semconv::kNvDlWorldSize, "nv.dl.world_size");
  EXPECT_EQ(attribute(attrs, semconv::kNvDlRank), json({{"intValue", "3"}}));
  EXPECT_EQ(attribute(attrs, semconv::kNvDlWorldSize), json({{"intValue", "4"}}));
  EXPECT_EQ(attribute(attrs, semconv::kNvDlRank), attribute(attrs, semconv::kDlRank));
  EXPECT_EQ(attribute(attrs, semconv::kNvDlWorldSize), attribute(attrs, semconv::kDlWorldSize));
}

TEST_F(SemconvFile, SpansCarryTheGroupThreadTruncatedAndExceptionNames) {
  TelemetryHandle handle = start(0, 1);
  auto open = managed_span(SpanGroup::JOB, "left_open");  // ended by shutdown: truncated
  {
    auto s = managed_span(SpanGroup::STEP, "failing");
    s.record_exception(std::runtime_error("out of memory"));
  }
  ASSERT_TRUE(handle.shutdown());
  const std::vector<json> spans = spans_of(read_lines(traces_));
  const json& failing = span_named(spans, "failing");
  EXPECT_EQ(attribute(failing.at("attributes"), semconv::kNemoSpanGroup),
            json({{"stringValue", std::string(SpanGroup::STEP)}}));
  EXPECT_TRUE(attribute(failing.at("attributes"), semconv::kThreadId).contains("intValue"));
  ASSERT_EQ(failing.at("events").size(), 1u);
  const json& event = failing.at("events").at(0);
  EXPECT_EQ(event.at("name"), semconv::kExceptionEvent);
  EXPECT_EQ(attribute(event.at("attributes"), semconv::kExceptionMessage),
            json({{"stringValue", "out of memory"}}));
  EXPECT_FALSE(attribute(event.at("attributes"), semconv::kExceptionType).is_null());

  const json& truncated = span_named(spans, "left_open");
  EXPECT_EQ(attribute(truncated.at("attributes"), semconv::kNemoSpanTruncated),
            json({{"boolValue", true}}));
  ASSERT_EQ(truncated.at("events").size(), 1u);
  EXPECT_EQ(truncated.at("events").at(0).at("name"), semconv::kNemoSpanTruncated);
}

TEST(Semconv, TrainingMetricsAreNamedByTheConstants) {
  lens_test::ScopedEnv env;
  auto metrics = std::make_shared<InMemoryMetricExporter>();
  NemoLensConfig c = lens_test::enabled_config("all");
  SetupOptions options;
  options.exporter = std::make_shared<InMemorySpanExporter>();
  options.metric_exporter = metrics;
  options.allow_reinit = true;
  TelemetryHandle handle = setup_telemetry(c, 0, 1, options);
  const TrainingMetrics training;
  StepMetrics step;
  step.duration_s = 0.5;
  step.tokens_per_second = 1000;
  step.samples_per_second = 10;
  step.loss = 2.5;
  step.learning_rate = 1e-4;
  step.grad_norm = 0.9;
  training.record_step(step);
  ASSERT_TRUE(handle.force_flush());
  for (std::string_view name : {semconv::kDlSteps, semconv::kDlStepDuration,
                                semconv::kDlThroughputTokens, semconv::kDlThroughputSamples,
                                semconv::kDlLoss, semconv::kDlLearningRate, semconv::kDlGradNorm}) {
    EXPECT_TRUE(metrics->latest(name).has_value()) << name;
  }
  handle.shutdown();
}

}  // namespace
}  // namespace nemo::lens
