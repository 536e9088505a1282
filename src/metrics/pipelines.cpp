// The metric reader, the log processor and their built-in exporters (see pipelines.hpp).
#include "metrics/pipelines.hpp"

#include <unistd.h>

#include <cstdio>

#include "env.hpp"
#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "immortal.hpp"
#include "metrics/metric_data.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"
#include "tracing/clock.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

constinit std::atomic<LogProcessor*> g_log_processor{nullptr};

MetricSettings metric_settings_from_env() {
  MetricSettings s;
  s.interval =
      std::chrono::milliseconds(env_uint("OTEL_METRIC_EXPORT_INTERVAL", 1, 86'400'000,
                                         "an interval in milliseconds from 1 to 86400000")
                                    .value_or(static_cast<std::uint64_t>(s.interval.count())));
  s.timeout =
      std::chrono::milliseconds(env_uint("OTEL_METRIC_EXPORT_TIMEOUT", 1, 86'400'000,
                                         "a timeout in milliseconds from 1 to 86400000")
                                    .value_or(static_cast<std::uint64_t>(s.timeout.count())));
  s.temporality = temporality_preference_from_env();
  return s;
}

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

std::size_t point_count(std::span<const MetricData> metrics) {
  std::size_t n = 0;
  for (const auto& m : metrics) n += m.number_points.size() + m.histogram_points.size();
  return n;
}

// ----- built-in exporters

std::size_t record_count(std::span<const LogRecordData> records) { return records.size(); }

// What a built-in exporter of one signal does: encode the batch, then send it over OTLP (protobuf
// or JSON, as the protocol says) or write it as one OTLP/JSON line (file, console).
template <class Data>
class SignalWriter {
 public:
  using Encoder = void (*)(std::string&, std::span<const Data>, const Resource&);
  using Counter = std::size_t (*)(std::span<const Data>);

  SignalWriter(std::unique_ptr<OtlpSender> sender, Encoder proto, Encoder json, Counter count)
      : sender_(std::move(sender)), proto_(proto), json_(json), count_(count) {}
  SignalWriter(std::unique_ptr<JsonLinesOutput> out, Encoder json, Counter count)
      : out_(std::move(out)), proto_(json), json_(json), count_(count) {}

  bool write(std::span<const Data> items, const Resource& resource,
             Clock::time_point deadline) noexcept {
    if (items.empty()) return true;
    try {
      buffer_.clear();
      const bool json = !sender_ || sender_->settings().protocol == OtlpProtocol::kHttpJson;
      (json ? json_ : proto_)(buffer_, items, resource);
    } catch (...) {
      return false;
    }
    return sender_ ? sender_->send(buffer_, count_(items), deadline) : out_->write_line(buffer_);
  }
  void shutdown(Clock::time_point deadline) noexcept {
    if (sender_) sender_->interrupt_by(deadline);
  }

 private:
  std::unique_ptr<OtlpSender> sender_;
  std::unique_ptr<JsonLinesOutput> out_;
  Encoder proto_, json_;
  Counter count_;
  std::string buffer_;
};

class BuiltinMetricExporter final : public MetricExporter {
 public:
  explicit BuiltinMetricExporter(SignalWriter<MetricData> writer) : writer_(std::move(writer)) {}
  bool export_metrics(std::span<const MetricData> metrics, const Resource& resource,
                      Clock::time_point deadline) noexcept override {
    return writer_.write(metrics, resource, deadline);
  }
  void shutdown(Clock::time_point deadline) noexcept override { writer_.shutdown(deadline); }

 private:
  SignalWriter<MetricData> writer_;
};

class BuiltinLogExporter final : public LogExporter {
 public:
  explicit BuiltinLogExporter(SignalWriter<LogRecordData> writer) : writer_(std::move(writer)) {}
  bool export_logs(std::span<const LogRecordData> records, const Resource& resource,
                   Clock::time_point deadline) noexcept override {
    return writer_.write(records, resource, deadline);
  }
  void shutdown(Clock::time_point deadline) noexcept override { writer_.shutdown(deadline); }

 private:
  SignalWriter<LogRecordData> writer_;
};

// The writer config.exporter names for a signal.
template <class Data>
SignalWriter<Data> make_writer(const NemoLensConfig& config, int rank, OtlpSignal signal,
                               std::string_view noun, std::string_view path_key,
                               std::string_view default_path, std::string_view what,
                               typename SignalWriter<Data>::Encoder proto,
                               typename SignalWriter<Data>::Encoder json,
                               typename SignalWriter<Data>::Counter count) {
  const std::string value = to_lower(trim(config.exporter));
  if (value == "otlp") return {make_otlp_sender(signal, noun), proto, json, count};
  if (value == "console") return {std::make_unique<JsonLinesOutput>(stdout), json, count};
  if (value != "file") (void)make_exporter(config, rank);  // throws the exporters' usual error
  const std::string path = rank_path(config, rank, path_key, default_path);
  return {std::make_unique<JsonLinesOutput>(path, what, path_origin(config, path_key)), json,
          count};
}

}  // namespace

std::shared_ptr<MetricExporter> make_metric_exporter(const NemoLensConfig& config, int rank) {
  return std::make_shared<BuiltinMetricExporter>(make_writer<MetricData>(
      config, rank, OtlpSignal::kMetrics, "data points", "METRICS_EXPORT_PATH",
      "lens-metrics-rank{rank}.jsonl", "metrics file", append_otlp_metrics_proto,
      append_otlp_metrics_json, point_count));
}

