// `lens collect` receiving metrics and logs (--metrics-out, --logs-out) as a real process on
// 127.0.0.1: OTLP/HTTP with protobuf, JSON and gzip bodies (libcurl), OTLP/gRPC through a generic
// stub, the answers (success, 400/404/405/413/415, UNIMPLEMENTED), the files and the summary line;
// and that whatever it answers 200 for, lens report and lens convert read.
// Requests are built with libprotobuf's classes generated from tests/proto; what the files hold is
// compared with libprotobuf's JSON printing of the same requests.
#include <curl/curl.h>
#include <google/protobuf/util/json_util.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#ifdef NEMO_LENS_WITH_GRPC
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#endif

#include "child_process.hpp"
#include "export/otlp.hpp"
#include "lens_collect.hpp"
#include "opentelemetry/proto/collector/logs/v1/logs_service.pb.h"
#include "opentelemetry/proto/collector/metrics/v1/metrics_service.pb.h"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace {

using lens_test::Collector;
using lens_test::temp_path;
using Json = nlohmann::json;
namespace pb_common = opentelemetry::proto::common::v1;
namespace pb_metrics = opentelemetry::proto::metrics::v1;
namespace pb_logs = opentelemetry::proto::logs::v1;
using MetricsRequest = opentelemetry::proto::collector::metrics::v1::ExportMetricsServiceRequest;
using LogsRequest = opentelemetry::proto::collector::logs::v1::ExportLogsServiceRequest;
using TraceRequest = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;

constexpr char kProto[] = "application/x-protobuf";
constexpr char kJson[] = "application/json";

struct HttpAnswer {
  long status = 0;
  std::string body;
  std::string content_type;
};

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

HttpAnswer request(const std::string& method, const std::string& url, const std::string& body,
                   const std::string& content_type, const std::string& encoding = "") {
  HttpAnswer answer;
  CURL* curl = curl_easy_init();
  curl_slist* headers = curl_slist_append(nullptr, ("Content-Type: " + content_type).c_str());
  if (!encoding.empty()) {
    headers = curl_slist_append(headers, ("Content-Encoding: " + encoding).c_str());
  }
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  if (method == "POST") {
    curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  } else {
    curl_easy_setopt(curl, CURLOPT_CUSTOMREQUEST, method.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10'000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  if (curl_easy_perform(curl) == CURLE_OK) {
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
    char* type = nullptr;
    curl_easy_getinfo(curl, CURLINFO_CONTENT_TYPE, &type);
    if (type != nullptr) answer.content_type = type;
  }
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return answer;
}

HttpAnswer post(const std::string& url, const std::string& body, const std::string& content_type,
                const std::string& encoding = "") {
  return request("POST", url, body, content_type, encoding);
}

std::string gzip(const std::string& in) {
  std::string out;
  EXPECT_TRUE(nemo::lens::detail::gzip_compress(in, out));
  return out;
}

std::vector<Json> read_lines(const std::string& path) {
  std::vector<Json> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(Json::parse(line));
  return lines;
}

// libprotobuf's JSON printing of `m` (enums as numbers), with the signal's array always there:
// what the receiver writes for the protobuf form of `m` (no ids in these requests).
Json printed(const google::protobuf::Message& m, const std::string& root_key) {
  std::string text;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_enums_as_ints = true;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &text, options).ok());
  Json j = Json::parse(text);
  if (!j.contains(root_key)) j[root_key] = Json::array();
  return j;
}

std::string json_text(const google::protobuf::Message& m) {
  std::string text;
  EXPECT_TRUE(google::protobuf::util::MessageToJsonString(m, &text).ok());
  return text;
}

void set_kv(pb_common::KeyValue* kv, const std::string& key, const std::string& value) {
  kv->set_key(key);
  kv->mutable_value()->set_string_value(value);
}

