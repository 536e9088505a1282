// The log processor and the built-in log exporter (see log_processor.hpp).
#include "logs/log_processor.hpp"

#include <unistd.h>

#include "env.hpp"
#include "export/otlp_signals.hpp"
#include "export/signal_writer.hpp"
#include "immortal.hpp"
#include "nemo/lens/errors.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

constinit std::atomic<LogProcessor*> g_log_processor{nullptr};

LogSettings log_settings_from_env() {
  LogSettings s;
  s.max_queue_size =
      env_uint("OTEL_BLRP_MAX_QUEUE_SIZE", 1, 1u << 24, "a queue size from 1 to 16777216")
          .value_or(s.max_queue_size);
  s.max_export_batch_size =
      env_uint("OTEL_BLRP_MAX_EXPORT_BATCH_SIZE", 1, 1u << 24, "a batch size from 1 to 16777216")
          .value_or(s.max_export_batch_size);
  if (s.max_export_batch_size > s.max_queue_size) {
    throw ConfigError(
        "OTEL_BLRP_MAX_EXPORT_BATCH_SIZE (" + std::to_string(s.max_export_batch_size) +
        ") must not exceed OTEL_BLRP_MAX_QUEUE_SIZE (" + std::to_string(s.max_queue_size) + ").");
  }
  s.schedule_delay = std::chrono::milliseconds(
      env_uint("OTEL_BLRP_SCHEDULE_DELAY", 1, 86'400'000,
               "a delay in milliseconds from 1 to 86400000")
          .value_or(static_cast<std::uint64_t>(s.schedule_delay.count())));
  s.export_timeout = std::chrono::milliseconds(
      env_uint("OTEL_BLRP_EXPORT_TIMEOUT", 1, 86'400'000,
               "a timeout in milliseconds from 1 to 86400000")
          .value_or(static_cast<std::uint64_t>(s.export_timeout.count())));
  return s;
}

namespace {

std::size_t record_count(std::span<const LogRecordData> records) { return records.size(); }

class BuiltinLogExporter final : public LogExporter,
                                 public InterruptibleExporter,
                                 public DeferredItemsExporter {
 public:
  explicit BuiltinLogExporter(SignalWriter<LogRecordData> writer) : writer_(std::move(writer)) {}
  bool export_logs(std::span<const LogRecordData> records, const Resource& resource,
                   Clock::time_point deadline) noexcept override {
    return writer_.write(records, resource, deadline);
  }
  void shutdown(Clock::time_point deadline) noexcept override { writer_.shutdown(deadline); }
  void interrupt_by(Clock::time_point deadline) noexcept override {
    writer_.interrupt_by(deadline);
  }
  DeferredCounts deferred_items() const noexcept override { return writer_.deferred(); }
  bool flush_deferred(Clock::time_point deadline) noexcept override {
    return writer_.flush(deadline);
  }

 private:
  SignalWriter<LogRecordData> writer_;
};

}  // namespace

std::shared_ptr<LogExporter> make_log_exporter(const NemoLensConfig& config, int rank) {
  return std::make_shared<BuiltinLogExporter>(
      make_writer<LogRecordData>(config, rank, OtlpSignal::kLogs, "log records", "LOGS_EXPORT_PATH",
                                 "lens-logs-rank{rank}.jsonl", "log file", append_otlp_logs_proto,
                                 append_otlp_logs_json, record_count));
}

// ----- the log processor

LogProcessor::LogProcessor(LogSettings settings, LogLimits limits,
                           std::shared_ptr<LogExporter> exporter, Resource resource)
    : settings_(settings),
      limits_(std::move(limits)),
      owner_pid_(::getpid()),
      exporter_(std::move(exporter)),
      resource_(std::move(resource)),
      queue_(settings.max_queue_size),
      worker_(
          settings.schedule_delay, [this](Clock::time_point deadline) { drain(deadline); },
          // The exporter's outage buffer sends what it holds until the stop's cutoff.
          [this](Clock::time_point cutoff) {
            exporter_->shutdown(std::min(cutoff, Clock::now() + settings_.export_timeout));
          }) {
  keep_reachable(this);  // immortal: a thread may still be logging into it
}

bool LogProcessor::forked() const noexcept { return ::getpid() != owner_pid_; }

LogProcessor::~LogProcessor() {
  shutdown(Clock::now() + settings_.export_timeout);
  LogRecordData* r = nullptr;
  while (queue_.try_pop(r)) delete r;
}

bool LogProcessor::redacted(std::string_view key) const noexcept {
  for (const auto& k : limits_.redacted_keys) {
    if (k == key) return true;
  }
  return false;
}

