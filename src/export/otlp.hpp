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
#include <random>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "export/export_buffer.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/exporter.hpp"
#include "tracing/record_exporter.hpp"

namespace nemo::lens::detail {

/// Appends one OTLP protobuf ExportTraceServiceRequest for `spans` (the same content as
/// append_otlp_json: one ResourceSpans, one ScopeSpans with scope nemo.lens, the span attributes
/// nemo.span.group and thread.id added the same way). Strings that are not valid UTF-8 are
/// repaired with U+FFFD, as proto3 requires valid UTF-8. Null entries of `spans` are skipped.
void append_otlp_proto(std::string& out, std::span<const SpanData* const> spans,
                       const Resource& resource);
/// The same request, byte for byte, for the records the pipeline would materialize() as `spans`,
/// read where they lie. Null entries are skipped.
void append_otlp_proto_records(std::string& out, std::span<const SpanRecord* const> records,
                               const Resource& resource, const TickConverter& clock);
/// The same request written over `buffer` from its start: `buffer` grows when the request needs
/// room and never shrinks, and its bytes past the request stay as they were, so that a buffer kept
/// from batch to batch is not filled with zeros again for each (as a std::string that grows is).
/// Returns the request's size: the request is buffer[0, size).
std::size_t write_otlp_proto_records(std::string& buffer,
                                     std::span<const SpanRecord* const> records,
                                     const Resource& resource, const TickConverter& clock);

/// The wire protocol of the OTLP exporter.
enum class OtlpProtocol : std::uint8_t { kGrpc, kHttpProtobuf, kHttpJson };

/// "grpc", "http/protobuf" or "http/json".
std::string_view protocol_name(OtlpProtocol protocol) noexcept;

/// True when this build of lens contains the OTLP/gRPC exporter.
bool grpc_built_in() noexcept;

/// The signal an OTLP exporter sends.
enum class OtlpSignal : std::uint8_t { kTraces, kMetrics, kLogs };

/// "v1/traces", "v1/metrics" or "v1/logs": the HTTP path of the signal.
std::string_view signal_path(OtlpSignal signal) noexcept;

/// The OTLP exporter's settings, read from the signal's OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_*
/// variables, else the general OTEL_EXPORTER_OTLP_* ones, else the OTel defaults.
struct OtlpSettings {
  OtlpSignal signal = OtlpSignal::kTraces;
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
/// an http(s) URL with a host and a port from 1 to 65535, a malformed header list or a header that
/// would break every request (Content-Length, Content-Type, ...; for gRPC also grpc-*, host,
/// user-agent), a timeout that is not a whole number of milliseconds, an unknown compression, a
/// certificate file that cannot be read.
OtlpSettings otlp_settings_from_env(OtlpSignal signal = OtlpSignal::kTraces);

/// What the receiver said about a batch it accepted: the partial_success of the signal's export
/// response (rejected spans, data points or log records).
struct PartialSuccess {
  std::int64_t rejected = 0;
  std::string error_message;
};

/// Decodes an Export{Trace,Metrics,Logs}ServiceResponse (protobuf: the same field numbers for
/// every signal). Empty or undecodable bodies give {}.
PartialSuccess parse_partial_success_proto(std::string_view body);
/// Decodes an Export{Trace,Metrics,Logs}ServiceResponse (OTLP/JSON: rejectedSpans,
/// rejectedDataPoints or rejectedLogRecords). Empty or undecodable bodies give {}.
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
  static AttemptResult timed_out() {
    return permanent("timeout", "no answer by the export deadline");
  }
  /// Memory ran out while sending.
  static AttemptResult out_of_memory() { return permanent("internal", "out of memory"); }
};

/// What a transport exports with: one attempt to send an encoded request by a deadline, which
/// interrupt_by() can move earlier from another thread at any time (shutdown).
class OtlpTransport {
 public:
  virtual ~OtlpTransport() = default;
  /// Sends `body` once; returns by `deadline` or the interrupt, whichever comes first.
  virtual AttemptResult send(std::string_view body,
                             std::chrono::steady_clock::time_point deadline) noexcept = 0;
  /// The URL or target requests go to, for messages.
  virtual const std::string& target() const noexcept = 0;

