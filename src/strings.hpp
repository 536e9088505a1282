// Small string helpers shared by the library's configuration code. Internal.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens::detail {

/// `s` without leading and trailing ASCII whitespace.
std::string_view trim(std::string_view s) noexcept;

/// `s` with ASCII letters lower-cased.
std::string to_lower(std::string_view s);

/// "['a', 'b']": the Python-style list NeMo Lens prints in its error messages.
std::string quoted_list(const std::vector<std::string>& items);

/// `s` split at every `sep` (empty parts kept).
std::vector<std::string_view> split(std::string_view s, char sep);

}  // namespace nemo::lens::detail