bool LogProcessor::enqueue(LogRecordData* record) noexcept {
  emitted_.fetch_add(1, std::memory_order_relaxed);
  std::uint64_t position = 0;
  if (!queue_.try_push(record, &position)) {
    delete record;
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  // A full batch: wake the thread (never waiting for it).
  if ((position + 1) % settings_.max_export_batch_size == 0) worker_.wake();
  return true;
}

void LogProcessor::drain(Clock::time_point deadline) noexcept {
  std::vector<LogRecordData> batch;
  for (;;) {
    batch.clear();
    std::size_t lost = 0;  // out of memory: the record being moved is lost
    // Records leave the queue under the ledger's lock: once shutdown closed it, they are its.
    const bool open = ledger_.take([&] {
      try {
        batch.reserve(settings_.max_export_batch_size);
        LogRecordData* r = nullptr;
        while (batch.size() < settings_.max_export_batch_size && queue_.try_pop(r)) {
          std::unique_ptr<LogRecordData> owned(r);
          batch.push_back(std::move(*owned));
        }
      } catch (...) {
        lost = 1;
      }
      return batch.size() + lost;
    });
    if (!open) return;
    if (lost != 0 && !ledger_.settle(lost, ExportLedger::Outcome::kFailed)) return;
    if (batch.empty()) return;
    const Clock::time_point limit = std::min(deadline, Clock::now() + settings_.export_timeout);
    ExportLedger::Outcome outcome = ExportLedger::Outcome::kShutdown;
    if (Clock::now() < limit) {
      outcome = exporter_->export_logs(batch, resource_, limit) ? ExportLedger::Outcome::kExported
                                                                : ExportLedger::Outcome::kFailed;
    }
    if (!ledger_.settle(batch.size(), outcome)) return;
  }
}

namespace {

DeferredCounts deferred_of(const LogExporter* exporter) noexcept {
  const auto* d = dynamic_cast<const DeferredItemsExporter*>(exporter);
  return d != nullptr ? d->deferred_items() : DeferredCounts{};
}

bool flush_deferred(LogExporter* exporter, Clock::time_point deadline) noexcept {
  auto* d = dynamic_cast<DeferredItemsExporter*>(exporter);
  return d == nullptr || d->flush_deferred(deadline);
}

}  // namespace

std::shared_ptr<LogExporter> LogProcessor::exporter() const noexcept {
  std::lock_guard lock(exporter_mu_);
  return exporter_;
}

DeferredCounts LogProcessor::deferred() const noexcept {
  std::lock_guard lock(exporter_mu_);
  return exporter_ != nullptr ? deferred_of(exporter_.get()) : final_deferred_;
}

bool LogProcessor::flush(Clock::time_point deadline) noexcept {
  return worker_.flush(deadline) && flush_deferred(exporter().get(), deadline);
}

bool LogProcessor::wait_flushed(std::uint64_t ticket, Clock::time_point deadline) noexcept {
  return worker_.wait_flushed(ticket, deadline) && flush_deferred(exporter().get(), deadline);
}

std::uint64_t LogProcessor::dropped() const noexcept {
  return dropped_.load(std::memory_order_relaxed) + ledger_.failed() +
         ledger_.dropped_at_shutdown() + deferred().dropped;
}

std::uint64_t LogProcessor::buffered() const noexcept { return deferred().pending; }

std::uint64_t LogProcessor::exported() const noexcept {
  // Saturating: a batch the buffer took may show there before the ledger counts it.
  const DeferredCounts d = deferred();
  const std::uint64_t accepted = ledger_.exported();
  return accepted > d.pending + d.dropped ? accepted - d.pending - d.dropped : 0;
}

void LogProcessor::begin_shutdown(Clock::time_point deadline) noexcept {
  const Clock::time_point cutoff = export_cutoff(deadline);
  worker_.request_stop(cutoff);
  interrupt_if_interruptible(exporter_.get(), cutoff);
}

bool LogProcessor::finish_shutdown(Clock::time_point deadline) noexcept {
  const bool stopped = worker_.wait_stopped(deadline);
  if (!stopped) worker_.abandon();  // first: a round ending from now on is its last
  // What is queued now (records of a thread that was logging as logs stopped, or everything,
  // when the thread did not finish) counts as dropped at shutdown.
  ledger_.close([&] {
    std::uint64_t n = 0;
    LogRecordData* r = nullptr;
    while (queue_.try_pop(r)) {
      delete r;
      ++n;
    }
    return n;
  });
  // Not stopped: the thread still runs; the processor is immortal, its exporter stays.
  if (!stopped) return false;
  // The processor itself stays (immortal); its exporter need not, once its counts are kept.
  std::lock_guard lock(exporter_mu_);
  final_deferred_ = deferred_of(exporter_.get());
  exporter_.reset();
  return true;
}

bool LogProcessor::shutdown(Clock::time_point deadline) noexcept {
  begin_shutdown(deadline);
  return finish_shutdown(deadline);
}

}  // namespace nemo::lens::detail

namespace nemo::lens {

bool InMemoryLogExporter::export_logs(std::span<const LogRecordData> records, const Resource&,
                                      std::chrono::steady_clock::time_point) noexcept {
  try {
    std::lock_guard lock(mu_);
    records_.insert(records_.end(), records.begin(), records.end());
  } catch (...) {
    return false;
  }
  return true;
}

std::vector<LogRecordData> InMemoryLogExporter::records() const {
  std::lock_guard lock(mu_);
  return records_;
}

}  // namespace nemo::lens