  /// From now on, no send() or wait lasts past `deadline`; a send() in progress gives up then.
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept;
  /// The earlier of `deadline` and the interrupt.
  std::chrono::steady_clock::time_point cap(
      std::chrono::steady_clock::time_point deadline) const noexcept;
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

/// Interrupts `exporter` by `deadline` when it is an InterruptibleExporter (the built-in ones, of
/// any signal); a custom exporter only has the deadlines its calls are given. Null: nothing.
template <class Exporter>
void interrupt_if_interruptible(Exporter* exporter,
                                std::chrono::steady_clock::time_point deadline) noexcept {
  if (auto* interruptible = dynamic_cast<InterruptibleExporter*>(exporter)) {
    interruptible->interrupt_by(deadline);
  }
}

/// Sends encoded OTLP requests of one signal through a transport (gzip when asked), one attempt at
/// a time; BufferedDelivery retries the retryable failures with exponential back-off (from 250 ms,
/// doubling up to 5 s, each wait drawn from the upper half of the current delay) or the
/// receiver's Retry-After. Each kind of failure is printed to stderr once, with the advice to fix
/// it. One caller at a time.
class OtlpSender {
 public:
  /// `noun` names what a request carries in messages: "spans", "data points", "log records".
  OtlpSender(OtlpSettings settings, std::unique_ptr<OtlpTransport> transport,
             std::string_view noun);
  /// One attempt to send `encoded` (compressed first when the settings say gzip over HTTP), by
  /// the earlier of `deadline` and the interrupt. A success's partial rejection is counted in
  /// rejected() and its message printed once; failures are only returned.
  AttemptResult attempt(std::string_view encoded, std::size_t items,
                        std::chrono::steady_clock::time_point deadline) noexcept;
  /// Prints `message` to stderr the first time `kind` is reported, with a note that later
  /// failures of the kind are counted, not printed.
  void report_once(const std::string& kind, const std::string& message);
  /// The receiver's URL or target, for messages.
  const std::string& target() const noexcept { return transport_->target(); }
  /// Items the receiver reported rejecting (partial success), so far.
  std::uint64_t rejected() const noexcept { return rejected_.load(std::memory_order_relaxed); }
  /// Attempts made so far (first tries and retries), for tests.
  std::uint64_t attempts() const noexcept { return attempts_.load(std::memory_order_relaxed); }
  /// From now on, no wait or request lasts past `deadline`.
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept {
    transport_->interrupt_by(deadline);
  }
  const OtlpSettings& settings() const noexcept { return settings_; }

 private:
  OtlpSettings settings_;
  std::unique_ptr<OtlpTransport> transport_;
  std::string noun_;
  std::string compressed_;
  std::minstd_rand rng_;
  std::mutex reported_mu_;
  std::set<std::string> reported_;  // failure kinds already printed
  std::atomic<std::uint64_t> rejected_{0};
  std::atomic<std::uint64_t> attempts_{0};
};

/// A sender for `signal` with settings from the environment and the transport their protocol
/// needs. Throws ConfigError for bad settings or a protocol this build lacks.
std::unique_ptr<OtlpSender> make_otlp_sender(OtlpSignal signal, std::string_view noun);

/// Delivers the encoded requests of one signal in order: at once while the receiver takes them;
/// a request it cannot take now (a retryable failure: it is down, restarting or busy) goes to the
/// outage buffer (ExportBuffer), and so does every later request while one waits there, so that
/// they leave in order: a thread of its own sends them again, with the sender's back-off, until
/// the receiver takes them, refuses them for good, or shutdown's deadline comes. A request that
/// fits no bound of the buffer is dropped. deliver() is called by one thread at a time (the
/// signal's exporter thread); the rest is thread-safe.
class BufferedDelivery {
 public:
  /// `noun` names the items in messages ("spans", "data points", "log records").
  BufferedDelivery(OtlpSender& sender, ExportBufferSettings buffer, std::string noun);
  /// Stops the thread at once (not in a forked child, whose copy has none).
  ~BufferedDelivery();
  BufferedDelivery(const BufferedDelivery&) = delete;
  BufferedDelivery& operator=(const BufferedDelivery&) = delete;

  /// Sends `body`[0, size) carrying `items` items by `deadline` (and the sender's timeout), or
  /// queues it. True when the receiver took it or it waits in the buffer; false when it was
  /// dropped (refused for good, or it fits no bound). A queued body is taken: `body` then holds
  /// a spare string.
  bool deliver(std::string& body, std::size_t size, std::size_t items,
               std::chrono::steady_clock::time_point deadline) noexcept;
  /// Waits until the buffer is empty and nothing is being sent, or `deadline`.
  bool flush(std::chrono::steady_clock::time_point deadline) noexcept;
  /// Sends what the buffer holds until `deadline`, then stops the thread; what is left is
  /// counted as dropped. Later deliver() calls drop their request.
  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept;
  DeferredCounts deferred() const noexcept;
  const ExportBufferSettings& settings() const noexcept { return settings_; }

