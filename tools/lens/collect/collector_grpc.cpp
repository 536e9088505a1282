// The OTLP/gRPC front-end of `lens collect`: a generic callback service, so the request arrives
// as the same protobuf bytes the HTTP front-end decodes. Built only with NEMO_LENS_WITH_GRPC.
#include "collect/collector.hpp"

#ifdef NEMO_LENS_WITH_GRPC

#include <grpc/slice.h>
#include <grpcpp/generic/async_generic_service.h>
#include <grpcpp/grpcpp.h>

#include <optional>
#include <string>
#include <type_traits>

#include "nemo/lens/errors.hpp"

namespace nemo::lens::cli {

namespace {

// The message bytes as they came off the wire: with per-message decompression off (see Receiver),
// gRPC core hands a compressed message over still compressed, its algorithm in the byte buffer.
// grpc::ByteBuffer's readers (Dump, ...) would inflate it without a bound, so the bytes are taken
// from the C buffer. ByteBuffer is a standard-layout class whose only member is that
// grpc_byte_buffer* (gRPC asserts the same): the two are pointer-interconvertible.
static_assert(std::is_standard_layout_v<grpc::ByteBuffer> &&
              sizeof(grpc::ByteBuffer) == sizeof(grpc_byte_buffer*));
grpc_compression_algorithm raw_message(const grpc::ByteBuffer& message, std::string& bytes) {
  bytes.clear();
  const grpc_byte_buffer* raw = *reinterpret_cast<grpc_byte_buffer* const*>(&message);
  if (raw == nullptr) return GRPC_COMPRESS_NONE;
  const grpc_slice_buffer& slices = raw->data.raw.slice_buffer;
  bytes.reserve(slices.length);  // at most --max-body: gRPC core checked the size on the wire
  for (std::size_t i = 0; i < slices.count; ++i) {
    bytes.append(reinterpret_cast<const char*>(GRPC_SLICE_START_PTR(slices.slices[i])),
                 GRPC_SLICE_LENGTH(slices.slices[i]));
  }
  return raw->data.raw.compression;
}

class ExportReactor final : public grpc::ServerGenericBidiReactor {
 public:
  ExportReactor(grpc::GenericCallbackServerContext* context, CollectorSink& sink,
                const ReceiverAccess& access)
      : sink_(sink) {
    if (!access.token.empty()) {
      // First: a writer without the token learns nothing about what is served here.
      const auto& metadata = context->client_metadata();
      const auto it = metadata.find("authorization");
      const std::string value =
          it == metadata.end() ? std::string() : std::string(it->second.data(), it->second.size());
      if (!bearer_matches(it == metadata.end() ? nullptr : value.c_str(), access.token)) {
        sink_.count_rejected();
        Finish(
            grpc::Status(grpc::StatusCode::UNAUTHENTICATED, std::string(kUnauthenticatedMessage)));
        return;
      }
    }
    std::optional<Signal> signal;
    std::string served;
    for (const Signal s : {Signal::kTraces, Signal::kMetrics, Signal::kLogs}) {
      if (context->method() == grpc_method(s)) signal = s;
      if (sink_.collects(s)) served += (served.empty() ? "" : ", ") + std::string(grpc_method(s));
    }
    if (!signal || !sink_.collects(*signal)) {
      sink_.count_rejected();
      Finish(grpc::Status(
          grpc::StatusCode::UNIMPLEMENTED,
          signal ? not_collected_message(*signal) : "lens collect serves " + served + " only"));
      return;
    }
    signal_ = *signal;
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "no request message"));
      return;
    }
    std::string bytes;
    const grpc_compression_algorithm algorithm = raw_message(request_, bytes);
    request_.Clear();  // the copy is all that is needed from here on
    // gzip and deflate (a zlib stream), the algorithms core accepts, are inflated by the sink
    // (which tells the two apart by their headers), bounded by --max-body as HTTP bodies are: a
    // gzip bomb costs at most that much memory.
    const Acceptance a = sink_.accept(signal_, bytes, /*json=*/false,
                                      /*gzip=*/algorithm != GRPC_COMPRESS_NONE);
    if (a.status != 200) {
      Finish(grpc::Status(a.status == 413   ? grpc::StatusCode::RESOURCE_EXHAUSTED
                          : a.status >= 500 ? grpc::StatusCode::INTERNAL
                                            : grpc::StatusCode::INVALID_ARGUMENT,
                          a.error));
      return;
    }
    grpc::Slice empty;
    response_ = grpc::ByteBuffer(&empty, 1);  // an empty Export<Signal>ServiceResponse
    StartWriteAndFinish(&response_, grpc::WriteOptions(), grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  CollectorSink& sink_;
  Signal signal_ = Signal::kTraces;
  grpc::ByteBuffer request_;
  grpc::ByteBuffer response_;
};

class Service final : public grpc::CallbackGenericService {
 public:
  Service(CollectorSink& sink, ReceiverAccess access) : sink_(sink), access_(std::move(access)) {}
  grpc::ServerGenericBidiReactor* CreateReactor(
      grpc::GenericCallbackServerContext* context) override {
    return new ExportReactor(context, sink_, access_);
  }

