// The rank-aware sampler: a rank keeps all of its spans or none of them, chosen by the same MD5
// rule as the "sampled" strategy, so sampling and strategy agree across C++ and Python.
//
//   nemo::lens::RankAwareSampler sampler(rank, world_size, 0.25);
//   if (sampler.should_sample()) { /* this rank's spans are recorded */ }
#pragma once

#include <string>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// Per-rank, all-or-nothing sampling decision, computed once at construction. Immutable;
/// thread-safe.
class NEMO_LENS_API RankAwareSampler {
 public:
  /// Decides for `rank`: rate >= 1 keeps it, rate <= 0 drops it, otherwise rank_in_sample().
  RankAwareSampler(int rank, int world_size, double sample_rate) noexcept;

  /// Whether this rank's spans are kept. Constant; costs a load.
  bool should_sample() const noexcept { return keep_; }

  /// A description for diagnostics, e.g. "RankAwareSampler(rank=3, world_size=8, rate=0.5)".
  std::string description() const;

 private:
  int rank_;
  int world_size_;
  double rate_;
  bool keep_;
};

}  // namespace nemo::lens
