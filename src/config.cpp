#include "nemo/lens/config.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "env.hpp"
#include "strings.hpp"

namespace nemo::lens {

namespace {

// The value of `<prefix>_<key>` or, when that is unset or blank, `<fallback>_<key>`, with the
// name of the variable it came from.
struct Found {
  std::string variable;
  std::string value;
};

std::optional<Found> lookup(std::string_view prefix, std::string_view fallback,
                            std::string_view key) {
  std::string primary = std::string(prefix) + "_" + std::string(key);
  if (auto v = detail::env_trimmed(primary)) return Found{primary, *v};
  if (!fallback.empty()) {
    std::string secondary = std::string(fallback) + "_" + std::string(key);
    if (auto v = detail::env_trimmed(secondary)) return Found{secondary, *v};
  }
  return std::nullopt;
}

class Reader {
 public:
  Reader(std::string_view prefix, std::string_view fallback)
      : prefix_(prefix), fallback_(fallback) {}

  std::string str(std::string_view key, std::string def) const {
    auto f = lookup(prefix_, fallback_, key);
    return f ? f->value : std::move(def);
  }

  bool boolean(std::string_view key, bool def) const {
    auto f = lookup(prefix_, fallback_, key);
    if (!f) return def;
    if (auto b = detail::parse_bool(f->value)) return *b;
    throw ConfigError("Invalid boolean for " + f->variable + ": '" + f->value +
                      "'. Expected one of 1/0, true/false, yes/no, on/off (any case).");
  }

  int integer(std::string_view key, int def) const {
    auto f = lookup(prefix_, fallback_, key);
    if (!f) return def;
    if (auto i = detail::parse_int(f->value)) return *i;
    throw ConfigError("Invalid integer for " + f->variable + ": '" + f->value +
                      "'. Expected a whole decimal integer such as -1 or 3.");
  }

  double real(std::string_view key, double def) const {
    auto f = lookup(prefix_, fallback_, key);
    if (!f) return def;
    if (auto d = detail::parse_double(f->value)) return *d;
    throw ConfigError("Invalid float for " + f->variable + ": '" + f->value +
                      "'. Expected a decimal number such as 0.25.");
  }

  // Where a key's value came from, for error messages about a value that parsed.
  std::string variable(std::string_view key) const {
    auto f = lookup(prefix_, fallback_, key);
    return f ? f->variable : std::string(prefix_) + "_" + std::string(key);
  }

 private:
  std::string_view prefix_;
  std::string_view fallback_;
};

}  // namespace

const SpanGroupCatalog& NemoLensConfig::catalog() const noexcept {
  return span_group_catalog ? *span_group_catalog : SpanGroup::catalog();
}

GroupSet NemoLensConfig::resolved_span_groups() const { return catalog().resolve(span_groups); }

void NemoLensConfig::validate() const {
  if (!(export_sample_rate >= 0.0 && export_sample_rate <= 1.0)) {
    throw ConfigError("export_sample_rate must be in [0.0, 1.0], got " +
                      std::to_string(export_sample_rate));
  }
}

std::optional<std::string> NemoLensConfig::env(std::string_view key) const {
  auto f = lookup(env_prefix, env_fallback_prefix, key);
  if (!f) return std::nullopt;
  return f->value;
}

std::optional<std::string> NemoLensConfig::env_variable(std::string_view key) const {
  auto f = lookup(env_prefix, env_fallback_prefix, key);
  if (!f) return std::nullopt;
  return f->variable;
}

NemoLensConfig NemoLensConfig::from_env(std::string_view prefix,
                                        std::optional<std::string_view> fallback_prefix,
                                        const SpanGroupCatalog& span_group_cls) {
  const std::string_view fallback = fallback_prefix.value_or(std::string_view{});
  const Reader r(prefix, fallback);
  NemoLensConfig c;
  c.env_prefix = std::string(prefix);
  c.env_fallback_prefix = std::string(fallback);
  c.enabled = r.boolean("ENABLED", false);
  c.service_name = detail::env_trimmed("OTEL_SERVICE_NAME").value_or("nemo");
  c.export_strategy = r.str("EXPORT_STRATEGY", "single_rank");
  c.export_rank = r.integer("EXPORT_RANK", -1);
  c.export_sample_rate = r.real("EXPORT_SAMPLE_RATE", 1.0);
  c.sampler_enabled = r.boolean("SAMPLER_ENABLED", false);
  c.traces_enabled = r.boolean("TRACES_ENABLED", true);
  c.metrics_enabled = r.boolean("METRICS_ENABLED", true);
  c.logs_enabled = r.boolean("LOGS_ENABLED", false);
  c.span_groups = r.str("SPAN_GROUPS", "default");
  c.exporter = r.str("EXPORTER", "otlp");
  c.run_id = r.str("RUN_ID", "");
  c.user = r.str("USER_ID", "");
  c.wandb_entity = detail::env_trimmed("WANDB_ENTITY").value_or("");
  c.wandb_project = detail::env_trimmed("WANDB_PROJECT").value_or("");
  c.span_group_catalog = std::make_shared<const SpanGroupCatalog>(span_group_cls);

  if (c.export_rank < -1) {
    throw ConfigError("Invalid value for " + r.variable("EXPORT_RANK") + ": " +
                      std::to_string(c.export_rank) + ". Expected a rank >= 0, or -1 for the last rank.");
  }
  if (!(c.export_sample_rate >= 0.0 && c.export_sample_rate <= 1.0)) {
    throw ConfigError("Invalid value for " + r.variable("EXPORT_SAMPLE_RATE") + ": '" +
                      r.str("EXPORT_SAMPLE_RATE", "") +
                      "'. Expected a fraction: export_sample_rate must be in [0.0, 1.0].");
  }
  // OpenTelemetry's switch: only "true" (any case) disables; anything but true/false is an error
  // rather than a silent guess.
  if (auto sdk_disabled = detail::env_trimmed("OTEL_SDK_DISABLED")) {
    const std::string v = detail::to_lower(*sdk_disabled);
    if (v == "true") {
      c.enabled = false;
    } else if (v != "false") {
      throw ConfigError("Invalid value for OTEL_SDK_DISABLED: '" + *sdk_disabled +
                        "'. Expected 'true' or 'false' (the OpenTelemetry specification's values).");
    }
  }
  return c;
}

}  // namespace nemo::lens
