// OtlpSpanExporter: encode, compress, send through a transport, retry what the OTLP
// specification calls retryable with exponential back-off and jitter, and drop the rest.
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
        result.rejected_spans = static_cast<std::int64_t>(partial.varint());
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
  if (auto r = it->find("rejectedSpans"); r != it->end()) {
    // int64 in the JSON mapping: a decimal string, though numbers are accepted too.
    if (r->is_number_integer()) {
      result.rejected_spans = r->get<std::int64_t>();
    } else if (r->is_string()) {
      try {
        result.rejected_spans = std::stoll(r->get<std::string>());
      } catch (...) {
      }
    }
  }
  if (auto m = it->find("errorMessage"); m != it->end() && m->is_string()) {
    result.error_message = m->get<std::string>();
  }
  return result;
}

struct OtlpSpanExporter::Impl {
  OtlpSettings settings;
  std::unique_ptr<OtlpTransport> transport;
  std::string encoded;
  std::string compressed;
  std::minstd_rand rng{std::random_device{}()};
  std::set<std::string> reported;  // failure kinds already printed

  void report_once(const std::string& kind, const std::string& message) {
    if (!reported.insert(kind).second) return;
    std::fprintf(stderr, "lens: %s Later failures of this kind are counted, not printed.\n",
                 message.c_str());
  }
};

OtlpSpanExporter::OtlpSpanExporter(OtlpSettings settings, std::unique_ptr<OtlpTransport> transport)
    : impl_(std::make_unique<Impl>()) {
  impl_->settings = std::move(settings);
  impl_->transport = std::move(transport);
}

OtlpSpanExporter::~OtlpSpanExporter() = default;

std::uint64_t OtlpSpanExporter::rejected_spans() const noexcept {
  return rejected_.load(std::memory_order_relaxed);
}

void OtlpSpanExporter::interrupt_by(Clock::time_point deadline) noexcept {
  impl_->transport->interrupt_by(deadline);
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

ExportResult OtlpSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                            const Resource& resource,
                                            Clock::time_point deadline) noexcept {
  Impl& m = *impl_;
  try {
    const Clock::time_point start = Clock::now();
    if (start + m.settings.timeout < deadline) deadline = start + m.settings.timeout;
    m.encoded.clear();
    if (m.settings.protocol == OtlpProtocol::kHttpJson) {
      append_otlp_json(m.encoded, spans, resource);
    } else {
      append_otlp_proto(m.encoded, spans, resource);
    }
    const std::string* body = &m.encoded;
    // gRPC compresses its messages itself (the channel's compression); HTTP bodies are ours to.
    if (m.settings.gzip && m.settings.protocol != OtlpProtocol::kGrpc) {
      if (!gzip_compress(m.encoded, m.compressed)) {
        m.report_once("gzip", "OTLP export: gzip compression failed; the batch is dropped.");
        return ExportResult::kFailure;
      }
      body = &m.compressed;
    }

    auto delay = kInitialBackOff;
    for (int attempt = 1;; ++attempt) {
      const Clock::time_point limit = m.transport->cap(deadline);
      AttemptResult r = AttemptResult::permanent(
          "deadline", "the export deadline passed before the batch could be sent");
      if (Clock::now() < limit) {
        attempts_.fetch_add(1, std::memory_order_relaxed);
        r = m.transport->send(*body, limit);
      }
      if (r.kind == AttemptResult::Kind::kSuccess) {
        if (r.partial.rejected_spans > 0) {
          rejected_.fetch_add(static_cast<std::uint64_t>(r.partial.rejected_spans),
                              std::memory_order_relaxed);
          m.report_once("partial success",
                        "OTLP receiver " + m.transport->target() + " rejected " +
                            std::to_string(r.partial.rejected_spans) + " of " +
                            std::to_string(spans.size()) + " spans" +
                            (r.partial.error_message.empty() ? "" : ": " + r.partial.error_message) +
                            ".");
        }
        return ExportResult::kSuccess;
      }
      if (r.kind == AttemptResult::Kind::kRetryable) {
        // Full jitter over the upper half of the current back-off, unless the receiver said when.
        std::chrono::milliseconds wait = r.retry_after.value_or(std::chrono::milliseconds(
            std::uniform_int_distribution<std::int64_t>(delay.count() / 2, delay.count())(m.rng)));
        const Clock::time_point wake = Clock::now() + wait;
        if (wake < m.transport->cap(deadline)) {
          m.transport->sleep_until(wake);
          delay = std::min(kMaxBackOff, 2 * delay);
          continue;
        }
        const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start);
        m.report_once(r.failure_kind + " (gave up)",
                      "OTLP export to " + m.transport->target() + " failed: " + r.detail +
                          "; gave up after " + std::to_string(attempt) + " attempt(s) in " +
                          std::to_string(waited.count()) + " ms (timeout " +
                          std::to_string(m.settings.timeout.count()) +
                          " ms, OTEL_EXPORTER_OTLP_TIMEOUT); " + std::to_string(spans.size()) +
                          " spans dropped.");
        return ExportResult::kFailure;
      }
      m.report_once(r.failure_kind, "OTLP export to " + m.transport->target() + " failed: " +
                                        r.detail + "; " + std::to_string(spans.size()) +
                                        " spans dropped, not retried.");
      return ExportResult::kFailure;
    }
  } catch (...) {
    return ExportResult::kFailure;
  }
}

std::shared_ptr<SpanExporter> make_otlp_exporter() {
  OtlpSettings settings = otlp_settings_from_env();
  std::unique_ptr<OtlpTransport> transport = settings.protocol == OtlpProtocol::kGrpc
                                                 ? make_grpc_transport(settings)
                                                 : make_http_transport(settings);
  if (transport == nullptr) {
    throw ConfigError("The OTLP protocol '" + std::string(protocol_name(settings.protocol)) +
                      "' is not available in this build of lens.");
  }
  return std::make_shared<OtlpSpanExporter>(std::move(settings), std::move(transport));
}

}  // namespace nemo::lens::detail
