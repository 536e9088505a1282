#include "common/cli.hpp"

#include <charconv>

namespace nemo::lens::cli {

std::optional<std::string> ParsedFlags::value(std::string_view flag) const {
  auto it = values_.find(flag);
  if (it == values_.end()) return std::nullopt;
  return it->second;
}

std::string ParsedFlags::value_or(std::string_view flag, std::string_view fallback) const {
  return value(flag).value_or(std::string(fallback));
}

int ParsedFlags::int_value_or(std::string_view flag, int fallback) const {
  auto text = value(flag);
  if (!text) return fallback;
  int out = 0;
  const char* end = text->data() + text->size();
  auto [ptr, ec] = std::from_chars(text->data(), end, out);
  if (text->empty() || ec != std::errc() || ptr != end) {
    throw UsageError("invalid value '" + *text + "' for " + std::string(flag) +
                     ": expected a whole decimal integer, e.g. 3");
  }
  return out;
}

ParsedFlags parse_flags(std::span<const std::string_view> args, std::span<const FlagSpec> flags) {
  ParsedFlags parsed;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (!arg.starts_with("-")) throw UsageError("unexpected argument '" + std::string(arg) + "'");
    const std::size_t eq = arg.find('=');
    const std::string name(arg.substr(0, eq));
    const FlagSpec* spec = nullptr;
    for (const FlagSpec& f : flags) {
      if (f.name == name) spec = &f;
    }
    if (spec == nullptr) throw UsageError("unknown option '" + name + "'");
    if (!spec->takes_value) {
      if (eq != std::string_view::npos) throw UsageError(name + " takes no value");
      parsed.values_[name] = "";
    } else if (eq != std::string_view::npos) {
      parsed.values_[name] = std::string(arg.substr(eq + 1));
    } else if (i + 1 == args.size()) {
      throw UsageError(name + " requires a value");
    } else if (args[i + 1].starts_with("--")) {
      throw UsageError(name + " requires a value but is followed by the option '" +
                       std::string(args[i + 1]) + "' (write " + name +
                       "=VALUE for a value that starts with '--')");
    } else {
      parsed.values_[name] = std::string(args[++i]);
    }
  }
  return parsed;
}

const SpanGroupCatalog& catalog_named(std::string_view name) {
  if (name == "base") return SpanGroup::catalog();
  if (name == "megatron") return MegatronSpanGroup::catalog();
  throw UsageError("invalid value '" + std::string(name) +
                   "' for --catalog: expected one of base, megatron");
}

}  // namespace nemo::lens::cli
