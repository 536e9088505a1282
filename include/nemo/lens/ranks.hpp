// Rank discovery: this process's rank, the world size and its rank on the node, read from the
// variables the launcher sets (mpirun, torchrun, srun, MPICH/Intel MPI hydra).
//
//   nemo::lens::RankInfo ranks = nemo::lens::discover_ranks();   // throws ConfigError
//   auto telemetry = nemo::lens::setup_telemetry(nemo::lens::NemoLensConfig::from_env(),
//                                                ranks.rank, ranks.world_size);
#pragma once

#include <string>

#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// Where this process sits in a distributed job.
struct RankInfo {
  /// The global rank, in [0, world_size).
  int rank = 0;
  /// The number of ranks, at least 1.
  int world_size = 1;
  /// The rank on this node, in [0, world_size).
  int local_rank = 0;
  /// The launcher the values came from: "openmpi", "torchrun", "pmi", "slurm", or "default"
  /// (no launcher variables: rank 0 of 1).
  std::string source = "default";
  friend bool operator==(const RankInfo&, const RankInfo&) = default;
};

/// Reads the rank, world size and local rank from the first launcher whose rank variable is set
/// (non-blank), in this order:
///
///   source     rank                   world size             local rank (0 when unset)
///   openmpi    OMPI_COMM_WORLD_RANK   OMPI_COMM_WORLD_SIZE   OMPI_COMM_WORLD_LOCAL_RANK
///   torchrun   RANK                   WORLD_SIZE             LOCAL_RANK
///   pmi        PMI_RANK               PMI_SIZE               MPI_LOCALRANKID, else PMI_LOCAL_RANK
///   slurm      SLURM_PROCID           SLURM_NTASKS           SLURM_LOCALID
///
/// and rank 0 of 1 ("default") when none is set. A launcher sets only its own variables, so the
/// first three do not meet in one process unless nested; SLURM's variables, however, describe the
/// allocation and stay in the environment of every process started inside it by mpirun or
/// torchrun (where SLURM_PROCID is the rank of the launching task, not of the process), so they
/// are used only when no launcher variable is set.
///
/// Throws ConfigError naming the variables and their values when a value is not an integer or is
/// negative, the world size is unset or below 1, or the rank or local rank is not below the world
/// size. Reads the environment on every call (a few getenv calls); not synchronised with setenv.
NEMO_LENS_API RankInfo discover_ranks();

}  // namespace nemo::lens
