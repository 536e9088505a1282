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
