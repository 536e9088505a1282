// `lens collect`'s OTLP/gRPC receiver as a real process on 127.0.0.1 against grpc++ clients with
// per-message compression: gzip and deflate exports land, and a gzip bomb (a small message that
// inflates to far more than --max-body) ends RESOURCE_EXHAUSTED while the receiver's peak resident
// memory stays bounded, instead of the receiver inflating all of it first.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lens_collect.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace {

using lens_test::Collector;
using lens_test::temp_path;
using lens_test::lines_of;
using TraceRequest = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;

constexpr char kTraceMethod[] = "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
constexpr std::size_t kMaxBody = 4u << 20;

// One Export call through a generic stub, its message compressed by the client's gRPC core with
// `algorithm` (grpc-encoding), as the OpenTelemetry SDKs' gRPC exporters do.
grpc::Status grpc_export(int port, const grpc::ByteBuffer& request,
                         grpc_compression_algorithm algorithm) {
  auto channel =
      grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
  context.set_compression_algorithm(algorithm);
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  grpc::Status answer;
  stub.UnaryCall(&context, kTraceMethod, grpc::StubOptions(), &request, &response,
                 [&](grpc::Status status) {
                   std::lock_guard lock(mu);
                   answer = std::move(status);
                   done = true;
                   cv.notify_all();
                 });
  std::unique_lock lock(mu);
  cv.wait(lock, [&] { return done; });  // the deadline bounds it
  return answer;
}

grpc::Status grpc_export(int port, const std::string& body, grpc_compression_algorithm algorithm) {
  grpc::Slice slice(body);
  return grpc_export(port, grpc::ByteBuffer(&slice, 1), algorithm);
}

// A trace request with one span named `name`, serialized by libprotobuf.
std::string trace_request(const std::string& name) {
  TraceRequest request;
  auto* span = request.add_resource_spans()->add_scope_spans()->add_spans();
  span->set_trace_id(
      std::string("\x4b\xf9\x2f\x35\x77\xb3\x4d\xa6\xa3\xce\x92\x9d\x0e\x0e\x47\x36", 16));
  span->set_span_id(std::string("\x00\xf0\x67\xaa\x0b\xa9\x02\xb7", 8));
  span->set_name(name);
  span->set_start_time_unix_nano(1'700'000'000'000'000'000);
  span->set_end_time_unix_nano(1'700'000'000'001'000'000);
  return request.SerializeAsString();
}

// The peak resident memory of process `pid` in bytes (VmHWM), or 0 when it cannot be read.
std::uint64_t peak_resident_bytes(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;  // "N kB"
  }
  return 0;
}

// Removes the output file and lens collect's stdout file, whatever the test's outcome; declared
// before the Collector, so that it runs after the process is gone.
struct RemoveOutputs {
  std::string out;
  ~RemoveOutputs() {
    std::remove(out.c_str());
    std::remove((out + ".stdout").c_str());
  }
};

TEST(CollectGrpc, GzipAndDeflateExportsLand) {
  const std::string out = temp_path("grpc_compressed");
  std::remove(out.c_str());
  const RemoveOutputs cleanup{out};
  Collector collector(out, "127.0.0.1:0", {"--max-body", std::to_string(kMaxBody)});
  ASSERT_NE(collector.grpc_port(), 0);
  EXPECT_TRUE(grpc_export(collector.grpc_port(), trace_request("plain"), GRPC_COMPRESS_NONE).ok());
  EXPECT_TRUE(grpc_export(collector.grpc_port(), trace_request("gzip"), GRPC_COMPRESS_GZIP).ok());
  EXPECT_TRUE(
      grpc_export(collector.grpc_port(), trace_request("deflate"), GRPC_COMPRESS_DEFLATE).ok());
  // Compressed, a message of --max-body bytes less its framing is accepted whole.
  std::string padded = trace_request("large");
  TraceRequest large;
  ASSERT_TRUE(large.ParseFromString(padded));
  large.mutable_resource_spans(0)->mutable_scope_spans(0)->mutable_spans(0)->set_name(
      std::string(kMaxBody - 200, 'n'));
  padded = large.SerializeAsString();
  ASSERT_LE(padded.size(), kMaxBody);
  EXPECT_TRUE(grpc_export(collector.grpc_port(), padded, GRPC_COMPRESS_GZIP).ok());
  // Uncompressed, a message over --max-body is still refused before it is read.
  const grpc::Status over =
      grpc_export(collector.grpc_port(), std::string(kMaxBody + 1, 'x'), GRPC_COMPRESS_NONE);
  EXPECT_EQ(over.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << over.error_message();

  EXPECT_EQ(collector.stop(), 0);
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_NE(lines[0].find("\"name\":\"plain\""), std::string::npos);
  EXPECT_NE(lines[1].find("\"name\":\"gzip\""), std::string::npos);
  EXPECT_NE(lines[2].find("\"name\":\"deflate\""), std::string::npos);
  EXPECT_NE(lines[3].find("nnnnnnnn"), std::string::npos);
}

TEST(CollectGrpc, GzipBombIsRefusedBeforeItIsInflated) {
  const std::string out = temp_path("grpc_bomb");
  std::remove(out.c_str());
  const RemoveOutputs cleanup{out};
  Collector collector(out, "127.0.0.1:0", {"--max-body", std::to_string(kMaxBody)});
  ASSERT_NE(collector.grpc_port(), 0);
  // Two bombs at once (two at once took the machine): 256 MiB of zeros each, which the client
  // holds as one 1 MiB block referenced 256 times; its gRPC core deflates each to about 0.25 MB
  // on the wire, well under --max-body.
  static const std::vector<char> block(1u << 20, '\0');
  std::vector<grpc::Slice> slices;
  for (int i = 0; i < 256; ++i) {
    slices.emplace_back(block.data(), block.size(), grpc::Slice::STATIC_SLICE);
  }
  const grpc::ByteBuffer bomb(slices.data(), slices.size());
  grpc::Status refused[2];
  {
    std::thread other(
        [&] { refused[1] = grpc_export(collector.grpc_port(), bomb, GRPC_COMPRESS_GZIP); });
    refused[0] = grpc_export(collector.grpc_port(), bomb, GRPC_COMPRESS_GZIP);
    other.join();
  }
  for (const grpc::Status& r : refused) {
    EXPECT_EQ(r.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << r.error_message();
    EXPECT_NE(r.error_message().find(std::to_string(kMaxBody)), std::string::npos)
        << r.error_message();
  }
  // Inflating the bombs whole would have taken 512 MiB.
  const std::uint64_t peak = peak_resident_bytes(collector.pid());
  EXPECT_GT(peak, 0u);
  EXPECT_LT(peak, std::uint64_t{200} << 20) << "lens collect's peak resident memory";
  // And the receiver still takes compressed exports.
  EXPECT_TRUE(grpc_export(collector.grpc_port(), trace_request("after"), GRPC_COMPRESS_GZIP).ok());

  EXPECT_EQ(collector.stop(), 0);
  const std::vector<std::string> lines = lines_of(out);
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("\"name\":\"after\""), std::string::npos);
  EXPECT_EQ(collector.summary(),
            "lens collect: 1 requests, 1 spans, 2 rejected; written to " + out + "\n");
}

}  // namespace
