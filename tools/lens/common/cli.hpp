// What the verbs of the lens command share: the command table entry, flag parsing and the
// --catalog choice.
//
//   constexpr FlagSpec kFlags[] = {{"--spec", true}, {"--json", false}};
//   const ParsedFlags flags = parse_flags(args, kFlags);   // throws UsageError
//   if (flags.has("--json")) { /* ... */ }
#pragma once

#include <map>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>

#include "nemo/lens/groups.hpp"

namespace nemo::lens::cli {

/// A command line the verb cannot run: unknown flag, missing or malformed value. main() prints
/// the message with a pointer to the verb's --help and exits with status 2.
class UsageError : public std::runtime_error {
 public:
  explicit UsageError(const std::string& message) : std::runtime_error(message) {}
};

/// One verb of the lens command. `run` gets the arguments after the verb (never --help, which
/// main() handles), writes its result to stdout and returns the exit status; it throws UsageError
/// for a bad command line and ConfigError (or SpanGroupError) for a bad configuration.
struct Command {
  std::string_view name;
  std::string_view summary;  // one line, for the global usage
  std::string_view help;     // the verb's full --help text
  int (*run)(std::span<const std::string_view> args);
};

/// A flag a verb accepts: its name ("--catalog") and whether it takes a value.
struct FlagSpec {
  std::string_view name;
  bool takes_value;
};

/// The flags given on a command line; switches have an empty value. A repeated flag keeps its
/// last value.
class ParsedFlags {
 public:
  /// Whether `flag` was given.
  bool has(std::string_view flag) const { return values_.contains(flag); }

  /// The value of `flag`, empty when not given.
  std::optional<std::string> value(std::string_view flag) const;

  /// The value of `flag`, or `fallback` when not given.
  std::string value_or(std::string_view flag, std::string_view fallback) const;

  /// The value of `flag` as an int, or `fallback` when not given. Throws UsageError when the value
  /// is not a whole decimal integer.
  int int_value_or(std::string_view flag, int fallback) const;

 private:
  friend ParsedFlags parse_flags(std::span<const std::string_view>, std::span<const FlagSpec>);
  std::map<std::string, std::string, std::less<>> values_;
};

/// Parses `args` against `flags`. A value is given as `--flag value` or `--flag=value`; in the
/// first form a value may not start with "--" (that is taken as a missing value). Throws
/// UsageError for an unknown flag, a positional argument, a missing value or a value given to a
/// switch.
ParsedFlags parse_flags(std::span<const std::string_view> args, std::span<const FlagSpec> flags);

/// The catalog a --catalog value names: "base" (SpanGroup) or "megatron" (MegatronSpanGroup).
/// Throws UsageError naming the valid ones otherwise.
const SpanGroupCatalog& catalog_named(std::string_view name);

/// The items of `range` joined with `separator`.
template <class Range>
std::string join(const Range& range, std::string_view separator) {
  std::string out;
  for (const auto& item : range) {
    if (!out.empty()) out += separator;
    out += item;
  }
  return out;
}

}  // namespace nemo::lens::cli
