// The type and message of the exception a thread is unwinding. C++ offers no way to reach an
// exception in flight from a destructor, so the library interposes __cxa_throw (shared builds on
// glibc) and records each throw's type and what() in a thread-local slot. Internal.
#pragma once

#include <cstdint>
#include <string>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens::detail {

/// The most recent exception thrown on this thread, if the hook saw it.
struct ThrownException {
  bool known = false;
  std::string type;     // demangled
  std::string message;  // what(), for types derived from std::exception
};

/// What the hook recorded for this thread's latest throw, if that throw is the one being unwound
/// while `uncaught` exceptions are in flight (known = false when the hook is not active, or the
/// latest throw it saw was at another depth, e.g. a rethrow through std::rethrow_exception).
ThrownException last_thrown_exception(int uncaught) noexcept;

/// The first fields of the C++ ABI's per-thread exception globals (__cxa_eh_globals, Itanium C++
/// ABI 2.2.2, the same in libstdc++ and libc++abi): what std::uncaught_exceptions() reads.
struct EhGlobals {
  void* caught_exceptions;
  unsigned int uncaught_exceptions;
};

/// This thread's EhGlobals, looked up on its first span (__cxa_get_globals()).
[[gnu::tls_model("initial-exec")]] extern constinit thread_local const EhGlobals* t_eh_globals;
const EhGlobals* lookup_eh_globals() noexcept;

/// std::uncaught_exceptions(), without its call into the C++ runtime and that runtime's
/// thread-local lookup: two loads once the thread's globals are known.
inline int uncaught_exceptions_now() noexcept {
  const EhGlobals* g = t_eh_globals;
  if (NEMO_LENS_UNLIKELY(g == nullptr)) g = lookup_eh_globals();
  return static_cast<int>(g->uncaught_exceptions);
}

/// The demangled name of a mangled type name; the input on failure.
std::string demangle(const char* mangled) noexcept;

}  // namespace nemo::lens::detail
