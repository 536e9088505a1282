// Reading and parsing environment variables. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
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

/// The variable `name` as a whole number in [min, max]; empty optional when unset or blank. Any
/// other value throws ConfigError: "Invalid value for NAME: 'v'. Expected <what>."
std::optional<std::uint64_t> env_uint(const char* name, std::uint64_t min, std::uint64_t max,
                                      const char* what);

/// The index in `choices` (lower-case names) of `value`, trimmed and compared in any case. Any
/// other value throws ConfigError: "Invalid value for VARIABLE: 'v'. Expected one of a, b, c."
std::size_t parse_choice(std::string_view variable, std::string_view value,
                         std::initializer_list<std::string_view> choices);

}  // namespace nemo::lens::detail
