#include "nemo/lens/telemetry.hpp"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <random>

#include "control/endpoint.hpp"
#include "env.hpp"
#include "export/exporters.hpp"
#include "gpu/gpu_timing.hpp"
#include "gpu/settings.hpp"
#include "immortal.hpp"
#include "inherited_context.hpp"
#include "logs/log_processor.hpp"
#include "metrics/metric_reader.hpp"
#include "nemo/lens/logs.hpp"
#include "nemo/lens/sampling.hpp"
#include "nemo/lens/state.hpp"
#include "nvtx/settings.hpp"
#include "record/recorder.hpp"
#include "record/settings.hpp"
#include "resources/resource.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens {

namespace detail {

struct TelemetryState {
  NemoLensConfig config;
  int rank = 0;
  int world_size = 1;
  bool exporting = false;
  Pipeline* pipeline = nullptr;              // immortal; null when not exporting
  std::unique_ptr<ControlEndpoint> control;  // null when off or it could not start
  // Null when metrics are off or not exported here. Owned, unless `metrics_kept`: its thread may
  // outlive the state (a forked child, or shutdown gave up on a custom exporter), so it stays.
  MetricReader* metrics = nullptr;
  bool metrics_kept = false;
  LogProcessor* logs = nullptr;        // immortal (threads may be logging); null when off
  Resource resource;                   // of every signal; empty when nothing is exported
  std::atomic<bool> shut_down{false};  // written under g_setup_mu

  TelemetryState() = default;
  TelemetryState(const TelemetryState&) = delete;
  TelemetryState& operator=(const TelemetryState&) = delete;
  ~TelemetryState() {
    if (!metrics_kept) delete metrics;
  }
};

namespace {

// The counters of every signal of `s`.
TelemetryStats stats_of(const TelemetryState& s) noexcept {
  TelemetryStats st;
  if (s.pipeline != nullptr) st = s.pipeline->current()->stats();
  if (s.metrics != nullptr) {
    st.metric_points_collected = s.metrics->collected_points();
    st.metric_points_exported = s.metrics->exported_points();
    st.metric_points_buffered = s.metrics->buffered_points();
    st.metric_points_dropped = s.metrics->dropped_points();
    st.metric_exports_failed = s.metrics->failed_exports();
    st.metric_measurements_dropped = dropped_measurements();
  }
  if (s.logs != nullptr) {
    st.log_records_emitted = s.logs->emitted();
    st.log_records_exported = s.logs->exported();
    st.log_records_buffered = s.logs->buffered();
    st.log_records_dropped = s.logs->dropped();
  }
  return st;
}

constinit std::mutex g_setup_mu;
// The active enabled set-up, if any. Held strongly: it stays active (and is shut down at exit)
// until shutdown(), even when the program drops every handle.
std::shared_ptr<TelemetryState>& active_state() {
  static auto* active = new std::shared_ptr<TelemetryState>();
  return *active;
}

std::string random_hex(std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  while (out.size() < n) {
    std::uint64_t v = os_random64();  // the OS's entropy, unaffected by the program's seeding
    for (int i = 0; i < 16 && out.size() < n; ++i, v >>= 4) out += kHex[v & 0xf];
  }
  return out;
}

std::vector<std::string> redacted_keys(const NemoLensConfig& config, const SetupOptions& options) {
  if (options.redacted_keys) return *options.redacted_keys;
  auto env = config.env("REDACTED_KEYS");
  if (!env) return default_redacted_keys();
  std::vector<std::string> keys;
  for (auto part : split(*env, ',')) {
    auto k = trim(part);
    if (!k.empty()) keys.emplace_back(k);
  }
  return keys;
}

// Under single_rank, an export_rank at or beyond the world size means that no rank exports. NeMo
// Lens decides the same without a word; lens keeps the decision (C++ and Python pick the same
// ranks) but says so once, on rank 0, naming where the rank came from.
void warn_if_no_rank_exports(const NemoLensConfig& config, int rank, int world_size,
                             const SetupOptions& options) {
  if (options.strategy || config.export_strategy != "single_rank" || rank != 0 ||
      config.export_rank < world_size) {
    return;
  }
  std::string source = "export_rank";
  if (auto variable = config.env_variable("EXPORT_RANK")) {
    if (parse_int(*config.env("EXPORT_RANK")) == config.export_rank) source = *variable;
  }
  std::fprintf(stderr,
               "lens: %s is %d, but the world size is %d: with export_strategy single_rank no "
               "rank exports. Give a rank from 0 to %d, or -1 for the last rank.\n",
               source.c_str(), config.export_rank, world_size, world_size - 1);
}

// The one-line summary shutdown prints last, when any signal lost something.
void print_summary(const TelemetryState& s, const TelemetryStats& st) {
  const std::uint64_t dropped =
      st.spans_dropped_queue_full + st.spans_dropped_export_failed + st.spans_dropped_shutdown;
  if (dropped == 0 && st.spans_rejected == 0 && st.metric_points_dropped == 0 &&
      st.log_records_dropped == 0) {
    return;
  }
  using ull = unsigned long long;
  std::string line = "lens: rank " + std::to_string(s.rank) + " at shutdown:";
  if (s.pipeline != nullptr) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  " dropped %llu of %llu spans (queue full %llu, export failed %llu, at shutdown "
                  "%llu); exported %llu, of which the receiver rejected %llu",
                  static_cast<ull>(dropped), static_cast<ull>(st.spans_ended),
                  static_cast<ull>(st.spans_dropped_queue_full),
                  static_cast<ull>(st.spans_dropped_export_failed),
                  static_cast<ull>(st.spans_dropped_shutdown), static_cast<ull>(st.spans_exported),
                  static_cast<ull>(st.spans_rejected));
    line += buf;
  }
  if (s.metrics) {
    line += (s.pipeline != nullptr ? ";" : "") + std::string(" dropped ") +
            std::to_string(st.metric_points_dropped) + " of " +
            std::to_string(st.metric_points_collected) + " metric data points";
  }
  if (s.logs != nullptr) {
    line += (s.pipeline != nullptr || s.metrics ? ";" : "") + std::string(" dropped ") +
            std::to_string(st.log_records_dropped) + " of " +
            std::to_string(st.log_records_emitted) + " log records";
  }
  std::fprintf(stderr, "%s\n", line.c_str());
}

