// Kernel names for kernel spans (see kernel_names.hpp).
#include "gpu/kernel_names.hpp"

#include <cxxabi.h>

#include <cstdlib>
#include <memory>

namespace nemo::lens::detail {

namespace {

constexpr std::size_t kMaxName = 160;

// `name` without what follows its top-level parameter list, without every template argument
// list, and without a return type before it.
std::string shorten(std::string name) {
  constexpr std::string_view kAnonymous = "(anonymous namespace)";
  for (std::size_t at; (at = name.find(kAnonymous)) != std::string::npos;) {
    name.replace(at, kAnonymous.size(), "(anon)");
  }
  std::string out;
  int angle = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    if (c == '<') {
      // "operator<" and "operator<<" are names, not template argument lists.
      if (angle == 0 && out.size() >= 8 && out.compare(out.size() - 8, 8, "operator") == 0) {
        out += c;
        continue;
      }
      ++angle;
      continue;
    }
    if (c == '>' && angle > 0) {
      --angle;
      continue;
    }
    if (angle > 0) continue;
    if (c == '(' && name.compare(i, 6, "(anon)") != 0) break;  // the parameters
    out += c;
  }
  // A return type ("void f"): the name is after the last space outside any brackets.
  if (const std::size_t space = out.rfind(' ');
      space != std::string::npos && out.compare(0, 9, "operator ") != 0) {
    out.erase(0, space + 1);
  }
  if (out.empty()) out = name;  // nothing left: keep what there was
  if (out.size() > kMaxName) out.resize(kMaxName);
  return out;
}

}  // namespace

std::string short_kernel_name(std::string_view mangled) {
  const std::string raw(mangled);
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> demangled(
      abi::__cxa_demangle(raw.c_str(), nullptr, nullptr, &status), std::free);
  return shorten(status == 0 && demangled ? std::string(demangled.get()) : raw);
}

}  // namespace nemo::lens::detail
