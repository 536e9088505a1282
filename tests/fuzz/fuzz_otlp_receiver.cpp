// libFuzzer target: what `lens collect` does with a request body from the network
// (tools/lens/common/otlp_transcode.hpp).
//
// Input: a body, decoded both as protobuf and as OTLP/JSON, as a request of each signal (traces,
// metrics, logs). Properties:
//   - neither decoder crashes, whatever the bytes;
//   - a refused body leaves the output as it was (the receiver appends nothing) and says why;
//   - an accepted protobuf body gives one line of JSON (no newline) that the JSON decoder accepts
//     in turn, with the same span (data point, log record) count and byte for byte the same
//     text (the JSON decoder keeps tokens as written, and the protobuf decoder writes compact
//     JSON);
//   - an accepted JSON body is re-serialised idempotently, as strict RFC 8259 JSON (what
//     nlohmann/json, the reader of lens report, parses): lone surrogate escapes and numbers
//     beyond a double are normalised away (docs/otlp.md);
//   - nothing lens collect accepts is unreadable: a line that passes the receiver's check (the
//     protobuf decoder's `unreadable` for spans and logs, else the reader with details and
//     metrics; tools/lens/collect/collector.cpp) is read without error both as `lens report`
//     reads it (metrics, no details) and as `lens convert` does (details, no metrics), with as
//     many spans as the decoder counted (traces); and the decoder's `unreadable` says a line is
//     unreadable exactly when the reader does.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "common/otlp_transcode.hpp"
#include "common/span_reader.hpp"
#include "fuzz_check.hpp"

namespace {

namespace cli = nemo::lens::cli;

// What lens collect does after decoding (tools/lens/collect/collector.cpp): writes the line only
// when lens report and lens convert read it. For a protobuf body of spans or logs it trusts the
// decoder's `unreadable` (spans) instead of reading the line: here that trust is checked.
void check_readable(std::string_view line, const lens_cli::TranscodeResult& decoded,
                    lens_cli::Signal signal, bool json) {
  static const cli::SpanLineReader collect({.details = true, .threads = 1, .metrics = true});
  static const cli::SpanLineReader report({.threads = 1, .metrics = true});
  static const cli::SpanLineReader convert({.details = true, .threads = 1});
  cli::ParsedRequest parsed;
  const std::string error = collect.parse_line(line, parsed);
  if (!json && signal != lens_cli::Signal::kMetrics) {
    // The decoder's verdict is the reader's.
    LENS_FUZZ_CHECK(decoded.unreadable.empty() == error.empty());
  }
  if (!error.empty()) return;  // answered 400: nothing was written
  const std::size_t spans = parsed.span_count;
  // The decoder counts the spans of a trace request only.
  LENS_FUZZ_CHECK(signal != lens_cli::Signal::kTraces || spans == decoded.spans);
  for (const cli::SpanLineReader* reader : {&report, &convert}) {
    cli::ParsedRequest again;
    LENS_FUZZ_CHECK(reader->parse_line(line, again).empty());
    LENS_FUZZ_CHECK(again.span_count == spans);
  }
}

void check(std::string_view body, lens_cli::Signal signal) {
  const std::string prefix = "kept";
  auto same_counts = [](const lens_cli::TranscodeResult& a, const lens_cli::TranscodeResult& b) {
    return a.spans == b.spans && a.points == b.points && a.records == b.records;
  };

  std::string proto_out = prefix;
  const lens_cli::TranscodeResult proto = lens_cli::protobuf_to_json(body, proto_out, signal);
  if (!proto.ok) {
    LENS_FUZZ_CHECK(proto_out == prefix);
    LENS_FUZZ_CHECK(!proto.error.empty());
  } else {
    const std::string_view line = std::string_view(proto_out).substr(prefix.size());
    LENS_FUZZ_CHECK(line.find('\n') == std::string_view::npos);
    std::string again;
    const lens_cli::TranscodeResult json = lens_cli::json_to_json(line, again, signal);
    LENS_FUZZ_CHECK(json.ok);
    LENS_FUZZ_CHECK(same_counts(json, proto));
    LENS_FUZZ_CHECK(again == line);
    LENS_FUZZ_CHECK(nlohmann::json::accept(line));
    check_readable(line, proto, signal, false);
  }

  std::string json_out = prefix;
  const lens_cli::TranscodeResult json = lens_cli::json_to_json(body, json_out, signal);
  if (!json.ok) {
    LENS_FUZZ_CHECK(json_out == prefix);
    LENS_FUZZ_CHECK(!json.error.empty());
  } else {
    const std::string_view line = std::string_view(json_out).substr(prefix.size());
    LENS_FUZZ_CHECK(line.find('\n') == std::string_view::npos);
    std::string again;
    const lens_cli::TranscodeResult twice = lens_cli::json_to_json(line, again, signal);
    LENS_FUZZ_CHECK(twice.ok && same_counts(twice, json) && again == line);
    LENS_FUZZ_CHECK(nlohmann::json::accept(line));
    check_readable(line, json, signal, true);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  for (const lens_cli::Signal signal :
       {lens_cli::Signal::kTraces, lens_cli::Signal::kMetrics, lens_cli::Signal::kLogs}) {
    check(body, signal);
  }
  return 0;
}
