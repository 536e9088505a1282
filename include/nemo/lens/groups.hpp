// Span groups: the vocabulary every instrumentation site tags itself with, the presets that
// bundle groups, and catalogs that resolve a spec string such as "default,step".
//
//   using nemo::lens::SpanGroup;
//   auto groups = SpanGroup::catalog().resolve("default,step");   // {checkpoint, evaluate, job, step}
//   auto megatron = nemo::lens::MegatronSpanGroup::catalog().resolve("per_step");
//   // A library adds groups by deriving and extending the base catalog (examples/custom_groups).
#pragma once

#include <initializer_list>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/errors.hpp"

namespace nemo::lens {

/// A set of span-group names, sorted. Supports lookup by std::string_view.
using GroupSet = std::set<std::string, std::less<>>;

/// Preset name to the groups it enables, sorted by preset name.
using PresetMap = std::map<std::string, GroupSet, std::less<>>;

/// The reserved preset that always means every group of a catalog.
inline constexpr std::string_view kAllPreset = "all";

/// Groups plus presets, and the resolution of spec strings against them. Immutable once built;
/// safe to share between threads. Group and preset names are lower case.
class NEMO_LENS_API SpanGroupCatalog {
 public:
  /// Builds a catalog. `presets` may not define "all" (it is always every group), may not reuse a
  /// group name, and may only name groups of `groups`. Names are trimmed and lower-cased.
  /// Throws SpanGroupError when any of that is violated.
  SpanGroupCatalog(GroupSet groups, PresetMap presets);

  /// A derived catalog: this catalog's groups plus `extra_groups`; this catalog's presets, each
  /// replaced by the one of the same name in `preset_overrides`; "all" covers every group. This is
  /// how a library builds its catalog from SpanGroup::catalog(). Throws SpanGroupError as the
  /// constructor does.
  SpanGroupCatalog extend(std::initializer_list<std::string_view> extra_groups,
                          PresetMap preset_overrides = {}) const;

  /// Every group of the catalog.
  const GroupSet& groups() const noexcept { return groups_; }

  /// Every preset, "all" included, with its groups.
  const PresetMap& presets() const noexcept { return presets_; }

  /// Whether `name` is a group of this catalog (exact, lower-case match).
  bool has_group(std::string_view name) const noexcept;

  /// Whether `name` is a preset of this catalog (exact, lower-case match).
  bool has_preset(std::string_view name) const noexcept;

  /// Every group and preset name, sorted: what an error message offers as valid options.
  std::vector<std::string> valid_options() const;

  /// Resolves a comma-separated spec. Each part is trimmed and lower-cased; empty parts are
  /// skipped; a preset adds its groups, a group adds itself. An empty spec gives the empty set.
  /// Throws SpanGroupError naming the first unknown part and listing valid_options().
  GroupSet resolve(std::string_view spec) const;

 private:
  GroupSet groups_;
  PresetMap presets_;
};

/// The eight base groups of NeMo Lens and their presets. Derive from it to add groups
/// (see MegatronSpanGroup); the constants are inherited.
struct NEMO_LENS_API SpanGroup {
  /// Root spans of a job or training run; once per job. In "default".
  static constexpr std::string_view JOB = "job";
  /// Checkpoint saves; every N iterations. In "default".
  static constexpr std::string_view CHECKPOINT = "checkpoint";
  /// Evaluation passes; every N iterations. In "default".
  static constexpr std::string_view EVALUATE = "evaluate";
  /// Model construction; once at start-up. In "per_step".
  static constexpr std::string_view MODEL_INIT = "model_init";
  /// Checkpoint load; once at start-up. In "per_step".
  static constexpr std::string_view LOAD_CHECKPOINT = "load_checkpoint";
  /// Training step boundaries; every iteration. In "per_step".
  static constexpr std::string_view STEP = "step";
  /// Forward and backward pass; every iteration. In "per_step".
  static constexpr std::string_view FORWARD_BACKWARD = "forward_backward";
  /// Optimizer step; every iteration. In "per_step".
  static constexpr std::string_view OPTIMIZER = "optimizer";

  /// The base catalog: the eight groups; "default" = job, checkpoint, evaluate; "per_step" = all
  /// eight; "all" = all eight.
  static const SpanGroupCatalog& catalog();
};

/// Megatron's extension of the base vocabulary (14 groups), exactly as NeMo Lens defines it.
struct NEMO_LENS_API MegatronSpanGroup : SpanGroup {
  /// One microbatch of a step.
  static constexpr std::string_view MICROBATCH = "microbatch";
  /// Collective communication (all-reduce, all-gather, send/recv).
  static constexpr std::string_view COMMUNICATION = "communication";
  /// Moving activations to and from host memory.
  static constexpr std::string_view ACTIVATION_OFFLOAD = "activation_offload";
  /// Loading and preparing input batches.
  static constexpr std::string_view DATA_LOADING = "data_loading";
  /// Inference requests and generation.
  static constexpr std::string_view INFERENCE = "inference";
  /// One model layer's forward or backward computation.
  static constexpr std::string_view LAYER = "layer";

  /// The Megatron catalog: "default" = job, checkpoint, evaluate, inference; "per_step" = the
  /// eight base groups plus communication, data_loading, inference; "all" = all 14 groups.
  static const SpanGroupCatalog& catalog();
};

/// A process-wide vocabulary assembled from several libraries. Each library registers its groups
/// and presets under its own namespace; catalog() is the union: a group registered by two
/// namespaces is one group, presets of the same name are merged by union, and "all" is reserved
/// and always means every registered group. Thread-safe (one mutex; registration is rare).
class NEMO_LENS_API SpanRegistry {
 public:
  SpanRegistry();
  ~SpanRegistry();
  SpanRegistry(const SpanRegistry&) = delete;
  SpanRegistry& operator=(const SpanRegistry&) = delete;

  /// The registry shared by the whole process.
  static SpanRegistry& global();

  /// Registers (or, when `ns` is already registered, replaces) a namespace's groups and presets.
  /// Each preset may only name groups of this namespace. Throws SpanGroupError, changing nothing,
  /// when `ns` is empty, a preset is named "all", a preset names a group it does not register, or
  /// a preset name equals a group name of any namespace (or vice versa).
  void register_groups(std::string_view ns, GroupSet groups, PresetMap presets = {});

  /// Removes a namespace. Returns false when it was not registered.
  bool unregister(std::string_view ns);

  /// The registered namespaces, sorted.
  std::vector<std::string> namespaces() const;

  /// The union of every registered namespace as a catalog (a snapshot; later registrations do
  /// not change it).
  SpanGroupCatalog catalog() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::lens
