// The flight recorder's variables: <PREFIX>_RECORD_GROUPS, _RECORD_SPANS and _RECORD_SLOW_FACTOR
// (docs/flight-recorder.md). Shared by the library and the lens tool (`lens config`). Internal.
#pragma once

#include <cstddef>
#include <string>

#include "nemo/lens/config.hpp"
#include "nemo/lens/groups.hpp"

namespace nemo::lens::detail {

/// Recorded spans kept per thread when <PREFIX>_RECORD_SPANS is not set.
inline constexpr std::size_t kDefaultRecordSpans = 16384;
/// The bounds of <PREFIX>_RECORD_SPANS.
inline constexpr std::size_t kMinRecordSpans = 16, kMaxRecordSpans = 16u << 20;
/// A top-level step slower than this many times the median of the recent steps is captured, when
/// <PREFIX>_RECORD_SLOW_FACTOR is not set.
inline constexpr double kDefaultSlowFactor = 2.0;

/// What the record variables say.
struct RecordSettings {
  /// The spec as given (trimmed); empty: the flight recorder is off.
  std::string spec;
  /// The recorded groups (those of them that are exported are exported, not recorded); empty: off.
  GroupSet groups;
  /// Recorded spans kept per thread; older ones are overwritten.
  std::size_t spans = kDefaultRecordSpans;
  /// The slow_step trigger's factor over the median of the recent top-level steps, > 1.
  double slow_factor = kDefaultSlowFactor;

  bool on() const noexcept { return !groups.empty(); }
};

/// Reads the variables of `config` (with its fallback prefix). A spec the group catalog does not
/// know, a span count that is not a whole number in [16, 16777216] or a factor that is not a number
/// in (1, 1000] throws ConfigError naming the variable and the value.
RecordSettings record_settings(const NemoLensConfig& config);

}  // namespace nemo::lens::detail
