#include "common/input_args.hpp"

#include <charconv>
#include <cmath>

namespace nemo::lens::cli {

InputArgs split_input_args(std::span<const std::string_view> args,
                           std::span<const FlagSpec> flags) {
  InputArgs out;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    if (arg == "--") {
      for (++i; i < args.size(); ++i) out.files.emplace_back(args[i]);
      break;
    }
    if (arg == "-" || !arg.starts_with("-")) {
      out.files.emplace_back(arg);
      continue;
    }
    out.flag_args.push_back(arg);
    if (arg.find('=') != std::string_view::npos || i + 1 == args.size()) continue;
    for (const FlagSpec& f : flags) {
      if (f.name == arg && f.takes_value && !args[i + 1].starts_with("--")) {
        out.flag_args.push_back(args[++i]);
        break;
      }
    }
  }
  return out;
}

double non_negative_number(const std::string& text, std::string_view flag) {
  double v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(v) || v < 0) {
    throw UsageError("invalid value '" + text + "' for " + std::string(flag) +
                     ": expected a number >= 0, e.g. 20");
  }
  return v;
}

}  // namespace nemo::lens::cli
