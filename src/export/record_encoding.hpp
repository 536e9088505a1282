// What the encoders of span records (OTLP protobuf and JSON) share: the ids of a batch, made a run
// at a time (BatchIds), and what they write the same for every span of one site and thread (the
// span's name, the attributes the encoder adds: nemo.span.group, thread.id), made once per request
// and copied into each span's encoding (SiteBytesCache). Internal.
//
//   SiteBytesCache sites;                              // one per request, on the stack
//   const SiteBytes* b = sites.find(r, [&](std::string& out, std::size_t (&ends)[3]) {
//     ...append the parts to out, ends[i] = out.size() after part i...;
//     return true;                                     // false: not cacheable
//   });
//   p = copy_padded(p, sites.at(b->at[0]), b->size[0]);
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>

#include "tracing/engine.hpp"

namespace nemo::lens::detail {

/// The ids each record of a batch is exported with (export_ids()), made a run of records at a time
/// as the encoder reaches them: one call into the library per run, no allocation.
class BatchIds {
 public:
  explicit BatchIds(std::span<const SpanRecord* const> records) : records_(records) {}
  /// The ids of records[i] (not null); i grows from call to call.
  const RecordIds& of(std::size_t i) {
    if (i >= end_) {
      begin_ = i;
      end_ = std::min(records_.size(), i + kRun);
      export_ids(records_.subspan(begin_, end_ - begin_), ids_);
    }
    return ids_[i - begin_];
  }

 private:
  static constexpr std::size_t kRun = 64;
  std::span<const SpanRecord* const> records_;
  std::size_t begin_ = 0, end_ = 0;
  RecordIds ids_[kRun];
};

/// Copies [src, src + n) to dst sixteen bytes at a time, reading and writing up to 15 bytes past
/// the end (SiteBytesCache pads what it keeps; the writer reserves the slack): for the short
/// runs of an encoding, fewer instructions than a call to memcpy. Returns dst + n.
inline char* copy_padded(char* dst, const char* src, std::size_t n) {
  for (std::size_t i = 0; i < n; i += 16) std::memcpy(dst + i, src + i, 16);
  return dst + n;
}

/// The bytes of one site and thread: three parts, where they lie in the cache's arena.
struct SiteBytes {
  const SpanSite* site = nullptr;
  std::int64_t thread_id = 0;
  std::uint16_t at[3] = {}, size[3] = {};
};

/// The bytes of the sites and threads of one request: a few kilobytes on the stack, a table of
/// kEntries by site and thread (a collision makes the newer one again), an arena that starts
/// again when full. Each entry's bytes take a multiple of 16 in the arena, zero-padded, so that
/// copy_padded() reads no byte past the arena and none that was never written.
class SiteBytesCache {
 public:
  /// The most bytes one site and thread may take.
  static constexpr std::size_t kMaxBytes = 512;

  /// The bytes of `r`'s site and thread (r.site is not null), made now with `make` when missing;
  /// null when they cannot be cached (make returned false, or they exceed kMaxBytes): the span is
  /// then written the general way. make(out, ends) appends the three parts to `out` (empty),
  /// ends[i] the size of `out` after part i, and returns true.
  template <class Make>
  const SiteBytes* find(const SpanRecord& r, Make&& make) {
    const auto key = reinterpret_cast<std::uintptr_t>(r.site) ^
                     static_cast<std::uintptr_t>(r.thread_id) * 0x9e3779b97f4a7c15ull;
    SiteBytes& e = entries_[(key * 0x9e3779b97f4a7c15ull) >> (64 - kEntryBits)];
    if (NEMO_LENS_LIKELY(e.site == r.site && e.thread_id == r.thread_id)) return &e;
    scratch_.clear();
    std::size_t ends[3] = {};
    if (!make(scratch_, ends) || scratch_.size() > kMaxBytes) return nullptr;
    const std::size_t size = scratch_.size();
    const std::size_t padded = (size + 15) & ~std::size_t{15};
    if (padded > kArena - used_) {
      // The arena is full (a request of many sites): start it again; the entries that pointed
      // into it go.
      for (SiteBytes& other : entries_) other = SiteBytes{};
      used_ = 0;
    }
    std::memcpy(arena_ + used_, scratch_.data(), size);
    std::memset(arena_ + used_ + size, 0, padded - size);
    e.site = r.site;
    e.thread_id = r.thread_id;
    std::size_t begin = 0;
    for (int i = 0; i < 3; ++i) {
      e.at[i] = static_cast<std::uint16_t>(used_ + begin);
      e.size[i] = static_cast<std::uint16_t>(ends[i] - begin);
      begin = ends[i];
    }
    used_ += padded;
    return &e;
  }

  /// The bytes at `offset` of the arena (SiteBytes::at).
  const char* at(std::uint16_t offset) const { return arena_ + offset; }

 private:
  static constexpr unsigned kEntryBits = 5;
  static constexpr std::size_t kArena = 4096;
  static_assert(kMaxBytes <= kArena && kArena <= UINT16_MAX);

  SiteBytes entries_[std::size_t{1} << kEntryBits];
  std::size_t used_ = 0;
  std::string scratch_;
  char arena_[kArena];
};

}  // namespace nemo::lens::detail
