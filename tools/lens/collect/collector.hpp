// The receiver behind `lens collect`: OTLP/HTTP (libmicrohttpd) and OTLP/gRPC (the generic
// callback service) front-ends over one sink that appends each accepted request to its signal's
// file (traces, metrics, logs) as one line of OTLP/JSON.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "collect/access.hpp"
#include "common/otlp_transcode.hpp"

namespace nemo::lens::cli {

using lens_cli::Signal;

/// What a front-end hands to the sink, and what it answers.
struct Acceptance {
  /// HTTP status: 200, 400 (undecodable), 413 (too large, also after decompression), 415.
  int status = 200;
  /// Why the request was refused; empty on success.
  std::string error;
  /// Spans, data points or log records in the request.
  std::uint64_t items = 0;
};

/// Where each signal goes; an empty path: the signal is not collected (its requests get 404 /
/// UNIMPLEMENTED). Two signals may share a file.
struct CollectorOutputs {
  std::string traces;
  std::string metrics;
  std::string logs;

  const std::string& path(Signal signal) const;
};

/// The command-line option that names `signal`'s file: "--out", "--metrics-out", "--logs-out".
std::string_view output_option(Signal signal);

/// The OTLP/HTTP path of `signal`: "/v1/traces", "/v1/metrics", "/v1/logs".
std::string_view http_path(Signal signal);

/// The gRPC method of `signal`: "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
/// ".../metrics.v1.MetricsService/Export", ".../logs.v1.LogsService/Export".
std::string_view grpc_method(Signal signal);

/// Why a request for a signal that is not collected is refused, naming the option that enables
/// it: "lens collect is not collecting metrics: start it with --metrics-out FILE".
std::string not_collected_message(Signal signal);

/// Decodes requests and appends them to their signal's file. Thread-safe.
class CollectorSink {
 public:
  /// Opens each given path for appending (creating it). A regular file whose last byte is not a
  /// newline (a line torn by a crash during its write) is first cut back to its last newline, so
  /// that the next line does not append onto the fragment; notices() says so. Throws ConfigError
  /// naming the option, the path and the error.
  CollectorSink(const CollectorOutputs& outputs, std::size_t max_body);
  ~CollectorSink();
  CollectorSink(const CollectorSink&) = delete;
  CollectorSink& operator=(const CollectorSink&) = delete;

  /// Whether `signal` has an output file.
  bool collects(Signal signal) const { return out_[index(signal)].fd >= 0; }

  /// Accepts one Export<Signal>ServiceRequest body. `json`: OTLP/JSON, else protobuf. `gzip`:
  /// the body is gzip-compressed (its decompressed size is bounded by max_body too). The signal
  /// must be collected (collects()). Writes the request's line only when lens report and lens
  /// convert read it without error (SpanLineReader::parse_line); else answers 400 with why.
  /// `still_wanted`, when given, is asked just before the write: false (the client has gone, so
  /// no answer can reach it) writes nothing and answers 499, counted as rejected.
  Acceptance accept(Signal signal, std::string_view body, bool json, bool gzip,
                    const std::function<bool()>& still_wanted = {});

  /// What opening the outputs repaired, one sentence each ("--out 'f': removed the 17 bytes of a
  /// torn last line ..."); empty when nothing was.
  const std::vector<std::string>& notices() const { return notices_; }

  /// Counts a request refused before its body was read (413 on Content-Length, 404, 415...).
  void count_rejected() { rejected_.fetch_add(1); }

  std::size_t max_body() const { return max_body_; }
  /// Requests accepted for `signal`.
  std::uint64_t requests(Signal signal) const { return out_[index(signal)].requests.load(); }
  /// Spans, data points or log records accepted for `signal`.
  std::uint64_t items(Signal signal) const { return out_[index(signal)].items.load(); }
  std::uint64_t rejected() const { return rejected_.load(); }

