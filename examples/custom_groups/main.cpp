// How a library extends the span-group vocabulary: an RL framework defines its own groups and
// presets on top of the base ones, reads its configuration under its own prefix (falling back to
// NEMO_LENS_*), and gates its instrumentation on the groups. It also registers its groups in the
// process-wide SpanRegistry, next to the base vocabulary, to show how libraries share one
// vocabulary.
//
//   RL_OTEL_ENABLED=1 RL_OTEL_SPAN_GROUPS=default,env_step ./custom_groups
//   NEMO_LENS_ENABLED=1 NEMO_LENS_SPAN_GROUPS=per_step ./custom_groups   # the fallback prefix
#include <cstdio>
#include <exception>
#include <initializer_list>
#include <string>
#include <string_view>

#include "nemo/lens/lens.hpp"

namespace {

using nemo::lens::GroupSet;
using nemo::lens::SpanGroupCatalog;

/// `names` as a GroupSet (GroupSet holds std::string, which std::string_view does not convert to
/// implicitly).
GroupSet group_set(std::initializer_list<std::string_view> names) {
  GroupSet out;
  for (std::string_view name : names) out.emplace(name);
  return out;
}

/// The groups of `groups` separated by commas, in sorted order.
std::string join(const GroupSet& groups) {
  std::string out;
  for (const auto& g : groups) {
    if (!out.empty()) out += ',';
    out += g;
  }
  return out;
}

}  // namespace

/// The RL framework's span groups: the eight base groups (inherited) plus four of its own.
/// Deriving keeps SpanGroup::JOB etc. usable as RlSpanGroup::JOB, and RlSpanGroup::catalog()
/// hides SpanGroup::catalog(), so NemoLensConfig::from_env<RlSpanGroup>() resolves against it.
struct RlSpanGroup : nemo::lens::SpanGroup {
  /// Collecting trajectories from the environment; once per episode. In "per_step".
  static constexpr std::string_view ROLLOUT = "rollout";
  /// Scoring trajectories; once per episode. In "per_step".
  static constexpr std::string_view REWARD = "reward";
  /// Updating the policy from scored trajectories; every N episodes. In "default" and "per_step".
  static constexpr std::string_view POLICY_UPDATE = "policy_update";
  /// One environment step; many per rollout. In no preset: enable it by name or with "all".
  static constexpr std::string_view ENV_STEP = "env_step";

  /// The RL catalog: the base catalog plus the four groups above. "default" = job, checkpoint,
  /// evaluate, policy_update; "per_step" = the eight base groups plus rollout, reward,
  /// policy_update; "all" = all twelve groups.
  static const SpanGroupCatalog& catalog();
};

const SpanGroupCatalog& RlSpanGroup::catalog() {
  // Built once, on first use (thread-safe); the catalog is immutable afterwards.
  static const SpanGroupCatalog kCatalog = [] {
    const SpanGroupCatalog& base = SpanGroup::catalog();
    // Overrides replace the base preset of the same name, so each one lists every group it keeps.
    GroupSet per_step = base.presets().at("per_step");
    per_step.merge(group_set({ROLLOUT, REWARD, POLICY_UPDATE}));
    return base.extend({ROLLOUT, REWARD, POLICY_UPDATE, ENV_STEP},
                       {{"default", group_set({JOB, CHECKPOINT, EVALUATE, POLICY_UPDATE})},
                        {"per_step", std::move(per_step)}});
  }();
  return kCatalog;
}

namespace {

/// Registers the base vocabulary (namespace "lens") and the RL groups (namespace "rl") in the
/// process-wide registry, and prints what the registry's combined catalog offers. A namespace
/// registers only its own groups, and its presets may name only those; presets of the same name
/// from several namespaces are merged.
void register_vocabularies() {
  auto& registry = nemo::lens::SpanRegistry::global();

  const SpanGroupCatalog& base = nemo::lens::SpanGroup::catalog();
  nemo::lens::PresetMap base_presets = base.presets();
  base_presets.erase(std::string(nemo::lens::kAllPreset));  // "all" is reserved: never register it
  registry.register_groups("lens", base.groups(), std::move(base_presets));

  registry.register_groups("rl",
                           group_set({RlSpanGroup::ROLLOUT, RlSpanGroup::REWARD,
                                      RlSpanGroup::POLICY_UPDATE, RlSpanGroup::ENV_STEP}),
                           {{"default", group_set({RlSpanGroup::POLICY_UPDATE})},
                            {"per_step", group_set({RlSpanGroup::ROLLOUT, RlSpanGroup::REWARD,
                                                    RlSpanGroup::POLICY_UPDATE})}});

  const SpanGroupCatalog combined = registry.catalog();
  std::string namespaces;
  for (const auto& ns : registry.namespaces()) namespaces += (namespaces.empty() ? "" : ",") + ns;
  std::printf("registry namespaces: %s\n", namespaces.c_str());
  std::printf("registry default: %s\n", join(combined.resolve("default")).c_str());
}

}  // namespace

int main() {
  try {
    register_vocabularies();

    // RL_OTEL_<KEY> first, NEMO_LENS_<KEY> when that is unset or blank; the span-group spec is
    // resolved against RlSpanGroup::catalog().
    const auto config = nemo::lens::NemoLensConfig::from_env<RlSpanGroup>("RL_OTEL", "NEMO_LENS");
    // A real job passes its rank and world size (e.g. from torch.distributed or MPI).
    const int rank = 0;
    const int world_size = 1;
    auto telemetry = nemo::lens::setup_telemetry(config, rank, world_size);

    std::printf("span groups spec: %s\n", config.span_groups.c_str());
    std::printf("resolved span groups: %s\n", join(config.resolved_span_groups()).c_str());
    std::printf("telemetry: %s\n", !telemetry.enabled()       ? "disabled"
                                   : telemetry.is_exporting() ? "exporting"
                                                              : "not exporting");
    std::printf("enabled span groups: %s\n", join(nemo::lens::enabled_span_groups()).c_str());

    // The training loop. Each LENS_GROUP_ENABLED site looks its group up once; afterwards a
    // disabled site costs two loads and a branch.
    constexpr int kEpisodes = 4;
    constexpr int kStepsPerEpisode = 3;
    int rollouts_traced = 0;
    int env_steps_traced = 0;
    for (int episode = 0; episode < kEpisodes; ++episode) {
      if (LENS_GROUP_ENABLED(RlSpanGroup::ROLLOUT)) ++rollouts_traced;  // a rollout span here
      for (int step = 0; step < kStepsPerEpisode; ++step) {
        if (LENS_GROUP_ENABLED(RlSpanGroup::ENV_STEP)) ++env_steps_traced;  // an env-step span
      }
    }
    std::printf("rollouts traced: %d/%d\n", rollouts_traced, kEpisodes);
    std::printf("env steps traced: %d/%d\n", env_steps_traced, kEpisodes * kStepsPerEpisode);

    telemetry.shutdown();
  } catch (const nemo::lens::ConfigError& e) {  // also SpanGroupError: a bad spec or variable
    std::fprintf(stderr, "custom_groups: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "custom_groups: unexpected error: %s\n", e.what());
    return 1;
  }
  return 0;
}