// Requires g_setup_mu. Stops `s`'s signals and, when `s` is the active set-up, every group. The
// three signals stop at the same time, each on its own thread with the whole budget, so that a
// hung export of one cannot take the time of another; every export in flight is interrupted at
// export_cutoff(deadline).
bool stop_locked(TelemetryState& s, std::chrono::steady_clock::time_point deadline) noexcept {
  if (s.control) s.control->stop();  // first: it may switch groups
  if (active_state().get() == &s) {
    stop_flight_recorder();  // before the pipeline stops: no span is recorded any more
    try {
      set_enabled_span_groups({});
      set_open_span_tracking(TrackOpen::kOff);
      set_nvtx_emitting(false);
    } catch (...) {
    }
    g_metrics_recording.store(false, std::memory_order_relaxed);
    g_logs_recording.store(false, std::memory_order_relaxed);
    if (g_log_processor.load() == s.logs) g_log_processor.store(nullptr);
    active_state().reset();
  }
  if (s.metrics != nullptr && s.metrics->forked()) {  // its thread is the parent's
    keep_reachable(s.metrics);
    s.metrics_kept = true;
    s.metrics = nullptr;
  }
  LogProcessor* logs = s.logs != nullptr && !s.logs->forked() ? s.logs : nullptr;
  Pipeline* pipeline = s.pipeline != nullptr ? s.pipeline->current() : nullptr;
  if (pipeline != nullptr) pipeline->begin_shutdown(deadline);
  if (s.metrics) s.metrics->begin_shutdown(deadline);
  if (logs != nullptr) logs->begin_shutdown(deadline);
  bool ok = true;
  if (pipeline != nullptr) ok = pipeline->finish_shutdown(deadline) && ok;
  if (s.metrics != nullptr && !s.metrics->finish_shutdown(deadline)) {
    // Its thread is still inside a custom exporter: the reader must outlive it.
    keep_reachable(s.metrics);
    s.metrics_kept = true;
    ok = false;
  }
  if (logs != nullptr) ok = logs->finish_shutdown(deadline) && ok;
  s.shut_down.store(true);
  print_summary(s, stats_of(s));
  return ok;
}