 private:
  // Moves `body`[0, size) into the buffer.
  bool enqueue_locked(std::string& body, std::size_t items, std::size_t size) noexcept;
  void schedule_retry_locked(const AttemptResult& r) noexcept;
  void report_buffered(const AttemptResult& r, std::size_t items);
  void run() noexcept;

  OtlpSender& sender_;
  const ExportBufferSettings settings_;
  const std::string noun_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // the buffer got a request, or shutdown began
  std::condition_variable idle_cv_;  // the buffer became empty
  ExportBuffer buffer_;
  bool in_flight_ = false;  // the thread is sending the buffer's front request
  bool stopping_ = false;
  std::chrono::steady_clock::time_point stop_deadline_;
  std::chrono::steady_clock::time_point next_attempt_;
  std::chrono::milliseconds back_off_;
  std::minstd_rand rng_;
  std::unique_ptr<std::thread> thread_;
  int thread_pid_ = 0;  // the process that started thread_ (a forked child has none)
  // Relaxed: a counter, read for statistics only.
  std::atomic<std::uint64_t> dropped_later_{0};
};

/// A metric or log exporter that may accept a request before the receiver has it (its OTLP outage
/// buffer): the reader or processor counts what it accepted as exported, less what this reports
/// as still pending or dropped, and its flush waits for the buffer to drain.
class DeferredItemsExporter {
 public:
  virtual ~DeferredItemsExporter() = default;
  /// Thread-safe; may be called at any time.
  virtual DeferredCounts deferred_items() const noexcept = 0;
  /// Waits until nothing waits in the buffer or is being sent from it, or `deadline`.
  virtual bool flush_deferred(std::chrono::steady_clock::time_point deadline) noexcept = 0;
};

/// The OTLP span exporter: encodes each batch (protobuf or JSON as the protocol says) and hands it
/// to a BufferedDelivery, on the pipeline's exporter thread. Over protobuf (HTTP or gRPC) it
/// encodes the pipeline's records directly. A batch that the outage buffer cannot take is dropped
/// (kFailure).
class OtlpSpanExporter final : public SpanExporter,
                               public InterruptibleExporter,
                               public RecordSpanExporter,
                               public DeferredSpanExporter {
 public:
  OtlpSpanExporter(std::unique_ptr<OtlpSender> sender, ExportBufferSettings buffer);
  ~OtlpSpanExporter() override;
  ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                            std::chrono::steady_clock::time_point deadline) noexcept override;
  bool encodes_records() const noexcept override;
  ExportResult export_records(std::span<const SpanRecord* const> records, const Resource& resource,
                              const TickConverter& clock,
                              std::chrono::steady_clock::time_point deadline) noexcept override;
  /// Waits until the outage buffer is empty and nothing is being sent, or `deadline`.
  bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept override;
  /// Sends what the buffer holds until `deadline`, then stops its thread; what is left is
  /// counted as dropped (DeferredSpanExporter).
  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept override;
  std::uint64_t rejected_spans() const noexcept override;
  DeferredCounts deferred_spans() const noexcept override;
  void interrupt_by(std::chrono::steady_clock::time_point deadline) noexcept override;

  /// Attempts made so far (first tries and retries), for tests.
  std::uint64_t attempts() const noexcept { return sender_->attempts(); }

 private:
  std::unique_ptr<OtlpSender> sender_;
  // The batch being sent: encoded_[0, size) (write_otlp_proto_records() keeps the buffer's size).
  std::string encoded_;
  BufferedDelivery delivery_;
};

/// An HTTP transport (libcurl) for the settings' endpoint and protocol.
std::unique_ptr<OtlpTransport> make_http_transport(const OtlpSettings& settings);

/// A gRPC transport; null in builds without gRPC.
std::unique_ptr<OtlpTransport> make_grpc_transport(const OtlpSettings& settings);

/// The exporter for `otlp`: settings from the environment, the transport their protocol needs,
/// the outage buffer's bounds from `config` (export_buffer_settings()).
std::shared_ptr<SpanExporter> make_otlp_exporter(const NemoLensConfig& config = {});

/// gzip-compresses `in` into `out` (replacing it). False on a zlib error.
bool gzip_compress(std::string_view in, std::string& out);

}  // namespace nemo::lens::detail
