// The built `lens report` and `lens convert` on real files: the three-rank job of
// report_fixture.hpp (a straggler, nested spans, a truncated span, malformed lines, four files),
// and the metrics and logs lines of metrics_fixture.hpp.
// Text output is checked byte for byte, --json and the Chrome trace field by field.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "metrics_fixture.hpp"
#include "report_fixture.hpp"

namespace {

using nlohmann::json;

class ReportCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = ::testing::TempDir() + "report_cli_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
    fixture_ = report_test::write_fixture(dir_);
  }

  // Runs lens with `args`; the fixture's directory is removed from what it prints, so file names
  // read as given relative to it.
  report_test::RunResult lens(std::vector<std::string> args, const std::string& stdin_path = {},
                              const std::string& cwd = {}) {
    args.insert(args.begin(), LENS_BINARY);
    report_test::RunResult r = report_test::run(args, dir_, stdin_path, cwd);
    for (std::string* s : {&r.out, &r.err}) {
      for (std::size_t at; (at = s->find(dir_ + "/")) != std::string::npos;)
        s->erase(at, dir_.size() + 1);
    }
    return r;
  }

  std::vector<std::string> report_args(std::vector<std::string> flags) const {
    std::vector<std::string> args = {"report"};
    args.insert(args.end(), fixture_.files.begin(), fixture_.files.end());
    args.insert(args.end(), flags.begin(), flags.end());
    return args;
  }

  std::string dir_;
  report_test::Fixture fixture_;
};

constexpr std::string_view kExpectedText =
    R"(lens report: 4 files, 15 lines (3 malformed), 59 spans, 3 ranks
run: run-42

Time by span group and name (share of the 1.050s spent in 9 top-level step spans; step%: within the steps, self%: on the steps' own threads)
  group             name              count    total     mean      p50      p95      max   step%  self%
  job               pretrain              3   1.175s  391.7ms  345.0ms  484.5ms  500.0ms    0.0%   0.0%
  step              train_step            9   1.050s  116.7ms  100.0ms  150.0ms  150.0ms  100.0%   4.0%
  forward_backward  forward_backward      9  780.0ms  86.67ms  70.00ms  120.0ms  120.0ms   74.3%   0.0%
  microbatch        microbatch           18  780.0ms  43.33ms  35.00ms  60.00ms  60.00ms   74.3%  74.3%
  optimizer         optimizer_step        9  135.0ms  15.00ms  15.00ms  15.00ms  15.00ms   12.9%  12.9%
  data_loading      get_batch             9  90.00ms  10.00ms  10.00ms  10.00ms  10.00ms    8.6%   8.6%
  (none)            save_checkpoint       1  10.00ms  10.00ms  10.00ms  10.00ms  10.00ms    0.0%   0.0%
  step              zero_grad             1  3.000ms  3.000ms  3.000ms  3.000ms  3.000ms    0.3%   0.3%

Step time by group (on the steps' own threads: the innermost span at each instant)
  group            self  share
  microbatch    780.0ms  74.3%
  optimizer     135.0ms  12.9%
  data_loading  90.00ms   8.6%
  step          45.00ms   4.3%

Beside the steps (their spans on other threads or processes; exposed: while the step's own thread was in no span of another group)
  none: every span of the steps ran on their own threads

Step time per rank (top-level spans of group step)
  rank  name        count      p50      p95      max
  0     train_step      3  100.0ms  100.0ms  100.0ms
  1     train_step      3  100.0ms  109.0ms  110.0ms
  2     train_step      3  150.0ms  150.0ms  150.0ms  straggler

Stragglers (compared within the ranks that run the same spans: lateness at the collectives, median step time more than 3.5 MADs, as many standard errors of its excess and 5% of the median step above the median rank)
  rank 2, train_step (3 ranks compared): median step 150.0ms, +50.0% over the median rank's 100.0ms; microbatch +50.00ms per step (+71.4%) over the median rank

Truncated spans (1)
  rank  group  name      duration
  0     job    pretrain   345.0ms

Malformed lines (3, skipped)
  rank1.jsonl:3: invalid JSON at byte 46: syntax error while parsing value - unexpected end of input; expected '[', '{', or a literal
  rank1.jsonl:7: span 1: spanId 'not-a-span-id!!!' is not 16 hex digits
  rank1.jsonl:8: invalid JSON at byte 1501: syntax error while parsing object key - invalid string: missing closing quote; last read: '"sta'; expected string literal
)";

TEST_F(ReportCli, TextReport) {
  const auto r = lens(report_args({}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, kExpectedText);
  EXPECT_EQ(r.err, "lens report: skipped 3 malformed lines (listed in the report)\n");
}

TEST_F(ReportCli, JsonReport) {
  const auto r = lens(report_args({"--json"}));
  ASSERT_EQ(r.status, 0) << r.err;
  ASSERT_EQ(r.out.find('\n'), r.out.size() - 1) << "one line";
  const json j = json::parse(r.out);
  EXPECT_EQ(j["format"], "lens.report");
  EXPECT_EQ(j["version"], 3);
  EXPECT_EQ(j["files"], json({"rank0.jsonl", "rank1.jsonl", "rank2-a.jsonl", "rank2-b.jsonl"}));
  EXPECT_EQ(j["input"], json({{"lines", 15},
                              {"requests", 12},
                              {"spans", 59},
                              {"metric_lines", 0},
                              {"data_points", 0},
                              {"log_lines", 0},
                              {"malformed_lines", 3}}));
  EXPECT_EQ(j["metrics"], json::array());
  EXPECT_EQ(j["run_ids"], json({"run-42"}));
  EXPECT_EQ(j["step"], json({{"group", "step"}, {"count", 9}, {"total_ns", 1'050'000'000}}));
  ASSERT_EQ(j["names"].size(), 8u);
  EXPECT_EQ(j["names_total"], 8);
  EXPECT_EQ(j["names"][1], json::parse(R"({"group":"step","name":"train_step","count":9,
      "total_ns":1050000000,"mean_ns":116666667,"p50_ns":100000000,"p95_ns":150000000,
      "max_ns":150000000,"in_step_ns":1050000000,"in_step_self_ns":42000000,"step_share":1.0,
      "self_share":0.04})"));
  EXPECT_EQ(j["names"][3], json::parse(R"({"group":"microbatch","name":"microbatch","count":18,
      "total_ns":780000000,"mean_ns":43333333,"p50_ns":35000000,"p95_ns":60000000,
      "max_ns":60000000,"in_step_ns":780000000,"in_step_self_ns":780000000,
      "step_share":0.742857,"self_share":0.742857})"));
  EXPECT_EQ(j["names"][6]["group"], "(none)");
  EXPECT_EQ(j["groups"][0]["group"], "microbatch");
  ASSERT_EQ(j["ranks"].size(), 3u);
  EXPECT_EQ(j["ranks"][1], json::parse(R"({"rank":1,"instance_id":"run-42-rank1","spans":19,
      "steps":[{"name":"train_step","count":3,"total_ns":300000000,"p50_ns":100000000,
        "p95_ns":109000000,"max_ns":110000000,"straggler":false}],
      "timeline":{"steps":3,"shown":3,"offset_and_duration_ns":
        [[0,100000000],[110000000,110000000],[230000000,90000000]],
        "overlapped_ns":[[],[],[]],"exposed_ns":[[],[],[]]}})"));
  EXPECT_EQ(j["ranks"][2]["steps"][0]["straggler"], true);
  EXPECT_EQ(j["timeline_origin_unix_ns"], report_test::kT0);
  // The ranks' median steps are 100, 100 and 150 ms: p95 interpolates 100 + 0.9 x 50.
  EXPECT_EQ(j["step_names"], json::parse(R"([{"name":"train_step","ranks":3,
      "median_ns":100000000,"min_ns":100000000,"p95_ns":145000000,"max_ns":150000000}])"));
  // Rank 2, by step time (no collectives): 150 ms against a median of 100, MAD 0, so the floor
  // (5 % of 100 ms) decides. Its microbatches take 120 ms a step, the median rank's 70.
  EXPECT_EQ(j["stragglers"], json::parse(R"({"threshold_pct":5.0,"mads":3.5,"ranks":[{"rank":2,
      "name":"train_step","flagged_by":["step_time"],"ranks_compared":3,"steps":3,
      "step_p50_ns":150000000,"step_p50_se_ns":0,"median_step_ns":100000000,"median_late_ns":0,
      "matched_steps":0,"collectives":0,"last_count":0,"last_into":[],"late_ns":0,"late_se_ns":0,
      "waited_ns":0,
      "waited_share":0.0,"wait_caused_ns":0,"wait_caused_per_step_ns":0,
      "wait_caused_share":0.0,"groups":[
        {"group":"microbatch","ns_per_step":120000000,"median_ns_per_step":70000000,
         "excess_ns_per_step":50000000},
        {"group":"data_loading","ns_per_step":10000000,"median_ns_per_step":10000000,
         "excess_ns_per_step":0},
        {"group":"optimizer","ns_per_step":15000000,"median_ns_per_step":15000000,
         "excess_ns_per_step":0},
        {"group":"step","ns_per_step":5000000,"median_ns_per_step":5000000,
         "excess_ns_per_step":0}]}]})"));
  EXPECT_EQ(j["truncated"], json::parse(R"({"count":1,"spans":[{"rank":0,"group":"job",
      "name":"pretrain","duration_ns":345000000}]})"));
  EXPECT_EQ(j["malformed"]["count"], 3);
  EXPECT_EQ(j["malformed"]["lines"][1], json::parse(R"({"file":"rank1.jsonl","line":7,
      "error":"span 1: spanId 'not-a-span-id!!!' is not 16 hex digits"})"));
  EXPECT_EQ(j["ancestry"], json::parse(R"({"unresolved":0,"duplicates":0,"cycles":0})"));
  EXPECT_EQ(j["overlap"], json::parse(R"({"groups":[],"names":[]})"));
}

// The metrics fixture holds two runs: run-42's ranks, and a worker whose resource has no
// nemo.run.id. Each is reported on its own.
constexpr std::string_view kExpectedMetricsText =
    R"(lens report: 3 files, 6 lines (0 malformed, 5 of metrics, 1 of logs), 0 spans, 0 ranks, 2 runs, reported one by one (--run RUN_ID: one): run-42 (no nemo.run.id)

=== run run-42: 0 spans, 0 ranks

Time by span group and name
  no spans

Step time per rank (top-level spans of group step)
  no spans of group step

Stragglers (compared within the ranks that run the same spans: lateness at the collectives, median step time more than 3.5 MADs, as many standard errors of its excess and 5% of the median step above the median rank): none

Truncated spans: none

Metrics: sums and gauges (a sum's last cumulative value, or its deltas added up, over its series; a gauge's last value per series)
  metric      rank  kind         unit      series       value
  gpu.memory  0     gauge        By        gpu=0         1000
  gpu.memory  0     gauge        By        gpu=1         2000
  loss        0     gauge        1                       2.25
  loss        1     gauge        1                        2.3
  samples     0     sum (delta)  {sample}  phase=train    128
  tokens      0     sum          {token}                 2500
  tokens      1     sum          {token}                 2400

Metrics: histograms (p50, p95 and max estimated from the buckets, explicit or exponential, when not recorded)
  metric         rank  kind       unit  count  sum  mean     p50     p95  max
  step.duration  0     histogram  s        10  0.9  0.09  0.0925   0.175  0.2
  step.duration  1     histogram  s        10  1.6  0.16   0.175  0.8125    1

=== run (no nemo.run.id): 0 spans, 0 ranks

Time by span group and name
  no spans

Step time per rank (top-level spans of group step)
  no spans of group step

Stragglers (compared within the ranks that run the same spans: lateness at the collectives, median step time more than 3.5 MADs, as many standard errors of its excess and 5% of the median step above the median rank): none

Truncated spans: none

Metrics: sums and gauges (a sum's last cumulative value, or its deltas added up, over its series; a gauge's last value per series)
  metric       rank      kind   unit  series  value
  queue.depth  worker-a  gauge                    3

Metrics: histograms (p50, p95 and max estimated from the buckets, explicit or exponential, when not recorded)
  metric   rank      kind                   unit  count  sum  mean      p50     p95  max
  latency  worker-a  exponential_histogram  ms        4   10   2.5  2.11893  2.3511  7.5

Malformed lines: none
)";

// The series of metrics_fixture.hpp, by hand: a cumulative sum's points as they are (rank 1's
// older point, read last, comes first), a delta sum's running total, a gauge's points per series,
// a cumulative histogram's intervals (the first point, then the second minus the first: 4 values
// in (0.05, 0.1] and 1 in (0.1, 0.25] each time, clamped to the recorded min and max).
constexpr const char* kExpectedFixtureSeries = R"({
  "gpu.memory rank 0": [
      {"attributes": "gpu=0", "run_id": "run-42", "points": [[1718000010000000000, 1000.0]]},
      {"attributes": "gpu=1", "run_id": "run-42", "points": [[1718000020000000000, 2000.0]]}],
  "latency rank null": [{"attributes": "", "run_id": "", "points": [
      [1718000005000000000, 4, 10.0, 2.1189261887185906, 2.3510958125672174]]}],
  "loss rank 0": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000010000000000, 2.5], [1718000020000000000, 2.25]]}],
  "loss rank 1": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000020000000000, 2.3]]}],
  "queue.depth rank null": [{"attributes": "", "run_id": "", "points": [
      [1718000005000000000, 3]]}],
  "samples rank 0": [{"attributes": "phase=train", "run_id": "run-42", "points": [
      [1718000010000000000, 64], [1718000020000000000, 128]]}],
  "step.duration rank 0": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000010000000000, 5, 0.45, 0.0925, 0.1375],
      [1718000020000000000, 5, 0.45, 0.0925, 0.17500000000000002]]}],
  "step.duration rank 1": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000020000000000, 10, 1.6, 0.175, 0.8125]]}],
  "tokens rank 0": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000010000000000, 1000], [1718000020000000000, 2500]]}],
  "tokens rank 1": [{"attributes": "", "run_id": "run-42", "points": [
      [1718000010000000000, 1100], [1718000020000000000, 2400]]}]
})";