// Runs at exit(): a program that returns from main() without shutdown() still exports what it
// recorded, and the exporter thread is stopped before static objects are destroyed.
void shutdown_at_exit() noexcept {
  try {
    std::lock_guard lock(g_setup_mu);
    if (auto active = active_state(); active && !active->shut_down.load()) {
      stop_locked(*active, std::chrono::steady_clock::now() + std::chrono::seconds(5));
    }
  } catch (...) {
  }
}

void install_exit_handler() noexcept {
  static const bool installed = std::atexit(shutdown_at_exit) == 0;
  (void)installed;
}

}  // namespace
}  // namespace detail

TelemetryHandle::TelemetryHandle(std::shared_ptr<detail::TelemetryState> state) noexcept
    : state_(std::move(state)) {}

bool TelemetryHandle::enabled() const noexcept { return state_ && state_->config.enabled; }

bool TelemetryHandle::is_exporting() const noexcept { return state_ && state_->exporting; }

const NemoLensConfig& TelemetryHandle::config() const noexcept {
  static const NemoLensConfig kDefault;
  return state_ ? state_->config : kDefault;
}

int TelemetryHandle::rank() const noexcept { return state_ ? state_->rank : 0; }

int TelemetryHandle::world_size() const noexcept { return state_ ? state_->world_size : 1; }

bool TelemetryHandle::force_flush(std::chrono::milliseconds timeout) noexcept {
  if (!state_ || state_->shut_down.load()) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  // The three flush at the same time, each on its own thread: one cannot hold up the others.
  detail::Pipeline* pipeline = state_->pipeline != nullptr ? state_->pipeline->current() : nullptr;
  detail::MetricReader* metrics =
      state_->metrics != nullptr && !state_->metrics->forked() ? state_->metrics : nullptr;
  detail::LogProcessor* logs =
      state_->logs != nullptr && !state_->logs->forked() ? state_->logs : nullptr;
  const std::uint64_t span_ticket = pipeline != nullptr ? pipeline->request_flush() : 0;
  const std::uint64_t metric_ticket = metrics != nullptr ? metrics->request_flush() : 0;
  const std::uint64_t log_ticket = logs != nullptr ? logs->request_flush() : 0;
  bool ok = true;
  if (pipeline != nullptr) ok = pipeline->wait_flushed(span_ticket, deadline) && ok;
  if (metrics != nullptr) ok = metrics->wait_flushed(metric_ticket, deadline) && ok;
  if (logs != nullptr) ok = logs->wait_flushed(log_ticket, deadline) && ok;
  return ok;
}

bool TelemetryHandle::shutdown(std::chrono::milliseconds timeout) noexcept {
  if (!state_) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  try {
    std::lock_guard lock(detail::g_setup_mu);
    if (state_->shut_down.load()) return true;
    return detail::stop_locked(*state_, deadline);
  } catch (...) {
    return false;  // a mutex failed; nothing else here can throw
  }
}

bool TelemetryHandle::is_shut_down() const noexcept { return state_ && state_->shut_down.load(); }

TelemetryStats TelemetryHandle::stats() const noexcept {
  return state_ ? detail::stats_of(*state_) : TelemetryStats{};
}

const Resource& TelemetryHandle::resource() const noexcept {
  static const Resource kEmpty;
  if (!state_) return kEmpty;
  if (state_->pipeline != nullptr) return state_->pipeline->current()->resource;
  return state_->resource;
}

