// The OTLP exporters (HTTP with protobuf or JSON through libcurl, gRPC through the distribution's
// gRPC library when built in), their settings from the standard OTEL_EXPORTER_OTLP_* variables,
// and the hand-written protobuf encoding they send. Internal.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "nemo/lens/exporter.hpp"

namespace nemo::lens::detail {

/// Appends one OTLP protobuf ExportTraceServiceRequest for `spans` (the same content as
/// append_otlp_json: one ResourceSpans, one ScopeSpans with scope nemo.lens, the span attributes
/// nemo.span.group and thread.id added the same way). Strings that are not valid UTF-8 are
/// repaired with U+FFFD, as proto3 requires valid UTF-8. Null entries of `spans` are skipped.
void append_otlp_proto(std::string& out, std::span<const SpanData* const> spans,
                       const Resource& resource);

/// The wire protocol of the OTLP exporter.
enum class OtlpProtocol : std::uint8_t { kGrpc, kHttpProtobuf, kHttpJson };

/// "grpc", "http/protobuf" or "http/json".
std::string_view protocol_name(OtlpProtocol protocol) noexcept;

/// True when this build of lens contains the OTLP/gRPC exporter.
bool grpc_built_in() noexcept;

/// The OTLP exporter's settings, read from the OTEL_EXPORTER_OTLP_TRACES_* variables, else the
/// general OTEL_EXPORTER_OTLP_* ones, else the OTel defaults.
struct OtlpSettings {
  OtlpProtocol protocol = OtlpProtocol::kHttpProtobuf;
  /// HTTP: the full URL requests are posted to. gRPC: the target ("http(s)://host:port" or
  /// "host:port").
  std::string endpoint;
  /// Where protocol and endpoint came from: a variable name, or "default".
  std::string protocol_origin, endpoint_origin;
  /// Extra request headers (names as given, values percent-decoded), general then signal-specific;
  /// a signal-specific header replaces a general one of the same name (ASCII case-insensitive).
  std::vector<std::pair<std::string, std::string>> headers;
  /// The time one export may take, retries included.
  std::chrono::milliseconds timeout{10'000};
  bool gzip = false;
  /// TLS files (PEM): trusted CA certificates, and the client's key and certificate for mTLS.
  std::string certificate, client_key, client_certificate;
  /// gRPC only: plaintext even when the endpoint has no scheme.
  bool insecure = false;
};

/// Reads OtlpSettings from the environment. Throws ConfigError naming the variable, its value and
/// what is valid: an unknown protocol (or "grpc" in a build without it), an endpoint that is not
/// an http(s) URL, a malformed header list, a timeout that is not a whole number of milliseconds,
/// an unknown compression, a certificate file that cannot be read.
OtlpSettings otlp_settings_from_env();

/// What the receiver said about a batch it accepted: the partial_success of
/// ExportTraceServiceResponse.
struct PartialSuccess {
  std::int64_t rejected_spans = 0;
  std::string error_message;
};

/// Decodes an ExportTraceServiceResponse (protobuf). Empty or undecodable bodies give {}.
PartialSuccess parse_partial_success_proto(std::string_view body);
/// Decodes an ExportTraceServiceResponse (OTLP/JSON). Empty or undecodable bodies give {}.
PartialSuccess parse_partial_success_json(std::string_view body);

/// The outcome of one attempt to send a batch.
struct AttemptResult {
  enum class Kind : std::uint8_t { kSuccess, kRetryable, kPermanent };
  Kind kind = Kind::kPermanent;
  /// Success: what the receiver rejected.
  PartialSuccess partial;
  /// Retryable: the delay the receiver asked for (Retry-After, gRPC RetryInfo).
  std::optional<std::chrono::milliseconds> retry_after;
  /// Failure: a short, stable name of the kind of failure ("HTTP 400", "connection refused"),
  /// used to print each kind once, and a human-readable detail.
  std::string failure_kind, detail;

  /// A failure not worth retrying.
  static AttemptResult permanent(std::string kind, std::string why) {
    AttemptResult r;
    r.failure_kind = std::move(kind);
    r.detail = std::move(why);
    return r;
  }
  /// The deadline (or the shutdown's interrupt) came before an answer.
  static AttemptResult timed_out() { return permanent("timeout", "no answer by the export deadline"); }
  /// Memory ran out while sending.
  static AttemptResult out_of_memory() { return permanent("internal", "out of memory"); }
};

/// What a transport exports with: one attempt to send an encoded request by a deadline, which
/// interrupt_by() can move earlier from another thread at any time (shutdown).
class OtlpTransport {
 public:
  virtual ~OtlpTransport() = default;
  /// Sends `body` once; returns by `deadline` or the interrupt, whichever comes first.
  virtual AttemptResult send(const std::string& body,
                             std::chrono::steady_clock::time_point deadline) noexcept = 0;
  /// The URL or target requests go to, for messages.
  virtual const std::string& target() const noexcept = 0;

  /// From now on, no send() or wait lasts past `deadline`; a send() in progress gives up then.
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept;
  /// The earlier of `deadline` and the interrupt.
  std::chrono::steady_clock::time_point cap(std::chrono::steady_clock::time_point deadline) const noexcept;
  /// Sleeps until `until` or the interrupt, whichever is first.
  void sleep_until(std::chrono::steady_clock::time_point until) noexcept;

 protected:
  /// Called by interrupt_by() after the interrupt moved, e.g. to cancel a call in flight.
  virtual void on_interrupt() noexcept {}

 private:
  std::atomic<std::chrono::steady_clock::rep> interrupt_at_{
      std::chrono::steady_clock::time_point::max().time_since_epoch().count()};
  std::mutex mu_;
  std::condition_variable cv_;
};

/// An exporter whose waits the pipeline can cut short at shutdown.
class InterruptibleExporter {
 public:
  virtual ~InterruptibleExporter() = default;
  /// From now on, no wait or request of the exporter lasts past `deadline`.
  virtual void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

/// The OTLP span exporter: encodes each batch (protobuf or JSON as the protocol says, gzip when
/// asked) and sends it through `transport`, retrying retryable failures with exponential back-off
/// (from 250 ms, doubling up to 5 s, each wait drawn from the upper half of the current delay) or
/// the receiver's Retry-After, until the export's deadline (the earlier of the pipeline's and OtlpSettings::timeout). A failed
/// batch is dropped; each kind of failure is printed to stderr once, with the advice to fix it.
class OtlpSpanExporter final : public SpanExporter, public InterruptibleExporter {
 public:
  OtlpSpanExporter(OtlpSettings settings, std::unique_ptr<OtlpTransport> transport);
  ~OtlpSpanExporter() override;
  ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                            std::chrono::steady_clock::time_point deadline) noexcept override;
  std::uint64_t rejected_spans() const noexcept override;
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept override;

  /// Attempts made so far (first tries and retries), for tests.
  std::uint64_t attempts() const noexcept { return attempts_.load(std::memory_order_relaxed); }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> attempts_{0};
};

/// An HTTP transport (libcurl) for the settings' endpoint and protocol.
std::unique_ptr<OtlpTransport> make_http_transport(const OtlpSettings& settings);

/// A gRPC transport; null in builds without gRPC.
std::unique_ptr<OtlpTransport> make_grpc_transport(const OtlpSettings& settings);

/// The exporter for `otlp`: settings from the environment, the transport their protocol needs.
std::shared_ptr<SpanExporter> make_otlp_exporter();

/// gzip-compresses `in` into `out` (replacing it). False on a zlib error.
bool gzip_compress(std::string_view in, std::string& out);

}  // namespace nemo::lens::detail
