// The type and message of the exception a thread is unwinding. C++ offers no way to reach an
// exception in flight from a destructor, so the library interposes __cxa_throw (shared builds on
// glibc) and records each throw's type and what() in a thread-local slot. Internal.
#pragma once

#include <cstdint>
#include <string>

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

/// The demangled name of a mangled type name; the input on failure.
std::string demangle(const char* mangled) noexcept;

}  // namespace nemo::lens::detail
