// The GPU-time variables (see settings.hpp).
#include "gpu/settings.hpp"

#include <string>

#include "env.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

GpuSettings gpu_settings(const NemoLensConfig& config) {
  GpuSettings s;
  if (auto v = config.env("GPU_TIME")) {
    s.spec = std::string(trim(*v));
    if (!s.spec.empty()) {
      try {
        s.groups = config.catalog().resolve(s.spec);
      } catch (const SpanGroupError& e) {
        throw ConfigError("Invalid value for " + *config.env_variable("GPU_TIME") + ": '" + *v +
                          "': " + e.what() +
                          ". Expected a span-group spec like SPAN_GROUPS' (presets, groups, all), "
                          "or empty for off.");
      }
      if (s.groups.empty()) s.spec.clear();  // a spec that names no group (an empty preset)
    }
  }
  if (auto v = config.env("GPU_KERNEL_SPANS")) {
    s.kernel_spans_spec = std::string(trim(*v));
    if (!s.kernel_spans_spec.empty()) {
      GroupSet named;
      try {
        named = config.catalog().resolve(s.kernel_spans_spec);
      } catch (const SpanGroupError& e) {
        throw ConfigError("Invalid value for " + *config.env_variable("GPU_KERNEL_SPANS") + ": '" +
                          *v + "': " + e.what() +
                          ". Expected a span-group spec like SPAN_GROUPS' (presets, groups, all), "
                          "or empty for off.");
      }
      for (const auto& g : named) {
        if (s.groups.contains(g)) s.kernel_spans.insert(g);
      }
    }
  }
  if (auto v = config.env("GPU_TIME_WAIT_MS")) {
    const std::string t(trim(*v));
    std::uint64_t ms = 0;
    bool ok = !t.empty() && t.size() <= 9;
    for (char c : t) ok = ok && c >= '0' && c <= '9';
    if (ok) ms = std::stoull(t);
    if (!ok || ms > 86'400'000) {
      throw ConfigError("Invalid value for " + *config.env_variable("GPU_TIME_WAIT_MS") + ": '" +
                        *v + "'. Expected a whole number of milliseconds in [0, 86400000].");
    }
    s.wait = std::chrono::milliseconds(ms);
  }
  return s;
}

std::chrono::milliseconds gpu_wait(const GpuSettings& settings,
                                   std::chrono::milliseconds export_interval) noexcept {
  return settings.wait ? *settings.wait : 2 * export_interval;
}

}  // namespace nemo::lens::detail
