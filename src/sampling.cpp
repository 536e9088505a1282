#include "nemo/lens/sampling.hpp"

#include <cstdio>

#include "nemo/lens/strategies.hpp"

namespace nemo::lens {

RankAwareSampler::RankAwareSampler(int rank, int world_size, double sample_rate) noexcept
    : rank_(rank),
      world_size_(world_size),
      rate_(sample_rate),
      keep_(sample_rate >= 1.0 ? true : sample_rate <= 0.0 ? false : rank_in_sample(rank, sample_rate)) {}

std::string RankAwareSampler::description() const {
  char buf[96];
  std::snprintf(buf, sizeof buf, "RankAwareSampler(rank=%d, world_size=%d, rate=%g)", rank_,
                world_size_, rate_);
  return buf;
}

}  // namespace nemo::lens
