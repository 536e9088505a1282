#include "tracing/exception_info.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <typeinfo>

namespace nemo::lens::detail {

namespace {

constexpr std::size_t kMaxText = 512;

struct Slot {
  bool known = false;
  int depth = 0;  // exceptions already in flight when it was thrown
  const std::type_info* type = nullptr;
  char message[kMaxText] = {};
};

thread_local Slot t_last_throw;

}  // namespace

[[gnu::tls_model("initial-exec")]] constinit thread_local const EhGlobals* t_eh_globals = nullptr;

const EhGlobals* lookup_eh_globals() noexcept {
  t_eh_globals = reinterpret_cast<const EhGlobals*>(abi::__cxa_get_globals());
  return t_eh_globals;
}

std::string demangle(const char* mangled) noexcept {
  try {
    int status = 0;
    char* out = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
    if (status == 0 && out != nullptr) {
      std::string s(out);
      std::free(out);
      return s;
    }
    std::free(out);
    return mangled;
  } catch (...) {
    return {};
  }
}

ThrownException last_thrown_exception(int uncaught) noexcept {
  ThrownException e;
  const Slot& s = t_last_throw;
  if (!s.known || s.type == nullptr || s.depth != uncaught - 1) return e;
  try {
    e.known = true;
    e.type = demangle(s.type->name());
    e.message = s.message;
  } catch (...) {
    e.known = false;
  }
  return e;
}

}  // namespace nemo::lens::detail

#if defined(NEMO_LENS_EXCEPTION_HOOK)
namespace {
// The C++ runtime's own definition of an interposed function.
void* real_function(const char* name) {
  void* f = dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    if (void* lib = dlopen("libstdc++.so.6", RTLD_LAZY | RTLD_NOLOAD)) f = dlsym(lib, name);
  }
  if (f == nullptr) {
    static const char kMsg[] = "lens: cannot find the C++ runtime's exception functions\n";
    (void)!write(2, kMsg, sizeof kMsg - 1);
    std::abort();
  }
  return f;
}
}  // namespace

// The interposed throw. Records the type and, for std::exception, what() (copied, since the object
// may be gone by the time a destructor asks), then calls the real __cxa_throw.
extern "C" {
using CxaThrow = void (*)(void*, std::type_info*, void (*)(void*));

__attribute__((visibility("default"), noreturn)) void __cxa_throw(void* obj, std::type_info* type,
                                                                   void (*dest)(void*)) {
  static CxaThrow real = reinterpret_cast<CxaThrow>(real_function("__cxa_throw"));
  using nemo::lens::detail::t_last_throw;
  auto& slot = t_last_throw;
  slot.known = true;
  slot.depth = std::uncaught_exceptions();
  slot.type = type;
  slot.message[0] = '\0';
  void* adjusted = obj;
  // Asks the handler type std::exception whether it would catch `type` (adjusting the pointer
  // to the std::exception base), as a catch clause would.
  if (type != nullptr && typeid(std::exception).__do_catch(type, &adjusted, 1)) {
    const char* what = static_cast<const std::exception*>(adjusted)->what();
    if (what != nullptr) {
      std::strncpy(slot.message, what, sizeof slot.message - 1);
      slot.message[sizeof slot.message - 1] = '\0';
    }
  }
  real(obj, type, dest);
  __builtin_unreachable();
}

// The interposed start of a catch clause: once an exception is caught its record is stale, so a
// later rethrow that bypasses __cxa_throw (std::rethrow_exception) reports "unknown" rather than
// this exception's type.
__attribute__((visibility("default"))) void* __cxa_begin_catch(void* exception) noexcept {
  using BeginCatch = void* (*)(void*);
  static BeginCatch real = reinterpret_cast<BeginCatch>(real_function("__cxa_begin_catch"));
  nemo::lens::detail::t_last_throw.known = false;
  return real(exception);
}
}
#endif