// A request of `points` data points: a cumulative sum, a gauge and a histogram on rank `rank`.
MetricsRequest metrics_request(int rank, int points) {
  MetricsRequest req;
  auto* rm = req.add_resource_metrics();
  auto* r = rm->mutable_resource()->add_attributes();
  r->set_key("dl.rank");
  r->mutable_value()->set_int_value(rank);
  auto* sm = rm->add_scope_metrics();
  sm->mutable_scope()->set_name("nemo.lens");
  auto* sum = sm->add_metrics();
  sum->set_name("tokens");
  sum->mutable_sum()->set_aggregation_temporality(pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  sum->mutable_sum()->set_is_monotonic(true);
  auto* gauge = sm->add_metrics();
  gauge->set_name("loss");
  auto* hist = sm->add_metrics();
  hist->set_name("step.duration");
  hist->set_unit("s");
  hist->mutable_histogram()->set_aggregation_temporality(
      pb_metrics::AGGREGATION_TEMPORALITY_CUMULATIVE);
  for (int i = 0; i < points; ++i) {
    const std::uint64_t t = 1'700'000'000'000'000'000ULL + static_cast<std::uint64_t>(i);
    switch (i % 3) {
      case 0: {
        auto* p = sum->mutable_sum()->add_data_points();
        p->set_time_unix_nano(t);
        p->set_as_int(1000 * (i + 1));
        set_kv(p->add_attributes(), "i", std::to_string(i));
        break;
      }
      case 1: {
        auto* p = gauge->mutable_gauge()->add_data_points();
        p->set_time_unix_nano(t);
        p->set_as_double(2.5 - i * 0.125);
        break;
      }
      default: {
        auto* p = hist->mutable_histogram()->add_data_points();
        p->set_time_unix_nano(t);
        p->set_count(3);
        p->set_sum(0.75);
        for (const std::uint64_t c : {1, 2, 0}) p->add_bucket_counts(c);
        p->add_explicit_bounds(0.1);
        p->add_explicit_bounds(0.5);
        p->set_min(0.05);
        p->set_max(0.4);
        set_kv(p->add_attributes(), "i", std::to_string(i));
      }
    }
  }
  return req;
}

LogsRequest logs_request(int records) {
  LogsRequest req;
  auto* rl = req.add_resource_logs();
  set_kv(rl->mutable_resource()->add_attributes(), "service.instance.id", "run-rank0");
  auto* sl = rl->add_scope_logs();
  sl->mutable_scope()->set_name("nemo.lens");
  for (int i = 0; i < records; ++i) {
    auto* r = sl->add_log_records();
    r->set_time_unix_nano(1'700'000'000'000'000'000ULL + static_cast<std::uint64_t>(i));
    r->set_severity_number(pb_logs::SEVERITY_NUMBER_INFO);
    r->set_severity_text("INFO");
    r->mutable_body()->set_string_value("record " + std::to_string(i) + " \"quoted\"\n");
    set_kv(r->add_attributes(), "logger", "trainer");
  }
  return req;
}

TraceRequest trace_request() {
  TraceRequest req;
  auto* span = req.add_resource_spans()->add_scope_spans()->add_spans();
  span->set_trace_id(std::string(16, '\x01'));
  span->set_span_id(std::string(8, '\x02'));
  span->set_name("step");
  span->set_start_time_unix_nano(1);
  span->set_end_time_unix_nano(2);
  return req;
}

class CollectSignals : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string name = ::testing::UnitTest::GetInstance()->current_test_info()->name();
    for (const char* kind : {"traces", "metrics", "logs"}) {
      paths_.push_back(temp_path(name + "_" + kind));
      std::remove(paths_.back().c_str());
    }
  }
  void TearDown() override {
    for (const std::string& p : paths_) {
      std::remove(p.c_str());
      std::remove((p + ".stdout").c_str());
    }
  }
  const std::string& traces() const { return paths_[0]; }
  const std::string& metrics() const { return paths_[1]; }
  const std::string& logs() const { return paths_[2]; }

  std::vector<std::string> paths_;
};

