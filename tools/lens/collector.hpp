// The receiver behind `lens collect`: OTLP/HTTP (libmicrohttpd) and OTLP/gRPC (the generic
// callback service) front-ends over one sink that appends each accepted request to a file as one
// line of OTLP/JSON.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>

namespace nemo::lens::cli {

/// What a front-end hands to the sink, and what it answers.
struct Acceptance {
  /// HTTP status: 200, 400 (undecodable), 413 (too large, also after decompression), 415.
  int status = 200;
  /// Why the request was refused; empty on success.
  std::string error;
  std::uint64_t spans = 0;
};

/// Decodes requests and appends them to the output file. Thread-safe.
class CollectorSink {
 public:
  /// Opens `path` for appending (creating it). Throws ConfigError naming the path and the error.
  CollectorSink(const std::string& path, std::size_t max_body);
  ~CollectorSink();
  CollectorSink(const CollectorSink&) = delete;
  CollectorSink& operator=(const CollectorSink&) = delete;

  /// Accepts one ExportTraceServiceRequest body. `json`: OTLP/JSON, else protobuf. `gzip`: the
  /// body is gzip-compressed (its decompressed size is bounded by max_body too).
  Acceptance accept(std::string_view body, bool json, bool gzip);

  /// Counts a request refused before its body was read (413 on Content-Length, 404, 415...).
  void count_rejected() { rejected_.fetch_add(1); }

  std::size_t max_body() const { return max_body_; }
  std::uint64_t requests() const { return requests_.load(); }
  std::uint64_t spans() const { return spans_.load(); }
  std::uint64_t rejected() const { return rejected_.load(); }

 private:
  int fd_ = -1;
  std::size_t max_body_;
  std::mutex write_mu_;
  std::atomic<std::uint64_t> requests_{0}, spans_{0}, rejected_{0};
};

/// A host and port to listen on.
struct ListenAddress {
  std::string host;
  std::uint16_t port = 0;
  /// "127.0.0.1:4318"; "[::1]:4318" for IPv6.
  std::string to_string() const;
  /// True for 127.0.0.0/8, ::1 and "localhost".
  bool is_loopback() const;
};

/// Parses "HOST:PORT" ("[V6]:PORT" for IPv6; PORT 0 picks a free port). Throws UsageError naming
/// `flag` and the value.
ListenAddress parse_listen_address(std::string_view value, std::string_view flag);

/// The OTLP/HTTP front-end: POST /v1/traces.
class HttpReceiver {
 public:
  /// Starts listening. Throws ConfigError when it cannot (the address is in use, ...).
  HttpReceiver(const ListenAddress& address, CollectorSink& sink);
  ~HttpReceiver();
  /// The port actually bound (the chosen one when the address said 0).
  std::uint16_t port() const;
  /// Stops accepting connections, waits up to `timeout_ms` for requests in flight, then stops.
  void stop(int timeout_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The OTLP/gRPC front-end: opentelemetry.proto.collector.trace.v1.TraceService/Export. Null
/// from make_grpc_receiver() in builds without gRPC.
class GrpcReceiver {
 public:
  virtual ~GrpcReceiver() = default;
  virtual std::uint16_t port() const = 0;
  /// Stops accepting calls and finishes those in flight (up to `timeout_ms`).
  virtual void stop(int timeout_ms) = 0;
};

/// Starts the gRPC receiver, or returns null when lens was built without gRPC. Throws ConfigError
/// when it cannot listen.
std::unique_ptr<GrpcReceiver> make_grpc_receiver(const ListenAddress& address, CollectorSink& sink);

/// True when this build has the gRPC receiver.
bool grpc_receiver_built_in();

}  // namespace nemo::lens::cli
