// The standard OpenTelemetry SDK variables lens honours for spans. Unlike SDKs that warn and fall
// back, lens refuses a value it cannot read: a job should not run for hours with a setting it
// silently ignored.
#include <charconv>
#include <cmath>

#include "env.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

std::uint32_t count_limit(const char* specific, std::uint32_t general) {
  return static_cast<std::uint32_t>(
      env_uint(specific, 0, UINT32_MAX, "a whole number of attributes, events or links >= 0")
          .value_or(general));
}

}  // namespace

BatchOptions batch_options_from_env() {
  BatchOptions o;
  o.max_queue_size = env_uint("OTEL_BSP_MAX_QUEUE_SIZE", 1, 1u << 24, "a queue size from 1 to 16777216")
                         .value_or(o.max_queue_size);
  o.max_export_batch_size =
      env_uint("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", 1, 1u << 24, "a batch size from 1 to 16777216")
          .value_or(o.max_export_batch_size);
  if (o.max_export_batch_size > o.max_queue_size) {
    throw ConfigError("OTEL_BSP_MAX_EXPORT_BATCH_SIZE (" + std::to_string(o.max_export_batch_size) +
                      ") must not exceed OTEL_BSP_MAX_QUEUE_SIZE (" +
                      std::to_string(o.max_queue_size) + ").");
  }
  o.schedule_delay = std::chrono::milliseconds(
      env_uint("OTEL_BSP_SCHEDULE_DELAY", 1, 86'400'000, "a delay in milliseconds from 1 to 86400000")
          .value_or(static_cast<std::uint64_t>(o.schedule_delay.count())));
  o.export_timeout = std::chrono::milliseconds(
      env_uint("OTEL_BSP_EXPORT_TIMEOUT", 1, 86'400'000, "a timeout in milliseconds from 1 to 86400000")
          .value_or(static_cast<std::uint64_t>(o.export_timeout.count())));
  return o;
}

SpanLimits span_limits_from_env() {
  SpanLimits l;
  const std::uint32_t general =
      count_limit("OTEL_ATTRIBUTE_COUNT_LIMIT", l.attribute_count);
  l.attribute_count = count_limit("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", general);
  l.event_count = count_limit("OTEL_SPAN_EVENT_COUNT_LIMIT", l.event_count);
  l.link_count = count_limit("OTEL_SPAN_LINK_COUNT_LIMIT", l.link_count);
  l.event_attribute_count = count_limit("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", general);
  l.link_attribute_count = count_limit("OTEL_LINK_ATTRIBUTE_COUNT_LIMIT", general);
  const char* kLength = "a length in characters >= 0";
  auto length = env_uint("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", 0, UINT64_MAX, kLength);
  auto span_length = env_uint("OTEL_SPAN_ATTRIBUTE_VALUE_LENGTH_LIMIT", 0, UINT64_MAX, kLength);
  if (span_length) {
    l.attribute_value_length = static_cast<std::size_t>(*span_length);
  } else if (length) {
    l.attribute_value_length = static_cast<std::size_t>(*length);
  }
  return l;
}

SamplerConfig sampler_from_env() {
  SamplerConfig s;
  const std::string name = to_lower(env_trimmed("OTEL_TRACES_SAMPLER").value_or("parentbased_always_on"));
  double ratio = 1.0;
  if (auto arg = env_trimmed("OTEL_TRACES_SAMPLER_ARG")) {
    auto r = parse_double(*arg);
    if (!r || *r < 0.0 || *r > 1.0) {
      throw ConfigError("Invalid value for OTEL_TRACES_SAMPLER_ARG: '" + *arg +
                        "'. Expected a sampling ratio in [0.0, 1.0].");
    }
    ratio = *r;
  }
  std::string_view root = name;
  s.parent_based = root.rfind("parentbased_", 0) == 0;
  if (s.parent_based) root.remove_prefix(std::string_view("parentbased_").size());
  if (root == "always_on") {
    s.root = SamplerConfig::Root::kAlwaysOn;
  } else if (root == "always_off") {
    s.root = SamplerConfig::Root::kAlwaysOff;
  } else if (root == "traceidratio") {
    s.root = SamplerConfig::Root::kRatio;
    s.ratio_one = ratio >= 1.0;
    s.ratio_threshold = s.ratio_one ? UINT64_MAX : static_cast<std::uint64_t>(std::ldexp(ratio, 64));
  } else {
    throw ConfigError("Unknown OTEL_TRACES_SAMPLER: '" + name +
                      "'. Valid options: ['always_off', 'always_on', 'parentbased_always_off', "
                      "'parentbased_always_on', 'parentbased_traceidratio', 'traceidratio'].");
  }
  // always_off records nothing; parentbased_always_off records only under sampled remote parents.
  s.records_anything = !(s.root == SamplerConfig::Root::kAlwaysOff && !s.parent_based);
  return s;
}

std::vector<std::string> default_redacted_keys() {
  return {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"};
}

}  // namespace nemo::lens::detail