TEST_F(ReportCli, MetricsAndLogsLines) {
  const std::vector<std::string> files = report_test::write_metrics_fixture(dir_);
  std::vector<std::string> args = {"report"};
  args.insert(args.end(), files.begin(), files.end());
  auto r = lens(args);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, kExpectedMetricsText);
  EXPECT_EQ(r.err, "");  // lines of logs are not malformed

  args.push_back("--json");
  r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  // Two runs, an object each; both count the whole input.
  const json runs = json::parse(r.out);
  ASSERT_TRUE(runs.is_array());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["run_ids"], json({"run-42"}));
  EXPECT_EQ(runs[1]["run_ids"], json::array());
  EXPECT_EQ(runs[0]["input"], runs[1]["input"]);
  EXPECT_EQ(runs[1]["metrics"].size(), 2u);
  EXPECT_EQ(runs[1]["logs"]["count"], 0);
  // The worker's two metrics beside run-42's, in the order of one run's list (by name, then
  // rank, the metrics without dl.rank after those with one), for the assertions below.
  json j = runs[0];
  for (const json& m : runs[1]["metrics"]) j["metrics"].push_back(m);
  std::stable_sort(j["metrics"].begin(), j["metrics"].end(), [](const json& a, const json& b) {
    if (a["name"] != b["name"]) return a["name"] < b["name"];
    return a["rank"].is_null() ? false : b["rank"].is_null() || a["rank"] < b["rank"];
  });
  EXPECT_EQ(j["input"], json({{"lines", 6},
                              {"requests", 0},
                              {"spans", 0},
                              {"metric_lines", 5},
                              {"data_points", 16},
                              {"log_lines", 1},
                              {"malformed_lines", 0}}));
  ASSERT_EQ(j["metrics"].size(), 10u);
  // Golden: every metric's series over time (docs/report.md#metrics-over-time); then the rows
  // without them.
  json series = json::object();
  for (json& m : j["metrics"]) {
    series[m["name"].get<std::string>() + " rank " + m["rank"].dump()] = m["timeseries"];
    m.erase("timeseries");
  }
  EXPECT_EQ(series, json::parse(kExpectedFixtureSeries)) << series.dump();
  EXPECT_EQ(j["metrics"][0], json::parse(R"({"name":"gpu.memory","unit":"By","type":"gauge",
      "rank":0,"instance_id":"run-42-rank0","temporality":null,"monotonic":false,"series":2,
      "points":2,"value":2000.0,"by_series":[{"attributes":"gpu=0","value":1000.0},
      {"attributes":"gpu=1","value":2000.0}]})"));
  EXPECT_EQ(j["metrics"][2]["value"], 2.25);
  EXPECT_EQ(j["metrics"][3]["value"], 2.3);
  EXPECT_EQ(j["metrics"][4], json::parse(R"({"name":"queue.depth","unit":"","type":"gauge",
      "rank":null,"instance_id":"worker-a","temporality":null,"monotonic":false,"series":1,
      "points":1,"value":3,"by_series":[{"attributes":"","value":3}]})"));
  EXPECT_TRUE(j["metrics"][4]["value"].is_number_integer());
  EXPECT_EQ(j["metrics"][5], json::parse(R"({"name":"samples","unit":"{sample}","type":"sum",
      "rank":0,"instance_id":"run-42-rank0","temporality":"delta","monotonic":true,"series":1,
      "points":2,"value":128})"));
  // Scale 2 (base 2^(1/4)), one value in bucket 3 and three in bucket 4: p50 a third and p95
  // 2.8/3 of the way through bucket 4, in log scale.
  json latency = j["metrics"][1];
  EXPECT_DOUBLE_EQ(latency["p50"].get<double>(), std::pow(2.0, (4 + 1.0 / 3) / 4));
  EXPECT_DOUBLE_EQ(latency["p95"].get<double>(), std::pow(2.0, (4 + 2.8 / 3) / 4));
  latency.erase("p50");
  latency.erase("p95");
  EXPECT_EQ(latency, json::parse(R"({"name":"latency","unit":"ms",
      "type":"exponential_histogram","rank":null,"instance_id":"worker-a",
      "temporality":"cumulative","monotonic":false,"series":1,"points":1,"count":4,"sum":10.0,
      "mean":2.5,"max":7.5})"));
  const json& step0 = j["metrics"][6];
  EXPECT_EQ(step0["name"], "step.duration");
  EXPECT_EQ(step0["rank"], 0);
  EXPECT_EQ(step0["count"], 10);
  EXPECT_DOUBLE_EQ(step0["sum"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(step0["mean"].get<double>(), 0.09);
  EXPECT_DOUBLE_EQ(step0["p50"].get<double>(), 0.0925);
  EXPECT_DOUBLE_EQ(step0["p95"].get<double>(), 0.175);
  EXPECT_EQ(step0["max"], 0.2);
  EXPECT_EQ(j["metrics"][7]["max"], 1.0);  // estimated: the highest non-empty bucket's bound
  EXPECT_EQ(j["metrics"][8], json::parse(R"({"name":"tokens","unit":"{token}","type":"sum",
      "rank":0,"instance_id":"run-42-rank0","temporality":"cumulative","monotonic":true,
      "series":1,"points":2,"value":2500})"));
  EXPECT_EQ(j["metrics"][9]["value"], 2400);  // the latest point, not the last line

  // The line of logs: its record, for the HTML page's markers.
  EXPECT_EQ(j["logs"], json::parse(R"({"count":1,"records":[{"rank":0,
      "time_unix_nano":1718000000000000000,"severity_number":9,"severity_text":"INFO",
      "body":"checkpoint saved"}]})"));

  // lens convert: a counter track per rank, metric and series, read back; the log record an
  // instant event of its rank.
  r = lens({"convert", "--to", "chrome", files[0], files[2], "-o", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::map<std::string, json> tracks;  // "pid name" -> [[ts, args]...]
  std::set<std::int64_t> named;
  int instants = 0;
  const json trace = json::parse(r.out);
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") named.insert(e["pid"].get<std::int64_t>());
    if (e["ph"] == "i") {
      EXPECT_EQ(e, json::parse(R"({"name":"INFO","cat":"log","ph":"i","s":"p","pid":0,"tid":0,
          "ts":1718000000000000,"args":{"body":"checkpoint saved","severity_number":9}})"));
      ++instants;
    }
    if (e["ph"] != "C") continue;
    EXPECT_EQ(e["cat"], "metric");
    EXPECT_EQ(e["tid"], 0);
    tracks[e["pid"].dump() + " " + e["name"].get<std::string>()].push_back({e["ts"], e["args"]});
  }
  EXPECT_EQ(named, (std::set<std::int64_t>{0, 2147483647}));
  EXPECT_EQ(instants, 1);
  EXPECT_EQ(json(tracks), json::parse(R"({
    "0 gpu.memory {gpu=0}": [[1718000010000000, {"value": 1000.0}]],
    "0 gpu.memory {gpu=1}": [[1718000020000000, {"value": 2000.0}]],
    "0 loss": [[1718000010000000, {"value": 2.5}], [1718000020000000, {"value": 2.25}]],
    "0 samples {phase=train}": [[1718000010000000, {"value": 64}],
                                [1718000020000000, {"value": 128}]],
    "0 step.duration": [[1718000010000000, {"count": 5, "p50": 0.0925, "p95": 0.1375}],
                        [1718000020000000, {"count": 5, "p50": 0.0925,
                                            "p95": 0.17500000000000002}]],
    "0 tokens": [[1718000010000000, {"value": 1000}], [1718000020000000, {"value": 2500}]],
    "2147483647 latency": [[1718000005000000, {"count": 4, "p50": 2.1189261887185906,
                                                "p95": 2.3510958125672174}]],
    "2147483647 queue.depth": [[1718000005000000, {"value": 3}]]
  })"));
}

