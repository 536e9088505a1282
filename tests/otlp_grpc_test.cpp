// The OTLP/gRPC exporter against a purpose-built gRPC server on 127.0.0.1 that answers each call
// with the status the test says: what is retried (UNAVAILABLE; RESOURCE_EXHAUSTED only with a
// RetryInfo), after how long, and what is dropped at once.
#include <google/protobuf/any.pb.h>
#include <google/protobuf/duration.pb.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "export/otlp.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nemo::lens::ExportResult;
using nemo::lens::SpanData;
using Request = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;

struct Call {
  std::string method, body;
  std::multimap<std::string, std::string> metadata;
  Clock::time_point received;
};

// Answers call i with statuses(i); records every call.
class TestGrpcServer {
 public:
  using Statuses = std::function<grpc::Status(std::size_t)>;

  explicit TestGrpcServer(Statuses statuses) : service_(*this), statuses_(std::move(statuses)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    builder.RegisterCallbackGenericService(&service_);
    server_ = builder.BuildAndStart();
  }
  ~TestGrpcServer() { server_->Shutdown(std::chrono::system_clock::now() + 1s); }

  std::string endpoint() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::vector<Call> calls() {
    std::lock_guard lock(mu_);
    return calls_;
  }

 private:
  class Reactor final : public grpc::ServerGenericBidiReactor {
   public:
    Reactor(TestGrpcServer& server, grpc::GenericCallbackServerContext* context) : server_(server) {
      call_.method = context->method();
      for (const auto& [k, v] : context->client_metadata()) {
        call_.metadata.emplace(std::string(k.data(), k.size()), std::string(v.data(), v.size()));
      }
      StartRead(&request_);
    }
    void OnReadDone(bool ok) override {
      call_.received = Clock::now();
      std::vector<grpc::Slice> slices;
      if (ok && request_.Dump(&slices).ok()) {
        for (const auto& s : slices) call_.body.append(reinterpret_cast<const char*>(s.begin()), s.size());
      }
      std::size_t index = 0;
      {
        std::lock_guard lock(server_.mu_);
        index = server_.calls_.size();
        server_.calls_.push_back(call_);
      }
      const grpc::Status status = server_.statuses_(index);
      if (!status.ok()) {
        Finish(status);
        return;
      }
      grpc::Slice empty;
      response_ = grpc::ByteBuffer(&empty, 1);
      StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
    }
    void OnDone() override { delete this; }

   private:
    TestGrpcServer& server_;
    Call call_;
    grpc::ByteBuffer request_, response_;
  };

  class Service final : public grpc::CallbackGenericService {
   public:
    explicit Service(TestGrpcServer& server) : server_(server) {}
    grpc::ServerGenericBidiReactor* CreateReactor(grpc::GenericCallbackServerContext* context) override {
      return new Reactor(server_, context);
    }

   private:
    TestGrpcServer& server_;
  };

  Service service_;
  Statuses statuses_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
  std::mutex mu_;
  std::vector<Call> calls_;
};

// A serialized google.rpc.Status {code, message, details: [Any(RetryInfo{retry_delay})]}. The Any
// and the Duration come from libprotobuf's well-known types; Status and RetryInfo, which it does
// not ship, are two hand-written length-delimited fields each.
std::string status_with_retry_info(int code, std::chrono::milliseconds delay) {
  google::protobuf::Duration duration;
  duration.set_seconds(delay.count() / 1000);
  duration.set_nanos(static_cast<int>(delay.count() % 1000) * 1'000'000);
  const std::string duration_bytes = duration.SerializeAsString();
  std::string retry_info = "\x0a";  // RetryInfo.retry_delay = 1
  retry_info.push_back(static_cast<char>(duration_bytes.size()));
  retry_info += duration_bytes;
  google::protobuf::Any any;
  any.set_type_url("type.googleapis.com/google.rpc.RetryInfo");
  any.set_value(retry_info);
  const std::string any_bytes = any.SerializeAsString();
  std::string status;
  status.push_back(0x08);  // Status.code = 1
  status.push_back(static_cast<char>(code));
  status.push_back(0x1a);  // Status.details = 3
  status.push_back(static_cast<char>(any_bytes.size()));
  status += any_bytes;
  return status;
}

std::vector<SpanData> sample(int n) {
  std::vector<SpanData> spans(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    spans[static_cast<std::size_t>(i)].name = "step";
    spans[static_cast<std::size_t>(i)].context.span_id.bytes[7] = static_cast<std::uint8_t>(i + 1);
    spans[static_cast<std::size_t>(i)].context.trace_id.bytes[15] = 1;
  }
  return spans;
}

struct Outcome {
  ExportResult result;
  std::uint64_t attempts;
  // After the exporter's shutdown: spans it took and then dropped.
  std::uint64_t dropped_later;
  // How long shutdown took.
  Clock::duration shutdown_took;
};

// Exports 5 spans, then shuts the exporter down with `shutdown_within` to send what its outage
// buffer holds.
Outcome export_to(const TestGrpcServer& server, lens_test::ScopedEnv& env,
                  std::chrono::milliseconds timeout = 10s,
                  std::chrono::milliseconds shutdown_within = 10s) {
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.endpoint());
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", std::to_string(timeout.count()));
  auto exporter = nemo::lens::detail::make_otlp_exporter();
  auto* otlp = dynamic_cast<nemo::lens::detail::OtlpSpanExporter*>(exporter.get());
  const auto spans = sample(5);
  std::vector<const SpanData*> views;
  for (const auto& s : spans) views.push_back(&s);
  const ExportResult r = exporter->export_spans(views, nemo::lens::Resource{}, Clock::now() + 30s);
  const auto t0 = Clock::now();
  exporter->force_flush(t0 + shutdown_within);
  exporter->shutdown(t0 + shutdown_within);
  const auto took = Clock::now() - t0;
  EXPECT_EQ(otlp->deferred_spans().pending, 0u);
  return {r, otlp->attempts(), otlp->deferred_spans().dropped, took};
}