// Every signal over HTTP in every encoding: the success answer of the request's encoding, one line
// per request in the signal's file, and the counts in the summary line.
TEST_F(CollectSignals, HttpProtobufJsonAndGzipOfEverySignal) {
  auto collector = Collector::with_args(
      traces(), {"--out", traces(), "--metrics-out", metrics(), "--logs-out", logs()});
  const std::string base = collector->http_base();
  EXPECT_NE(collector->stderr_text().find("lens collect: OTLP/HTTP on " + base +
                                          "/v1/traces\nlens collect: OTLP/HTTP also on " + base +
                                          "/v1/metrics\nlens collect: OTLP/HTTP also on " + base +
                                          "/v1/logs\n"),
            std::string::npos)
      << collector->stderr_text();
  EXPECT_NE(collector->stderr_text().find("appending spans to " + traces() + ", metrics to " +
                                          metrics() + ", logs to " + logs() + "; stop with"),
            std::string::npos)
      << collector->stderr_text();
  const MetricsRequest m1 = metrics_request(0, 6), m2 = metrics_request(1, 4),
                       m3 = metrics_request(2, 3);
  const LogsRequest l1 = logs_request(5), l2 = logs_request(2), l3 = logs_request(1);

  HttpAnswer a = post(base + "/v1/metrics", m1.SerializeAsString(), kProto);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "");  // an empty ExportMetricsServiceResponse
  EXPECT_EQ(a.content_type, kProto);
  a = post(base + "/v1/metrics", json_text(m2), kJson);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "{}");
  EXPECT_EQ(a.content_type, kJson);
  EXPECT_EQ(post(base + "/v1/metrics", gzip(m3.SerializeAsString()), kProto, "gzip").status, 200);
  a = post(base + "/v1/logs", l1.SerializeAsString(), kProto);
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "");
  a = post(base + "/v1/logs", gzip(json_text(l2)), "application/json; charset=utf-8", "gzip");
  EXPECT_EQ(a.status, 200);
  EXPECT_EQ(a.body, "{}");
  EXPECT_EQ(post(base + "/v1/logs", l3.SerializeAsString(), kProto, "identity").status, 200);
  EXPECT_EQ(post(base + "/v1/traces", trace_request().SerializeAsString(), kProto).status, 200);

  ASSERT_EQ(collector->stop(), 0);
  const std::vector<Json> metric_lines = read_lines(metrics());
  ASSERT_EQ(metric_lines.size(), 3u);
  EXPECT_EQ(metric_lines[0], printed(m1, "resourceMetrics"));
  EXPECT_EQ(metric_lines[1], Json::parse(json_text(m2)));  // JSON bodies are kept as sent
  EXPECT_EQ(metric_lines[2], printed(m3, "resourceMetrics"));
  const std::vector<Json> log_lines = read_lines(logs());
  ASSERT_EQ(log_lines.size(), 3u);
  EXPECT_EQ(log_lines[0], printed(l1, "resourceLogs"));
  EXPECT_EQ(log_lines[1], Json::parse(json_text(l2)));
  EXPECT_EQ(log_lines[2], printed(l3, "resourceLogs"));
  EXPECT_EQ(read_lines(traces()).size(), 1u);
  EXPECT_EQ(collector->summary(),
            "lens collect: 1 requests, 1 spans, 3 metrics requests, 13 data points, 3 logs "
            "requests, 8 log records, 0 rejected; written to " +
                traces() + ", " + metrics() + ", " + logs() + "\n");
}

