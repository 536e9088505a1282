// The spans `lens report` analyses step by step, kept until every input has been read: in memory
// while they are few, then in temporary files (in TMPDIR, removed as they are made), one of
// kBuckets chosen by rank and trace, so that each trace comes back whole. A file is read back
// whole when it holds at most kInMemory spans or one trace; a larger one is split again by another
// hash first. Memory then grows with the largest trace (64 bytes a span), not with the input.
//
//   SpanSpill spill;
//   spill.add(facts);                                      // for every span
//   spill.for_each_trace([&](std::span<SpanFacts> trace) { analyzer.analyze(trace, ...); });
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "report/step_breakdown.hpp"

namespace nemo::lens::cli {

class SpanSpill {
 public:
  /// Temporary files, each holding the traces whose (rank, trace) hash falls in it.
  static constexpr std::size_t kBuckets = 64;
  /// Spans kept in memory before the first file is made (2 MiB).
  static constexpr std::size_t kInMemory = 32768;

  /// `in_memory`: spans kept in memory before the first file, and the most read back at once
  /// unless they are one trace (kInMemory; tests make it small to reach the files).
  explicit SpanSpill(std::size_t in_memory = kInMemory) : in_memory_(in_memory) {}
  ~SpanSpill();
  SpanSpill(const SpanSpill&) = delete;
  SpanSpill& operator=(const SpanSpill&) = delete;

  /// Keeps `facts`. Throws FileError when a temporary file cannot be made or written.
  void add(const SpanFacts& facts);

  /// Calls `fn` once for each (rank, trace) with all its spans, bucket by bucket, in an order
  /// that depends only on the spans, then forgets them. Throws FileError on a read error.
  void for_each_trace(const std::function<void(std::span<SpanFacts>)>& fn);

  std::uint64_t spans() const { return spans_; }
  /// Whether the spans went to temporary files.
  bool spilled() const { return !files_.empty(); }

 private:
  static std::size_t bucket_of(const SpanFacts& facts, std::uint64_t level);
  std::vector<std::FILE*> make_files();
  void write(std::FILE* file, const SpanFacts& facts);
  // Gives back the traces of `file` (closed afterwards) made at split `level`.
  void drain(std::FILE* file, std::uint64_t level,
             const std::function<void(std::span<SpanFacts>)>& fn);
  static void each_trace(std::vector<SpanFacts>& spans,
                         const std::function<void(std::span<SpanFacts>)>& fn);

  std::size_t in_memory_;
  std::vector<SpanFacts> memory_;
  std::vector<std::FILE*> files_;  // kBuckets, once spilled
  std::string directory_;
  std::uint64_t spans_ = 0;
};

}  // namespace nemo::lens::cli