  /// The line `lens collect` prints when it stops, without a newline. With traces alone:
  /// "lens collect: 3 requests, 9 spans, 1 rejected; written to spans.jsonl"; each other
  /// signal collected adds its counts before the rejected ones ("2 metrics requests, 40 data
  /// points", "1 logs requests, 5 log records") and its file to the list, in the order traces,
  /// metrics, logs. `connections_shed` (HttpReceiver::shed()), when not 0, follows the rejected
  /// ones: ", 44 idle connections shed".
  std::string summary(std::uint64_t connections_shed = 0) const;

 private:
  struct Output {
    std::string path;
    int fd = -1;
    std::atomic<std::uint64_t> requests{0}, items{0};
    ~Output();
  };
  static std::size_t index(Signal signal) { return static_cast<std::size_t>(signal); }

  std::array<Output, 3> out_;
  std::vector<std::string> notices_;
  std::size_t max_body_;
  std::mutex write_mu_;  // one for every file: two signals may share one
  std::atomic<std::uint64_t> rejected_{0};
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

/// How the OTLP/HTTP front-end shares its connections, so that idle or slow clients cannot lock
/// out writers (docs/otlp.md, "Connections").
struct HttpLimits {
  /// Open connections at most; 0: from RLIMIT_NOFILE (half the soft limit less 64, at most 4096).
  unsigned max_connections = 0;
  /// Seconds a new connection has to deliver its first request's headers (TLS handshake
  /// included) before it is shut down.
  unsigned header_timeout_s = 10;
  /// Seconds of inactivity after which a connection is closed: a keep-alive connection between
  /// requests (counted from the last answer), or a body that stops arriving.
  unsigned idle_timeout_s = 30;
  /// Connections from one address that have not yet sent a request with the token (without a
  /// token: any request headers) at most; such connections from all addresses are held to half
  /// of max_connections. At any of these limits a new connection takes the place of the one of
  /// that scope that has waited longest without sending a request (HttpReceiver::shed()); the
  /// two listener threads may each let one in at the same moment, one over the limit.
  unsigned max_unproven_per_address = 256;
};

/// The OTLP/HTTP front-end: POST /v1/traces, /v1/metrics, /v1/logs. With a token, a request
/// without "Authorization: Bearer <token>" gets 401 (and WWW-Authenticate: Bearer) before any
/// other check; with a certificate, it serves HTTPS only.
class HttpReceiver {
 public:
  /// Starts listening. Throws ConfigError when it cannot (the address is in use, a bad key...).
  HttpReceiver(const ListenAddress& address, CollectorSink& sink, const ReceiverAccess& access = {},
               const HttpLimits& limits = {});
  ~HttpReceiver();
  /// Connections shut down to make room for new ones at a limit (HttpLimits), so far.
  std::uint64_t shed() const;
  /// The port actually bound (the chosen one when the address said 0).
  std::uint16_t port() const;
  /// Stops accepting connections, waits up to `timeout_ms` for requests in flight, then stops.
  void stop(int timeout_ms);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The OTLP/gRPC front-end: the Export methods of TraceService, MetricsService and LogsService
/// (grpc_method()). With a token, a call without the metadata "authorization: Bearer <token>" ends
/// UNAUTHENTICATED before any other check; with a certificate, it serves TLS only. Null from
/// make_grpc_receiver() in builds without gRPC.
class GrpcReceiver {
 public:
  virtual ~GrpcReceiver() = default;
  virtual std::uint16_t port() const = 0;
  /// Stops accepting calls and finishes those in flight (up to `timeout_ms`).
  virtual void stop(int timeout_ms) = 0;
};

/// Starts the gRPC receiver, or returns null when lens was built without gRPC. Throws ConfigError
/// when it cannot listen.
std::unique_ptr<GrpcReceiver> make_grpc_receiver(const ListenAddress& address, CollectorSink& sink,
                                                 const ReceiverAccess& access = {});

/// True when this build has the gRPC receiver.
bool grpc_receiver_built_in();

}  // namespace nemo::lens::cli
