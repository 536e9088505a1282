// lens config: the configuration the environment gives, checked as set-up would check it.
#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "common/json_output.hpp"
#include "control/settings.hpp"
#include "export/export_buffer.hpp"
#include "export/otlp.hpp"
#include "gpu/settings.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/propagation.hpp"
#include "nemo/lens/ranks.hpp"
#include "nemo/lens/strategies.hpp"
#include "nvtx/settings.hpp"
#include "record/settings.hpp"
#include "strings.hpp"

namespace nemo::lens::cli {

namespace {

constexpr std::string_view kHelp =
    R"(usage: lens config [--prefix P] [--fallback-prefix F] [--catalog base|megatron]
                   [--rank R] [--world-size W] [--json]

Shows the configuration NemoLensConfig::from_env() reads from the environment, the span groups
it resolves to and whether rank R of W ranks exports (is_exporting). The span-group spec and the
export strategy are checked even when telemetry is disabled. With the otlp exporter, the
effective OTLP protocol and endpoint follow (from OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL and
_ENDPOINT, checked with the other OTEL_EXPORTER_OTLP_* variables as set-up checks them). run_id is shown as set; set-up
fills an empty one from SLURM_JOB_ID or at random. Four fields near the end are the live-control
settings (docs/control.md): the control endpoint, its directory, which open spans are tracked
for `lens ctl dump`, and the hang watchdog's timeout (0: off); then the NVTX settings
(docs/nvtx.md): the mode, whether an NVTX tool is attached (NVTX_INJECTION64_PATH, as under
Nsight Systems) and whether span sites open NVTX ranges; then GPU time of spans (docs/gpu.md):
the groups whose spans carry it (off: none) and how long an ended span waits for its GPU
activity (default: twice OTEL_BSP_SCHEDULE_DELAY); then the flight recorder
(docs/flight-recorder.md): the groups it records (off: none), the spans each thread's ring keeps
and the slow_step trigger's factor; last, the context this process would
continue from TRACEPARENT/TRACESTATE (docs/distributed.md; empty when unset). R and W default to what the launcher's
variables give: OpenMPI's, else torchrun's, else PMI's, else SLURM's, else rank 0 of 1.
rank_source names where the rank came from: openmpi, torchrun, pmi, slurm, default or
command_line (--rank).

options:
  --prefix P           read <P>_ENABLED, <P>_SPAN_GROUPS, ... (default NEMO_LENS)
  --fallback-prefix F  read <F>_<KEY> where <P>_<KEY> is unset or blank (default: none)
  --catalog NAME       the catalog span groups resolve against: base (default) or megatron
  --rank R             the rank is_exporting is decided for (default: discovered)
  --world-size W       the number of ranks (default: discovered); 0 <= R < W
  --json               print one JSON object on one line
  -h, --help           show this help and exit

variables: <P>_ENABLED, <P>_EXPORT_STRATEGY, <P>_EXPORT_RANK, <P>_EXPORT_SAMPLE_RATE,
<P>_SAMPLER_ENABLED, <P>_TRACES_ENABLED, <P>_METRICS_ENABLED, <P>_LOGS_ENABLED, <P>_SPAN_GROUPS,
<P>_EXPORTER, <P>_RUN_ID, <P>_USER_ID, <P>_CONTROL, <P>_CONTROL_DIR, <P>_TRACK_OPEN,
<P>_HANG_TIMEOUT, <P>_NVTX, <P>_GPU_TIME, <P>_GPU_TIME_WAIT_MS, <P>_RECORD_GROUPS,
<P>_RECORD_SPANS, <P>_RECORD_SLOW_FACTOR, NVTX_INJECTION64_PATH,
TRACEPARENT, TRACESTATE, XDG_RUNTIME_DIR, OTEL_SERVICE_NAME, OTEL_SDK_DISABLED, WANDB_ENTITY, WANDB_PROJECT, LOCAL_RANK for the
first_rank_per_node strategy, and the launcher variables OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK},
RANK, WORLD_SIZE, PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, PMI_LOCAL_RANK, SLURM_PROCID, SLURM_NTASKS
and SLURM_LOCALID.

exit status: 0 on success, 2 for a bad command line or an invalid configuration.
)";

constexpr FlagSpec kFlags[] = {{"--prefix", true}, {"--fallback-prefix", true}, {"--catalog", true},
                               {"--rank", true},   {"--world-size", true},      {"--json", false}};