 private:
  CollectorSink& sink_;
  const ReceiverAccess access_;
};

class Receiver final : public GrpcReceiver {
 public:
  Receiver(const ListenAddress& address, CollectorSink& sink, const ReceiverAccess& access)
      : service_(sink, access) {
    grpc::ServerBuilder builder;
    int selected = 0;
    std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
    if (access.tls()) {
      grpc::SslServerCredentialsOptions options;
      options.pem_key_cert_pairs.push_back({access.key_pem, access.cert_pem});
      credentials = grpc::SslServerCredentials(options);
    }
    builder.AddListeningPort(address.to_string(), credentials, &selected);
    builder.RegisterCallbackGenericService(&service_);
    // The limit applies to the message as it arrives, compressed or not ...
    builder.SetMaxReceiveMessageSize(
        static_cast<int>(std::min<std::size_t>(sink.max_body(), INT32_MAX)));
    // ... and gRPC core (1.51) would inflate a compressed message whole before it compares the
    // result with that limit: a 4 MB message could take gigabytes. Without its decompression
    // the message reaches OnReadDone compressed, and the sink inflates it with a bound.
    builder.AddChannelArgument(GRPC_ARG_ENABLE_PER_MESSAGE_DECOMPRESSION, 0);
    server_ = builder.BuildAndStart();
    if ((server_ == nullptr || selected == 0) && access.tls()) {
      throw ConfigError("Cannot serve OTLP/gRPC over TLS on " + address.to_string() +
                        ": the port is in use, or --tls-cert and --tls-key are not a certificate "
                        "and its private key.");
    }
    if (server_ == nullptr || selected == 0) {
      throw ConfigError(
          "Cannot listen for OTLP/gRPC on " + address.to_string() +
          " (is the port in use? pick another with --grpc-listen, or --grpc-listen off).");
    }
    port_ = static_cast<std::uint16_t>(selected);
  }

  ~Receiver() override { stop(0); }

  std::uint16_t port() const override { return port_; }

  void stop(int timeout_ms) override {
    if (server_ == nullptr) return;
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms));
    server_->Wait();
    server_.reset();
  }

 private:
  Service service_;
  std::unique_ptr<grpc::Server> server_;
  std::uint16_t port_ = 0;
};

}  // namespace

std::unique_ptr<GrpcReceiver> make_grpc_receiver(const ListenAddress& address, CollectorSink& sink,
                                                 const ReceiverAccess& access) {
  return std::make_unique<Receiver>(address, sink, access);
}

bool grpc_receiver_built_in() { return true; }

}  // namespace nemo::lens::cli

#else

namespace nemo::lens::cli {

std::unique_ptr<GrpcReceiver> make_grpc_receiver(const ListenAddress&, CollectorSink&,
                                                 const ReceiverAccess&) {
  return nullptr;
}

bool grpc_receiver_built_in() { return false; }

}  // namespace nemo::lens::cli

#endif