// A signal without an output file is refused with 404 naming the option that enables it; the
// others keep working; the summary names only the files given.
TEST_F(CollectSignals, SignalWithoutOutputGets404NamingItsOption) {
  auto collector = Collector::with_args(metrics(), {"--metrics-out", metrics()});
  const std::string base = collector->http_base();
  EXPECT_NE(collector->stderr_text().find("lens collect: OTLP/HTTP on " + base + "/v1/metrics\n"),
            std::string::npos)
      << collector->stderr_text();
  EXPECT_EQ(collector->stderr_text().find("also on"), std::string::npos);
  HttpAnswer a = post(base + "/v1/traces", trace_request().SerializeAsString(), kJson);
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(Json::parse(a.body),
            Json::parse(R"({"code":12,"message":"lens collect is not collecting traces: start it )"
                        R"(with --out FILE"})"));
  a = post(base + "/v1/logs", logs_request(1).SerializeAsString(), kProto);
  EXPECT_EQ(a.status, 404);
  EXPECT_NE(a.body.find("lens collect is not collecting logs: start it with --logs-out FILE"),
            std::string::npos);
  a = post(base + "/v1/spans", "{}", kJson);
  EXPECT_EQ(a.status, 404);
  EXPECT_EQ(Json::parse(a.body)["message"], "not found: lens collect serves POST /v1/metrics");
  EXPECT_EQ(post(base + "/v1/metrics", metrics_request(0, 2).SerializeAsString(), kProto).status,
            200);
  ASSERT_EQ(collector->stop(), 0);
  EXPECT_EQ(read_lines(metrics()).size(), 1u);
  EXPECT_EQ(collector->summary(),
            "lens collect: 1 metrics requests, 2 data points, 3 rejected; "
            "written to " +
                metrics() + "\n");
  std::ifstream traces_file(traces());
  EXPECT_FALSE(traces_file.good()) << "no file for a signal without output";
}

// The error answers of /v1/traces hold for the other signals, and none stops the receiver.
// A gzip body of several members is read whole, as gzip -d reads it; bytes after the end of a
// gzip body that are not another member make it malformed (400), not ignored.
TEST_F(CollectSignals, GzipMembersAreAllReadAndTrailingGarbageIsRefused) {
  auto collector = Collector::with_args(metrics(), {"--metrics-out", metrics()});
  const std::string url = collector->http_base() + "/v1/metrics";
  const std::string good = metrics_request(0, 3).SerializeAsString();
  const std::string two_members = gzip(good.substr(0, 10)) + gzip(good.substr(10));
  EXPECT_EQ(post(url, two_members, kProto, "gzip").status, 200);
  const HttpAnswer garbage = post(url, gzip(good) + "garbage", kProto, "gzip");
  EXPECT_EQ(garbage.status, 400);
  EXPECT_NE(garbage.body.find("data after its end"), std::string::npos) << garbage.body;
  EXPECT_EQ(post(url, gzip(good) + "\x1f", kProto, "gzip").status, 400);
  EXPECT_EQ(post(url, good, kProto).status, 200);
  ASSERT_EQ(collector->stop(), 0);
  const std::vector<Json> lines = read_lines(metrics());
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0], lines[1]) << "the two-member body is the whole request";
}

