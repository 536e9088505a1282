#include "nemo/lens/groups.hpp"

#include <mutex>

#include "strings.hpp"

namespace nemo::lens {

ConfigError::ConfigError(const std::string& message) : std::invalid_argument(message) {}
SpanGroupError::SpanGroupError(const std::string& message) : ConfigError(message) {}

namespace {

std::string normalize(std::string_view name) { return detail::to_lower(detail::trim(name)); }

GroupSet normalize_all(const GroupSet& names) {
  GroupSet out;
  for (const auto& n : names) out.insert(normalize(n));
  return out;
}

// Checks one namespace's (or catalog's) own definitions; `what` names it in messages.
void check_definitions(const GroupSet& groups, const PresetMap& presets, const std::string& what) {
  for (const auto& g : groups) {
    if (g.empty()) throw SpanGroupError(what + ": a group name is empty");
    if (g.find(',') != std::string::npos) {
      throw SpanGroupError(what + ": group name '" + g + "' contains a comma");
    }
    if (g == kAllPreset) {
      throw SpanGroupError(what + ": 'all' is a reserved preset and cannot be a group name");
    }
  }
  for (const auto& [name, members] : presets) {
    if (name.empty()) throw SpanGroupError(what + ": a preset name is empty");
    if (name == kAllPreset) {
      throw SpanGroupError(what +
                           ": the preset 'all' is reserved (it always means every group) and "
                           "cannot be defined");
    }
    if (groups.count(name) != 0) {
      throw SpanGroupError(what + ": preset '" + name + "' has the same name as a group");
    }
    for (const auto& m : members) {
      if (groups.count(m) == 0) {
        throw SpanGroupError(what + ": preset '" + name + "' names '" + m +
                             "', which is not one of its groups " +
                             detail::quoted_list({groups.begin(), groups.end()}));
      }
    }
  }
}

PresetMap normalize_presets(const PresetMap& presets) {
  PresetMap out;
  for (const auto& [name, members] : presets) {
    GroupSet& dst = out[normalize(name)];
    for (const auto& m : members) dst.insert(normalize(m));
  }
  return out;
}

}  // namespace

SpanGroupCatalog::SpanGroupCatalog(GroupSet groups, PresetMap presets)
    : groups_(normalize_all(groups)), presets_(normalize_presets(presets)) {
  check_definitions(groups_, presets_, "span-group catalog");
  presets_[std::string(kAllPreset)] = groups_;
}

SpanGroupCatalog SpanGroupCatalog::extend(std::initializer_list<std::string_view> extra_groups,
                                          PresetMap preset_overrides) const {
  GroupSet groups = groups_;
  for (auto g : extra_groups) groups.insert(normalize(g));
  PresetMap presets = presets_;
  presets.erase(std::string(kAllPreset));
  for (auto& [name, members] : normalize_presets(preset_overrides)) presets[name] = members;
  return SpanGroupCatalog(std::move(groups), std::move(presets));
}

bool SpanGroupCatalog::has_group(std::string_view name) const noexcept {
  return groups_.find(name) != groups_.end();
}

bool SpanGroupCatalog::has_preset(std::string_view name) const noexcept {
  return presets_.find(name) != presets_.end();
}

std::vector<std::string> SpanGroupCatalog::valid_options() const {
  GroupSet all = groups_;
  for (const auto& [name, members] : presets_) all.insert(name);
  return {all.begin(), all.end()};
}

GroupSet SpanGroupCatalog::resolve(std::string_view spec) const {
  GroupSet result;
  for (std::string_view raw : detail::split(spec, ',')) {
    std::string part = normalize(raw);
    if (part.empty()) continue;
    if (auto preset = presets_.find(part); preset != presets_.end()) {
      result.insert(preset->second.begin(), preset->second.end());
    } else if (groups_.count(part) != 0) {
      result.insert(std::move(part));
    } else {
      throw SpanGroupError("Unknown span group or preset: '" + part +
                           "'. Valid options: " + detail::quoted_list(valid_options()));
    }
  }
  return result;
}

const SpanGroupCatalog& SpanGroup::catalog() {
  static const SpanGroupCatalog kCatalog(
      {std::string(JOB), std::string(CHECKPOINT), std::string(EVALUATE), std::string(MODEL_INIT),
       std::string(LOAD_CHECKPOINT), std::string(STEP), std::string(FORWARD_BACKWARD),
       std::string(OPTIMIZER)},
      {{"default", {std::string(JOB), std::string(CHECKPOINT), std::string(EVALUATE)}},
       {"per_step",
        {std::string(JOB), std::string(CHECKPOINT), std::string(EVALUATE), std::string(MODEL_INIT),
         std::string(LOAD_CHECKPOINT), std::string(STEP), std::string(FORWARD_BACKWARD),
         std::string(OPTIMIZER)}}});
  return kCatalog;
}

const SpanGroupCatalog& MegatronSpanGroup::catalog() {
  static const SpanGroupCatalog kCatalog = [] {
    const GroupSet& base = SpanGroup::catalog().groups();
    GroupSet per_step = base;
    per_step.insert({std::string(COMMUNICATION), std::string(DATA_LOADING), std::string(INFERENCE)});
    return SpanGroup::catalog().extend(
        {MICROBATCH, COMMUNICATION, ACTIVATION_OFFLOAD, DATA_LOADING, INFERENCE, LAYER},
        {{"default",
          {std::string(JOB), std::string(CHECKPOINT), std::string(EVALUATE), std::string(INFERENCE)}},
         {"per_step", per_step}});
  }();
  return kCatalog;
}

// ---------------------------------------------------------------------------------------------
// SpanRegistry

struct SpanRegistry::Impl {
  struct Entry {
    GroupSet groups;
    PresetMap presets;
  };
  mutable std::mutex mu;
  std::map<std::string, Entry, std::less<>> namespaces;
};

SpanRegistry::SpanRegistry() : impl_(std::make_unique<Impl>()) {}
SpanRegistry::~SpanRegistry() = default;

SpanRegistry& SpanRegistry::global() {
  // Never destroyed: libraries may unregister from their own static destructors.
  static SpanRegistry* registry = new SpanRegistry();
  return *registry;
}

void SpanRegistry::register_groups(std::string_view ns, GroupSet groups, PresetMap presets) {
  std::string name(detail::trim(ns));
  if (name.empty()) throw SpanGroupError("span registry: the namespace name is empty");
  Impl::Entry entry{normalize_all(groups), normalize_presets(presets)};
  const std::string what = "span registry namespace '" + name + "'";
  check_definitions(entry.groups, entry.presets, what);

  std::lock_guard lock(impl_->mu);
  for (const auto& [other_name, other] : impl_->namespaces) {
    if (other_name == name) continue;  // being replaced
    for (const auto& [preset, members] : entry.presets) {
      if (other.groups.count(preset) != 0) {
        throw SpanGroupError(what + ": preset '" + preset + "' collides with a group of namespace '" +
                             other_name + "'");
      }
    }
    for (const auto& g : entry.groups) {
      if (other.presets.count(g) != 0) {
        throw SpanGroupError(what + ": group '" + g + "' collides with a preset of namespace '" +
                             other_name + "'");
      }
    }
  }
  impl_->namespaces[name] = std::move(entry);
}

bool SpanRegistry::unregister(std::string_view ns) {
  std::lock_guard lock(impl_->mu);
  auto it = impl_->namespaces.find(detail::trim(ns));
  if (it == impl_->namespaces.end()) return false;
  impl_->namespaces.erase(it);
  return true;
}

std::vector<std::string> SpanRegistry::namespaces() const {
  std::lock_guard lock(impl_->mu);
  std::vector<std::string> out;
  for (const auto& [name, entry] : impl_->namespaces) out.push_back(name);
  return out;
}

SpanGroupCatalog SpanRegistry::catalog() const {
  GroupSet groups;
  PresetMap presets;
  {
    std::lock_guard lock(impl_->mu);
    for (const auto& [name, entry] : impl_->namespaces) {
      groups.insert(entry.groups.begin(), entry.groups.end());
      for (const auto& [preset, members] : entry.presets) {
        presets[preset].insert(members.begin(), members.end());
      }
    }
  }
  return SpanGroupCatalog(std::move(groups), std::move(presets));
}

}  // namespace nemo::lens
