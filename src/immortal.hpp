// Objects that are never freed because other threads may still use them (span pipelines, log
// processors): keep_reachable() records them so that leak checkers see them as reachable, not
// leaked. Internal.
#pragma once

#include <mutex>
#include <vector>

namespace nemo::lens::detail {

/// Records `p` in a process-wide list of T that is itself never freed. Never throws (when memory
/// runs out, `p` is simply not recorded).
template <class T>
void keep_reachable(T* p) noexcept {
  static auto* mu = new std::mutex();
  static auto* all = new std::vector<T*>();
  try {
    std::lock_guard lock(*mu);
    all->push_back(p);
  } catch (...) {
  }
}

}  // namespace nemo::lens::detail
