// Reading and parsing environment variables. Internal.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace nemo::lens::detail {

/// The variable's value trimmed; empty optional when unset or blank.
std::optional<std::string> env_trimmed(const std::string& name);

/// 1/0, true/false, yes/no, on/off in any case; empty optional otherwise.
std::optional<bool> parse_bool(std::string_view s) noexcept;

/// A whole decimal int (optional sign, surrounding whitespace allowed); empty optional otherwise.
std::optional<int> parse_int(std::string_view s) noexcept;

/// A whole finite decimal number; empty optional otherwise.
std::optional<double> parse_double(std::string_view s) noexcept;

}  // namespace nemo::lens::detail
