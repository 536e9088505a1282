#include "tracing/read_only_memory.hpp"

#include <elf.h>
#include <link.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <vector>

namespace nemo::lens::detail {

namespace {

struct Range {
  std::uintptr_t begin, end;
};

// The read-only segments of the objects loaded when they were last listed, sorted, and the
// loader's counts of objects added and removed then.
struct Segments {
  std::mutex mu;
  std::vector<Range> ranges;
  unsigned long long adds = 0, subs = 0;
  bool listed = false;
};

Segments& segments() {
  static auto* s = new Segments();  // immortal: usable from any thread at any time
  return *s;
}

struct Counts {
  unsigned long long adds = 0, subs = 0;
};

int read_counts(dl_phdr_info* info, std::size_t size, void* data) {
  // Every entry carries the same counts: the first one is enough.
  if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
    *static_cast<Counts*>(data) = {info->dlpi_adds, info->dlpi_subs};
  }
  return 1;
}

int list_segments(dl_phdr_info* info, std::size_t, void* data) {
  auto& out = *static_cast<std::vector<Range>*>(data);
  for (ElfW(Half) i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD || (ph.p_flags & PF_W) != 0) continue;
    const std::uintptr_t begin = info->dlpi_addr + ph.p_vaddr;
    out.push_back({begin, begin + ph.p_memsz});
  }
  return 0;
}

}  // namespace

bool in_read_only_memory(const void* p, std::size_t n) noexcept {
  Segments& s = segments();
  try {
    std::lock_guard lock(s.mu);
    Counts now;
    dl_iterate_phdr(read_counts, &now);
    if (!s.listed || now.adds != s.adds || now.subs != s.subs) {
      s.ranges.clear();
      dl_iterate_phdr(list_segments, &s.ranges);
      std::sort(s.ranges.begin(), s.ranges.end(),
                [](const Range& a, const Range& b) { return a.begin < b.begin; });
      s.adds = now.adds;
      s.subs = now.subs;
      s.listed = true;
    }
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    // The last segment that begins at or before `a`; segments do not overlap.
    auto it = std::upper_bound(s.ranges.begin(), s.ranges.end(), a,
                               [](std::uintptr_t v, const Range& r) { return v < r.begin; });
    if (it == s.ranges.begin()) return false;
    --it;
    return a < it->end && n <= it->end - a;
  } catch (...) {
    return false;
  }
}

}  // namespace nemo::lens::detail
