// Whether bytes lie in memory that cannot change: a read-only segment of a loaded object, where
// string literals live. A LENS_SPAN site whose attribute keys are there recognises them again by
// their address alone. Internal.
#pragma once

#include <cstddef>

namespace nemo::lens::detail {

/// Whether [p, p + n) lies within one read-only PT_LOAD segment of an object loaded now (the
/// program or a shared library). Its bytes then stay as they are while that object is loaded.
/// Looks the segments up again after a library was loaded or unloaded; a few hundred nanoseconds
/// otherwise. Thread-safe; false when memory runs out.
bool in_read_only_memory(const void* p, std::size_t n) noexcept;

}  // namespace nemo::lens::detail