namespace {

// Starts GPU time of spans in `pipeline` (not published yet); on failure says why on stderr, once,
// and leaves everything else as it was.
void start_gpu_timing(detail::Pipeline& pipeline, const detail::GpuSettings& settings) noexcept {
  std::string why;
  try {
    auto* timing = new detail::GpuTiming(
        pipeline, settings.groups, detail::gpu_wait(settings, pipeline.options.schedule_delay),
        settings.kernel_spans);
    why = timing->start(detail::make_gpu_source());
    if (why.empty()) {
      pipeline.gpu = timing;  // never freed, like the pipeline
      return;
    }
    delete timing;
  } catch (...) {
    why = "out of memory";
  }
  std::fprintf(stderr, "lens: GPU time of spans is off (%s): %s\n", settings.spec.c_str(),
               why.c_str());
}

}  // namespace

TelemetryHandle setup_telemetry(const NemoLensConfig& config, int rank, int world_size,
                                SetupOptions options) {
  if (world_size < 1) {
    throw ConfigError("setup_telemetry: world_size must be >= 1, got " +
                      std::to_string(world_size));
  }
  if (rank < 0 || rank >= world_size) {
    throw ConfigError("setup_telemetry: rank must be in [0, " + std::to_string(world_size - 1) +
                      "], got " + std::to_string(rank));
  }
  auto state = std::make_shared<detail::TelemetryState>();
  state->config = config;
  state->rank = rank;
  state->world_size = world_size;
  if (!config.enabled) {
    // Every group off, unless an enabled set-up (say, of another library in this process) is
    // active: a disabled configuration must not switch that one's tracing off.
    std::lock_guard lock(detail::g_setup_mu);
    if (auto active = detail::active_state(); !active || active->shut_down.load()) {
      set_enabled_span_groups({});
    }
    return TelemetryHandle(std::move(state));
  }

  // Everything that can throw happens before any state changes. Set-up is rare: it runs under
  // the set-up mutex from here on.
  std::lock_guard lock(detail::g_setup_mu);
  auto active = detail::active_state();
  if (active && active->shut_down.load()) active.reset();
  if (active && !options.allow_reinit) {
    throw ConfigError(
        "setup_telemetry was already called in this process (run_id '" + active->config.run_id +
        "'). Call shutdown() on its handle first, or pass SetupOptions{.allow_reinit = true}.");
  }
  config.validate();
  GroupSet groups = config.resolved_span_groups();
  const detail::ControlSettings control = detail::control_settings(config);
  const detail::GpuSettings gpu = detail::gpu_settings(config);
  const detail::RecordSettings record = detail::record_settings(config);
  const bool nvtx = detail::nvtx_emits(detail::nvtx_mode(config));
  detail::InheritedContext inherited = detail::read_inherited_context();
  ExportStrategy strategy =
      options.strategy ? options.strategy : get_export_strategy(config.export_strategy);
  state->exporting = strategy(config, rank, world_size);
  if (state->config.run_id.empty()) {
    state->config.run_id = detail::env_trimmed("SLURM_JOB_ID").value_or(detail::random_hex(12));
  }
  // A rank the rank-aware sampler drops keeps none of its spans: it gets no pipeline and every
  // group off, so its sites cost only the gate.
  const bool rank_sampled =
      !config.sampler_enabled ||
      RankAwareSampler(rank, world_size, config.export_sample_rate).should_sample();
  const bool tracing = state->exporting && config.traces_enabled && rank_sampled;
  const bool metrics = state->exporting && config.metrics_enabled;
  const bool logs = state->exporting && config.logs_enabled;
  // Metrics and logs: settings and exporters first (they may throw), started below.
  std::optional<detail::MetricSettings> metric_settings;
  std::shared_ptr<MetricExporter> metric_exporter;
  if (metrics) {
    metric_settings = detail::metric_settings_from_env();
    metric_exporter = options.metric_exporter ? options.metric_exporter
                                              : detail::make_metric_exporter(state->config, rank);
  }
  std::optional<detail::LogSettings> log_settings;
  detail::LogLimits log_limits;
  std::shared_ptr<LogExporter> log_exporter;
  if (logs) {
    log_settings = detail::log_settings_from_env();
    const detail::SpanLimits span_limits = detail::span_limits_from_env();
    log_limits.attribute_count = span_limits.attribute_count;
    log_limits.attribute_value_length = span_limits.attribute_value_length;
    log_limits.redacted_keys = detail::redacted_keys(config, options);
    log_exporter = options.log_exporter ? options.log_exporter
                                        : detail::make_log_exporter(state->config, rank);
  }
  if (metrics || logs) {
    state->resource =
        detail::detect_resource(state->config, rank, world_size, options.resource_attributes);
  }
  if (tracing) {
    detail::BatchOptions batch = detail::batch_options_from_env();
    detail::SpanLimits limits = detail::span_limits_from_env();
    detail::SamplerConfig sampler = detail::sampler_from_env();
    Resource resource = (metrics || logs) ? state->resource
                                          : detail::detect_resource(state->config, rank, world_size,
                                                                    options.resource_attributes);
    std::shared_ptr<SpanExporter> exporter = options.exporter;
    std::function<std::shared_ptr<SpanExporter>()> exporter_for_child;
    if (!exporter) {
      exporter = detail::make_exporter(state->config, rank);
      exporter_for_child = [cfg = state->config, rank]() -> std::shared_ptr<SpanExporter> {
        try {
          return detail::make_exporter(cfg, rank);
        } catch (...) {
          return nullptr;  // the child's spans are counted as failed exports
        }
      };
    }
    auto* pipeline =
        new detail::Pipeline(batch, limits, sampler, detail::redacted_keys(config, options),
                             std::move(resource), std::move(exporter));
    pipeline->exporter_for_child = std::move(exporter_for_child);
    pipeline->inherit(inherited.context);
    state->pipeline = pipeline;
  }

  if (active) {
    detail::stop_locked(*active, std::chrono::steady_clock::now() + std::chrono::seconds(30));
  }
  // GPU time: its source starts once the set-up before this one stopped its own (CUPTI takes one
  // subscriber), before the pipeline is published.
  if (state->pipeline != nullptr && gpu.on()) start_gpu_timing(*state->pipeline, gpu);
  detail::install_fork_handlers();
  detail::install_exit_handler();
  detail::set_inherited_context(std::move(inherited));
  detail::g_active_pipeline.store(state->pipeline, std::memory_order_release);
  set_enabled_span_groups(tracing ? groups : GroupSet{});
  // The flight recorder records on a rank that exports spans (docs/flight-recorder.md).
  if (tracing) detail::start_flight_recorder(record);
  // NVTX ranges follow the span groups on every rank, exporting or not.
  if (!tracing) detail::set_nvtx_span_groups(groups);
  detail::set_nvtx_emitting(nvtx);
  // Open spans are tracked for `lens ctl dump`: recorded ones, or with TRACK_OPEN=all every one.
  if (control.track_open == detail::TrackOpen::kAll) detail::calibrate_clock();
  detail::set_open_span_tracking(control.track_open);
  state->control = detail::ControlEndpoint::start(
      {state->config, rank, world_size, state->pipeline, std::move(groups), control});
  if (metrics) {
    detail::reset_metric_values();
    state->metrics =
        new detail::MetricReader(*metric_settings, std::move(metric_exporter), state->resource);
    detail::g_metrics_recording.store(true, std::memory_order_relaxed);
  }
  if (logs) {
    state->logs = new detail::LogProcessor(*log_settings, std::move(log_limits),
                                           std::move(log_exporter), state->resource);
    detail::g_log_processor.store(state->logs, std::memory_order_release);
    detail::g_logs_recording.store(true, std::memory_order_relaxed);
  }
  detail::active_state() = state;
  detail::warn_if_no_rank_exports(config, rank, world_size, options);
  return TelemetryHandle(std::move(state));
}

}  // namespace nemo::lens
