// Command lines with input files among the flags, for `lens report` and `lens convert`:
// positional arguments are files ("-" is standard input), "--" ends the flags.
//
//   const InputArgs in = split_input_args(args, kFlags);   // {flag arguments, files}
//   const ParsedFlags flags = parse_flags(in.flag_args, kFlags);
#pragma once

#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/cli.hpp"

namespace nemo::lens::cli {

struct InputArgs {
  std::vector<std::string_view> flag_args;  // for parse_flags()
  std::vector<std::string> files;
};

/// Separates the files from the flags of `args`. A flag of `flags` that takes a value, given as
/// `--flag VALUE`, keeps VALUE (unless VALUE starts with "--", which parse_flags() reports).
/// Everything after "--" is a file.
InputArgs split_input_args(std::span<const std::string_view> args, std::span<const FlagSpec> flags);

/// `text` as a number >= 0 for `flag`, or UsageError.
double non_negative_number(const std::string& text, std::string_view flag);

}  // namespace nemo::lens::cli
