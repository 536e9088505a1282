// OTLP/JSON to OTLP/JSON: a body checked as JSON and as the request's shape, its tokens copied
// as written without the whitespace between them (json_to_json in common/otlp_transcode.hpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/otlp_transcode.hpp"

namespace lens_cli::transcode {

// Appends `body` compacted to `out` and counts its items (spans, data points or log records); on
// failure returns false with `error` set, and `out` holds a partial line that the caller truncates.
bool compact_json(std::string_view body, std::string& out, Signal signal, std::string& error,
                  std::uint64_t& items);

}  // namespace lens_cli::transcode
