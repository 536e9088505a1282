// The OTLP exporter against real receivers on 127.0.0.1: `lens collect` as a child process, or a
// purpose-built server in this process where a fault needs one. Every test checks the received
// spans by id against the ids the program created.
#include <curl/curl.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "lens_collect.hpp"
#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "http_test_server.hpp"
#include "nemo/lens/lens.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using nemo::lens::SpanData;
using lens_test::BlackHole;
using lens_test::ChildProcess;
using lens_test::RecordedRequest;
using lens_test::Reply;
using lens_test::ScopedEnv;
using lens_test::TestHttpServer;
using Json = nlohmann::json;
using lens_test::Collector;
using lens_test::read_received;
using lens_test::Received;
using lens_test::temp_path;
using Request = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using Clock = std::chrono::steady_clock;

// Span ids of a protobuf request body, decoded by libprotobuf.
std::vector<std::string> ids_in(const std::string& body) {
  Request request;
  EXPECT_TRUE(request.ParseFromString(body));
  std::vector<std::string> ids;
  static constexpr char kHex[] = "0123456789abcdef";
  for (const auto& rs : request.resource_spans()) {
    for (const auto& ss : rs.scope_spans()) {
      for (const auto& span : ss.spans()) {
        std::string hex;
        for (unsigned char c : span.span_id()) {
          hex.push_back(kHex[c >> 4]);
          hex.push_back(kHex[c & 15]);
        }
        ids.push_back(hex);
      }
    }
  }
  return ids;
}

// Enabled, exporting set-up whose exporter is `otlp` with the environment's settings.
nemo::lens::TelemetryHandle setup_otlp() {
  nemo::lens::NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = "all";
  c.exporter = "otlp";
  nemo::lens::SetupOptions options;
  options.allow_reinit = true;
  return nemo::lens::setup_telemetry(c, 0, 1, options);
}

// Emits `n` spans named `name` (group step, two attributes); returns their span ids.
std::vector<std::string> emit(int n, const std::string& name = "train_step") {
  std::vector<std::string> ids;
  for (int i = 0; i < n; ++i) {
    auto span = nemo::lens::managed_span("step", name, {{"iteration", i}, {"loss", 1.0 / (i + 1)}});
    ids.push_back(span.context().span_id.to_hex());
  }
  return ids;
}

void http_protobuf_to(ScopedEnv& env, const std::string& url) {
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url);
  env.set("OTEL_BSP_SCHEDULE_DELAY", "50");
}

// Points the exporter (OTLP/HTTP) at a free loopback port nobody serves yet; returns that
// address ("127.0.0.1:PORT") for the lens collect that comes later.
std::string unserved_address(ScopedEnv& env) {
  const std::string listen = "127.0.0.1:" + std::to_string(lens_test::free_port());
  http_protobuf_to(env, "http://" + listen + "/v1/traces");
  return listen;
}

// 1. The receiver starts two seconds after the program: every span arrives, none twice.
TEST(OtlpFaults, ReceiverStartingLateGetsEverySpanOnce) {
  ScopedEnv env;
  const std::string out = temp_path("late");
  std::remove(out.c_str());
  const int port = lens_test::free_port();
  http_protobuf_to(env, "http://127.0.0.1:" + std::to_string(port) + "/v1/traces");
  auto telemetry = setup_otlp();
  const auto ids = emit(500);
  std::this_thread::sleep_for(2s);  // the fault itself: nobody listens for two seconds
  Collector collector(out, "127.0.0.1:" + std::to_string(port));
  ASSERT_TRUE(telemetry.force_flush(20s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  const Received received = read_received(out);
  EXPECT_EQ(received.duplicates, 0u);
  EXPECT_EQ(received.spans.size(), ids.size());
  for (const auto& id : ids) EXPECT_TRUE(received.spans.contains(id)) << id;
  EXPECT_EQ(stats.spans_exported, ids.size());
  EXPECT_EQ(stats.spans_dropped_export_failed + stats.spans_dropped_queue_full, 0u);
  EXPECT_EQ(collector.stop(), 0);
  std::remove(out.c_str());
}

// Spans from `threads` threads at `per_second` each until `stop` (a paced load, as a training
// job makes them, rather than a burst that outruns any exporter); returns their ids.
std::vector<std::string> paced_load(int threads, int per_second, const std::atomic<bool>& stop) {
  std::vector<std::vector<std::string>> ids(static_cast<std::size_t>(threads));
  std::vector<std::thread> workers;
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const auto period = std::chrono::nanoseconds(1'000'000'000 / per_second);
      auto next = Clock::now();
      for (int i = 0; !stop.load(); ++i) {
        {
          auto span = nemo::lens::managed_span("step", "paced", {{"thread", t}, {"i", i}});
          ids[static_cast<std::size_t>(t)].push_back(span.context().span_id.to_hex());
        }
        next += period;
        std::this_thread::sleep_until(next);  // the pace itself, not a wait for an event
      }
    });
  }
  for (auto& w : workers) w.join();
  std::vector<std::string> all;
  for (auto& v : ids) all.insert(all.end(), v.begin(), v.end());
  return all;
}

