// lens groups: the groups and presets of a catalog, or the groups a spec resolves to.
#include <iostream>

#include "commands.hpp"
#include "common/cli.hpp"
#include "common/json_output.hpp"

namespace nemo::lens::cli {

namespace {

constexpr std::string_view kHelp =
    R"(usage: lens groups [--catalog base|megatron] [--spec SPEC] [--json]

Lists the span groups and presets of a catalog or, with --spec, the groups a span-group spec
resolves to (as <PREFIX>_SPAN_GROUPS is resolved).

options:
  --catalog NAME  the catalog: base (default) or megatron
  --spec SPEC     resolve SPEC, comma-separated group and preset names (case and spaces around
                  names are ignored), and print the groups, sorted, one per line
  --json          print one JSON object (a JSON array with --spec) on one line
  -h, --help      show this help and exit

exit status: 0 on success, 2 for a bad command line or an unknown name in SPEC.
)";

constexpr FlagSpec kFlags[] = {{"--catalog", true}, {"--spec", true}, {"--json", false}};

void print_catalog(std::string_view name, const SpanGroupCatalog& catalog, bool json) {
  if (json) {
    JsonObject presets;
    for (const auto& [preset, groups] : catalog.presets()) {
      presets.add(preset, json_string_array(groups));
    }
    std::cout << JsonObject()
                     .add("catalog", json_string(name))
                     .add("groups", json_string_array(catalog.groups()))
                     .add("presets", presets.str())
                     .str()
              << '\n';
    return;
  }
  std::cout << "groups:\n";
  for (const auto& group : catalog.groups()) std::cout << "  " << group << '\n';
  std::cout << "presets:\n";
  for (const auto& [preset, groups] : catalog.presets()) {
    std::cout << "  " << preset << ": " << join(groups, ", ") << '\n';
  }
}

int run(std::span<const std::string_view> args) {
  const ParsedFlags flags = parse_flags(args, kFlags);
  const std::string catalog_name = flags.value_or("--catalog", "base");
  const SpanGroupCatalog& catalog = catalog_named(catalog_name);
  const bool json = flags.has("--json");
  const std::optional<std::string> spec = flags.value("--spec");
  if (!spec) {
    print_catalog(catalog_name, catalog, json);
    return 0;
  }
  const GroupSet groups = catalog.resolve(*spec);  // throws SpanGroupError
  if (json) {
    std::cout << json_string_array(groups) << '\n';
  } else {
    for (const auto& group : groups) std::cout << group << '\n';
  }
  return 0;
}

}  // namespace

const Command& groups_command() {
  static constexpr Command kCommand{
      "groups", "list the span groups and presets of a catalog, or resolve a spec", kHelp, run};
  return kCommand;
}

}  // namespace nemo::lens::cli
