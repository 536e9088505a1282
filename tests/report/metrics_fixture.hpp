// Test helper: OTLP metrics (and logs) as JSON Lines, as `lens collect --metrics-out` and the
// library's metrics file exporter write them, for the `lens report` tests.
//
// write_metrics_fixture(dir) writes three files with known aggregates:
//   metrics-0.jsonl (dl.rank 0): two exports 10 s apart of
//     tokens          cumulative monotonic sum, asInt: 1000, then 2500
//     samples         delta sum, asInt, attribute phase=train: 64 and 64 (128 in all)
//     loss            gauge, asDouble: 2.5, then 2.25
//     gpu.memory      gauge, two series (gpu=0 at +10 s: 1000, gpu=1 at +20 s: 2000)
//     step.duration   cumulative histogram, bounds 0.05 0.1 0.25 1 (s): count 5 then 10
//                     (buckets 0 8 2 0 0, sum 0.9, min 0.08, max 0.2)
//   then a line of logs.
//   metrics-1.jsonl (dl.rank 1): the export at +20 s (tokens 2400, loss 2.3, step.duration
//     count 10, buckets 0 2 6 2 0, sum 1.6, no min or max), then an older one at +10 s (tokens
//     1100: not the last value).
//   worker.jsonl (no dl.rank, service.instance.id worker-a): queue.depth gauge asInt 3, and an
//     exponential histogram latency (count 4, sum 10, max 7.5).
#pragma once

#include <string>
#include <vector>

#include "otlp_lines.hpp"

