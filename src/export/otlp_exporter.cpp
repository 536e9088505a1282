// OtlpSender: compress, send through a transport, retry what the OTLP specification calls
// retryable with exponential back-off and jitter, and drop the rest. BufferedDelivery sends with
// it and keeps what the receiver cannot take yet in the outage buffer; OtlpSpanExporter encodes
// spans and hands them to one, the metric and log exporters (signal_writer.hpp) their requests.
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>

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

// The wait before the next attempt: what the receiver asked for, else full jitter over the upper
// half of the current back-off.
std::chrono::milliseconds retry_wait(const AttemptResult& r, std::chrono::milliseconds back_off,
                                     std::minstd_rand& rng) {
  return r.retry_after.value_or(std::chrono::milliseconds(
      std::uniform_int_distribution<std::int64_t>(back_off.count() / 2, back_off.count())(rng)));
}

}  // namespace

bool gzip_compress(std::string_view in, std::string& out) {
  z_stream zs{};
  // windowBits 15 + 16: a gzip header and trailer instead of zlib's.
  if (deflateInit2(&zs, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) !=
      Z_OK) {
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
    : settings_(std::move(settings)),
      transport_(std::move(transport)),
      noun_(noun),
      rng_(std::random_device{}()) {}

void OtlpSender::report_once(const std::string& kind, const std::string& message) {
  {
    std::lock_guard lock(reported_mu_);
    if (!reported_.insert(kind).second) return;
  }
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

AttemptResult OtlpSender::attempt(std::string_view encoded, std::size_t items,
                                  Clock::time_point deadline) noexcept {
  try {
    std::string_view body = encoded;
    // gRPC compresses its messages itself (the channel's compression); HTTP bodies are ours to.
    if (settings_.gzip && settings_.protocol != OtlpProtocol::kGrpc) {
      if (!gzip_compress(encoded, compressed_)) {
        return AttemptResult::permanent("gzip", "gzip compression failed");
      }
      body = compressed_;
    }
    const Clock::time_point limit = transport_->cap(deadline);
    if (Clock::now() >= limit) {
      return AttemptResult::permanent("deadline",
                                      "the export deadline passed before the batch could be sent");
    }
    attempts_.fetch_add(1, std::memory_order_relaxed);
    AttemptResult r = transport_->send(body, limit);
    if (r.kind == AttemptResult::Kind::kSuccess && r.partial.rejected > 0) {
      rejected_.fetch_add(static_cast<std::uint64_t>(r.partial.rejected),
                          std::memory_order_relaxed);
      report_once(
          "partial success",
          "OTLP receiver " + transport_->target() + " rejected " +
              std::to_string(r.partial.rejected) + " of " + std::to_string(items) + " " + noun_ +
              (r.partial.error_message.empty() ? "" : ": " + r.partial.error_message) + ".");
    }
    return r;
  } catch (...) {
    return AttemptResult::out_of_memory();
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

// ---- BufferedDelivery

BufferedDelivery::BufferedDelivery(OtlpSender& sender, ExportBufferSettings buffer,
                                   std::string noun)
    : sender_(sender),
      settings_(buffer),
      noun_(std::move(noun)),
      buffer_(std::move(buffer)),
      back_off_(kInitialBackOff),
      rng_(std::random_device{}()) {}

BufferedDelivery::~BufferedDelivery() {
  if (thread_ == nullptr) return;
  if (thread_pid_ != ::getpid()) {
    (void)thread_.release();  // a forked child's copy: the thread is the parent's, not here
    return;
  }
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
    stop_deadline_ = Clock::now();
  }
  work_cv_.notify_all();
  sender_.interrupt_by(Clock::now());
  thread_->join();
}

DeferredCounts BufferedDelivery::deferred() const noexcept {
  DeferredCounts c;
  std::lock_guard lock(mu_);
  c.pending = buffer_.items();
  c.dropped = dropped_later_.load(std::memory_order_relaxed);
  return c;
}

bool BufferedDelivery::deliver(std::string& body, std::size_t size, std::size_t items,
                               Clock::time_point deadline) noexcept {
  try {
    {
      std::lock_guard lock(mu_);
      // Requests wait for the receiver: this one goes behind them, so that they leave in order.
      if (!buffer_.empty()) return enqueue_locked(body, items, size);
    }
    const Clock::time_point now = Clock::now();
    if (now + sender_.settings().timeout < deadline) deadline = now + sender_.settings().timeout;
    const AttemptResult r = sender_.attempt(std::string_view(body.data(), size), items, deadline);
    if (r.kind == AttemptResult::Kind::kSuccess) return true;
    if (r.kind == AttemptResult::Kind::kPermanent) {
      sender_.report_once(r.failure_kind,
                          "OTLP export to " + sender_.target() + " failed: " + r.detail + "; " +
                              std::to_string(items) + " " + noun_ + " dropped, not retried.");
      return false;
    }
    report_buffered(r, items);
    std::lock_guard lock(mu_);
    schedule_retry_locked(r);
    return enqueue_locked(body, items, size);
  } catch (...) {
    return false;
  }
}

void BufferedDelivery::report_buffered(const AttemptResult& r, std::size_t items) {
  std::string bounds = std::to_string(settings_.memory_bytes >> 20) + " MiB in memory";
  if (!settings_.spool_dir.empty()) {
    bounds +=
        ", then " + std::to_string(settings_.spool_bytes >> 20) + " MiB in " + settings_.spool_dir;
  }
  sender_.report_once(r.failure_kind + " (buffered)",
                      "OTLP export to " + sender_.target() + " failed: " + r.detail + "; " +
                          std::to_string(items) + " " + noun_ +
                          " and the batches after them wait in the outage buffer (" + bounds +
                          ") and are sent again once the receiver takes them.");
}

bool BufferedDelivery::enqueue_locked(std::string& body, std::size_t items,
                                      std::size_t size) noexcept {
  if (stopping_) return false;
  body.resize(size);  // shorter or the same: nothing is filled
  if (!buffer_.push(body, items)) {
    std::string why = buffer_.spool_error();
    if (why.empty()) {
      why = "the outage buffer is full (" + std::to_string(buffer_.memory_bytes()) +
            " bytes in memory, " + std::to_string(buffer_.spool_bytes()) + " bytes spooled)";
    }
    sender_.report_once("buffer full",
                        "OTLP receiver " + sender_.target() + " is still away and " + why + ": " +
                            std::to_string(items) + " " + noun_ +
                            " dropped, and later batches are dropped and counted until it "
                            "drains (the bounds: " +
                            settings_.env_prefix + "_EXPORT_BUFFER_SIZE, " + settings_.env_prefix +
                            "_EXPORT_SPOOL_SIZE).");
    return false;
  }
  body = buffer_.take_spare();
  if (thread_ == nullptr) {
    try {
      thread_ = std::make_unique<std::thread>([this] { run(); });
      thread_pid_ = ::getpid();
    } catch (...) {
      // No thread: the batches wait until shutdown counts them as dropped.
    }
  }
  work_cv_.notify_one();
  return true;
}

void BufferedDelivery::schedule_retry_locked(const AttemptResult& r) noexcept {
  next_attempt_ = Clock::now() + retry_wait(r, back_off_, rng_);
  back_off_ = std::min(kMaxBackOff, 2 * back_off_);
}

void BufferedDelivery::run() noexcept {
  std::unique_lock lock(mu_);
  for (;;) {
    if (buffer_.empty()) {
      idle_cv_.notify_all();
      if (stopping_) return;
      work_cv_.wait(lock, [&] { return stopping_ || !buffer_.empty(); });
      continue;
    }
    const Clock::time_point now = Clock::now();
    if (stopping_ && now >= stop_deadline_) return;
    if (now < next_attempt_) {
      work_cv_.wait_until(lock,
                          stopping_ ? std::min(next_attempt_, stop_deadline_) : next_attempt_);
      continue;
    }
    const std::uint64_t items = buffer_.front_items();
    const std::string* body = buffer_.front();
    if (body == nullptr) {
      sender_.report_once("spool read", "OTLP export: " + buffer_.spool_error() + "; " +
                                            std::to_string(items) + " " + noun_ + " dropped.");
      dropped_later_.fetch_add(items, std::memory_order_relaxed);
      buffer_.pop();
      continue;
    }
    in_flight_ = true;
    lock.unlock();
    // The body stays valid: only this thread pops, and pushes leave the front where it is.
    const AttemptResult r = sender_.attempt(*body, static_cast<std::size_t>(items),
                                            Clock::now() + sender_.settings().timeout);
    lock.lock();
    in_flight_ = false;
    switch (r.kind) {
      case AttemptResult::Kind::kSuccess:
        back_off_ = kInitialBackOff;
        buffer_.pop();
        break;
      case AttemptResult::Kind::kPermanent:
        sender_.report_once(r.failure_kind,
                            "OTLP export to " + sender_.target() + " failed: " + r.detail + "; " +
                                std::to_string(items) + " " + noun_ + " dropped, not retried.");
        dropped_later_.fetch_add(items, std::memory_order_relaxed);
        buffer_.pop();
        break;
      case AttemptResult::Kind::kRetryable:
        schedule_retry_locked(r);
        break;
    }
  }
}

bool BufferedDelivery::flush(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    return idle_cv_.wait_until(lock, deadline, [&] { return buffer_.empty() && !in_flight_; });
  } catch (...) {
    return false;
  }
}

void BufferedDelivery::shutdown(Clock::time_point deadline) noexcept {
  {
    std::lock_guard lock(mu_);
    if (stopping_) return;
    stopping_ = true;
    stop_deadline_ = deadline;
  }
  work_cv_.notify_all();
  sender_.interrupt_by(deadline);  // an attempt in flight gives up by then
  if (thread_ != nullptr && thread_pid_ == ::getpid()) {
    thread_->join();
    thread_.reset();
  }
  std::lock_guard lock(mu_);
  dropped_later_.fetch_add(buffer_.clear(), std::memory_order_relaxed);
}

// ---- OtlpSpanExporter

OtlpSpanExporter::OtlpSpanExporter(std::unique_ptr<OtlpSender> sender, ExportBufferSettings buffer)
    : sender_(std::move(sender)), delivery_(*sender_, std::move(buffer), "spans") {}

OtlpSpanExporter::~OtlpSpanExporter() = default;

std::uint64_t OtlpSpanExporter::rejected_spans() const noexcept { return sender_->rejected(); }

DeferredCounts OtlpSpanExporter::deferred_spans() const noexcept { return delivery_.deferred(); }

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
  return delivery_.deliver(encoded_, encoded_.size(), spans.size(), deadline)
             ? ExportResult::kSuccess
             : ExportResult::kFailure;
}

bool OtlpSpanExporter::encodes_records() const noexcept {
  return sender_->settings().protocol != OtlpProtocol::kHttpJson;
}

ExportResult OtlpSpanExporter::export_records(std::span<const SpanRecord* const> records,
                                              const Resource& resource, const TickConverter& clock,
                                              Clock::time_point deadline) noexcept {
  std::size_t size = 0;
  try {
    size = write_otlp_proto_records(encoded_, records, resource, clock);
  } catch (...) {
    return ExportResult::kFailure;
  }
  return delivery_.deliver(encoded_, size, records.size(), deadline) ? ExportResult::kSuccess
                                                                     : ExportResult::kFailure;
}

bool OtlpSpanExporter::force_flush(Clock::time_point deadline) noexcept {
  return delivery_.flush(deadline);
}

void OtlpSpanExporter::shutdown(Clock::time_point deadline) noexcept {
  delivery_.shutdown(deadline);
}

std::shared_ptr<SpanExporter> make_otlp_exporter(const NemoLensConfig& config) {
  ExportBufferSettings buffer = export_buffer_settings(config);
  return std::make_shared<OtlpSpanExporter>(make_otlp_sender(OtlpSignal::kTraces, "spans"),
                                            std::move(buffer));
}

}  // namespace nemo::lens::detail
