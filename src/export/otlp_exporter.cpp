// OtlpSender: compress, send through a transport, retry what the OTLP specification calls
// retryable with exponential back-off and jitter, and drop the rest. OtlpSpanExporter encodes
// spans and sends them with it; the metric and log exporters do the same with their requests.
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/errors.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

namespace {

// The back-off between retries: exponential from kInitialBackOff, doubling up to kMaxBackOff.
constexpr std::chrono::milliseconds kInitialBackOff{250};
constexpr std::chrono::milliseconds kMaxBackOff{5'000};

}  // namespace

bool gzip_compress(std::string_view in, std::string& out) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) {
    return false;
  }
  out.resize(deflateBound(&zs, static_cast<uLong>(in.size())));
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  const int rc = deflate(&zs, Z_FINISH);
  out.resize(zs.total_out);
  deflateEnd(&zs);
  return rc == Z_STREAM_END;
}

PartialSuccess parse_partial_success_proto(std::string_view body) {
  PartialSuccess result;
  pb::Reader response(body);
  while (response.next()) {
    if (response.field() != 1 || response.wire_type() != pb::kLengthDelimited) continue;
    pb::Reader partial(response.bytes());
    while (partial.next()) {
      if (partial.field() == 1 && partial.wire_type() == pb::kVarint) {
        result.rejected = static_cast<std::int64_t>(partial.varint());
      } else if (partial.field() == 2 && partial.wire_type() == pb::kLengthDelimited) {
        result.error_message = std::string(partial.bytes());
      }
    }
    if (partial.error() != nullptr) return {};
  }
  if (response.error() != nullptr) return {};
  return result;
}

PartialSuccess parse_partial_success_json(std::string_view body) {
  PartialSuccess result;
  auto doc = nlohmann::json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (!doc.is_object()) return result;
  auto it = doc.find("partialSuccess");
  if (it == doc.end() || !it->is_object()) return result;
  auto r = it->find("rejectedSpans");
  if (r == it->end()) r = it->find("rejectedDataPoints");
  if (r == it->end()) r = it->find("rejectedLogRecords");
  if (r != it->end()) {
    // int64 in the JSON mapping: a decimal string, though numbers are accepted too.
    if (r->is_number_integer()) {
      result.rejected = r->get<std::int64_t>();
    } else if (r->is_string()) {
      try {
        result.rejected = std::stoll(r->get<std::string>());
      } catch (...) {
      }
    }
  }
  if (auto m = it->find("errorMessage"); m != it->end() && m->is_string()) {
    result.error_message = m->get<std::string>();
  }
  return result;
}

OtlpSender::OtlpSender(OtlpSettings settings, std::unique_ptr<OtlpTransport> transport,
                       std::string_view noun)
    : settings_(std::move(settings)), transport_(std::move(transport)), noun_(noun),
      rng_(std::random_device{}()) {}

void OtlpSender::report_once(const std::string& kind, const std::string& message) {
  if (!reported_.insert(kind).second) return;
  std::fprintf(stderr, "lens: %s Later failures of this kind are counted, not printed.\n",
               message.c_str());
}

void OtlpTransport::interrupt_by(Clock::time_point deadline) noexcept {
  const Clock::rep wanted = deadline.time_since_epoch().count();
  Clock::rep current = interrupt_at_.load();
  while (wanted < current && !interrupt_at_.compare_exchange_weak(current, wanted)) {
  }
  {
    std::lock_guard lock(mu_);  // a sleeper between its check and its wait sees the change
  }
  cv_.notify_all();
  on_interrupt();
}

Clock::time_point OtlpTransport::cap(Clock::time_point deadline) const noexcept {
  return std::min(deadline, Clock::time_point(Clock::duration(interrupt_at_.load())));
}

void OtlpTransport::sleep_until(Clock::time_point until) noexcept {
  std::unique_lock lock(mu_);
  while (Clock::now() < cap(until)) {
    const Clock::rep seen = interrupt_at_.load();
    cv_.wait_until(lock, cap(until), [&] { return interrupt_at_.load() != seen; });
  }
}

