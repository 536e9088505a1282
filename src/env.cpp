#include "env.hpp"

#include <charconv>
#include <cmath>
#include <cstdlib>

#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

std::optional<std::string> env_trimmed(const std::string& name) {
  const char* v = std::getenv(name.c_str());
  if (v == nullptr) return std::nullopt;
  std::string_view t = trim(v);
  if (t.empty()) return std::nullopt;
  return std::string(t);
}

std::optional<bool> parse_bool(std::string_view s) noexcept {
  std::string_view t = trim(s);
  if (t.size() > 5) return std::nullopt;
  char buf[6] = {};
  for (size_t i = 0; i < t.size(); ++i) {
    char c = t[i];
    buf[i] = (c >= 'A' && c <= 'Z') ? static_cast<char>(c - 'A' + 'a') : c;
  }
  std::string_view v(buf, t.size());
  if (v == "1" || v == "true" || v == "yes" || v == "on") return true;
  if (v == "0" || v == "false" || v == "no" || v == "off") return false;
  return std::nullopt;
}

std::optional<int> parse_int(std::string_view s) noexcept {
  std::string_view t = trim(s);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty() || t.front() == '+' || (s.find('+') != std::string_view::npos && t.front() == '-')) {
    return std::nullopt;
  }
  int out = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (ec != std::errc() || ptr != t.data() + t.size()) return std::nullopt;
  return out;
}

std::optional<double> parse_double(std::string_view s) noexcept {
  std::string_view t = trim(s);
  if (!t.empty() && t.front() == '+') t.remove_prefix(1);
  if (t.empty() || t.front() == '+' || (s.find('+') != std::string_view::npos && t.front() == '-')) {
    return std::nullopt;
  }
  double out = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), out);
  if (ec != std::errc() || ptr != t.data() + t.size() || !std::isfinite(out)) return std::nullopt;
  return out;
}

std::optional<std::uint64_t> env_uint(const char* name, std::uint64_t min, std::uint64_t max,
                                      const char* what) {
  auto v = env_trimmed(name);
  if (!v) return std::nullopt;
  std::uint64_t out = 0;
  auto [ptr, ec] = std::from_chars(v->data(), v->data() + v->size(), out);
  if (ec != std::errc() || ptr != v->data() + v->size() || out < min || out > max) {
    throw ConfigError(std::string("Invalid value for ") + name + ": '" + *v + "'. Expected " + what +
                      ".");
  }
  return out;
}

std::size_t parse_choice(std::string_view variable, std::string_view value,
                         std::initializer_list<std::string_view> choices) {
  const std::string v = to_lower(trim(value));
  std::string expected;
  std::size_t i = 0;
  for (std::string_view c : choices) {
    if (v == c) return i;
    expected += (i++ == 0 ? "" : ", ") + std::string(c);
  }
  throw ConfigError("Invalid value for " + std::string(variable) + ": '" + std::string(value) +
                    "'. Expected one of " + expected + ".");
}

}  // namespace nemo::lens::detail