namespace report_test {

inline constexpr std::uint64_t kMetricsT0 = 1'718'000'000'000'000'000ull;
inline constexpr std::uint64_t kSecond = 1'000'000'000ull;

/// One ExportMetricsServiceRequest line whose one scope holds `metrics` (JSON objects, joined).
inline std::string metrics_line(const std::vector<Attr>& resource,
                                const std::vector<std::string>& metrics) {
  std::string out = "{\"resourceMetrics\":[{\"resource\":{\"attributes\":";
  append_attributes(out, resource);
  out += "},\"scopeMetrics\":[{\"scope\":{\"name\":\"nemo.lens\"},\"metrics\":[";
  for (std::size_t i = 0; i < metrics.size(); ++i) out += (i ? "," : "") + metrics[i];
  return out + "]}]}]}";
}

/// One ExportLogsServiceRequest line with one record.
inline std::string logs_line(const std::vector<Attr>& resource, const std::string& body) {
  std::string out = "{\"resourceLogs\":[{\"resource\":{\"attributes\":";
  append_attributes(out, resource);
  return out + "},\"scopeLogs\":[{\"scope\":{\"name\":\"nemo.lens\"},\"logRecords\":[" +
         "{\"timeUnixNano\":\"" + std::to_string(kMetricsT0) +
         "\",\"severityNumber\":9,\"severityText\":\"INFO\",\"body\":{\"stringValue\":" +
         json_escape(body) + "}}]}]}]}";
}

inline std::string time_at(std::uint64_t seconds) {
  return "\"" + std::to_string(kMetricsT0 + seconds * kSecond) + "\"";
}

inline std::string sum_metric(const std::string& name, const std::string& unit, int temporality,
                              const std::string& points) {
  return "{\"name\":\"" + name + "\",\"unit\":\"" + unit + "\",\"sum\":{\"dataPoints\":[" + points +
         "],\"aggregationTemporality\":" + std::to_string(temporality) + ",\"isMonotonic\":true}}";
}

inline std::string gauge_metric(const std::string& name, const std::string& unit,
                                const std::string& points) {
  return "{\"name\":\"" + name + "\",\"unit\":\"" + unit + "\",\"gauge\":{\"dataPoints\":[" +
         points + "]}}";
}

inline std::string int_point(std::uint64_t at, std::int64_t value, const std::string& attrs = "") {
  return "{\"startTimeUnixNano\":" + time_at(0) + ",\"timeUnixNano\":" + time_at(at) +
         ",\"asInt\":\"" + std::to_string(value) + "\"" +
         (attrs.empty() ? "" : ",\"attributes\":" + attrs) + "}";
}

inline std::string double_point(std::uint64_t at, const std::string& value,
                                const std::string& attrs = "") {
  return "{\"timeUnixNano\":" + time_at(at) + ",\"asDouble\":" + value +
         (attrs.empty() ? "" : ",\"attributes\":" + attrs) + "}";
}

inline std::string step_histogram(std::uint64_t at, const std::string& count,
                                  const std::string& sum, const std::string& buckets,
                                  const std::string& min_max) {
  return "{\"name\":\"step.duration\",\"unit\":\"s\",\"histogram\":{\"dataPoints\":[{"
         "\"startTimeUnixNano\":" +
         time_at(0) + ",\"timeUnixNano\":" + time_at(at) + ",\"count\":\"" + count +
         "\",\"sum\":" + sum + ",\"bucketCounts\":[" + buckets +
         "],\"explicitBounds\":[0.05,0.1,0.25,1.0]" + min_max + "}],\"aggregationTemporality\":2}}";
}

inline std::vector<std::string> write_metrics_fixture(const std::string& dir) {
  const std::string train = R"([{"key":"phase","value":{"stringValue":"train"}}])";
  const std::string gpu0 = R"([{"key":"gpu","value":{"intValue":"0"}}])";
  const std::string gpu1 = R"([{"key":"gpu","value":{"intValue":"1"}}])";
  std::string rank0 =
      metrics_line(rank_resource(0),
                   {sum_metric("tokens", "{token}", 2, int_point(10, 1000)),
                    sum_metric("samples", "{sample}", 1, int_point(10, 64, train)),
                    gauge_metric("loss", "1", double_point(10, "2.5")),
                    gauge_metric("gpu.memory", "By", double_point(10, "1000", gpu0)),
                    step_histogram(10, "5", "0.45", R"("0","4","1","0","0")",
                                   R"(,"min":0.08,"max":0.15)")}) +
      "\n" +
      metrics_line(
          rank_resource(0),
          {sum_metric("tokens", "{token}", 2, int_point(20, 2500)),
           sum_metric("samples", "{sample}", 1, int_point(20, 64, train)),
           gauge_metric("loss", "1", double_point(20, "2.25")),
           gauge_metric("gpu.memory", "By", double_point(20, "2000", gpu1)),
           step_histogram(20, "10", "0.9", R"("0","8","2","0","0")", R"(,"min":0.08,"max":0.2)")}) +
      "\n" + logs_line(rank_resource(0), "checkpoint saved") + "\n";
  std::string rank1 =
      metrics_line(rank_resource(1),
                   {sum_metric("tokens", "{token}", 2, int_point(20, 2400)),
                    gauge_metric("loss", "1", double_point(20, "2.3")),
                    step_histogram(20, "10", "1.6", R"("0","2","6","2","0")", "")}) +
      "\n" +
      metrics_line(rank_resource(1), {sum_metric("tokens", "{token}", 2, int_point(10, 1100))}) +
      "\n";
  const std::vector<Attr> worker = {{"service.name", std::string("loader")},
                                    {"service.instance.id", std::string("worker-a")}};
  std::string other =
      metrics_line(
          worker, {"{\"name\":\"queue.depth\",\"gauge\":{\"dataPoints\":[{\"timeUnixNano\":" +
                       time_at(5) + ",\"asInt\":\"3\"}]}}",
                   "{\"name\":\"latency\",\"unit\":\"ms\",\"exponentialHistogram\":{\"dataPoints\":"
                   "[{\"timeUnixNano\":" +
                       time_at(5) +
                       ",\"count\":\"4\",\"sum\":10,\"scale\":2,\"positive\":{\"offset\":3,"
                       "\"bucketCounts\":[\"1\",\"3\"]},\"max\":7.5}],"
                       "\"aggregationTemporality\":2}}"}) +
      "\n";
  std::vector<std::string> files = {dir + "/metrics-0.jsonl", dir + "/metrics-1.jsonl",
                                    dir + "/worker.jsonl"};
  write_file(files[0], rank0);
  write_file(files[1], rank1);
  write_file(files[2], other);
  return files;
}

}  // namespace report_test