bool OtlpSender::send(const std::string& encoded, std::size_t items,
                      Clock::time_point deadline) noexcept {
  try {
    const Clock::time_point start = Clock::now();
    if (start + settings_.timeout < deadline) deadline = start + settings_.timeout;
    const std::string* body = &encoded;
    // gRPC compresses its messages itself (the channel's compression); HTTP bodies are ours to.
    if (settings_.gzip && settings_.protocol != OtlpProtocol::kGrpc) {
      if (!gzip_compress(encoded, compressed_)) {
        report_once("gzip", "OTLP export: gzip compression failed; the " + noun_ +
                                " are dropped.");
        return false;
      }
      body = &compressed_;
    }
    const std::string what = std::to_string(items) + " " + noun_;
    auto delay = kInitialBackOff;
    for (int attempt = 1;; ++attempt) {
      const Clock::time_point limit = transport_->cap(deadline);
      AttemptResult r = AttemptResult::permanent(
          "deadline", "the export deadline passed before the batch could be sent");
      if (Clock::now() < limit) {
        attempts_.fetch_add(1, std::memory_order_relaxed);
        r = transport_->send(*body, limit);
      }
      if (r.kind == AttemptResult::Kind::kSuccess) {
        if (r.partial.rejected > 0) {
          rejected_.fetch_add(static_cast<std::uint64_t>(r.partial.rejected),
                              std::memory_order_relaxed);
          report_once("partial success",
                      "OTLP receiver " + transport_->target() + " rejected " +
                          std::to_string(r.partial.rejected) + " of " + what +
                          (r.partial.error_message.empty() ? "" : ": " + r.partial.error_message) +
                          ".");
        }
        return true;
      }
      if (r.kind == AttemptResult::Kind::kRetryable) {
        // Full jitter over the upper half of the current back-off, unless the receiver said when.
        std::chrono::milliseconds wait = r.retry_after.value_or(std::chrono::milliseconds(
            std::uniform_int_distribution<std::int64_t>(delay.count() / 2, delay.count())(rng_)));
        const Clock::time_point wake = Clock::now() + wait;
        if (wake < transport_->cap(deadline)) {
          transport_->sleep_until(wake);
          delay = std::min(kMaxBackOff, 2 * delay);
          continue;
        }
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
        report_once(r.failure_kind + " (gave up)",
                    "OTLP export to " + transport_->target() + " failed: " + r.detail +
                        "; gave up after " + std::to_string(attempt) + " attempt(s) in " +
                        std::to_string(waited.count()) + " ms (timeout " +
                        std::to_string(settings_.timeout.count()) +
                        " ms, OTEL_EXPORTER_OTLP_TIMEOUT); " + what + " dropped.");
        return false;
      }
      report_once(r.failure_kind, "OTLP export to " + transport_->target() + " failed: " +
                                      r.detail + "; " + what + " dropped, not retried.");
      return false;
    }
  } catch (...) {
    return false;
  }
}

std::unique_ptr<OtlpSender> make_otlp_sender(OtlpSignal signal, std::string_view noun) {
  OtlpSettings settings = otlp_settings_from_env(signal);
  std::unique_ptr<OtlpTransport> transport = settings.protocol == OtlpProtocol::kGrpc
                                                 ? make_grpc_transport(settings)
                                                 : make_http_transport(settings);
  if (transport == nullptr) {
    throw ConfigError("The OTLP protocol '" + std::string(protocol_name(settings.protocol)) +
                      "' is not available in this build of lens.");
  }
  return std::make_unique<OtlpSender>(std::move(settings), std::move(transport), noun);
}

OtlpSpanExporter::OtlpSpanExporter(std::unique_ptr<OtlpSender> sender)
    : sender_(std::move(sender)) {}

OtlpSpanExporter::~OtlpSpanExporter() = default;

std::uint64_t OtlpSpanExporter::rejected_spans() const noexcept { return sender_->rejected(); }

void OtlpSpanExporter::interrupt_by(Clock::time_point deadline) noexcept {
  sender_->interrupt_by(deadline);
}

ExportResult OtlpSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                            const Resource& resource,
                                            Clock::time_point deadline) noexcept {
  try {
    encoded_.clear();
    if (sender_->settings().protocol == OtlpProtocol::kHttpJson) {
      append_otlp_json(encoded_, spans, resource);
    } else {
      append_otlp_proto(encoded_, spans, resource);
    }
  } catch (...) {
    return ExportResult::kFailure;
  }
  return sender_->send(encoded_, spans.size(), deadline) ? ExportResult::kSuccess
                                                          : ExportResult::kFailure;
}

bool OtlpSpanExporter::encodes_records() const noexcept {
  return sender_->settings().protocol != OtlpProtocol::kHttpJson;
}

ExportResult OtlpSpanExporter::export_records(std::span<const SpanRecord* const> records,
                                              const Resource& resource,
                                              const TickConverter& clock,
                                              Clock::time_point deadline) noexcept {
  try {
    encoded_.clear();
    append_otlp_proto_records(encoded_, records, resource, clock);
  } catch (...) {
    return ExportResult::kFailure;
  }
  return sender_->send(encoded_, records.size(), deadline) ? ExportResult::kSuccess
                                                            : ExportResult::kFailure;
}

std::shared_ptr<SpanExporter> make_otlp_exporter() {
  return std::make_shared<OtlpSpanExporter>(make_otlp_sender(OtlpSignal::kTraces, "spans"));
}

}  // namespace nemo::lens::detail