using FieldValue = std::variant<bool, int, std::uint64_t, double, std::string, GroupSet>;

struct Field {
  std::string_view name;
  FieldValue value;
};

struct PlainText {
  std::string operator()(bool v) const { return v ? "true" : "false"; }
  std::string operator()(int v) const { return std::to_string(v); }
  std::string operator()(std::uint64_t v) const { return std::to_string(v); }
  std::string operator()(double v) const { return format_number(v); }
  std::string operator()(const std::string& v) const { return v; }
  std::string operator()(const GroupSet& v) const { return join(v, ", "); }
};

struct JsonText {
  std::string operator()(bool v) const { return json_bool(v); }
  std::string operator()(int v) const { return json_number(v); }
  std::string operator()(std::uint64_t v) const { return std::to_string(v); }
  std::string operator()(double v) const { return json_number(v); }
  std::string operator()(const std::string& v) const { return json_string(v); }
  std::string operator()(const GroupSet& v) const { return json_string_array(v); }
};

// The context TRACEPARENT (with TRACESTATE) hands this process, as set-up reads it: the
// traceparent lens continues, "" when unset, "ignored: ..." when set-up would ignore it.
std::string inherited_context() {
  const char* traceparent = std::getenv("TRACEPARENT");
  if (traceparent == nullptr || detail::trim(traceparent).empty()) return "";
  Carrier carrier{{"traceparent", traceparent}};
  if (const char* trace_state = std::getenv("TRACESTATE")) carrier["tracestate"] = trace_state;
  const SpanContext ctx = extract_context(carrier).context;
  if (!ctx.is_valid()) return "ignored: TRACEPARENT is not a W3C traceparent";
  Carrier out;
  inject_context(ctx, out);
  std::string text = out["traceparent"];
  if (auto it = out.find("tracestate"); it != out.end()) text += " tracestate=" + it->second;
  return text;
}

// Where from_env() read `key` from, as `VARIABLE='value'`, or `field='value'` for a default.
std::string origin(const NemoLensConfig& config, std::string_view key, std::string_view field,
                   const std::string& value) {
  return config.env_variable(key).value_or(std::string(field)) + "='" + value + "'";
}