TEST(OtlpGrpc, UnavailableIsRetriedUntilTheCallSucceeds) {
  lens_test::ScopedEnv env;
  TestGrpcServer server([](std::size_t i) {
    return i < 2 ? grpc::Status(grpc::StatusCode::UNAVAILABLE, "restarting") : grpc::Status::OK;
  });
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "X-Tenant=team%20a");
  const Outcome o = export_to(server, env);
  EXPECT_EQ(o.result, ExportResult::kSuccess);  // taken into the outage buffer
  EXPECT_EQ(o.attempts, 3u);
  EXPECT_EQ(o.dropped_later, 0u);
  const auto calls = server.calls();
  ASSERT_EQ(calls.size(), 3u);
  EXPECT_EQ(calls[0].method, "/opentelemetry.proto.collector.trace.v1.TraceService/Export");
  EXPECT_EQ(calls[0].body, calls[2].body);
  Request request;
  ASSERT_TRUE(request.ParseFromString(calls[2].body));
  EXPECT_EQ(request.resource_spans(0).scope_spans(0).spans_size(), 5);
  EXPECT_EQ(calls[0].metadata.find("x-tenant")->second, "team a");
  EXPECT_NE(calls[0].metadata.find("user-agent")->second.find("nemo-lens-cpp/"), std::string::npos);
}

TEST(OtlpGrpc, ResourceExhaustedWithoutRetryInfoIsDropped) {
  lens_test::ScopedEnv env;
  TestGrpcServer server([](std::size_t) { return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "full"); });
  const Outcome o = export_to(server, env);
  EXPECT_EQ(o.result, ExportResult::kFailure);
  EXPECT_EQ(server.calls().size(), 1u);
}

TEST(OtlpGrpc, ResourceExhaustedWithRetryInfoWaitsTheGivenDelay) {
  lens_test::ScopedEnv env;
  const std::string details = status_with_retry_info(8, 1200ms);
  TestGrpcServer server([&](std::size_t i) {
    return i == 0 ? grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "slow down", details)
                  : grpc::Status::OK;
  });
  const Outcome o = export_to(server, env);
  EXPECT_EQ(o.result, ExportResult::kSuccess);
  EXPECT_EQ(o.dropped_later, 0u);
  const auto calls = server.calls();
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_GE(calls[1].received - calls[0].received, 1150ms);
}

TEST(OtlpGrpc, ARetryInfoPastShutdownsDeadlineIsNotAwaited) {
  lens_test::ScopedEnv env;
  const std::string details = status_with_retry_info(14, 30'000ms);
  TestGrpcServer server([&](std::size_t) {
    return grpc::Status(grpc::StatusCode::UNAVAILABLE, "down for maintenance", details);
  });
  const Outcome o = export_to(server, env, 2000ms, 1000ms);
  EXPECT_EQ(o.result, ExportResult::kSuccess);  // waits in the buffer for the receiver...
  EXPECT_EQ(o.dropped_later, 5u);               // ...until shutdown's deadline counts it lost
  EXPECT_LT(o.shutdown_took, 1500ms);
  EXPECT_EQ(server.calls().size(), 1u) << "the receiver asked for 30 s";
}

TEST(OtlpGrpc, InvalidArgumentIsDroppedWithoutRetry) {
  lens_test::ScopedEnv env;
  TestGrpcServer server([](std::size_t) { return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "bad"); });
  const Outcome o = export_to(server, env);
  EXPECT_EQ(o.result, ExportResult::kFailure);
  EXPECT_EQ(o.attempts, 1u);
  EXPECT_EQ(server.calls().size(), 1u);
}

TEST(OtlpGrpc, NoServerIsRetriedFromTheBufferUntilShutdownThenCountedDropped) {
  lens_test::ScopedEnv env;
  std::string endpoint;
  {
    TestGrpcServer gone([](std::size_t) { return grpc::Status::OK; });
    endpoint = gone.endpoint();
  }
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint);
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500");
  auto exporter = nemo::lens::detail::make_otlp_exporter();
  auto* otlp = dynamic_cast<nemo::lens::detail::OtlpSpanExporter*>(exporter.get());
  const auto spans = sample(1);
  const SpanData* view = &spans[0];
  const auto t0 = Clock::now();
  EXPECT_EQ(exporter->export_spans({&view, 1}, nemo::lens::Resource{}, Clock::now() + 30s),
            ExportResult::kSuccess);
  EXPECT_LT(Clock::now() - t0, 1500ms) << "the exporter thread does not wait out the outage";
  EXPECT_EQ(otlp->deferred_spans().pending, 1u);
  EXPECT_FALSE(exporter->force_flush(Clock::now() + 1500ms));  // still away: retried meanwhile
  exporter->shutdown(Clock::now() + 200ms);
  EXPECT_GT(otlp->attempts(), 1u);
  EXPECT_EQ(otlp->deferred_spans().pending, 0u);
  EXPECT_EQ(otlp->deferred_spans().dropped, 1u);
}

}  // namespace