// The kinds metrics_fixture.hpp has not: delta histograms (explicit and exponential) and a
// summary, whose intervals are their points; a cumulative sum whose later point is lower (a
// restart) is drawn as it is.
TEST_F(ReportCli, SeriesOfDeltaHistogramsAndSummaries) {
  using report_test::time_at;
  const std::string hist_point = R"({"timeUnixNano":%T,"count":"%C","sum":%S,)"
                                 R"("bucketCounts":[%B],"explicitBounds":[1,2]})";
  auto point = [&](std::uint64_t at, const std::string& count, const std::string& sum,
                   const std::string& buckets) {
    std::string p = hist_point;
    p.replace(p.find("%T"), 2, time_at(at));
    p.replace(p.find("%C"), 2, count);
    p.replace(p.find("%S"), 2, sum);
    p.replace(p.find("%B"), 2, buckets);
    return p;
  };
  const std::string line = report_test::metrics_line(
      report_test::rank_resource(2),
      {R"({"name":"h","histogram":{"aggregationTemporality":1,"dataPoints":[)" +
           point(10, "2", "3", R"("0","2","0")") + "," + point(20, "4", "10", R"("0","0","4")") +
           "]}}",
       R"({"name":"e","exponentialHistogram":{"aggregationTemporality":1,"dataPoints":[)"
       R"({"timeUnixNano":)" +
           time_at(10) +
           R"(,"count":"2","sum":5,"scale":0,"positive":{"offset":1,"bucketCounts":["2"]}},)"
           R"({"timeUnixNano":)" +
           time_at(20) + R"(,"count":"1","zeroCount":"1","sum":0}]}})",
       R"({"name":"s","summary":{"dataPoints":[{"timeUnixNano":)" + time_at(10) +
           R"(,"count":"3","sum":6},{"timeUnixNano":)" + time_at(20) +
           R"(,"count":"5","sum":7,"quantileValues":[{"quantile":0.5,"value":1}]}]}})",
       report_test::sum_metric(
           "c", "1", 2, report_test::int_point(10, 50) + "," + report_test::int_point(20, 5))});
  const std::string file = dir_ + "/series.jsonl";
  report_test::write_file(file, line + "\n");
  const auto r = lens({"report", file, "--json"});
  ASSERT_EQ(r.status, 0) << r.err;
  json series = json::object();
  const json report = json::parse(r.out);
  for (const json& m : report["metrics"]) series[m["name"].get<std::string>()] = m;
  // Delta: each point its interval. (1, 2] holds both values, then (2, max] all four (no max:
  // the last bound, 2).
  EXPECT_EQ(series["h"]["timeseries"], json::parse(R"([{"attributes":"","run_id":"run-42","points":[
      [1718000010000000000, 2, 3.0, 1.5, 1.95], [1718000020000000000, 4, 10.0, 2.0, 2.0]]}])"));
  EXPECT_EQ(series["h"]["count"], 6);
  // Scale 0: both values in (2, 4], then one in the zero bucket.
  EXPECT_EQ(series["e"]["timeseries"], json::parse(R"([{"attributes":"","run_id":"run-42","points":[
      [1718000010000000000, 2, 5.0, 2.8284271247461903, 3.863745315699382],
      [1718000020000000000, 1, 0.0, 0.0, 0.0]]}])"));
  // A summary's points are cumulative: the second interval is 2 values and a sum of 1; it has
  // no buckets, so no percentiles (its quantile values are not read).
  EXPECT_EQ(series["s"]["timeseries"], json::parse(R"([{"attributes":"","run_id":"run-42","points":[
      [1718000010000000000, 3, 6.0, null, null], [1718000020000000000, 2, 1.0, null, null]]}])"));
  EXPECT_EQ(series["c"]["timeseries"], json::parse(R"([{"attributes":"","run_id":"run-42","points":[
      [1718000010000000000, 50], [1718000020000000000, 5]]}])"));
  EXPECT_EQ(series["c"]["value"], 5) << "the last point is the value";
}

// Run run-42's metrics after its spans' tables, which they leave as they were.
TEST_F(ReportCli, MetricsLeaveTheSpanReportAsItWas) {
  const std::vector<std::string> metric_files = report_test::write_metrics_fixture(dir_);
  std::vector<std::string> flags(metric_files.begin(), metric_files.end());
  flags.insert(flags.end(), {"--run", "run-42"});
  const auto r = lens(report_args(flags));
  EXPECT_EQ(r.status, 0) << r.err;
  std::string expected(kExpectedText);
  expected.replace(0, expected.find('\n'),
                   "lens report: 7 files, 21 lines (3 malformed, 5 of metrics, 1 of logs), 59 "
                   "spans, 3 ranks");
  const std::size_t from = kExpectedMetricsText.find("\nMetrics: sums");
  const std::string_view metrics_part = kExpectedMetricsText.substr(
      from, kExpectedMetricsText.find("\n=== run (no nemo.run.id)") - from);
  expected.insert(expected.find("\nMalformed lines"), metrics_part);
  EXPECT_EQ(r.out, expected);
  EXPECT_EQ(r.err, "lens report: skipped 3 malformed lines (listed in the report)\n");
}

