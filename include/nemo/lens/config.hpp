// NemoLensConfig: everything a process needs to decide whether and what to trace, read from the
// environment with the same variables and rules as NeMo Lens (Python).
//
//   auto cfg = nemo::lens::NemoLensConfig::from_env();                      // NEMO_LENS_*
//   auto mcfg = nemo::lens::NemoLensConfig::from_env<nemo::lens::MegatronSpanGroup>(
//       "MEGATRON_OTEL", "NEMO_LENS");                                       // prefix + fallback
//   nemo::lens::GroupSet groups = mcfg.resolved_span_groups();
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/groups.hpp"

namespace nemo::lens {

/// The configuration of one process. A plain aggregate: construct it directly or with from_env().
/// Copyable; not synchronised (build it before starting threads that read it).
struct NEMO_LENS_API NemoLensConfig {
  /// Telemetry is active only when this is true (`<PREFIX>_ENABLED`; `OTEL_SDK_DISABLED=true`
  /// forces it off).
  bool enabled = false;
  /// Service name of the resource (`OTEL_SERVICE_NAME`).
  std::string service_name = "nemo";
  /// Which ranks export: a registered strategy name (`<PREFIX>_EXPORT_STRATEGY`).
  std::string export_strategy = "single_rank";
  /// For "single_rank": the exporting rank; -1 means the last rank (`<PREFIX>_EXPORT_RANK`).
  int export_rank = -1;
  /// For "sampled" and the rank-aware sampler: the fraction of ranks kept, in [0, 1]
  /// (`<PREFIX>_EXPORT_SAMPLE_RATE`).
  double export_sample_rate = 1.0;
  /// Installs the rank-aware sampler: a rank keeps all or none of its spans
  /// (`<PREFIX>_SAMPLER_ENABLED`).
  bool sampler_enabled = false;
  /// Whether spans are recorded at all (`<PREFIX>_TRACES_ENABLED`).
  bool traces_enabled = true;
  /// Whether metric instruments record (`<PREFIX>_METRICS_ENABLED`).
  bool metrics_enabled = true;
  /// Whether log records are exported (`<PREFIX>_LOGS_ENABLED`).
  bool logs_enabled = false;
  /// The span-group spec resolved at set-up (`<PREFIX>_SPAN_GROUPS`), e.g. "per_step,layer".
  std::string span_groups = "default";
  /// Where spans go: "otlp", "console" or "file" (`<PREFIX>_EXPORTER`).
  std::string exporter = "otlp";
  /// Identifier shared by every rank of a run (`<PREFIX>_RUN_ID`); set-up fills it from
  /// `SLURM_JOB_ID` or 12 random hex characters when empty.
  std::string run_id;
  /// Owner label of the run (`<PREFIX>_USER_ID`).
  std::string user;
  /// W&B entity (`WANDB_ENTITY`).
  std::string wandb_entity;
  /// W&B project (`WANDB_PROJECT`).
  std::string wandb_project;
  /// The prefix the configuration was read with; later components read their own
  /// `<PREFIX>_<KEY>` variables (e.g. `EXPORT_PATH`) through env().
  std::string env_prefix = "NEMO_LENS";
  /// The fallback prefix, empty when none.
  std::string env_fallback_prefix;
  /// The catalog span_groups resolves against; null means SpanGroup::catalog().
  std::shared_ptr<const SpanGroupCatalog> span_group_catalog;

  /// The catalog span_groups resolves against.
  const SpanGroupCatalog& catalog() const noexcept;

  /// span_groups resolved against catalog(). Throws SpanGroupError for an unknown name.
  GroupSet resolved_span_groups() const;

  /// Checks the fields that have a fixed range (export_sample_rate in [0, 1]). Throws ConfigError.
  void validate() const;

  /// The value of `<env_prefix>_<key>`, or of `<env_fallback_prefix>_<key>` when the primary is
  /// unset or blank; trimmed. Empty optional when neither is set to something non-blank.
  std::optional<std::string> env(std::string_view key) const;

  /// The name of the variable env(key) reads: `<env_prefix>_<key>`, or the fallback's when only
  /// that one is set. Empty optional when neither is set. For error messages.
  std::optional<std::string> env_variable(std::string_view key) const;

  /// Reads the configuration from the environment: every field's `<prefix>_<KEY>` first,
  /// `<fallback_prefix>_<KEY>` when the primary is unset or blank, the default otherwise.
  /// Booleans accept 1/0, true/false, yes/no, on/off in any case; numbers must parse whole.
  /// Throws ConfigError naming the variable, its value and what is valid.
  static NemoLensConfig from_env(std::string_view prefix = "NEMO_LENS",
                                 std::optional<std::string_view> fallback_prefix = {},
                                 const SpanGroupCatalog& span_group_cls = SpanGroup::catalog());

  /// from_env() resolving against `Groups::catalog()`, e.g. from_env<MegatronSpanGroup>().
  template <class Groups>
  static NemoLensConfig from_env(std::string_view prefix = "NEMO_LENS",
                                 std::optional<std::string_view> fallback_prefix = {}) {
    return from_env(prefix, fallback_prefix, Groups::catalog());
  }
};

}  // namespace nemo::lens
