// The metric reader and the built-in metric exporter (see metric_reader.hpp).
#include "metrics/metric_reader.hpp"

#include <unistd.h>

#include "env.hpp"
#include "export/otlp_signals.hpp"
#include "export/signal_writer.hpp"
#include "tracing/clock.hpp"

namespace nemo::lens::detail {

using Clock = std::chrono::steady_clock;

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

namespace {

std::size_t point_count(std::span<const MetricData> metrics) {
  std::size_t n = 0;
  for (const auto& m : metrics) n += m.number_points.size() + m.histogram_points.size();
  return n;
}

class BuiltinMetricExporter final : public MetricExporter,
                                    public InterruptibleExporter,
                                    public DeferredItemsExporter {
 public:
  explicit BuiltinMetricExporter(SignalWriter<MetricData> writer) : writer_(std::move(writer)) {}
  bool export_metrics(std::span<const MetricData> metrics, const Resource& resource,
                      Clock::time_point deadline) noexcept override {
    return writer_.write(metrics, resource, deadline);
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
  SignalWriter<MetricData> writer_;
};

}  // namespace

std::shared_ptr<MetricExporter> make_metric_exporter(const NemoLensConfig& config, int rank) {
  return std::make_shared<BuiltinMetricExporter>(make_writer<MetricData>(
      config, rank, OtlpSignal::kMetrics, "data points", "METRICS_EXPORT_PATH",
      "lens-metrics-rank{rank}.jsonl", "metrics file", append_otlp_metrics_proto,
      append_otlp_metrics_json, point_count));
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
          settings.interval, [this](Clock::time_point deadline) { collect_and_export(deadline); },
          // The exporter's outage buffer sends what it holds until the stop's cutoff.
          [this](Clock::time_point cutoff) {
            exporter_->shutdown(std::min(cutoff, Clock::now() + settings_.timeout));
          }) {}

bool MetricReader::forked() const noexcept { return ::getpid() != owner_pid_; }

namespace {

DeferredCounts deferred_of(const MetricExporter* exporter) noexcept {
  const auto* d = dynamic_cast<const DeferredItemsExporter*>(exporter);
  return d != nullptr ? d->deferred_items() : DeferredCounts{};
}

}  // namespace

bool MetricReader::wait_flushed(std::uint64_t ticket, Clock::time_point deadline) noexcept {
  if (!worker_.wait_flushed(ticket, deadline)) return false;
  auto* d = dynamic_cast<DeferredItemsExporter*>(exporter_.get());
  return d == nullptr || d->flush_deferred(deadline);
}

std::uint64_t MetricReader::exported_points() const noexcept {
  // Saturating: a request the buffer took may show there before the ledger counts it.
  const DeferredCounts d = deferred_of(exporter_.get());
  const std::uint64_t accepted = ledger_.exported();
  return accepted > d.pending + d.dropped ? accepted - d.pending - d.dropped : 0;
}

std::uint64_t MetricReader::buffered_points() const noexcept {
  return deferred_of(exporter_.get()).pending;
}

std::uint64_t MetricReader::dropped_points() const noexcept {
  return ledger_.failed() + ledger_.dropped_at_shutdown() + deferred_of(exporter_.get()).dropped;
}

MetricReader::~MetricReader() { shutdown(Clock::now() + settings_.timeout); }

void MetricReader::begin_shutdown(Clock::time_point deadline) noexcept {
  const Clock::time_point cutoff = export_cutoff(deadline);
  worker_.request_stop(cutoff);
  interrupt_if_interruptible(exporter_.get(), cutoff);
}

bool MetricReader::finish_shutdown(Clock::time_point deadline) noexcept {
  if (worker_.wait_stopped(deadline)) return true;
  worker_.abandon();  // first: a round ending from now on is its last
  ledger_.close([] { return 0; });
  return false;
}

bool MetricReader::shutdown(Clock::time_point deadline) noexcept {
  begin_shutdown(deadline);
  return finish_shutdown(deadline);
}

void MetricReader::collect_and_export(Clock::time_point deadline) noexcept {
  try {
    const std::vector<MetricData> metrics =
        collect_metrics(settings_.temporality, start_unix_nano_, now_unix_nano());
    if (metrics.empty()) return;
    const std::size_t n = point_count(metrics);
    if (!ledger_.take([&] { return n; })) return;  // shutdown gave up on this thread
    deadline = std::min(deadline, Clock::now() + settings_.timeout);
    if (Clock::now() >= deadline) {
      ledger_.settle(n, ExportLedger::Outcome::kShutdown);
      return;
    }
    const bool ok = exporter_->export_metrics(metrics, resource_, deadline);
    ledger_.settle(n, ok ? ExportLedger::Outcome::kExported : ExportLedger::Outcome::kFailed);
  } catch (...) {
    ledger_.settle(0, ExportLedger::Outcome::kFailed);  // out of memory
  }
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

}  // namespace nemo::lens
