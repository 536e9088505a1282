// The flight recorder's variables (see settings.hpp).
#include "record/settings.hpp"

#include <charconv>
#include <cmath>
#include <string>

#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

RecordSettings record_settings(const NemoLensConfig& config) {
  RecordSettings s;
  if (auto v = config.env("RECORD_GROUPS")) {
    s.spec = std::string(trim(*v));
    if (!s.spec.empty()) {
      try {
        s.groups = config.catalog().resolve(s.spec);
      } catch (const SpanGroupError& e) {
        throw ConfigError("Invalid value for " + *config.env_variable("RECORD_GROUPS") + ": '" +
                          *v + "': " + e.what() +
                          ". Expected a span-group spec like SPAN_GROUPS' (presets, groups, all), "
                          "or empty for off.");
      }
      if (s.groups.empty()) s.spec.clear();  // a spec that names no group (an empty preset)
    }
  }
  if (auto v = config.env("RECORD_SPANS")) {
    const std::string_view t = trim(*v);
    std::size_t n = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), n);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || n < kMinRecordSpans ||
        n > kMaxRecordSpans) {
      throw ConfigError("Invalid value for " + *config.env_variable("RECORD_SPANS") + ": '" + *v +
                        "'. Expected a whole number of spans per thread in [" +
                        std::to_string(kMinRecordSpans) + ", " + std::to_string(kMaxRecordSpans) +
                        "] (default " + std::to_string(kDefaultRecordSpans) + ").");
    }
    s.spans = n;
  }
  if (auto v = config.env("RECORD_SLOW_FACTOR")) {
    const std::string_view t = trim(*v);
    double f = 0;
    const auto [end, ec] = std::from_chars(t.data(), t.data() + t.size(), f);
    if (t.empty() || ec != std::errc() || end != t.data() + t.size() || !std::isfinite(f) ||
        f <= 1 || f > 1000) {
      throw ConfigError("Invalid value for " + *config.env_variable("RECORD_SLOW_FACTOR") + ": '" +
                        *v +
                        "'. Expected a number above 1 and at most 1000: how many times the "
                        "median of the recent steps a step must last to be captured (default 2).");
    }
    s.slow_factor = f;
  }
  return s;
}

}  // namespace nemo::lens::detail