int run(std::span<const std::string_view> args) {
  const ParsedFlags flags = parse_flags(args, kFlags);
  const std::string prefix = flags.value_or("--prefix", "NEMO_LENS");
  if (prefix.empty()) throw UsageError("--prefix must not be empty");
  const std::optional<std::string> fallback = flags.value("--fallback-prefix");
  const SpanGroupCatalog& catalog = catalog_named(flags.value_or("--catalog", "base"));
  // The launcher's variables are read only for what the command line leaves out.
  RankInfo ranks;
  if (!flags.has("--rank") || !flags.has("--world-size")) ranks = discover_ranks();
  if (flags.has("--rank")) ranks.source = "command_line";
  const int world_size = flags.int_value_or("--world-size", ranks.world_size);
  const int rank = flags.int_value_or("--rank", ranks.rank);
  if (world_size < 1) {
    throw UsageError("invalid value '" + std::to_string(world_size) +
                     "' for --world-size: expected an integer >= 1");
  }
  if (rank >= world_size && !flags.has("--rank")) {
    throw UsageError("the rank the " + ranks.source + " launcher variables give (" +
                     std::to_string(rank) + ") is not below --world-size (" +
                     std::to_string(world_size) + "); pass --rank too");
  }
  if (rank < 0 || rank >= world_size) {
    throw UsageError("invalid value '" + std::to_string(rank) +
                     "' for --rank: expected 0 <= rank < --world-size (" +
                     std::to_string(world_size) + ")");
  }

  // Each step throws ConfigError (or SpanGroupError) with a message naming the variable.
  const NemoLensConfig config = NemoLensConfig::from_env(prefix, fallback, catalog);
  GroupSet resolved;
  try {
    resolved = config.resolved_span_groups();
  } catch (const SpanGroupError& e) {
    throw SpanGroupError(origin(config, "SPAN_GROUPS", "span_groups", config.span_groups) + ": " +
                         e.what());
  }
  ExportStrategy strategy;
  try {
    strategy = get_export_strategy(config.export_strategy);
  } catch (const ConfigError& e) {
    throw ConfigError(origin(config, "EXPORT_STRATEGY", "export_strategy", config.export_strategy) +
                      ": " + e.what());
  }
  const bool is_exporting = config.enabled && strategy(config, rank, world_size);
  const detail::ControlSettings control = detail::control_settings(config);
  const detail::NvtxMode nvtx = detail::nvtx_mode(config);
  const detail::GpuSettings gpu = detail::gpu_settings(config);
  const detail::RecordSettings record = detail::record_settings(config);

  std::vector<Field> fields_before = {
      {"enabled", config.enabled},
      {"service_name", config.service_name},
      {"export_strategy", config.export_strategy},
      {"export_rank", config.export_rank},
      {"export_sample_rate", config.export_sample_rate},
      {"sampler_enabled", config.sampler_enabled},
      {"traces_enabled", config.traces_enabled},
      {"metrics_enabled", config.metrics_enabled},
      {"logs_enabled", config.logs_enabled},
      {"span_groups", config.span_groups},
      {"exporter", config.exporter},
  };
  // The OTLP exporter's effective protocol and endpoint, checked as set-up checks them.
  std::vector<Field> fields_after = {
      {"run_id", config.run_id},
      {"user", config.user},
      {"wandb_entity", config.wandb_entity},
      {"wandb_project", config.wandb_project},
      {"resolved_span_groups", resolved},
      {"rank", rank},
      {"world_size", world_size},
      {"rank_source", ranks.source},
      {"is_exporting", is_exporting},
      {"control", control.endpoint},
      {"control_dir", control.dir},
      {"track_open", std::string(detail::track_open_name(control.track_open))},
      {"hang_timeout_s", control.hang_timeout_s},
      {"nvtx", std::string(detail::nvtx_mode_name(nvtx))},
      {"nvtx_tool_attached", detail::nvtx_tool_attached()},
      {"nvtx_emits", config.enabled && detail::nvtx_emits(nvtx)},
      // GPU time of spans: the groups' spec ("off" when none), and the wait ("default": twice
      // OTEL_BSP_SCHEDULE_DELAY).
      {"gpu_time", gpu.on() ? gpu.spec : std::string("off")},
      {"gpu_time_wait_ms", gpu.wait ? std::to_string(gpu.wait->count()) : std::string("default")},
      {"gpu_kernel_spans", gpu.kernel_spans.empty() ? std::string("off") : gpu.kernel_spans_spec},
      // The flight recorder: its groups' spec ("off" when none), ring size and trigger factor.
      {"record_groups", record.on() ? record.spec : std::string("off")},
      {"record_spans", static_cast<std::uint64_t>(record.spans)},
      {"record_slow_factor", record.slow_factor},
      {"inherited_context", inherited_context()},
  };
  std::vector<Field> fields = std::move(fields_before);
  if (detail::to_lower(detail::trim(config.exporter)) == "otlp") {
    const detail::OtlpSettings otlp = detail::otlp_settings_from_env();
    fields.push_back({"otlp_protocol", std::string(detail::protocol_name(otlp.protocol))});
    fields.push_back({"otlp_endpoint", otlp.endpoint});
    // The outage buffer each signal has (spans, metrics, logs): bounds in bytes, and the spool's
    // directory as named ("default": <TMPDIR or /tmp>/lens-spool-<uid>), "off" without one.
    const detail::ExportBufferSettings buffer = detail::export_buffer_settings(config);
    const auto spool = config.env("EXPORT_SPOOL_DIR");
    fields.push_back({"export_buffer_size", buffer.memory_bytes});
    fields.push_back({"export_spool_dir", buffer.spool_bytes == 0 ? std::string("off")
                                          : spool                 ? buffer.spool_dir
                                                                  : std::string("default")});
    fields.push_back({"export_spool_size", buffer.spool_bytes});
  }
  fields.insert(fields.end(), fields_after.begin(), fields_after.end());
  if (flags.has("--json")) {
    JsonObject object;
    for (const Field& f : fields) object.add(f.name, std::visit(JsonText{}, f.value));
    std::cout << object.str() << '\n';
    return 0;
  }
  std::size_t width = 0;
  for (const Field& f : fields) width = std::max(width, f.name.size());
  for (const Field& f : fields) {
    std::cout << f.name << std::string(width - f.name.size(), ' ') << " = "
              << std::visit(PlainText{}, f.value) << '\n';
  }
  return 0;
}

}  // namespace

const Command& config_command() {
  static constexpr Command kCommand{
      "config", "show the configuration read from the environment and check it", kHelp, run};
  return kCommand;
}

}  // namespace nemo::lens::cli
