// The OTLP/gRPC transport: the encoded ExportTraceServiceRequest goes out as raw bytes through
// gRPC's generic stub, so the same hand-written encoding serves HTTP and gRPC and no generated
// code is needed. Built only with NEMO_LENS_WITH_GRPC; otherwise make_grpc_transport() is null.
#include "export/otlp.hpp"

#ifdef NEMO_LENS_WITH_GRPC

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <fstream>
#include <sstream>

#include "export/protobuf_wire.hpp"
#include "nemo/lens/version.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

using Clock = std::chrono::steady_clock;

// The Export method of the signal's collector service.
const char* export_method(OtlpSignal signal) {
  switch (signal) {
    case OtlpSignal::kMetrics: return "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
    case OtlpSignal::kLogs: return "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    case OtlpSignal::kTraces: break;
  }
  return "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// The retry delay of a google.rpc.RetryInfo in the details of a google.rpc.Status (fields:
// Status.details = 3, Any.type_url = 1, Any.value = 2, RetryInfo.retry_delay = 1,
// Duration.seconds = 1, Duration.nanos = 2).
std::optional<std::chrono::milliseconds> retry_info_delay(std::string_view status_bytes) {
  pb::Reader status(status_bytes);
  while (status.next()) {
    if (status.field() != 3 || status.wire_type() != pb::kLengthDelimited) continue;
    std::string_view type_url, value;
    pb::Reader any(status.bytes());
    while (any.next()) {
      if (any.wire_type() != pb::kLengthDelimited) continue;
      if (any.field() == 1) type_url = any.bytes();
      if (any.field() == 2) value = any.bytes();
    }
    if (!type_url.ends_with("/google.rpc.RetryInfo")) continue;
    pb::Reader info(value);
    while (info.next()) {
      if (info.field() != 1 || info.wire_type() != pb::kLengthDelimited) continue;
      std::int64_t seconds = 0, nanos = 0;
      pb::Reader duration(info.bytes());
      while (duration.next()) {
        if (duration.wire_type() != pb::kVarint) continue;
        if (duration.field() == 1) seconds = static_cast<std::int64_t>(duration.varint());
        if (duration.field() == 2) nanos = static_cast<std::int64_t>(duration.varint());
      }
      if (seconds < 0 || nanos < 0 || seconds > 86'400) return std::nullopt;
      return std::chrono::milliseconds(seconds * 1000 + nanos / 1'000'000);
    }
  }
  return std::nullopt;
}

class GrpcTransport final : public OtlpTransport {
 public:
  explicit GrpcTransport(const OtlpSettings& s)
      : target_(s.endpoint), method_(export_method(s.signal)), headers_(s.headers) {
    std::string host = s.endpoint;
    bool tls = !s.insecure;
    const std::string lower = to_lower(host);
    if (lower.starts_with("http://")) {
      host = host.substr(7);
      tls = false;
    } else if (lower.starts_with("https://")) {
      host = host.substr(8);
      tls = true;
    }
    if (auto slash = host.find('/'); slash != std::string::npos) host.resize(slash);
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    if (tls) {
      grpc::SslCredentialsOptions options;
      if (!s.certificate.empty()) options.pem_root_certs = read_file(s.certificate);
      if (!s.client_key.empty()) options.pem_private_key = read_file(s.client_key);
      if (!s.client_certificate.empty()) options.pem_cert_chain = read_file(s.client_certificate);
      credentials = grpc::SslCredentials(options);
    } else {
      credentials = grpc::InsecureChannelCredentials();
    }
    grpc::ChannelArguments args;
    args.SetUserAgentPrefix("nemo-lens-cpp/" NEMO_LENS_VERSION_STRING);
    if (s.gzip) args.SetCompressionAlgorithm(GRPC_COMPRESS_GZIP);
    for (auto& h : headers_) h.first = to_lower(h.first);  // gRPC metadata keys are lower case
    stub_ = std::make_unique<grpc::GenericStub>(grpc::CreateCustomChannel(host, credentials, args));
  }

  const std::string& target() const noexcept override { return target_; }

  AttemptResult send(std::string_view body, Clock::time_point deadline) noexcept override {
    AttemptResult result;
    try {
      const Clock::time_point limit = cap(deadline);
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + (limit - Clock::now()));
      for (const auto& [name, value] : headers_) context.AddMetadata(name, value);
      grpc::Slice slice(body.data(), body.size());
      grpc::ByteBuffer request(&slice, 1);
      grpc::ByteBuffer response;
      grpc::Status status;
      bool done = false;
      stub_->UnaryCall(&context, method_, grpc::StubOptions(), &request, &response,
                       [&](grpc::Status s) {
                         std::lock_guard lock(mu_);
                         status = std::move(s);
                         done = true;
                         cv_.notify_all();
                       });
      {
        std::unique_lock lock(mu_);
        while (!done && Clock::now() < cap(deadline)) {
          cv_.wait_until(lock, cap(deadline));
        }
      }
      bool cancelled = false;
      {
        std::unique_lock lock(mu_);
        if (!done) {
          cancelled = true;
          lock.unlock();
          context.TryCancel();  // the completion callback still runs; wait for it
          lock.lock();
          cv_.wait(lock, [&] { return done; });
        }
      }
      if (status.ok()) {
        result.kind = AttemptResult::Kind::kSuccess;
        std::vector<grpc::Slice> slices;
        std::string bytes;
        if (response.Dump(&slices).ok()) {
          for (const auto& sl : slices) bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
        }
        result.partial = parse_partial_success_proto(bytes);
        return result;
      }
      const grpc::StatusCode code = status.error_code();
      result.failure_kind = "gRPC status " + std::to_string(static_cast<int>(code));
      result.detail = "gRPC status " + std::to_string(static_cast<int>(code)) +
                      (status.error_message().empty() ? "" : ": " + status.error_message());
      if (cancelled || code == grpc::StatusCode::DEADLINE_EXCEEDED) {
        return AttemptResult::timed_out();  // the deadline is spent
      }
      switch (code) {
        case grpc::StatusCode::CANCELLED:
        case grpc::StatusCode::ABORTED:
        case grpc::StatusCode::OUT_OF_RANGE:
        case grpc::StatusCode::UNAVAILABLE:
        case grpc::StatusCode::DATA_LOSS:
          result.kind = AttemptResult::Kind::kRetryable;
          result.retry_after = retry_info_delay(status.error_details());
          break;
        case grpc::StatusCode::RESOURCE_EXHAUSTED:
          // Retryable only when the server says when to come back.
          result.retry_after = retry_info_delay(status.error_details());
          result.kind = result.retry_after ? AttemptResult::Kind::kRetryable
                                           : AttemptResult::Kind::kPermanent;
          break;
        default:
          result.kind = AttemptResult::Kind::kPermanent;
      }
    } catch (...) {
      return AttemptResult::out_of_memory();
    }
    return result;
  }

 private:
  void on_interrupt() noexcept override {
    std::lock_guard lock(mu_);
    cv_.notify_all();
  }

  std::string target_;
  const char* method_;
  std::vector<std::pair<std::string, std::string>> headers_;
  std::unique_ptr<grpc::GenericStub> stub_;
  std::mutex mu_;
  std::condition_variable cv_;
};

}  // namespace

std::unique_ptr<OtlpTransport> make_grpc_transport(const OtlpSettings& settings) {
  return std::make_unique<GrpcTransport>(settings);
}

}  // namespace nemo::lens::detail

#else

namespace nemo::lens::detail {

std::unique_ptr<OtlpTransport> make_grpc_transport(const OtlpSettings&) { return nullptr; }

}  // namespace nemo::lens::detail

#endif