std::shared_ptr<LogExporter> make_log_exporter(const NemoLensConfig& config, int rank) {
  return std::make_shared<BuiltinLogExporter>(
      make_writer<LogRecordData>(config, rank, OtlpSignal::kLogs, "log records", "LOGS_EXPORT_PATH",
                                 "lens-logs-rank{rank}.jsonl", "log file", append_otlp_logs_proto,
                                 append_otlp_logs_json, record_count));
}

// ----- the metric reader

// ----- the worker thread

PeriodicWorker::PeriodicWorker(std::chrono::milliseconds period, std::function<void()> round,
                               std::function<void()> last)
    : period_(period), round_(std::move(round)), last_(std::move(last)) {
  thread_ = std::thread([this] { run(); });
}

PeriodicWorker::~PeriodicWorker() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void PeriodicWorker::run() noexcept {
  auto next = Clock::now() + period_;
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait_until(lock, next, [&] { return stop_ || wake_ || requested_ != done_; });
    wake_ = false;
    const bool stopping = stop_;
    const std::uint64_t target = requested_;
    lock.unlock();
    round_();
    if (stopping) last_();
    lock.lock();
    done_ = target;
    if (Clock::now() >= next) next = Clock::now() + period_;
    stopped_ = stopping;
    cv_.notify_all();
    if (stopping) return;
  }
}

bool PeriodicWorker::flush(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    if (stopped_) return true;
    const std::uint64_t ticket = ++requested_;
    cv_.notify_all();
    return cv_.wait_until(lock, deadline, [&] { return done_ >= ticket || stopped_; });
  } catch (...) {
    return false;
  }
}

bool PeriodicWorker::stop(Clock::time_point deadline) noexcept {
  try {
    std::unique_lock lock(mu_);
    stop_ = true;
    cv_.notify_all();
    if (!cv_.wait_until(lock, deadline, [&] { return stopped_; })) return false;
  } catch (...) {
    return false;
  }
  if (thread_.joinable()) thread_.join();
  return true;
}

void PeriodicWorker::wake() noexcept {
  std::unique_lock lock(mu_, std::try_to_lock);
  if (lock.owns_lock()) {
    wake_ = true;
    cv_.notify_all();
  }
}

// ----- the metric reader

MetricReader::MetricReader(MetricSettings settings, std::shared_ptr<MetricExporter> exporter,
                           Resource resource)
    : settings_(settings),
      exporter_(std::move(exporter)),
      resource_(std::move(resource)),
      start_unix_nano_(now_unix_nano()),
      owner_pid_(::getpid()),
      worker_(
          settings.interval, [this] { collect_and_export(); },
          [this] { exporter_->shutdown(Clock::now() + settings_.timeout); }) {}

bool MetricReader::forked() const noexcept { return ::getpid() != owner_pid_; }

MetricReader::~MetricReader() { shutdown(Clock::now() + settings_.timeout); }

bool MetricReader::flush(Clock::time_point deadline) noexcept { return worker_.flush(deadline); }

bool MetricReader::shutdown(Clock::time_point deadline) noexcept { return worker_.stop(deadline); }

void MetricReader::collect_and_export() noexcept {
  try {
    const std::vector<MetricData> metrics =
        collect_metrics(settings_.temporality, start_unix_nano_, now_unix_nano());
    if (metrics.empty()) return;
    if (exporter_->export_metrics(metrics, resource_, Clock::now() + settings_.timeout)) {
      points_.fetch_add(point_count(metrics), std::memory_order_relaxed);
    } else {
      failed_.fetch_add(1, std::memory_order_relaxed);
    }
  } catch (...) {
    failed_.fetch_add(1, std::memory_order_relaxed);  // out of memory
  }
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
          settings.schedule_delay, [this] { drain(Clock::now() + settings_.export_timeout); },
          [this] { exporter_->shutdown(Clock::now() + settings_.export_timeout); }) {
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
    try {
      batch.reserve(settings_.max_export_batch_size);
      LogRecordData* r = nullptr;
      while (batch.size() < settings_.max_export_batch_size && queue_.try_pop(r)) {
        std::unique_ptr<LogRecordData> owned(r);
        batch.push_back(std::move(*owned));
      }
    } catch (...) {
      dropped_.fetch_add(batch.size(), std::memory_order_relaxed);
      return;
    }
    if (batch.empty()) return;
    if (exporter_->export_logs(batch, resource_,
                               std::min(deadline, Clock::now() + settings_.export_timeout))) {
      exported_.fetch_add(batch.size(), std::memory_order_relaxed);
    } else {
      dropped_.fetch_add(batch.size(), std::memory_order_relaxed);
    }
  }
}

bool LogProcessor::flush(Clock::time_point deadline) noexcept { return worker_.flush(deadline); }

bool LogProcessor::shutdown(Clock::time_point deadline) noexcept {
  if (!worker_.stop(deadline)) return false;
  exporter_.reset();  // the processor itself stays (immortal); its exporter need not
  return true;
}

}  // namespace nemo::lens::detail

namespace nemo::lens {

bool InMemoryMetricExporter::export_metrics(std::span<const MetricData> metrics, const Resource&,
                                            std::chrono::steady_clock::time_point) noexcept {
  try {
    std::lock_guard lock(mu_);
    collections_.emplace_back(metrics.begin(), metrics.end());
  } catch (...) {
    return false;
  }
  return true;
}

std::vector<std::vector<MetricData>> InMemoryMetricExporter::collections() const {
  std::lock_guard lock(mu_);
  return collections_;
}

std::optional<MetricData> InMemoryMetricExporter::latest(std::string_view name) const {
  std::lock_guard lock(mu_);
  for (auto c = collections_.rbegin(); c != collections_.rend(); ++c) {
    for (const MetricData& m : *c) {
      if (m.name == name) return m;
    }
  }
  return std::nullopt;
}

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