TEST_F(CollectSignals, BadRequestsGetTheirStatus) {
  auto collector = Collector::with_args(
      metrics(), {"--metrics-out", metrics(), "--logs-out", logs(), "--max-body", "100000"});
  const std::string base = collector->http_base();
  const std::string good_metrics = metrics_request(0, 3).SerializeAsString();
  const std::string good_logs = logs_request(2).SerializeAsString();
  for (const std::string path : {"/v1/metrics", "/v1/logs"}) {
    const std::string& good = path == "/v1/metrics" ? good_metrics : good_logs;
    const std::string url = base + path;
    const HttpAnswer truncated = post(url, good.substr(0, good.size() - 3), kProto);
    EXPECT_EQ(truncated.status, 400) << path;
    EXPECT_NE(truncated.body.find("undecodable OTLP protobuf"), std::string::npos);
    const HttpAnswer shape =
        post(url, path == "/v1/metrics" ? R"({"resourceMetrics":{}})" : R"({"resourceLogs":[1]})",
             kJson);
    EXPECT_EQ(shape.status, 400) << path;
    EXPECT_EQ(Json::parse(shape.body)["message"],
              path == "/v1/metrics"
                  ? "undecodable OTLP/JSON: resourceMetrics is not an array"
                  : "undecodable OTLP/JSON: an element of resourceLogs is not an object");
    EXPECT_EQ(post(url, good, "text/plain").status, 415) << path;
    EXPECT_EQ(post(url, good, kProto, "br").status, 415) << path;
    EXPECT_EQ(post(url, std::string(200'000, 'x'), kProto).status, 413) << path;
    EXPECT_EQ(post(url, gzip(std::string(10u << 20, '\0')), kProto, "gzip").status, 413) << path;
    EXPECT_EQ(post(url, "not gzip", kProto, "gzip").status, 400) << path;
    EXPECT_EQ(request("GET", url, "", kProto).status, 405) << path;
    EXPECT_EQ(post(url, good, kProto).status, 200) << path;
  }
  ASSERT_EQ(collector->stop(), 0);
  EXPECT_EQ(read_lines(metrics()).size(), 1u);
  EXPECT_EQ(read_lines(logs()).size(), 1u);
  EXPECT_EQ(collector->summary(),
            "lens collect: 1 metrics requests, 3 data points, 1 logs requests, 2 log records, 16 "
            "rejected; written to " +
                metrics() + ", " + logs() + "\n");
}

// One file for every signal: lens report reads its metrics and counts its lines of logs.
TEST_F(CollectSignals, OneFileForEverySignalFeedsLensReport) {
  auto collector = Collector::with_args(traces(), {"--out", traces(), "--metrics-out", traces(),
                                                   "--logs-out", traces(), "--grpc-listen", "off"});
  const std::string base = collector->http_base();
  EXPECT_EQ(post(base + "/v1/metrics", metrics_request(3, 3).SerializeAsString(), kProto).status,
            200);
  EXPECT_EQ(post(base + "/v1/logs", logs_request(2).SerializeAsString(), kProto).status, 200);
  EXPECT_EQ(post(base + "/v1/traces", trace_request().SerializeAsString(), kProto).status, 200);
  ASSERT_EQ(collector->stop(), 0);
  EXPECT_EQ(read_lines(traces()).size(), 3u);

  lens_test::ChildProcess report({LENS_BINARY, "report", "--json", traces()}, metrics());
  ASSERT_EQ(report.wait(), 0) << report.stderr_text();
  std::ifstream in(metrics());
  const Json j = Json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  EXPECT_EQ(j["input"]["lines"], 3);
  EXPECT_EQ(j["input"]["requests"], 1);
  EXPECT_EQ(j["input"]["metric_lines"], 1);
  EXPECT_EQ(j["input"]["data_points"], 3);
  EXPECT_EQ(j["input"]["log_lines"], 1);
  EXPECT_EQ(j["input"]["malformed_lines"], 0);
  ASSERT_EQ(j["metrics"].size(), 3u) << j["metrics"];
  EXPECT_EQ(j["metrics"][0]["name"], "loss");
  EXPECT_EQ(j["metrics"][0]["rank"], 3);
  EXPECT_EQ(j["metrics"][0]["value"], 2.375);
  EXPECT_EQ(j["metrics"][1]["name"], "step.duration");
  EXPECT_EQ(j["metrics"][1]["count"], 3);
  EXPECT_EQ(j["metrics"][2]["name"], "tokens");
  EXPECT_EQ(j["metrics"][2]["value"], 1000);
}

// The spans of one OTLP/JSON trace request, as the OpenTelemetry JS SDK writes them: span `i`
// has the attribute `value` (an AnyValue, as JSON text).
std::string json_spans(const std::vector<std::string>& values) {
  std::string spans;
  for (std::size_t i = 0; i < values.size(); ++i) {
    char id[17];
    std::snprintf(id, sizeof id, "%016zx", i + 1);
    spans += std::string(i == 0 ? "" : ",") +
             R"({"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":")" + id +
             R"(","name":"s","kind":1,"startTimeUnixNano":"1700000000000000000",)"
             R"("endTimeUnixNano":"1700000000000001000","attributes":[{"key":"v","value":)" +
             values[i] + "}]}";
  }
  return R"({"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[)" + spans +
         "]}]}]}";
}

// What lens report and lens convert make of a file: report's JSON, and convert's events.
Json report_of(const std::string& file, const std::string& scratch) {
  lens_test::ChildProcess report({LENS_BINARY, "report", "--json", file}, scratch);
  EXPECT_EQ(report.wait(), 0) << report.stderr_text();
  std::ifstream in(scratch);
  return Json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
}

// The issue's batch of 201 spans from the JS SDK: a lone surrogate in one attribute, NaN and the
// infinities as null, integers beyond int64. Collect keeps it (200), and every span is readable.
TEST_F(CollectSignals, NothingAcceptedIsUnreadable) {
  auto collector = Collector::with_args(
      traces(), {"--out", traces(), "--metrics-out", metrics(), "--grpc-listen", "off"});
  const std::string base = collector->http_base();
  std::vector<std::string> values = {R"({"stringValue":"bad\ud800"})"};
  const char* odd[] = {R"({"doubleValue":null})",
                       R"({"doubleValue":"NaN"})",
                       R"({"doubleValue":"Infinity"})",
                       R"({"doubleValue":"-Infinity"})",
                       R"({"intValue":1e+300})",
                       R"({"intValue":9223372036854775808})",
                       R"({"arrayValue":{"values":[{"doubleValue":null},{"intValue":1e+300}]}})",
                       R"({"doubleValue":1e999})"};
  while (values.size() < 201) values.emplace_back(odd[values.size() % std::size(odd)]);
  HttpAnswer kept = post(base + "/v1/traces", json_spans(values), kJson);
  EXPECT_EQ(kept.status, 200) << kept.body;
  kept = post(base + "/v1/metrics",
              R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"g","gauge":)"
              R"({"dataPoints":[{"timeUnixNano":"1","asDouble":null},)"
              R"({"timeUnixNano":"2","asInt":1e+300}]}}]}]}]})",
              kJson);
  EXPECT_EQ(kept.status, 200) << kept.body;

  // What lens report could not read is refused, with the reason, and nothing is written.
  const HttpAnswer no_id =
      post(base + "/v1/traces", R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x"}]}]}]})",
           kJson);
  EXPECT_EQ(no_id.status, 400);
  EXPECT_EQ(Json::parse(no_id.body)["message"], "invalid OTLP/JSON request: span 1: no spanId");
  TraceRequest empty_id = trace_request();
  empty_id.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->clear_span_id();
  const HttpAnswer proto = post(base + "/v1/traces", empty_id.SerializeAsString(), kProto);
  EXPECT_EQ(proto.status, 400);
  EXPECT_NE(proto.body.find("invalid OTLP protobuf request: span 1: no spanId"), std::string::npos)
      << proto.body;
  const HttpAnswer bad_point =
      post(base + "/v1/metrics",
           R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[{"name":"h","histogram":)"
           R"({"dataPoints":[{"bucketCounts":["1"],"explicitBounds":[0.5]}]}}]}]}]})",
           kJson);
  EXPECT_EQ(bad_point.status, 400);
  EXPECT_EQ(Json::parse(bad_point.body)["message"],
            "invalid OTLP/JSON request: metric 'h': dataPoints[0]: 1 bucketCounts for 1 "
            "explicitBounds (expected one more)");
  ASSERT_EQ(collector->stop(), 0);
  EXPECT_EQ(read_lines(traces()).size(), 1u);
  EXPECT_EQ(read_lines(metrics()).size(), 1u);

  const Json spans = report_of(traces(), logs());
  EXPECT_EQ(spans["input"]["spans"], 201);
  EXPECT_EQ(spans["input"]["malformed_lines"], 0);
  const Json points = report_of(metrics(), logs());
  EXPECT_EQ(points["input"]["data_points"], 2);
  EXPECT_EQ(points["input"]["malformed_lines"], 0);

  lens_test::ChildProcess convert(
      {LENS_BINARY, "convert", "--to", "chrome", traces(), "-o", logs()}, logs() + ".stdout");
  ASSERT_EQ(convert.wait(), 0) << convert.stderr_text();
  EXPECT_EQ(convert.stderr_text(), "");
  std::ifstream in(logs());
  const Json chrome = Json::parse(std::string(std::istreambuf_iterator<char>(in), {}));
  std::map<std::string, Json> by_id;
  for (const Json& e : chrome["traceEvents"]) {
    if (e["ph"] == "X") by_id[e["args"]["span_id"]] = e["args"]["v"];
  }
  ASSERT_EQ(by_id.size(), 201u);
  EXPECT_EQ(by_id["0000000000000001"], "bad\xEF\xBF\xBD");
  EXPECT_EQ(by_id["0000000000000002"], "NaN");
  EXPECT_EQ(by_id["0000000000000003"], "Infinity");
  EXPECT_EQ(by_id["0000000000000004"], "-Infinity");
  EXPECT_EQ(by_id["0000000000000005"], 1e300);
  EXPECT_EQ(by_id["0000000000000006"], 9223372036854775808.0);
  EXPECT_EQ(by_id["0000000000000007"], Json::parse(R"(["NaN",1e300])"));
  EXPECT_EQ(by_id["0000000000000008"], "Infinity");  // 1e999
  EXPECT_EQ(by_id["0000000000000009"], "NaN");       // null: which non-finite value is not known
}

#ifdef NEMO_LENS_WITH_GRPC

// An Export call through a generic stub: the status, and the response bytes.
struct GrpcAnswer {
  grpc::Status status;
  std::string response;
};

GrpcAnswer grpc_export(int port, const std::string& method, const std::string& body) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::Slice slice(body);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  GrpcAnswer answer;
  stub.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status status) {
                   std::lock_guard lock(mu);
                   answer.status = std::move(status);
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });
  std::vector<grpc::Slice> slices;
  if (answer.status.ok() && response.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      answer.response.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  return answer;
}