// 2. The receiver is away twice at 2,000 spans/s from 2 threads — it starts late, then is killed
// (SIGKILL) and restarted on the same port — and the outage buffer loses nothing: every span
// arrives once, none is counted dropped.
TEST(OtlpFaults, AReceiverThatStartsLateAndRestartsLosesNoSpan) {
  ScopedEnv env;
  const std::string out = temp_path("outage");
  std::remove(out.c_str());
  const std::string spool = temp_path("outage_spool") + ".d";
  const std::string listen = unserved_address(env);
  env.set("OTEL_BSP_MAX_QUEUE_SIZE", "1000");
  env.set("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100");
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", spool);
  // A small memory part, so that the outage also goes through the spool on disk.
  env.set("NEMO_LENS_EXPORT_BUFFER_SIZE", "64KiB");
  auto telemetry = setup_otlp();
  std::atomic<bool> stop{false};
  std::vector<std::string> ids;
  std::thread load([&] { ids = paced_load(2, 1000, stop); });
  // The faults themselves: nobody listens for 1.5 s, then a receiver does for 1.5 s, is killed,
  // and is back 1.5 s later for the rest of the run.
  std::this_thread::sleep_for(1500ms);
  const auto buffered_early = telemetry.stats().spans_buffered;
  auto collector = std::make_unique<Collector>(out, listen);
  std::this_thread::sleep_for(1500ms);
  collector->kill();
  std::this_thread::sleep_for(1500ms);
  collector = std::make_unique<Collector>(out, listen);
  std::this_thread::sleep_for(1000ms);
  stop = true;
  load.join();
  ASSERT_TRUE(telemetry.force_flush(20s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  EXPECT_EQ(collector->stop(), 0);

  EXPECT_GT(buffered_early, 1000u) << "the first outage's spans waited in the buffer";
  const Received received = read_received(out);
  EXPECT_EQ(received.duplicates, 0u);
  std::size_t missing = 0;
  for (const auto& id : ids) missing += !received.spans.contains(id);
  EXPECT_EQ(missing, 0u) << "of " << ids.size();
  EXPECT_EQ(received.spans.size(), ids.size());
  EXPECT_GT(ids.size(), 8000u);
  EXPECT_EQ(stats.spans_exported, ids.size());
  EXPECT_EQ(stats.spans_buffered, 0u);
  EXPECT_EQ(stats.spans_dropped_export_failed + stats.spans_dropped_queue_full +
                stats.spans_dropped_shutdown,
            0u);
  std::remove(out.c_str());
  std::system(("rm -rf '" + spool + "'").c_str());
}

// 2b. An outage longer than the buffer's bounds: what does not fit is dropped and counted, what
// fits arrives once the receiver is back, and the counts add up exactly.
TEST(OtlpFaults, WhatExceedsTheOutageBufferIsDroppedAndCounted) {
  ScopedEnv env;
  const std::string out = temp_path("overflow");
  std::remove(out.c_str());
  const std::string listen = unserved_address(env);
  env.set("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "100");
  env.set("NEMO_LENS_EXPORT_BUFFER_SIZE", "32KiB");
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", "off");
  auto telemetry = setup_otlp();
  std::atomic<bool> stop{false};
  std::vector<std::string> ids;
  std::thread load([&] { ids = paced_load(1, 2000, stop); });
  std::this_thread::sleep_for(1500ms);  // the outage
  stop = true;
  load.join();
  const auto during = telemetry.stats();
  EXPECT_GT(during.spans_dropped_export_failed, 0u) << "32 KiB cannot hold 3,000 spans";
  EXPECT_GT(during.spans_buffered, 0u);
  Collector collector(out, listen);
  ASSERT_TRUE(telemetry.force_flush(20s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  EXPECT_EQ(collector.stop(), 0);
  const Received received = read_received(out);
  EXPECT_EQ(received.duplicates, 0u);
  EXPECT_EQ(stats.spans_buffered, 0u);
  EXPECT_EQ(received.spans.size(), stats.spans_exported);
  EXPECT_EQ(stats.spans_ended, stats.spans_exported + stats.spans_dropped_export_failed +
                                   stats.spans_dropped_queue_full);
  EXPECT_EQ(stats.spans_ended, ids.size());
  std::remove(out.c_str());
}

// 2c. fork() while spans wait in the outage buffer: the child has a buffer (and spool) of its own,
// never sends the parent's spans, and both deliver theirs once the receiver is up.
TEST(OtlpFaults, AForkedChildHasItsOwnOutageBuffer) {
  ScopedEnv env;
  const std::string out = temp_path("fork_outage");
  std::remove(out.c_str());
  const std::string listen = unserved_address(env);
  env.set("NEMO_LENS_EXPORT_BUFFER_SIZE", "0");  // all but the first batch go to the spool
  env.set("NEMO_LENS_EXPORT_SPOOL_DIR", temp_path("fork_spool") + ".d");
  env.set("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "50");
  auto telemetry = setup_otlp();
  const auto parent_ids = emit(200, "parent");
  EXPECT_FALSE(telemetry.force_flush(300ms)) << "nobody listens yet";
  EXPECT_EQ(telemetry.stats().spans_buffered, 200u);
  Collector collector(out, listen);
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    emit(100, "child");
    const bool flushed = telemetry.force_flush(20s);
    const auto stats = telemetry.stats();
    telemetry.shutdown();
    ::_exit(flushed && stats.spans_exported == 100 && stats.spans_buffered == 0 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the child's own 100 spans";
  ASSERT_TRUE(telemetry.force_flush(20s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  EXPECT_EQ(collector.stop(), 0);
  EXPECT_EQ(stats.spans_exported, 200u);
  const Received received = read_received(out);
  EXPECT_EQ(received.duplicates, 0u) << "the child sent none of the parent's spans";
  std::map<std::string, int> by_name;
  for (const auto& [id, span] : received.spans) ++by_name[span["name"].get<std::string>()];
  EXPECT_EQ(by_name["parent"], 200);
  EXPECT_EQ(by_name["child"], 100);
  for (const auto& id : parent_ids) EXPECT_TRUE(received.spans.contains(id)) << id;
  std::remove(out.c_str());
  std::system(("rm -rf '" + temp_path("fork_spool") + ".d'").c_str());
}

// 3. 503 with Retry-After: 1 to the first requests: the exporter waits as told and retries.
TEST(OtlpFaults, RetryAfterIsHonouredAndEverythingArrives) {
  ScopedEnv env;
  TestHttpServer server([](const RecordedRequest&, std::size_t index) {
    if (index < 2) return Reply{503, "busy", {{"Retry-After", "1"}}};
    return Reply{200, "", {{"Content-Type", "application/x-protobuf"}}};
  });
  http_protobuf_to(env, server.url());
  auto telemetry = setup_otlp();
  const auto ids = emit(50);
  ASSERT_TRUE(telemetry.force_flush(20s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  const auto requests = server.requests();
  ASSERT_GE(requests.size(), 3u);
  EXPECT_EQ(ids_in(requests[0].body), ids_in(requests[2].body)) << "the same batch, retried";
  EXPECT_GE(requests[1].received - requests[0].received, 950ms);
  EXPECT_GE(requests[2].received - requests[1].received, 950ms);
  std::set<std::string> delivered;
  for (std::size_t i = 2; i < requests.size(); ++i) {
    for (const auto& id : ids_in(requests[i].body)) EXPECT_TRUE(delivered.insert(id).second);
  }
  EXPECT_EQ(delivered, std::set<std::string>(ids.begin(), ids.end()));
  EXPECT_EQ(stats.spans_exported, ids.size());
  EXPECT_EQ(stats.spans_dropped_export_failed, 0u);
}

// A CPU-bound loop body of a few microseconds, for the black-hole test.
double work(int i) {
  double x = i;
  for (int k = 0; k < 2000; ++k) x = x * 1.0000001 + 0.5 / (k + 1);
  return x;
}

// Median nanoseconds per iteration of `iterations` iterations, each with a span when `spans`.
double median_iteration_ns(int iterations, bool spans) {
  std::vector<double> samples;
  volatile double sink = 0;
  for (int i = 0; i < iterations; ++i) {
    const auto t0 = Clock::now();
    if (spans) {
      auto span = nemo::lens::managed_span("step", "iteration", {{"i", i}});
      sink = sink + work(i);
    } else {
      sink = sink + work(i);
    }
    samples.push_back(std::chrono::duration<double, std::nano>(Clock::now() - t0).count());
  }
  std::nth_element(samples.begin(), samples.begin() + samples.size() / 2, samples.end());
  return samples[samples.size() / 2];
}

// 4. A black-hole endpoint: the instrumented loop does not slow down, and shutdown(timeout)
// returns in time although the exporter is stuck waiting for an answer.
TEST(OtlpFaults, BlackHoleNeitherSlowsTheLoopNorDelaysShutdown) {
  ScopedEnv env;
  BlackHole hole;
  http_protobuf_to(env, "http://127.0.0.1:" + std::to_string(hole.port()) + "/v1/traces");
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60000");  // without the interrupt: a minute
  env.set("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "64");
  const double baseline_ns = median_iteration_ns(3000, false);
  auto telemetry = setup_otlp();
  const double traced_ns = median_iteration_ns(3000, true);
  // The exporter thread is blocked on the black hole; the loop only pays for its spans.
  EXPECT_LT(traced_ns, baseline_ns * 2 + 20'000) << "baseline " << baseline_ns << " ns";
  const auto stats_before = telemetry.stats();
  EXPECT_GT(stats_before.export_requests, 0u);
  const auto t0 = Clock::now();
  telemetry.shutdown(std::chrono::milliseconds(1000));
  const auto took = Clock::now() - t0;
  EXPECT_LT(took, 1500ms);
  const auto stats = telemetry.stats();
  EXPECT_EQ(stats.spans_exported, 0u);
  EXPECT_EQ(stats.spans_ended, 3000u);
}

// 5. The receiver answers 400: each batch is dropped and counted once, with no retry.
TEST(OtlpFaults, BadRequestDropsTheBatchWithoutRetrying) {
  ScopedEnv env;
  TestHttpServer server([](const RecordedRequest&, std::size_t) { return Reply{400, "bad", {}}; });
  http_protobuf_to(env, server.url());
  env.set("OTEL_BSP_SCHEDULE_DELAY", "60000");  // batches leave at the flushes below only
  auto telemetry = setup_otlp();
  for (int batch = 0; batch < 5; ++batch) {
    emit(10);
    ASSERT_TRUE(telemetry.force_flush(10s));
  }
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  EXPECT_EQ(server.requests().size(), 5u);
  EXPECT_EQ(stats.export_requests, 5u);
  EXPECT_EQ(stats.spans_dropped_export_failed, 50u);
  EXPECT_EQ(stats.spans_exported, 0u);
}

TEST(OtlpExport, PartialSuccessRejectionsAreCounted) {
  ScopedEnv env;
  opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse response;
  response.mutable_partial_success()->set_rejected_spans(3);
  response.mutable_partial_success()->set_error_message("spans too old");
  const std::string body = response.SerializeAsString();
  TestHttpServer server([&](const RecordedRequest&, std::size_t) { return Reply{200, body, {}}; });
  http_protobuf_to(env, server.url());
  auto telemetry = setup_otlp();
  emit(10);
  ASSERT_TRUE(telemetry.force_flush(10s));
  const auto stats = telemetry.stats();
  telemetry.shutdown();
  EXPECT_EQ(stats.spans_exported, 10u);
  EXPECT_EQ(stats.spans_rejected, 3u * server.requests().size());
}

TEST(OtlpExport, RequestsCarryContentTypeUserAgentAndConfiguredHeaders) {
  ScopedEnv env;
  TestHttpServer server([](const RecordedRequest&, std::size_t) { return Reply{}; });
  http_protobuf_to(env, server.url());
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "x-tenant=team%20a,authorization=Bearer%20abc");
  env.set("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip");
  auto telemetry = setup_otlp();
  const auto ids = emit(5);
  ASSERT_TRUE(telemetry.force_flush(10s));
  telemetry.shutdown();
  const auto requests = server.requests();
  ASSERT_EQ(requests.size(), 1u);
  const auto& h = requests[0].headers;
  EXPECT_EQ(requests[0].method, "POST");
  EXPECT_EQ(requests[0].path, "/v1/traces");
  EXPECT_EQ(h.at("content-type"), "application/x-protobuf");
  EXPECT_EQ(h.at("content-encoding"), "gzip");
  EXPECT_EQ(h.at("user-agent"), "nemo-lens-cpp/" NEMO_LENS_VERSION_STRING);
  EXPECT_EQ(h.at("x-tenant"), "team a");
  EXPECT_EQ(h.at("authorization"), "Bearer abc");
  // The body inflates (zlib, gzip mode) to a request holding the five spans.
  z_stream zs{};
  ASSERT_EQ(inflateInit2(&zs, 16 + 15), Z_OK);
  std::string inflated(1 << 20, '\0');
  std::string body = requests[0].body;
  zs.next_in = reinterpret_cast<Bytef*>(body.data());
  zs.avail_in = static_cast<uInt>(body.size());
  zs.next_out = reinterpret_cast<Bytef*>(inflated.data());
  zs.avail_out = static_cast<uInt>(inflated.size());
  ASSERT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
  inflated.resize(zs.total_out);
  inflateEnd(&zs);
  EXPECT_EQ(ids_in(inflated), ids);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

TEST(OtlpExport, HttpsTrustsTheConfiguredCertificateAndRefusesAnUnknownOne) {
  // A self-signed certificate for 127.0.0.1, made by the openssl command for this test.
  const std::string dir = ::testing::TempDir() + "lens_tls_" + std::to_string(::getpid());
  const std::string cert = dir + "/cert.pem";
  const std::string key = dir + "/key.pem";
  ASSERT_EQ(std::system(("mkdir -p " + dir + " && openssl req -x509 -newkey rsa:2048 -nodes -days 1"
                         " -subj /CN=127.0.0.1 -addext subjectAltName=IP:127.0.0.1 -keyout " +
                         key + " -out " + cert + " 2>/dev/null")
                            .c_str()),
            0);
  const TestHttpServer::Tls tls{read_file(cert), read_file(key)};
  TestHttpServer server([](const RecordedRequest&, std::size_t) { return Reply{}; }, &tls);
  ASSERT_EQ(server.url().substr(0, 8), "https://");
  const SpanData span = [] {
    SpanData s;
    s.name = "secure";
    s.context.trace_id.bytes[0] = 1;
    s.context.span_id.bytes[0] = 1;
    return s;
  }();
  const SpanData* view = &span;
  {
    ScopedEnv env;
    env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
    env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.url());
    env.set("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", cert);
    auto exporter = nemo::lens::detail::make_otlp_exporter();
    EXPECT_EQ(exporter->export_spans({&view, 1}, nemo::lens::Resource{}, Clock::now() + 10s),
              nemo::lens::ExportResult::kSuccess);
  }
  ASSERT_EQ(server.requests().size(), 1u);
  EXPECT_EQ(ids_in(server.requests()[0].body), std::vector<std::string>{span.context.span_id.to_hex()});
  {
    ScopedEnv env;  // the system's CAs only: the self-signed certificate is refused, not retried
    env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
    env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.url());
    auto exporter = nemo::lens::detail::make_otlp_exporter();
    testing::internal::CaptureStderr();
    EXPECT_EQ(exporter->export_spans({&view, 1}, nemo::lens::Resource{}, Clock::now() + 10s),
              nemo::lens::ExportResult::kFailure);
    const std::string printed = testing::internal::GetCapturedStderr();
    EXPECT_NE(printed.find("not retried"), std::string::npos) << printed;
    EXPECT_EQ(dynamic_cast<nemo::lens::detail::OtlpSpanExporter*>(exporter.get())->attempts(), 1u);
  }
  EXPECT_EQ(server.requests().size(), 1u);
  std::system(("rm -rf " + dir).c_str());
}

// 6. lens collect given garbage, a truncated protobuf, a wrong content type, an oversized body and
// a gzip bomb: each gets its status, and good requests keep working in between.
struct HttpAnswer {
  long status = 0;
  std::string body;
};

std::size_t append_body(char* data, std::size_t size, std::size_t n, void* user) {
  static_cast<std::string*>(user)->append(data, size * n);
  return size * n;
}

HttpAnswer post(const std::string& url, const std::string& body, const std::string& content_type,
                const std::string& encoding = "") {
  HttpAnswer answer;
  CURL* curl = curl_easy_init();
  curl_slist* headers = curl_slist_append(nullptr, ("Content-Type: " + content_type).c_str());
  if (!encoding.empty()) headers = curl_slist_append(headers, ("Content-Encoding: " + encoding).c_str());
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer.body);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 10'000L);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  if (curl_easy_perform(curl) == CURLE_OK) curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &answer.status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  return answer;
}

std::string gzip(const std::string& in) {
  std::string out;
  EXPECT_TRUE(nemo::lens::detail::gzip_compress(in, out));
  return out;
}

SpanData sample_span(int i) {
  SpanData s;
  s.name = "step " + std::to_string(i);
  s.group = "step";
  s.context.trace_id = *nemo::lens::TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  s.context.span_id.bytes[6] = static_cast<std::uint8_t>((i + 1) >> 8);
  s.context.span_id.bytes[7] = static_cast<std::uint8_t>(i + 1);
  s.context.trace_flags = 1;
  s.parent_span_id = *nemo::lens::SpanId::from_hex("b7ad6b7169203331");
  s.start_time_unix_nano = 1'700'000'000'000'000'000 + i;
  s.end_time_unix_nano = s.start_time_unix_nano + 1'000'000;
  s.attributes = {{"iteration", std::int64_t{i}}, {"loss", 0.25}, {"tags", std::vector<std::string>{"a", "b"}}};
  s.events.push_back({"saved", s.start_time_unix_nano + 5, {{"bytes", std::int64_t{10}}}, 0});
  nemo::lens::SpanLink link;
  link.context.trace_id = *nemo::lens::TraceId::from_hex("0af7651916cd43dd8448eb211c80319c");
  link.context.span_id = *nemo::lens::SpanId::from_hex("53995c3f42cd8ad8");
  link.context.is_remote = true;
  s.links.push_back(link);
  s.status_code = nemo::lens::StatusCode::kError;
  s.status_message = "boom";
  s.thread_id = 99;
  return s;
}

std::string encoded_request(int spans) {
  std::vector<SpanData> data;
  for (int i = 0; i < spans; ++i) data.push_back(sample_span(i));
  std::vector<const SpanData*> views;
  for (const auto& d : data) views.push_back(&d);
  std::string out;
  nemo::lens::detail::append_otlp_proto(out, views, nemo::lens::Resource{});
  return out;
}

TEST(LensCollect, BadRequestsGetTheirStatusAndTheServerKeepsServing) {
  const std::string out = temp_path("bad");
  std::remove(out.c_str());
  Collector collector(out, "127.0.0.1:0", {"--max-body", "100000"});
  const std::string url = collector.http_url();
  const std::string good = encoded_request(3);
  const std::string proto = "application/x-protobuf";
  int good_sent = 0;
  auto good_request_works = [&] {
    ++good_sent;
    return post(url, good, proto).status == 200;
  };

  EXPECT_EQ(post(url, "\xff\xff\xff garbage", proto).status, 400);
  EXPECT_TRUE(good_request_works());
  const HttpAnswer truncated = post(url, good.substr(0, good.size() - 7), proto);
  EXPECT_EQ(truncated.status, 400);
  EXPECT_NE(truncated.body.find("undecodable OTLP protobuf"), std::string::npos) << truncated.body;
  EXPECT_TRUE(good_request_works());
  EXPECT_EQ(post(url, good, "text/plain").status, 415);
  EXPECT_EQ(post(url, "{not json", "application/json").status, 400);
  EXPECT_TRUE(good_request_works());
  EXPECT_EQ(post(url, std::string(200'000, 'x'), proto).status, 413);
  EXPECT_TRUE(good_request_works());
  // 50 MB of zeros compress to about 50 KB: under the body limit, far over it once inflated.
  const std::string bomb = gzip(std::string(50u << 20, '\0'));
  ASSERT_LT(bomb.size(), 100'000u);
  EXPECT_EQ(post(url, bomb, proto, "gzip").status, 413);
  EXPECT_EQ(post(url, "not gzip at all", proto, "gzip").status, 400);
  EXPECT_EQ(post(url, good, proto, "br").status, 415);
  EXPECT_EQ(post("http://127.0.0.1:" + std::to_string(collector.http_port()) + "/v1/metricz", good, proto).status,
            404);
  EXPECT_TRUE(good_request_works());
  EXPECT_EQ(post(url, gzip(good), proto, "gzip").status, 200);
  ++good_sent;

  EXPECT_EQ(collector.stop(), 0);
  const Received received = read_received(out);
  EXPECT_EQ(received.lines.size(), static_cast<std::size_t>(good_sent));
  EXPECT_EQ(collector.summary(), "lens collect: " + std::to_string(good_sent) + " requests, " +
                                     std::to_string(3 * good_sent) + " spans, 9 rejected; written to " +
                                     out + "\n");
  std::remove(out.c_str());
}

// 7. HTTP protobuf, HTTP JSON, gRPC (and HTTP protobuf with gzip) deliver the same spans.
TEST(LensCollect, EveryProtocolDeliversTheSameSpans) {
  const std::string out = temp_path("protocols");
  std::remove(out.c_str());
  Collector collector(out);
  std::vector<SpanData> data;
  for (int i = 0; i < 20; ++i) data.push_back(sample_span(i));
  std::vector<const SpanData*> views;
  for (const auto& d : data) views.push_back(&d);
  nemo::lens::Resource resource;
  resource.attributes = {{"service.name", std::string("trainer")}, {"dl.rank", std::int64_t{2}}};

  struct Variant {
    std::string protocol, endpoint, compression;
  };
  std::vector<Variant> variants = {
      {"http/protobuf", collector.http_url(), "none"},
      {"http/json", collector.http_url(), "none"},
      {"http/protobuf", collector.http_url(), "gzip"},
  };
  if (nemo::lens::detail::grpc_built_in()) {
    ASSERT_NE(collector.grpc_port(), 0);
    variants.push_back({"grpc", "http://127.0.0.1:" + std::to_string(collector.grpc_port()), "none"});
    variants.push_back({"grpc", "http://127.0.0.1:" + std::to_string(collector.grpc_port()), "gzip"});
  }
  for (const auto& v : variants) {
    ScopedEnv env;
    env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", v.protocol);
    env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", v.endpoint);
    env.set("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", v.compression);
    auto exporter = nemo::lens::detail::make_otlp_exporter();
    EXPECT_EQ(exporter->export_spans(views, resource, Clock::now() + 10s), nemo::lens::ExportResult::kSuccess)
        << v.protocol << " " << v.compression;
    exporter->shutdown(Clock::now() + 1s);
  }
  EXPECT_EQ(collector.stop(), 0);
  const Received received = read_received(out);
  ASSERT_EQ(received.lines.size(), variants.size());
  std::string expected;
  nemo::lens::detail::append_otlp_json(expected, views, resource);
  const Json expected_json = Json::parse(expected);
  for (std::size_t i = 0; i < variants.size(); ++i) {
    EXPECT_EQ(received.lines[i], expected_json) << variants[i].protocol << " " << variants[i].compression;
  }
  EXPECT_EQ(received.spans.size(), 20u);
  std::remove(out.c_str());
}

struct SlowUpload {
  std::function<void()> on_half;
  bool fired = false;
};

int on_upload_progress(void* user, curl_off_t, curl_off_t, curl_off_t total, curl_off_t sent) {
  auto* upload = static_cast<SlowUpload*>(user);
  if (!upload->fired && total > 0 && sent >= total / 2) {
    upload->fired = true;
    upload->on_half();
  }
  return 0;
}

TEST(LensCollect, StopSignalFinishesTheRequestInFlight) {
  const std::string out = temp_path("inflight");
  std::remove(out.c_str());
  Collector collector(out, "127.0.0.1:0", {"--grpc-listen", "off"});
  // One request of 4000 spans, uploaded at 1 MB/s; SIGTERM arrives when half of it is sent.
  const std::string body = encoded_request(4000);
  SlowUpload upload{[&] { collector.signal(SIGTERM); }};
  CURL* curl = curl_easy_init();
  curl_slist* headers = curl_slist_append(nullptr, "Content-Type: application/x-protobuf");
  headers = curl_slist_append(headers, "Expect:");
  curl_easy_setopt(curl, CURLOPT_URL, collector.http_url().c_str());
  curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
  curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body.data());
  curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(body.size()));
  curl_easy_setopt(curl, CURLOPT_MAX_SEND_SPEED_LARGE, static_cast<curl_off_t>(1'000'000));
  curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
  curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, &on_upload_progress);
  curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &upload);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, 20'000L);
  std::string answer;
  curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, &append_body);
  curl_easy_setopt(curl, CURLOPT_WRITEDATA, &answer);
  const CURLcode rc = curl_easy_perform(curl);
  long status = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
  curl_slist_free_all(headers);
  curl_easy_cleanup(curl);
  ASSERT_TRUE(upload.fired);
  EXPECT_EQ(rc, CURLE_OK) << curl_easy_strerror(rc);
  EXPECT_EQ(status, 200);
  EXPECT_EQ(collector.wait(), 0);
  EXPECT_EQ(read_received(out).spans.size(), 4000u);
  EXPECT_EQ(collector.summary(), "lens collect: 1 requests, 4000 spans, 0 rejected; written to " + out + "\n");
  std::remove(out.c_str());
}

TEST(LensCollect, RefusesAnAddressInUseWithAClearError) {
  const std::string out = temp_path("inuse");
  Collector first(out);
  ChildProcess second({LENS_BINARY, "collect", "--out", out, "--listen",
                       "127.0.0.1:" + std::to_string(first.http_port()), "--grpc-listen", "off"});
  EXPECT_EQ(second.wait(), 2);
  EXPECT_NE(second.stderr_text().find("Cannot listen for OTLP/HTTP on 127.0.0.1:" +
                                      std::to_string(first.http_port())),
            std::string::npos)
      << second.stderr_text();
  EXPECT_EQ(first.stop(), 0);
  std::remove(out.c_str());
}

}  // namespace
