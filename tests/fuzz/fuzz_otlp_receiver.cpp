// libFuzzer target: what `lens collect` does with a request body from the network
// (tools/lens/otlp_transcode.hpp).
//
// Input: a body, decoded both as protobuf and as OTLP/JSON. Properties:
//   - neither decoder crashes, whatever the bytes;
//   - a refused body leaves the output as it was (the receiver appends nothing) and says why;
//   - an accepted protobuf body gives one line of JSON (no newline) that the JSON decoder accepts
//     in turn, with the same span count and byte for byte the same text (the JSON decoder keeps
//     tokens as written, and the protobuf decoder writes compact JSON);
//   - an accepted JSON body is re-serialised idempotently.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "otlp_transcode.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view body(reinterpret_cast<const char*>(data), size);
  const std::string prefix = "kept";

  std::string proto_out = prefix;
  const lens_cli::TranscodeResult proto = lens_cli::protobuf_to_json(body, proto_out);
  if (!proto.ok) {
    LENS_FUZZ_CHECK(proto_out == prefix);
    LENS_FUZZ_CHECK(!proto.error.empty());
  } else {
    const std::string_view line = std::string_view(proto_out).substr(prefix.size());
    LENS_FUZZ_CHECK(line.find('\n') == std::string_view::npos);
    std::string again;
    const lens_cli::TranscodeResult json = lens_cli::json_to_json(line, again);
    LENS_FUZZ_CHECK(json.ok);
    LENS_FUZZ_CHECK(json.spans == proto.spans);
    LENS_FUZZ_CHECK(again == line);
  }

  std::string json_out = prefix;
  const lens_cli::TranscodeResult json = lens_cli::json_to_json(body, json_out);
  if (!json.ok) {
    LENS_FUZZ_CHECK(json_out == prefix);
    LENS_FUZZ_CHECK(!json.error.empty());
  } else {
    const std::string_view line = std::string_view(json_out).substr(prefix.size());
    LENS_FUZZ_CHECK(line.find('\n') == std::string_view::npos);
    std::string again;
    const lens_cli::TranscodeResult twice = lens_cli::json_to_json(line, again);
    LENS_FUZZ_CHECK(twice.ok && twice.spans == json.spans && again == line);
  }
  return 0;
}