constexpr char kMetricsMethod[] = "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
constexpr char kLogsMethod[] = "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
constexpr char kTraceMethod[] = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";

TEST_F(CollectSignals, GrpcMetricsAndLogsServices) {
  auto collector =
      Collector::with_args(metrics(), {"--metrics-out", metrics(), "--logs-out", logs()});
  const int port = collector->grpc_port();
  ASSERT_NE(port, 0) << collector->stderr_text();
  const MetricsRequest m = metrics_request(5, 7);
  const LogsRequest l = logs_request(3);
  GrpcAnswer a = grpc_export(port, kMetricsMethod, m.SerializeAsString());
  EXPECT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.response, "");  // an empty ExportMetricsServiceResponse
  a = grpc_export(port, kLogsMethod, l.SerializeAsString());
  EXPECT_TRUE(a.status.ok()) << a.status.error_message();
  EXPECT_EQ(a.response, "");
  // Refusals: a signal without output, another method, an undecodable message.
  a = grpc_export(port, kTraceMethod, trace_request().SerializeAsString());
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(a.status.error_message(),
            "lens collect is not collecting traces: start it with --out FILE");
  a = grpc_export(port, "/opentelemetry.proto.collector.profiles.v1.ProfilesService/Export", "");
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::UNIMPLEMENTED);
  EXPECT_EQ(a.status.error_message(),
            std::string("lens collect serves ") + kMetricsMethod + ", " + kLogsMethod + " only");
  a = grpc_export(port, kLogsMethod, "\x0a\x05\x0a");
  EXPECT_EQ(a.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(a.status.error_message().find("undecodable OTLP protobuf"), std::string::npos);
  ASSERT_EQ(collector->stop(), 0);
  const std::vector<Json> metric_lines = read_lines(metrics());
  ASSERT_EQ(metric_lines.size(), 1u);
  EXPECT_EQ(metric_lines[0], printed(m, "resourceMetrics"));
  const std::vector<Json> log_lines = read_lines(logs());
  ASSERT_EQ(log_lines.size(), 1u);
  EXPECT_EQ(log_lines[0], printed(l, "resourceLogs"));
  EXPECT_EQ(collector->summary(),
            "lens collect: 1 metrics requests, 7 data points, 1 logs "
            "requests, 3 log records, 3 rejected; written to " +
                metrics() + ", " + logs() + "\n");
}

#endif  // NEMO_LENS_WITH_GRPC

}  // namespace
