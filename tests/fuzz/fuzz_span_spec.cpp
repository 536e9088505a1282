// libFuzzer target: span-group spec resolution (SpanGroupCatalog::resolve) against the base and the
// Megatron catalogs.
//
// Input: the spec string. SpanGroupError is the expected failure; any other exception escapes
// and aborts the run (a finding), as does a crash. Properties, from the documented rules (parts
// split at ',', trimmed and lower-cased, empty parts skipped, a preset adds its groups, a group
// itself, anything else is an error naming the part):
//   - resolve() agrees with those rules evaluated through the catalog's public groups() and
//     presets(): the same set, or SpanGroupError exactly when a part is unknown, naming it;
//   - the result is a subset of the catalog's groups and resolves to itself again;
//   - a spec the base catalog accepts, the Megatron catalog accepts too, with a superset.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "fuzz_check.hpp"
#include "nemo/lens/groups.hpp"

namespace {

using nemo::lens::GroupSet;
using nemo::lens::SpanGroupCatalog;

bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

std::string normalized(std::string_view part) {
  while (!part.empty() && is_space(part.front())) part.remove_prefix(1);
  while (!part.empty() && is_space(part.back())) part.remove_suffix(1);
  std::string out(part);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

// The documented resolution; `unknown` receives the first unknown part (nullopt result).
std::optional<GroupSet> expected_resolution(const SpanGroupCatalog& catalog, std::string_view spec,
                                            std::string& unknown) {
  GroupSet out;
  for (;;) {
    const std::size_t comma = spec.find(',');
    const std::string part = normalized(spec.substr(0, comma));
    if (!part.empty()) {
      if (auto preset = catalog.presets().find(part); preset != catalog.presets().end()) {
        out.insert(preset->second.begin(), preset->second.end());
      } else if (catalog.groups().count(part) != 0) {
        out.insert(part);
      } else {
        unknown = part;
        return std::nullopt;
      }
    }
    if (comma == std::string_view::npos) return out;
    spec.remove_prefix(comma + 1);
  }
}

// Resolves `spec` and checks the result; nullopt when it throws SpanGroupError.
std::optional<GroupSet> check_resolve(const SpanGroupCatalog& catalog, std::string_view spec) {
  std::string unknown;
  const std::optional<GroupSet> expected = expected_resolution(catalog, spec, unknown);
  GroupSet result;
  try {
    result = catalog.resolve(spec);
  } catch (const nemo::lens::SpanGroupError& e) {
    LENS_FUZZ_CHECK(!expected.has_value());
    // The message quotes the part as it is; a NUL byte in it ends what() there.
    const std::string quoted = "'" + unknown + "'";
    LENS_FUZZ_CHECK(std::string_view(e.what()).find(quoted.substr(0, quoted.find('\0'))) !=
                    std::string_view::npos);
    return std::nullopt;
  }
  LENS_FUZZ_CHECK(expected.has_value());
  LENS_FUZZ_CHECK(result == *expected);
  for (const auto& group : result) LENS_FUZZ_CHECK(catalog.has_group(group));

  // The result written as a spec resolves to itself.
  std::string joined;
  for (const auto& group : result) joined.append(joined.empty() ? "" : ",").append(group);
  LENS_FUZZ_CHECK(catalog.resolve(joined) == result);
  return result;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view spec(reinterpret_cast<const char*>(data), size);
  const std::optional<GroupSet> base = check_resolve(nemo::lens::SpanGroup::catalog(), spec);
  const std::optional<GroupSet> megatron =
      check_resolve(nemo::lens::MegatronSpanGroup::catalog(), spec);
  if (base.has_value()) {
    LENS_FUZZ_CHECK(megatron.has_value());
    for (const auto& group : *base) LENS_FUZZ_CHECK(megatron->count(group) != 0);
  }
  return 0;
}
