#include "nemo/lens/telemetry.hpp"

#include <atomic>
#include <cstdio>
#include <mutex>
#include <random>

#include "env.hpp"
#include "nemo/lens/state.hpp"

namespace nemo::lens {

namespace detail {

struct TelemetryState {
  NemoLensConfig config;
  int rank = 0;
  int world_size = 1;
  bool exporting = false;
  std::atomic<bool> shut_down{false};
  std::mutex shutdown_mu;
};

namespace {

constinit std::mutex g_setup_mu;
// The active enabled set-up, if any (weak: the program owns the handles).
std::weak_ptr<TelemetryState>& active_state() {
  static auto* w = new std::weak_ptr<TelemetryState>();
  return *w;
}

std::string random_hex(std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;  // the OS's entropy source, unaffected by the program's seeding
  std::string out;
  while (out.size() < n) {
    unsigned v = rd();
    for (int i = 0; i < 8 && out.size() < n; ++i, v >>= 4) out += kHex[v & 0xf];
  }
  return out;
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

bool TelemetryHandle::force_flush(std::chrono::milliseconds) noexcept { return true; }

bool TelemetryHandle::shutdown(std::chrono::milliseconds) noexcept {
  if (!state_) return true;
  try {
    std::lock_guard lock(state_->shutdown_mu);
    if (state_->shut_down.load()) return true;
    {
      std::lock_guard setup_lock(detail::g_setup_mu);
      if (detail::active_state().lock() == state_) {
        set_enabled_span_groups({});
        detail::active_state().reset();
      }
    }
    state_->shut_down.store(true);
  } catch (...) {
    return false;  // a mutex failed; nothing else here can throw
  }
  return true;
}

bool TelemetryHandle::is_shut_down() const noexcept {
  return state_ && state_->shut_down.load();
}

TelemetryHandle setup_telemetry(const NemoLensConfig& config, int rank, int world_size,
                                SetupOptions options) {
  if (world_size < 1) {
    throw ConfigError("setup_telemetry: world_size must be >= 1, got " + std::to_string(world_size));
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
    if (auto active = detail::active_state().lock(); !active || active->shut_down.load()) {
      set_enabled_span_groups({});
    }
    return TelemetryHandle(std::move(state));
  }

  // Everything that can throw happens before any state changes.
  config.validate();
  GroupSet groups = config.resolved_span_groups();
  ExportStrategy strategy =
      options.strategy ? options.strategy : get_export_strategy(config.export_strategy);
  state->exporting = strategy(config, rank, world_size);
  if (state->config.run_id.empty()) {
    state->config.run_id = detail::env_trimmed("SLURM_JOB_ID").value_or(detail::random_hex(12));
  }

  std::lock_guard lock(detail::g_setup_mu);
  if (auto active = detail::active_state().lock(); active && !active->shut_down.load()) {
    if (!options.allow_reinit) {
      throw ConfigError(
          "setup_telemetry was already called in this process (run_id '" + active->config.run_id +
          "'). Call shutdown() on its handle first, or pass SetupOptions{.allow_reinit = true}.");
    }
    active->shut_down.store(true);  // replaced: its groups are overwritten below
  }
  set_enabled_span_groups(state->exporting ? std::move(groups) : GroupSet{});
  detail::active_state() = state;
  return TelemetryHandle(std::move(state));
}

}  // namespace nemo::lens
