// OTLP request bodies to OTLP/JSON lines for `lens collect`: the entry points. The protobuf
// decoder (a wire reader under a per-message JSON writer, one file per signal) and the JSON
// compactor live in transcode/.
#include "common/otlp_transcode.hpp"

#include <cstddef>
#include <cstdint>
#include <exception>
#include <string>
#include <string_view>
#include <utility>

#include "common/transcode/json_compactor.hpp"
#include "common/transcode/protobuf_to_json.hpp"

namespace lens_cli {

namespace {

TranscodeResult refused(std::string error) {
  TranscodeResult r;
  r.error = std::move(error);
  return r;
}

TranscodeResult accepted(Signal signal, std::uint64_t items) {
  TranscodeResult r;
  r.ok = true;
  switch (signal) {
    case Signal::kTraces:
      r.spans = items;
      break;
    case Signal::kMetrics:
      r.points = items;
      break;
    case Signal::kLogs:
      r.records = items;
      break;
  }
  return r;
}

}  // namespace

const char* signal_name(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return "metrics";
    case Signal::kLogs:
      return "logs";
    case Signal::kTraces:
      break;
  }
  return "traces";
}

TranscodeResult protobuf_to_json(std::string_view bytes, std::string& out, Signal signal) {
  const std::size_t mark = out.size();
  try {
    // OTLP/JSON of a typical request is 1.5-3 times its protobuf size (lens' spans: 2.7).
    out.reserve(mark + 3 * bytes.size() + 32);
    transcode::ProtobufToJson transcoder(bytes, out);
    const auto* p = reinterpret_cast<const transcode::Byte*>(bytes.data());
    if (!transcoder.request(signal, p, p + bytes.size())) {
      out.resize(mark);
      return refused(std::move(transcoder.error));
    }
    TranscodeResult r = accepted(signal, transcoder.spans + transcoder.points + transcoder.records);
    r.unreadable = std::move(transcoder.unreadable);
    return r;
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
    out.resize(mark);
    return refused(std::string("out of memory: ") + e.what());
  }
}

TranscodeResult json_to_json(std::string_view body, std::string& out, Signal signal) {
  const std::size_t mark = out.size();
  try {
    out.reserve(mark + body.size());
    std::string error;
    std::uint64_t items = 0;
    if (!transcode::compact_json(body, out, signal, error, items)) {
      out.resize(mark);
      return refused(std::move(error));
    }
    return accepted(signal, items);
  } catch (const std::exception& e) {  // std::bad_alloc, std::length_error
    out.resize(mark);
    return refused(std::string("out of memory: ") + e.what());
  }
}

}  // namespace lens_cli
