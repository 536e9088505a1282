// A minimal program built against an installed lens, the way a downstream project would use it.
// The packaging test builds it twice (CMake package and pkg-config) and compares its output with
// tests/package/expected_output.txt.in. It exercises the public headers, the exported catalog and
// set-up functions, and the call-site gate, whose slow path crosses into the shared library.
//
//   nemo_lens 0.1.0
//   resolved default,step: checkpoint evaluate job step
//   ...
#include <cstdio>
#include <exception>
#include <nemo/lens/lens.hpp>
#include <string>

namespace {

namespace lens = nemo::lens;

// The set's names separated by single spaces, in the set's (sorted) order.
std::string join(const lens::GroupSet& groups) {
  std::string out;
  for (const auto& g : groups) {
    if (!out.empty()) out += ' ';
    out += g;
  }
  return out;
}

const char* on_off(bool on) { return on ? "on" : "off"; }

}  // namespace

int main() {
  try {
    std::printf("nemo_lens %s\n", NEMO_LENS_VERSION_STRING);
    std::printf("resolved default,step: %s\n",
                join(lens::SpanGroup::catalog().resolve("default,step")).c_str());
    std::printf("megatron per_step: %s\n",
                join(lens::MegatronSpanGroup::catalog().resolve("per_step")).c_str());

    // Built directly rather than from the environment, so the test's environment cannot change
    // the result. Rank 0 of 1 is the last rank, which "single_rank" (the default) picks.
    lens::NemoLensConfig config;
    config.enabled = true;
    config.span_groups = "default,step";
    config.exporter = "console";  // no span is started, so nothing is printed
    lens::TelemetryHandle telemetry = lens::setup_telemetry(config, /*rank=*/0, /*world_size=*/1);
    std::printf("exporting: %s\n", telemetry.is_exporting() ? "yes" : "no");
    std::printf("enabled: %s\n", join(lens::enabled_span_groups()).c_str());
    std::printf("gate step: %s\n", on_off(LENS_GROUP_ENABLED(lens::SpanGroup::STEP)));
    std::printf("gate optimizer: %s\n", on_off(LENS_GROUP_ENABLED(lens::SpanGroup::OPTIMIZER)));

    telemetry.shutdown();
    std::printf("after shutdown, gate step: %s\n",
                on_off(LENS_GROUP_ENABLED(lens::SpanGroup::STEP)));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
  return 0;
}
