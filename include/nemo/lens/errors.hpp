// The exceptions lens throws. They come only from configuration and set-up; once
// setup_telemetry() has returned, nothing lens does throws into the instrumented program.
//
//   try {
//     auto cfg = nemo::lens::NemoLensConfig::from_env();
//     auto handle = nemo::lens::setup_telemetry(cfg, rank, world_size);
//   } catch (const nemo::lens::ConfigError& e) {   // also catches SpanGroupError
//     std::fprintf(stderr, "telemetry: %s\n", e.what());
//   }
#pragma once

#include <stdexcept>
#include <string>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// A configuration value is invalid: an environment variable that does not parse, a value out of
/// range, an unknown export strategy or exporter, or a second set-up. The message names the
/// variable or field, the bad value and what would be valid.
class NEMO_LENS_API ConfigError : public std::invalid_argument {
 public:
  /// Creates the error with a complete, user-facing message.
  explicit ConfigError(const std::string& message);
};

/// A span-group spec names something that is neither a group nor a preset of the catalog it is
/// resolved against, or a catalog/registry definition is inconsistent. The message names the
/// offending part and lists every valid option, sorted.
class NEMO_LENS_API SpanGroupError : public ConfigError {
 public:
  /// Creates the error with a complete, user-facing message.
  explicit SpanGroupError(const std::string& message);
};

}  // namespace nemo::lens