TEST_F(ReportCli, MalformedMetricsLinesAreListed) {
  report_test::write_file(
      dir_ + "/bad.jsonl",
      report_test::metrics_line(report_test::rank_resource(0),
                                {R"({"name":"h","histogram":{"dataPoints":[{"bucketCounts":["1"],)"
                                 R"("explicitBounds":[1.0]}]}})"}) +
          "\n" + R"({"resourceLogs":{}})" + "\n");
  const auto r = lens({"report", dir_ + "/bad.jsonl"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("lens report: 1 file, 2 lines (2 malformed), 0 spans, 0 ranks\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("Malformed lines (2, skipped)\n"
                       "  bad.jsonl:1: metric 'h': dataPoints[0]: 1 bucketCounts for 1 "
                       "explicitBounds (expected one more)\n"
                       "  bad.jsonl:2: resourceLogs is not an array\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("Metrics:"), std::string::npos);
}

TEST_F(ReportCli, TopLimitsTheNameTable) {
  auto r = lens(report_args({"--top", "2"}));
  EXPECT_EQ(r.status, 0);
  EXPECT_NE(r.out.find("  group  name        count   total     mean      p50      p95      max"
                       "   step%  self%\n"
                       "  job    pretrain        3  1.175s  391.7ms  345.0ms  484.5ms  500.0ms"
                       "    0.0%   0.0%\n"
                       "  step   train_step      9  1.050s  116.7ms  100.0ms  150.0ms  150.0ms"
                       "  100.0%   4.0%\n"
                       "  (2 of 8 rows; --top 0 shows all)\n"),
            std::string::npos)
      << r.out;
  r = lens(report_args({"--json", "--top=2"}));
  EXPECT_EQ(json::parse(r.out)["names"].size(), 2u);
  EXPECT_EQ(json::parse(r.out)["names_total"], 8);
  r = lens(report_args({"--top", "0"}));
  EXPECT_EQ(r.out, kExpectedText);
}

// --run keeps one run's spans and metrics when files of several runs are read together (the
// demo's C++ and PyTorch jobs, through one receiver).
TEST_F(ReportCli, RunSelectsOneRunsSpansAndMetrics) {
  const std::string other = dir_ + "/other.jsonl";
  const std::string resource =
      R"("resource":{"attributes":[{"key":"nemo.run.id","value":{"stringValue":"run-7"}},)"
      R"({"key":"dl.rank","value":{"intValue":"0"}}]})";
  report_test::write_file(
      other,
      R"({"resourceSpans":[{)" + resource +
          R"(,"scopeSpans":[{"spans":[{"traceId":"0af7651916cd43dd8448eb211c80319c",)"
          R"("spanId":"b7ad6b7169203331","name":"other_step","startTimeUnixNano":"1000000000",)"
          R"("endTimeUnixNano":"1250000000","attributes":[{"key":"nemo.span.group",)"
          R"("value":{"stringValue":"step"}}]}]}]}]})"
          "\n"
          R"({"resourceMetrics":[{)" +
          resource +
          R"(,"scopeMetrics":[{"metrics":[{"name":"other.gauge","gauge":{"dataPoints":[)"
          R"({"asDouble":3.5}]}}]}]}]})"
          "\n");
  std::vector<std::string> args = report_args({"--json", "--run", "run-7"});
  args.insert(args.begin() + 1, other);
  auto r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["run_ids"], json::parse(R"(["run-7"])"));  // the header names the run reported
  ASSERT_EQ(j["names"].size(), 1u);
  EXPECT_EQ(j["names"][0]["name"], "other_step");
  ASSERT_EQ(j["metrics"].size(), 1u);
  EXPECT_EQ(j["metrics"][0]["name"], "other.gauge");

  args = report_args({"--json", "--run", "run-42"});
  args.insert(args.begin() + 1, other);
  r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["names"].size(), 8u) << "the fixture's own names, without other_step";
  EXPECT_TRUE(j["metrics"].empty());

  r = lens(report_args({"--run="}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("--run requires a run id"), std::string::npos) << r.err;
}

// Control characters in names from the wire reach the terminal escaped (the HTML page escapes
// them for HTML; the JSON report keeps them as JSON escapes).
TEST_F(ReportCli, TextOutputEscapesControlCharacters) {
  const std::string file = dir_ + "/escapes.jsonl";
  report_test::write_file(
      file,
      R"({"resourceSpans":[{"resource":{"attributes":[{"key":"nemo.run.id","value":)"
      R"({"stringValue":"run\u001b]0;x\u0007"}}]},"scopeSpans":[{"spans":[{)"
      R"("traceId":"0af7651916cd43dd8448eb211c80319c","spanId":"b7ad6b7169203331",)"
      R"("name":"a\u001b[31mred\u0007\rb\u0085c","startTimeUnixNano":"1000","endTimeUnixNano":"2000"}]}]}]})"
      "\n");
  const auto r = lens({"report", file});
  ASSERT_EQ(r.status, 0) << r.err;
  for (char c : r.out) {
    const auto u = static_cast<unsigned char>(c);
    ASSERT_TRUE(u >= 0x20 || c == '\n') << "raw control byte " << int(u) << " in:\n" << r.out;
  }
  EXPECT_EQ(r.out.find("\xc2\x85"), std::string::npos) << "the C1 control NEL printed raw";
  EXPECT_NE(r.out.find(R"(a\x1b[31mred\x07\x0db\u0085c)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(R"(run: run\x1b]0;x\x07)"), std::string::npos) << r.out;
}

// The threshold is the rule's floor: rank 2's 50 ms over the median rank's 100 ms step is not
// above 50 % of it, and is above 49.5 %.
TEST_F(ReportCli, StragglerThreshold) {
  auto r = lens(report_args({"--straggler-threshold", "50"}));
  EXPECT_NE(r.out.find("Stragglers (compared within the ranks that run the same spans: lateness "
                       "at the collectives, median step time more than 3.5 MADs, as many standard "
                       "errors of its excess and 50% of the median step above the median rank): "
                       "none\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("straggler\n"), std::string::npos);
  r = lens(report_args({"--straggler-threshold=49.5", "--json"}));
  const json j = json::parse(r.out);
  EXPECT_EQ(j["stragglers"]["threshold_pct"], 49.5);
  EXPECT_EQ(j["stragglers"]["ranks"].size(), 1u);
}

TEST_F(ReportCli, StandardInputAndDoubleDash) {
  auto r = lens({"report", "--json", "-"}, fixture_.files[0]);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["input"]["spans"], 20);
  EXPECT_EQ(json::parse(r.out)["files"], json({"-"}));
  std::filesystem::copy_file(fixture_.files[0], dir_ + "/--odd.jsonl");
  r = lens({"report", "--json", "--", "--odd.jsonl"}, {}, dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["input"]["spans"], 20);
}

TEST_F(ReportCli, Errors) {
  auto r = lens({"report", fixture_.files[0], dir_ + "/missing.jsonl", "--json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "lens report: cannot open 'missing.jsonl': No such file or directory\n");
  r = lens({"report", dir_});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("it is a directory"), std::string::npos) << r.err;
  r = lens({"report"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "lens report: no input FILE given\nRun 'lens report --help' for usage.\n");
  r = lens(report_args({"--straggler-threshold", "lots"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens report: invalid value 'lots' for --straggler-threshold: expected a "
                       "number >= 0"),
            std::string::npos);
  r = lens(report_args({"--straggler-threshold=-5"}));
  EXPECT_EQ(r.status, 2);
  r = lens(report_args({"--top", "-1"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("invalid value '-1' for --top"), std::string::npos) << r.err;
  r = lens(report_args({"--verbose"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens report: unknown option '--verbose'"), std::string::npos);
  for (const char* bad : {"0", "x", "-2", "3x", ""}) {
    r = lens(report_args({"--ranks", bad}));
    EXPECT_EQ(r.status, 2) << bad;
    EXPECT_NE(r.err.find(std::string("invalid value '") + bad +
                         "' for --ranks: expected N >= 1 or 'all'"),
              std::string::npos)
        << r.err;
  }
  r = lens(report_args({"--html", "/nonexistent/dir/r.html"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens report: cannot write '/nonexistent/dir/r.html': No such file or "
                       "directory"),
            std::string::npos)
      << r.err;
}

TEST_F(ReportCli, Help) {
  auto r = lens({"report", "--help"});
  EXPECT_EQ(r.status, 0);
  EXPECT_EQ(r.out.rfind("usage: lens report FILE...", 0), 0u);
  r = lens({"convert", "-h"});
  EXPECT_EQ(r.out.rfind("usage: lens convert --to chrome FILE... -o OUT.json", 0), 0u);
  r = lens({"--help"});
  EXPECT_NE(r.out.find("\n  report  summarise spans"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n  convert convert spans to a Chrome/Perfetto trace file"),
            std::string::npos);
}

TEST_F(ReportCli, HtmlIsSelfContainedAndEmbedsTheJsonReport) {
  const std::string html_path = dir_ + "/report.html";
  auto r = lens(report_args({"--html", html_path}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, kExpectedText);  // the text report still goes to stdout
  std::string html = report_test::read_file(html_path);
  for (std::size_t at; (at = html.find(dir_ + "/")) != std::string::npos;)
    html.erase(at, dir_.size() + 1);
  EXPECT_EQ(html.rfind("<!DOCTYPE html>", 0), 0u);
  // No network: no external script, style, image or font, and the one URL is the SVG namespace.
  for (const char* forbidden : {"<link", " src=", "@import", "url(", "@font-face", "https://"}) {
    EXPECT_EQ(html.find(forbidden), std::string::npos) << forbidden;
  }
  std::size_t urls = 0, namespaces = 0;
  for (std::size_t at = 0; (at = html.find("http://", at)) != std::string::npos; ++at) ++urls;
  for (std::size_t at = 0; (at = html.find("http://www.w3.org/2000/svg", at)) != std::string::npos;
       ++at) {
    ++namespaces;
  }
  EXPECT_EQ(urls, namespaces);
  // The data: what --json --top 20 prints, with '<' escaped.
  const std::string open = "<script type=\"application/json\" id=\"lens-data\">";
  const std::size_t begin = html.find(open) + open.size();
  const std::size_t end = html.find("</script>", begin);
  ASSERT_NE(end, std::string::npos);
  json embedded = json::parse(html.substr(begin, end - begin));
  // Beside it, the rank x step matrices of the heat map: the fixture's step times in us, a row
  // per rank; no collectives, so no lateness.
  EXPECT_EQ(embedded["heatmaps"], json::parse(R"([{"name":"train_step","ranks":[0,1,2],"steps":3,
      "steps_per_column":1,"step_us":[[100000,100000,100000],[100000,110000,90000],
      [150000,150000,150000]],"late_us":null}])"));
  embedded.erase("heatmaps");
  r = lens(report_args({"--json", "--top", "20"}));
  EXPECT_EQ(embedded, json::parse(r.out));
}

TEST_F(ReportCli, HtmlEscapesScriptEndsInNames) {
  report_test::write_file(
      dir_ + "/evil.jsonl",
      report_test::request_line(report_test::rank_resource(0),
                                {report_test::make_span(1, 0, "</script><b>x</b>", "step",
                                                        report_test::kT0, report_test::kT0 + 5)}) +
          "\n");
  auto r = lens({"report", dir_ + "/evil.jsonl", "--html", dir_ + "/evil.html"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string html = report_test::read_file(dir_ + "/evil.html");
  EXPECT_EQ(html.find("</script><b>"), std::string::npos);
  EXPECT_NE(html.find(R"(\u003c/script>\u003cb>x\u003c/b>)"), std::string::npos);
}

TEST_F(ReportCli, ConvertToChrome) {
  const std::string out_path = dir_ + "/trace.json";
  std::vector<std::string> args = {"convert", "--to", "chrome"};
  args.insert(args.end(), fixture_.files.begin(), fixture_.files.end());
  args.insert(args.end(), {"-o", out_path});
  const auto r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "lens convert: skipped rank1.jsonl:3: invalid JSON at byte 46: syntax error while "
            "parsing value - unexpected end of input; expected '[', '{', or a literal\n"
            "lens convert: skipped rank1.jsonl:7: span 1: spanId 'not-a-span-id!!!' is not 16 hex "
            "digits\n"
            "lens convert: skipped rank1.jsonl:8: invalid JSON at byte 1501: syntax error while "
            "parsing object key - invalid string: missing closing quote; last read: '\"sta'; "
            "expected string literal\n"
            "lens convert: 59 spans written, 3 malformed lines skipped\n");
  const std::string text = report_test::read_file(out_path);
  const json trace = json::parse(text);
  ASSERT_TRUE(trace["traceEvents"].is_array());
  EXPECT_EQ(trace["displayTimeUnit"], "ms");
  std::size_t complete = 0, instant = 0;
  std::set<std::string> processes, threads;
  for (const json& e : trace["traceEvents"]) {
    const std::string ph = e["ph"];
    if (ph == "X") {
      ++complete;
      EXPECT_TRUE(e["ts"].is_number() && e["dur"].is_number() && e["args"].is_object());
      EXPECT_EQ(e["tid"], 11 + 10 * e["pid"].get<int>()) << e.dump();  // thread.id of each rank
      EXPECT_EQ(e["cat"], e["args"].value("nemo.span.group", "(none)")) << e.dump();
    } else if (ph == "i") {
      ++instant;
      EXPECT_EQ(e, json::parse(R"({"name":"loss_scale_update","cat":"forward_backward","ph":"i",
          "s":"t","pid":0,"tid":11,"ts":1718000000050000,"args":{"scale":1024,"reason":"overflow"}})"));
    } else {
      ASSERT_EQ(ph, "M");
      if (e["name"] == "process_name") processes.insert(e["args"]["name"]);
      if (e["name"] == "thread_name") threads.insert(e["args"]["name"]);
    }
  }
  EXPECT_EQ(complete, 59u);
  EXPECT_EQ(instant, 1u);
  EXPECT_EQ(processes, (std::set<std::string>{"rank 0", "rank 1", "rank 2"}));
  EXPECT_EQ(threads, (std::set<std::string>{"thread 11", "thread 21", "thread 31"}));
  // Times are exact microseconds, written as decimal text.
  EXPECT_NE(
      text.find(R"("name":"forward_backward","cat":"forward_backward","ph":"X","pid":0,)"
                R"("tid":11,"ts":1718000000010000,"dur":70000,"args":{"iteration":0,)"
                R"("nemo.span.group":"forward_backward","thread.id":11,)"
                R"("trace_id":"4bf92f3577b34da6a3ce929d0e0e4736","span_id":"0000000000000102",)"
                R"("parent_span_id":"0000000000000101","service.instance.id":"run-42-rank0"}})"),
      std::string::npos);
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    if (e["name"] == "optimizer_step" && e["args"].contains("lr")) {
      EXPECT_EQ(e["args"]["lr"], 0.0003);
      EXPECT_EQ(e["args"]["shapes"], json::parse(R"([4,"x"])"));
      EXPECT_EQ(e["args"]["opts"], json::parse(R"({"fused":true})"));
    }
    if (e["pid"] == 1 && e["name"] == "train_step" && e["args"]["iteration"] == 1) {
      EXPECT_EQ(e["args"]["status"], "error");
      EXPECT_EQ(e["args"]["status_message"], "nan loss");
    }
    if (e["name"] == "pretrain") {
      EXPECT_FALSE(e["args"].contains("parent_span_id"));
    }
  }
}

TEST_F(ReportCli, ConvertToStandardOutputAndErrors) {
  auto r = lens({"convert", "--to=chrome", fixture_.files[0], "-o", "-"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["traceEvents"].size(), 20u + 3 + 1);  // spans, metadata, event
  EXPECT_EQ(r.err, "");

  r = lens({"convert", fixture_.files[0], "-o", dir_ + "/x.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens convert: --to FORMAT is required"), std::string::npos) << r.err;
  r = lens({"convert", "--to", "perfetto", fixture_.files[0], "-o", dir_ + "/x.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("invalid value 'perfetto' for --to: expected chrome"), std::string::npos);
  r = lens({"convert", "--to", "chrome", fixture_.files[0]});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens convert: -o OUT.json is required"), std::string::npos);
  r = lens({"convert", "--to", "chrome", "-o", dir_ + "/x.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens convert: no input FILE given"), std::string::npos);
  r = lens({"convert", "--to", "chrome", dir_ + "/missing.jsonl", "-o", dir_ + "/x.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err, "lens convert: cannot open 'missing.jsonl': No such file or directory\n");
  EXPECT_FALSE(std::filesystem::exists(dir_ + "/x.json"));
  r = lens({"convert", "--to", "chrome", fixture_.files[0], "-o", "/nonexistent/dir/x.json"});
  EXPECT_EQ(r.status, 2);
  EXPECT_NE(r.err.find("lens convert: cannot write '/nonexistent/dir/x.json'"), std::string::npos);
}

TEST_F(ReportCli, FilesTheLibraryWrites) {
  // Three ranks of a real traced loop; rank 2's steps take twice as long.
  std::vector<std::string> files;
  for (int rank = 0; rank < 3; ++rank) {
    const auto r = report_test::run({REPORT_JOB, std::to_string(rank), "3", "5",
                                     rank == 2 ? "60" : "30", dir_ + "/trace-{rank}.jsonl"},
                                    dir_);
    ASSERT_EQ(r.status, 0) << r.err;
    files.push_back(dir_ + "/trace-" + std::to_string(rank) + ".jsonl");
  }
  std::vector<std::string> args = {"report", "--json"};
  args.insert(args.end(), files.begin(), files.end());
  auto r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["input"]["spans"], 3 * (1 + 5 * 6));
  EXPECT_EQ(j["input"]["malformed_lines"], 0);
  EXPECT_EQ(j["run_ids"], json({"job-test"}));
  EXPECT_EQ(j["step"]["count"], 15);
  ASSERT_EQ(j["ranks"].size(), 3u);
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_EQ(j["ranks"][rank]["rank"], rank);
    EXPECT_EQ(j["ranks"][rank]["instance_id"], "job-test-rank" + std::to_string(rank));
    EXPECT_EQ(j["ranks"][rank]["steps"][0]["name"], "train_step");
    EXPECT_EQ(j["ranks"][rank]["steps"][0]["count"], 5);
  }
  ASSERT_EQ(j["stragglers"]["ranks"].size(), 1u) << j["stragglers"];
  EXPECT_EQ(j["stragglers"]["ranks"][0]["rank"], 2);
  EXPECT_EQ(j["truncated"]["count"], 3);
  EXPECT_EQ(j["truncated"]["spans"][0]["name"], "pretrain");
  EXPECT_EQ(j["truncated"]["spans"][0]["group"], "job");
  for (const json& n : j["names"]) {
    if (n["group"] == "job") {
      EXPECT_EQ(n["in_step_ns"], 0);
    } else {
      EXPECT_EQ(n["count"], n["group"] == "microbatch" ? 30 : 15) << n;
      EXPECT_EQ(n["in_step_ns"], n["total_ns"]) << n;  // all of it inside the steps
    }
  }
  args = {"convert", "--to", "chrome", "-o", dir_ + "/trace.json"};
  args.insert(args.end(), files.begin(), files.end());
  r = lens(args);
  ASSERT_EQ(r.status, 0) << r.err;
  const json trace = json::parse(report_test::read_file(dir_ + "/trace.json"));
  std::size_t complete = 0;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "X") {
      ++complete;
      EXPECT_GT(e["tid"].get<std::int64_t>(), 0) << "thread.id of the span";
    }
  }
  EXPECT_EQ(complete, 3u * 31);
}

// The spans of the steps go to temporary files past 32,768 of them: a TMPDIR that cannot take
// them stops the report with its name, exit status 2 and nothing on stdout.
TEST_F(ReportCli, ATemporaryDirectoryThatCannotBeWrittenIsNamed) {
  std::string lines;
  std::uint64_t id = 1;
  for (int line = 0; line < 70; ++line) {
    std::vector<report_test::SpanSpec> spans;
    for (int i = 0; i < 500; ++i, ++id) {
      spans.push_back(report_test::make_span(id, 0, "op", "layer", report_test::kT0 + id,
                                             report_test::kT0 + id + 10, 1));
    }
    lines += report_test::request_line(report_test::rank_resource(0), spans) + "\n";
  }
  report_test::write_file(dir_ + "/many.jsonl", lines);
  const std::string missing = dir_ + "/no-such-dir";
  auto r = report_test::run(
      {"/usr/bin/env", "TMPDIR=" + missing, LENS_BINARY, "report", dir_ + "/many.jsonl"}, dir_);
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_NE(r.err.find("lens report: cannot make a temporary file in '" + missing +
                       "' (TMPDIR) for the step analysis: No such file or directory"),
            std::string::npos)
      << r.err;
  r = report_test::run(
      {"/usr/bin/env", "TMPDIR=" + dir_, LENS_BINARY, "report", "--json", dir_ + "/many.jsonl"},
      dir_);
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["input"]["spans"], 35000);
  std::size_t left = 0;  // the temporary files are gone
  for (const auto& e : std::filesystem::directory_iterator(dir_)) {
    left += e.path().filename().string().rfind("lens-report-", 0) == 0;
  }
  EXPECT_EQ(left, 0u);
}

// Issue 40: no share above 100 %, on every golden input (tests/report/golden) and on the fixture:
// every name's and group's step and self share, every overlapped and exposed share; and the
// groups' own time adds up to the step time exactly.
TEST_F(ReportCli, NoShareOfAnyGoldenInputIsAboveOneHundredPercent) {
  std::vector<std::vector<std::string>> inputs = {fixture_.files};
  for (const char* f :
       {"order_children_first.jsonl", "order_parent_first.jsonl", "ddp.jsonl", "gpu.jsonl"}) {
    inputs.push_back({std::string(REPORT_GOLDEN_DIR) + "/" + f});
  }
  inputs.push_back({std::string(REPORT_GOLDEN_DIR) + "/nested_rank0.jsonl",
                    std::string(REPORT_GOLDEN_DIR) + "/nested_rank1.jsonl"});
  for (const auto& files : inputs) {
    std::vector<std::string> args = {"report", "--json"};
    args.insert(args.end(), files.begin(), files.end());
    const auto r = lens(args);
    ASSERT_EQ(r.status, 0) << r.err;
    const json j = json::parse(r.out);
    std::uint64_t own = 0;
    for (const json& g : j["groups"]) {
      own += g["in_step_self_ns"].get<std::uint64_t>();
      EXPECT_LE(g["step_share"].get<double>(), 1.0) << files[0] << ": " << g;
      EXPECT_LE(g["self_share"].get<double>(), 1.0) << files[0] << ": " << g;
    }
    EXPECT_EQ(own, j["step"]["total_ns"].get<std::uint64_t>()) << files[0];
    for (const json& n : j["names"]) {
      EXPECT_LE(n["step_share"].get<double>(), 1.0) << files[0] << ": " << n;
      EXPECT_LE(n["self_share"].get<double>(), 1.0) << files[0] << ": " << n;
    }
    for (const char* kind : {"groups", "names"}) {
      for (const json& o : j["overlap"][kind]) {
        EXPECT_LE(o["overlapped_share"].get<double>(), 1.0) << files[0] << ": " << o;
        EXPECT_LE(o["exposed_ns"].get<std::uint64_t>(), o["overlapped_ns"].get<std::uint64_t>());
      }
    }
    // GPU time: the busy time within the steps, and the utilisation within the GPU intervals.
    for (const json& n : j["names"]) {
      for (const char* key : {"gpu_step_share", "gpu_utilization"}) {
        if (n.contains(key) && !n[key].is_null()) {
          EXPECT_LE(n[key].get<double>(), 1.0) << files[0] << ": " << n;
        }
      }
    }
    // The waits at the collectives: a rank's own wait, and what it made the others wait.
    for (const json& c : j["collectives"]) {
      for (const json& x : c["ranks"]) {
        EXPECT_LE(x["waited_share"].get<double>(), 1.0) << files[0] << ": " << x;
        EXPECT_LE(x["wait_caused_share"].get<double>(), 1.0) << files[0] << ": " << x;
      }
    }
    // And every share the text prints (an excess, "+30.0%", is not a share).
    args.erase(args.begin() + 1);
    const std::string text = lens(args).out;
    for (std::size_t at = 0; (at = text.find('%', at)) != std::string::npos; ++at) {
      std::size_t from = at;
      while (from > 0 && (std::isdigit(static_cast<unsigned char>(text[from - 1])) != 0 ||
                          text[from - 1] == '.')) {
        --from;
      }
      if (from == at || (from > 0 && text[from - 1] == '+')) continue;
      EXPECT_LE(std::stod(text.substr(from, at - from)), 100.0)
          << files[0] << ": " << text.substr(from, at - from + 1);
    }
  }
}

// ---- GPU time (docs/report.md#gpu-time) ----

// The figures of golden/gpu.jsonl (make_inputs.py), each computed by hand from the GPU intervals
// and busy times there, in ms from each step's start (steps of 100 ms at 0, 100, 200):
//   rank 0: forward_backward [5,40] busy 30 (120 kernels), all_reduce [35,60] busy 20 (4),
//           optimizer [72,80] busy 6 (30), the step [5,80] busy 55 (154);
//   rank 1: forward_backward [5,75] busy 68, all_reduce [60,95] busy 30, optimizer [76,102]
//           busy 20, the step [5,102] busy 95; get_batch [0,5) has no GPU times;
//   rank 2: as rank 0.
TEST_F(ReportCli, GpuTimeOfTheGoldenInputIsWhatTheArithmeticGives) {
  const std::string input = std::string(REPORT_GOLDEN_DIR) + "/gpu.jsonl";
  const auto r = lens({"report", "--json", input});
  ASSERT_EQ(r.status, 0) << r.err;
  const json j = json::parse(r.out);
  constexpr std::uint64_t ms = 1'000'000;
  // Per name: gpu.busy and gpu.kernels added up over 3 steps of each rank; the busy time within
  // the steps (the optimizer's [76,102] of rank 1 is cut at the step's end: 20 busy, at most
  // 24 within, so 20); the utilisation, busy over the GPU intervals' length.
  std::map<std::string, std::tuple<json, json, json>> names;
  std::map<std::string, std::tuple<json, json, json>> shares;
  for (const json& n : j["names"]) {
    names[n["name"]] = {n["gpu_spans"], n["gpu_busy_ns"], n["gpu_kernels"]};
    shares[n["name"]] = {n["gpu_in_step_ns"], n["gpu_step_share"], n["gpu_utilization"]};
  }
  using Row = std::tuple<json, json, json>;
  EXPECT_EQ(names["train_step"], Row(9, 3 * (55 + 95 + 55) * ms, 9 * 154));        // 615 ms
  EXPECT_EQ(names["forward_backward"], Row(9, 3 * (30 + 68 + 30) * ms, 9 * 120));  // 384 ms
  EXPECT_EQ(names["all_reduce"], Row(9, 3 * (20 + 30 + 20) * ms, 9 * 4));          // 210 ms
  EXPECT_EQ(names["optimizer"], Row(9, 3 * (6 + 20 + 6) * ms, 9 * 30));            // 96 ms
  EXPECT_EQ(names["get_batch"], Row(0, nullptr, nullptr));
  // The step row: busy 55 within [5,80] (75 long), 95 within [5,100] cut from [5,102]: 615 ms
  // of 900, and utilisation 615 / (3 x (75 + 97 + 75)) = 0.82996.
  EXPECT_EQ(shares["train_step"], Row(615 * ms, 0.683333, 0.82996));
  // forward_backward: 384 ms of 900; busy over its intervals 384 / (3 x (35 + 70 + 35)).
  EXPECT_EQ(shares["forward_backward"], Row(384 * ms, 0.426667, 0.914286));
  EXPECT_EQ(shares["optimizer"], Row(96 * ms, 0.106667, 0.761905));  // 96 / (3 x (8+26+8))
  EXPECT_EQ(shares["get_batch"], Row(nullptr, nullptr, nullptr));
  // Per step, rank 0: busy 55 (the step's gpu.busy); idle: window [0, max(100, 80)] = 100,
  // less 55 = 45; exposed communication: [35,60] - ([5,40] + [72,80]) = [40,60] = 20.
  // Rank 1: busy 95; window [0, max(100, 102)] = 102, idle 102 - 95 = 7; exposed communication
  // [60,95] - ([5,75] + [76,102]) = [75,76] = 1.
  const json& r0 = j["ranks"][0];
  const json& r1 = j["ranks"][1];
  EXPECT_EQ(r0["timeline"]["gpu_busy_ns"], json({55 * ms, 55 * ms, 55 * ms}));
  EXPECT_EQ(r0["timeline"]["gpu_idle_ns"], json({45 * ms, 45 * ms, 45 * ms}));
  EXPECT_EQ(r0["timeline"]["gpu_exposed_comm_ns"], json({20 * ms, 20 * ms, 20 * ms}));
  EXPECT_EQ(r1["timeline"]["gpu_busy_ns"], json({95 * ms, 95 * ms, 95 * ms}));
  EXPECT_EQ(r1["timeline"]["gpu_idle_ns"], json({7 * ms, 7 * ms, 7 * ms}));
  EXPECT_EQ(r1["timeline"]["gpu_exposed_comm_ns"], json({ms, ms, ms}));
  EXPECT_EQ(j["ranks"][2]["timeline"]["gpu_busy_ns"], r0["timeline"]["gpu_busy_ns"]);
  // The GPU row of rank 1's second step: the leaves' intervals, from the first step's start.
  EXPECT_EQ(r1["timeline"]["gpu_intervals_ns"][1],
            json::parse(R"([[105000000,70000000,"forward_backward"],
                            [160000000,35000000,"communication"],
                            [176000000,26000000,"optimizer"]])"));
  EXPECT_EQ(r0["gpu_steps"], json::parse(R"([{"name":"train_step","count":3,
      "gpu_busy_ns":165000000,"gpu_busy_p50_ns":55000000,"gpu_idle_ns":135000000,
      "gpu_exposed_comm_ns":60000000,"straggler":false}])"));
  EXPECT_EQ(r1["gpu_steps"], json::parse(R"([{"name":"train_step","count":3,
      "gpu_busy_ns":285000000,"gpu_busy_p50_ns":95000000,"gpu_idle_ns":21000000,
      "gpu_exposed_comm_ns":3000000,"straggler":true}])"));
  // Every rank's steps take 100 ms: no straggler on step time. On GPU busy the median rank's is
  // 55 (MAD 0); rank 1's 95 is 40 ms above it, past the floor of 5 ms (5 % of the step). Its
  // GPU spends 68 ms a step in forward_backward against the median rank's 30, 20 in the
  // optimizer against 6 and 30 in communication against 20.
  EXPECT_TRUE(r1["steps"][0]["straggler"]);  // flagged, on GPU busy
  const json& s = j["stragglers"]["ranks"];
  ASSERT_EQ(s.size(), 1u) << s;
  EXPECT_EQ(s[0]["rank"], 1);
  EXPECT_EQ(s[0]["flagged_by"], json({"gpu_busy"}));
  EXPECT_EQ(s[0]["gpu_busy_p50_ns"], 95 * ms);
  EXPECT_EQ(s[0]["median_gpu_busy_ns"], 55 * ms);
  EXPECT_EQ(s[0]["gpu_groups"], json::parse(R"([
      {"group":"forward_backward","ns_per_step":68000000,"median_ns_per_step":30000000,
       "excess_ns_per_step":38000000},
      {"group":"optimizer","ns_per_step":20000000,"median_ns_per_step":6000000,
       "excess_ns_per_step":14000000},
      {"group":"communication","ns_per_step":30000000,"median_ns_per_step":20000000,
       "excess_ns_per_step":10000000}])"));
  EXPECT_EQ(j["gpu"], json::parse(R"({"spans":36,"steps":9,"busy_ns":615000000,
      "idle_ns":291000000,"exposed_comm_ns":123000000,"communication_group":"communication"})"));
  // With a floor of 40 % (40 ms), rank 1's 40 ms is not above it.
  const json at40 =
      json::parse(lens({"report", "--json", "--straggler-threshold", "40", input}).out);
  EXPECT_EQ(at40["stragglers"]["ranks"], json::array());
  EXPECT_FALSE(at40["ranks"][1]["gpu_steps"][0]["straggler"]);

  // The same report with the spans in reverse order, children before their steps, two files.
  std::vector<std::string> lines;
  std::istringstream in(report_test::read_file(input));
  for (std::string line; std::getline(in, line);) {
    json request = json::parse(line);
    json& spans = request["resourceSpans"][0]["scopeSpans"][0]["spans"];
    spans = json(std::vector<json>(spans.rbegin(), spans.rend()));
    lines.push_back(request.dump());
  }
  ASSERT_EQ(lines.size(), 9u);
  std::ofstream(dir_ + "/a.jsonl") << lines[5] << '\n'
                                   << lines[1] << '\n'
                                   << lines[3] << '\n'
                                   << lines[8] << '\n';
  std::ofstream(dir_ + "/b.jsonl") << lines[4] << '\n'
                                   << lines[0] << '\n'
                                   << lines[2] << '\n'
                                   << lines[7] << '\n'
                                   << lines[6] << '\n';
  const auto reversed = lens({"report", "--json", dir_ + "/b.jsonl", dir_ + "/a.jsonl"});
  ASSERT_EQ(reversed.status, 0) << reversed.err;
  json k = json::parse(reversed.out), expected = j;
  for (json* x : {&k, &expected}) x->erase("files");
  EXPECT_EQ(k, expected);
}

TEST_F(ReportCli, WithoutGpuAttributesNothingOfGpuIsShown) {
  for (const bool as_json : {false, true}) {
    const auto r = lens(
        report_args(as_json ? std::vector<std::string>{"--json"} : std::vector<std::string>{}));
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_EQ(r.out.find("gpu"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("GPU"), std::string::npos) << r.out;
  }
}

// lens convert puts the GPU intervals of the leaf GPU-timed spans (forward_backward, all_reduce,
// optimizer: not the steps, which hold them) on a "GPU" track per rank, an interval that overlaps
// another on a second track "GPU 2", so that no track's events overlap.
TEST_F(ReportCli, ConvertWritesTheGpuIntervalsOnAGpuTrackPerRank) {
  const std::string out_path = dir_ + "/trace.json";
  const auto r = lens(
      {"convert", "--to", "chrome", std::string(REPORT_GOLDEN_DIR) + "/gpu.jsonl", "-o", out_path});
  ASSERT_EQ(r.status, 0) << r.err;
  const json trace = json::parse(report_test::read_file(out_path));
  constexpr std::int64_t kGpu = 2147483646;             // the GPU track's tid; kGpu - 1: "GPU 2"
  using Track = std::pair<std::int64_t, std::int64_t>;  // (pid, tid)
  std::map<Track, std::string> thread_names;
  std::map<Track, std::vector<json>> gpu_events;
  std::size_t span_events = 0;
  for (const json& e : trace["traceEvents"]) {
    const Track key{e.value("pid", std::int64_t{-1}), e.value("tid", std::int64_t{-1})};
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[key] = e["args"]["name"];
    if (e["ph"] != "X") continue;
    if (key.second >= kGpu - 1) {
      gpu_events[key].push_back(e);
    } else {
      ++span_events;
    }
  }
  EXPECT_EQ(span_events, 45u);  // every span as before
  for (const std::int64_t pid : {0, 1, 2}) {
    EXPECT_EQ(thread_names[Track(pid, kGpu)], "GPU");
    EXPECT_EQ(thread_names[Track(pid, kGpu - 1)], "GPU 2");
    // Per step: forward_backward and optimizer on "GPU", the all-reduce (overlapping
    // forward_backward's interval on both ranks) on "GPU 2".
    std::multiset<std::string> first, second;
    for (const json& e : gpu_events[Track(pid, kGpu)]) first.insert(e["name"]);
    for (const json& e : gpu_events[Track(pid, kGpu - 1)]) second.insert(e["name"]);
    EXPECT_EQ(first, (std::multiset<std::string>{"forward_backward", "forward_backward",
                                                 "forward_backward", "optimizer", "optimizer",
                                                 "optimizer"}))
        << pid;
    EXPECT_EQ(second, (std::multiset<std::string>{"all_reduce", "all_reduce", "all_reduce"}));
  }
  for (auto& [key, events] : gpu_events) {
    std::sort(events.begin(), events.end(),
              [](const json& a, const json& b) { return a["ts"] < b["ts"]; });
    for (std::size_t i = 1; i < events.size(); ++i) {
      EXPECT_LE(events[i - 1]["ts"].get<double>() + events[i - 1]["dur"].get<double>(),
                events[i]["ts"].get<double>())
          << "overlap on pid " << key.first << " tid " << key.second;
    }
  }
  // Rank 1's first forward_backward: GPU interval [5,75] ms after the step's start at
  // 1718000000000000 us, busy 68 ms, 120 kernels.
  EXPECT_EQ(gpu_events[Track(1, kGpu)][0], json::parse(R"({
      "name":"forward_backward","cat":"forward_backward","ph":"X","pid":1,"tid":2147483646,
      "ts":1718000000005000,"dur":70000,
      "args":{"gpu.busy":68000000,"gpu.kernels":120,"span_id":"00000000000000cb"}})"));
}

// Issue 40: the report and the trace do not depend on the order of the spans. Real exports (the
// library's file exporter) are taken apart span by span, shuffled, and written again as lines of
// random length over several files in random order: `lens report --json` gives the same object
// byte for byte (but the list of files and the count of lines), and `lens convert` the same events.
TEST_F(ReportCli, ShuffledExportsGiveTheSameReportAndTrace) {
  std::vector<std::string> files;
  for (int rank = 0; rank < 3; ++rank) {
    const auto r = report_test::run(
        {REPORT_JOB, std::to_string(rank), "3", "6", "20", dir_ + "/trace-{rank}.jsonl"}, dir_);
    ASSERT_EQ(r.status, 0) << r.err;
    files.push_back(dir_ + "/trace-" + std::to_string(rank) + ".jsonl");
  }
  // (resource, span) for every span of every line.
  std::vector<std::pair<json, json>> spans;
  for (const std::string& f : files) {
    std::istringstream in(report_test::read_file(f));
    for (std::string line; std::getline(in, line);) {
      if (line.empty()) continue;
      const json request = json::parse(line);
      for (const json& rs : request["resourceSpans"]) {
        for (const json& ss : rs["scopeSpans"]) {
          for (const json& sp : ss["spans"]) spans.emplace_back(rs["resource"], sp);
        }
      }
    }
  }
  ASSERT_GT(spans.size(), 50u);
  auto comparable_report = [&](const std::vector<std::string>& inputs) {
    std::vector<std::string> args = {"report", "--json"};
    args.insert(args.end(), inputs.begin(), inputs.end());
    const auto r = lens(args);
    EXPECT_EQ(r.status, 0) << r.err;
    json j = json::parse(r.out);
    EXPECT_EQ(j["input"]["spans"], spans.size());
    j.erase("files");
    j.erase("input");
    return j.dump();
  };
  auto events = [&](const std::vector<std::string>& inputs) {
    std::vector<std::string> args = {"convert", "--to", "chrome", "-o", dir_ + "/trace.json"};
    args.insert(args.end(), inputs.begin(), inputs.end());
    EXPECT_EQ(lens(args).status, 0);
    std::multiset<std::string> out;
    const json trace = json::parse(report_test::read_file(dir_ + "/trace.json"));
    for (const json& e : trace["traceEvents"]) out.insert(e.dump());
    return out;
  };
  const std::string reference = comparable_report(files);
  const std::multiset<std::string> reference_events = events(files);
  std::mt19937_64 rng(40);
  for (int trial = 0; trial < 4; ++trial) {
    std::shuffle(spans.begin(), spans.end(), rng);
    const std::size_t file_count = 2 + rng() % 3;
    std::vector<std::string> shuffled;
    std::vector<std::ofstream> outs;
    for (std::size_t i = 0; i < file_count; ++i) {
      shuffled.push_back(dir_ + "/shuffled-" + std::to_string(i) + ".jsonl");
      outs.emplace_back(shuffled.back());
    }
    for (std::size_t at = 0; at < spans.size();) {
      // One line: spans of one resource, as many as the dice say.
      const std::size_t want = 1 + rng() % 12;
      json line_spans = json::array();
      const json& resource = spans[at].first;
      while (at < spans.size() && line_spans.size() < want && spans[at].first == resource) {
        line_spans.push_back(spans[at++].second);
      }
      const json request = {
          {"resourceSpans",
           {{{"resource", resource},
             {"scopeSpans",
              {{{"scope", {{"name", "nemo.lens"}}}, {"spans", std::move(line_spans)}}}}}}}};
      outs[rng() % file_count] << request.dump() << '\n';
    }
    outs.clear();  // closed
    std::shuffle(shuffled.begin(), shuffled.end(), rng);
    EXPECT_EQ(comparable_report(shuffled), reference) << "trial " << trial;
    EXPECT_EQ(events(shuffled), reference_events) << "trial " << trial;
  }
}

// ---- stragglers (docs/report.md#stragglers) ----

// A synthetic synchronous job (report_sync_job) of `args`, reported as JSON.
json sync_report(const std::string& dir, const std::vector<std::string>& args,
                 const std::vector<std::string>& report_flags = {}) {
  std::vector<std::string> job = {REPORT_SYNC_JOB};
  job.insert(job.end(), args.begin(), args.end());
  const report_test::RunResult generated = report_test::run(job, dir);
  EXPECT_EQ(generated.status, 0) << generated.err;
  report_test::write_file(dir + "/sync.jsonl", generated.out);
  std::vector<std::string> command = {LENS_BINARY, "report", "--json", dir + "/sync.jsonl"};
  command.insert(command.end(), report_flags.begin(), report_flags.end());
  const report_test::RunResult r = report_test::run(command, dir);
  EXPECT_EQ(r.status, 0) << r.err;
  return json::parse(r.out);
}

std::vector<std::int64_t> flagged(const json& report) {
  std::vector<std::int64_t> ranks;
  for (const json& s : report["stragglers"]["ranks"]) ranks.push_back(s["rank"]);
  std::sort(ranks.begin(), ranks.end());
  return ranks;
}

// Over many seeds of the noise: a balanced job names nobody, at 4 and at 16 ranks and with
// three times the noise; a slow rank is named alone, late at the collectives, slower in the
// group that is slow, and its cost is what the job's arithmetic gives.
TEST_F(ReportCli, StragglersOfSyntheticJobsOverSeeds) {
  for (int seed = 1; seed <= 8; ++seed) {
    const std::string s = std::to_string(seed);
    EXPECT_TRUE(flagged(sync_report(dir_, {"--seed", s})).empty()) << "seed " << s;
    EXPECT_TRUE(flagged(sync_report(dir_, {"--seed", s, "--ranks", "16", "--noise", "6"})).empty())
        << "seed " << s;
    // Rank 2's forward_backward takes 1.3 x 40 ms: 12 ms late at every all-reduce.
    json j = sync_report(dir_, {"--seed", s, "--slow", "2:1.3"});
    ASSERT_EQ(flagged(j), std::vector<std::int64_t>{2}) << "seed " << s;
    const json& x = j["stragglers"]["ranks"][0];
    EXPECT_EQ(x["flagged_by"], json({"arrival"}));
    EXPECT_EQ(x["groups"][0]["group"], "forward_backward");
    EXPECT_NEAR(x["groups"][0]["excess_ns_per_step"].get<double>(), 12e6, 1.5e6);
    EXPECT_NEAR(x["late_ns"].get<double>(), 12e6, 1.5e6);
    EXPECT_EQ(x["last_into"][0],
              json::parse(R"({"name":"allreduce_gradients","last":30,"of":30})"));
    // The other three wait about 12 ms in each step of about 69 ms.
    EXPECT_NEAR(x["wait_caused_per_step_ns"].get<double>(), 12e6, 1.5e6);
    EXPECT_NEAR(x["wait_caused_share"].get<double>(), 12.0 / 69, 0.03);
    // Slow in data loading instead: that group is named.
    j = sync_report(dir_, {"--seed", s, "--slow", "1:3:data_loading"});
    ASSERT_EQ(flagged(j), std::vector<std::int64_t>{1}) << "seed " << s;
    EXPECT_EQ(j["stragglers"]["ranks"][0]["groups"][0]["group"], "data_loading");
    // Two slow ranks of eight, and a pipeline's last stage compared only with itself.
    EXPECT_EQ(flagged(sync_report(
                  dir_, {"--seed", s, "--ranks", "8", "--slow", "2:1.3", "--slow", "5:1.2"})),
              (std::vector<std::int64_t>{2, 5}))
        << "seed " << s;
    EXPECT_EQ(flagged(sync_report(
                  dir_, {"--seed", s, "--ranks", "8", "--last-stage", "3", "--slow", "3:1.3"})),
              std::vector<std::int64_t>{3})
        << "seed " << s;
  }
}

// The floor: rank 2's 4 ms lateness (10 % of its 40 ms forward_backward) is above 5 % of the
// 61 ms step, not above 8 %.
TEST_F(ReportCli, TheStragglerThresholdIsTheRulesFloor) {
  EXPECT_EQ(flagged(sync_report(dir_, {"--slow", "2:1.1"})), std::vector<std::int64_t>{2});
  EXPECT_TRUE(
      flagged(sync_report(dir_, {"--slow", "2:1.1"}, {"--straggler-threshold", "8"})).empty());
}

// Two jobs in one input (a C++ job of 11 ms steps and a PyTorch job of 212 ms steps, both
// "train_step"): a section each, never averaged together; --json an array; --run one of them.
TEST_F(ReportCli, SeveralRunsAreReportedOneByOne) {
  std::string lines;
  for (const auto& [run, step_ms] : {std::pair{"cpp-job", 11}, std::pair{"torch-job", 212}}) {
    for (int rank = 0; rank < 2; ++rank) {
      std::vector<report_test::SpanSpec> spans;
      for (std::uint64_t i = 0; i < 3; ++i) {
        const std::uint64_t t = report_test::kT0 + i * 1000 * report_test::kMs;
        spans.push_back(report_test::make_span(100 * (rank + 1) + i + 1, 0, "train_step", "step", t,
                                               t + step_ms * report_test::kMs, 1));
      }
      lines += report_test::request_line(report_test::rank_resource(rank, run), spans) + "\n";
    }
  }
  report_test::write_file(dir_ + "/two.jsonl", lines);
  auto r = lens({"report", dir_ + "/two.jsonl"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out.rfind("lens report: 1 file, 4 lines (0 malformed), 12 spans, 4 ranks, 2 runs, "
                        "reported one by one (--run RUN_ID: one): cpp-job torch-job\n",
                        0),
            0u)
      << r.out;
  const std::size_t cpp = r.out.find("\n=== run cpp-job: 6 spans, 2 ranks\n");
  const std::size_t torch = r.out.find("\n=== run torch-job: 6 spans, 2 ranks\n");
  ASSERT_NE(cpp, std::string::npos) << r.out;
  ASSERT_NE(torch, std::string::npos) << r.out;
  EXPECT_LT(cpp, torch);
  const std::string cpp_part = r.out.substr(cpp, torch - cpp), torch_part = r.out.substr(torch);
  EXPECT_NE(
      cpp_part.find("  step   train_step      6  66.00ms  11.00ms  11.00ms  11.00ms  11.00ms"),
      std::string::npos)
      << cpp_part;
  EXPECT_NE(
      torch_part.find("  step   train_step      6  1.272s  212.0ms  212.0ms  212.0ms  212.0ms"),
      std::string::npos)
      << torch_part;
  EXPECT_EQ(torch_part.find("Malformed lines: none"), torch_part.rfind("Malformed lines"));
  EXPECT_EQ(cpp_part.find("Malformed lines"), std::string::npos) << "once, at the end";

  r = lens({"report", "--json", dir_ + "/two.jsonl"});
  const json runs = json::parse(r.out);
  ASSERT_TRUE(runs.is_array());
  ASSERT_EQ(runs.size(), 2u);
  EXPECT_EQ(runs[0]["run_ids"], json({"cpp-job"}));
  EXPECT_EQ(runs[0]["names"][0]["p95_ns"], 11'000'000);
  EXPECT_EQ(runs[1]["run_ids"], json({"torch-job"}));
  EXPECT_EQ(runs[1]["names"][0]["p95_ns"], 212'000'000);

  r = lens({"report", "--json", "--run", "torch-job", dir_ + "/two.jsonl"});
  const json one = json::parse(r.out);
  ASSERT_TRUE(one.is_object());
  EXPECT_EQ(one["run_ids"], json({"torch-job"}));
  EXPECT_EQ(one["step"]["count"], 6);
}

// --ranks: a job of more ranks than N shows the spread across them (min, p50, p95, max) and the
// N furthest out, the flagged ones first; --ranks all lists every one.
TEST_F(ReportCli, RanksListsEveryRankUpToNThenTheFurthestOut) {
  auto r = lens(report_args({"--ranks", "2"}));
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("Step time per rank (top-level spans of group step; 3 ranks: min, p50, "
                       "p95 and max across them, then the 2 furthest out, flagged ones first; "
                       "--ranks all lists every rank)\n"
                       "  rank  name        count      p50      p95      max\n"
                       "  min   train_step      3  100.0ms  100.0ms  100.0ms\n"
                       "  p50   train_step      3  100.0ms  109.0ms  110.0ms\n"
                       "  p95   train_step      3  145.0ms  145.9ms  146.0ms\n"
                       "  max   train_step      3  150.0ms  150.0ms  150.0ms\n"
                       "  2     train_step      3  150.0ms  150.0ms  150.0ms  straggler\n"
                       "  0     train_step      3  100.0ms  100.0ms  100.0ms\n"),
            std::string::npos)
      << r.out;
  EXPECT_EQ(lens(report_args({"--ranks", "3"})).out, kExpectedText);
  EXPECT_EQ(lens(report_args({"--ranks", "all"})).out, kExpectedText);
  // 40 ranks: 8 listed by default, all 40 with --ranks all.
  const json j = sync_report(dir_, {"--ranks", "40", "--steps", "5", "--slow", "7:1.3"});
  EXPECT_EQ(flagged(j), std::vector<std::int64_t>{7});
  const std::string job = dir_ + "/sync.jsonl";
  auto rows = [](const std::string& text, const std::string& heading) {
    const std::size_t at = text.find(heading);
    const std::string table = text.substr(at, text.find("\n\n", at) - at);
    std::size_t n = 0;
    for (std::size_t i = 0; (i = table.find("\n  ", i)) != std::string::npos; ++i) ++n;
    return n - 1;  // less the header
  };
  const std::string short_text = lens({"report", job}).out;
  EXPECT_EQ(rows(short_text, "Step time per rank"), 4u + 8u) << short_text;
  EXPECT_NE(short_text.find("  7     train_step      5"), std::string::npos) << short_text;
  EXPECT_EQ(rows(lens({"report", job, "--ranks", "all"}).out, "Step time per rank"), 40u);
  EXPECT_EQ(rows(lens({"report", job, "--ranks", "all"}).out, "Waits at the collectives"), 41u);
}

}  // namespace
