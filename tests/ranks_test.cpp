#include "nemo/lens/ranks.hpp"

#include <gtest/gtest.h>

#include <ostream>

#include "launcher_env.hpp"
#include "nemo/lens/errors.hpp"

namespace nemo::lens {

void PrintTo(const RankInfo& r, std::ostream* os) {
  *os << "{rank " << r.rank << ", world_size " << r.world_size << ", local_rank " << r.local_rank
      << ", source \"" << r.source << "\"}";
}

namespace {

using lens_test::LauncherEnv;

std::string error_of_discover() {
  return lens_test::error_message_of<ConfigError>([] { discover_ranks(); });
}

void set_openmpi(LauncherEnv& env, const char* rank, const char* size, const char* local) {
  env.set("OMPI_COMM_WORLD_RANK", rank);
  env.set("OMPI_COMM_WORLD_SIZE", size);
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", local);
}
void set_torchrun(LauncherEnv& env, const char* rank, const char* size, const char* local) {
  env.set("RANK", rank);
  env.set("WORLD_SIZE", size);
  env.set("LOCAL_RANK", local);
}
void set_pmi(LauncherEnv& env, const char* rank, const char* size, const char* local) {
  env.set("PMI_RANK", rank);
  env.set("PMI_SIZE", size);
  env.set("MPI_LOCALRANKID", local);
}
void set_slurm(LauncherEnv& env, const char* rank, const char* size, const char* local) {
  env.set("SLURM_PROCID", rank);
  env.set("SLURM_NTASKS", size);
  env.set("SLURM_LOCALID", local);
}

TEST(DiscoverRanks, WithoutLauncherVariablesRankZeroOfOne) {
  LauncherEnv env;
  EXPECT_EQ(discover_ranks(), (RankInfo{0, 1, 0, "default"}));
  // Variables of a launcher whose rank variable is unset do not count.
  env.set("WORLD_SIZE", "8");
  env.set("LOCAL_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "2");
  EXPECT_EQ(discover_ranks(), (RankInfo{0, 1, 0, "default"}));
}

TEST(DiscoverRanks, OpenMpi) {
  LauncherEnv env;
  set_openmpi(env, "5", "16", "1");
  EXPECT_EQ(discover_ranks(), (RankInfo{5, 16, 1, "openmpi"}));
}

TEST(DiscoverRanks, Torchrun) {
  LauncherEnv env;
  set_torchrun(env, "9", "32", "1");
  EXPECT_EQ(discover_ranks(), (RankInfo{9, 32, 1, "torchrun"}));
}

TEST(DiscoverRanks, PmiLocalRankFromMpiLocalRankIdThenPmiLocalRank) {
  LauncherEnv env;
  env.set("PMI_RANK", "6");
  env.set("PMI_SIZE", "8");
  EXPECT_EQ(discover_ranks(), (RankInfo{6, 8, 0, "pmi"}));
  env.set("PMI_LOCAL_RANK", "2");
  EXPECT_EQ(discover_ranks(), (RankInfo{6, 8, 2, "pmi"}));
  env.set("MPI_LOCALRANKID", "3");
  EXPECT_EQ(discover_ranks(), (RankInfo{6, 8, 3, "pmi"}));
}

TEST(DiscoverRanks, Slurm) {
  LauncherEnv env;
  set_slurm(env, "7", "8", "3");
  EXPECT_EQ(discover_ranks(), (RankInfo{7, 8, 3, "slurm"}));
}

TEST(DiscoverRanks, LocalRankDefaultsToZero) {
  LauncherEnv env;
  env.set("OMPI_COMM_WORLD_RANK", "3");
  env.set("OMPI_COMM_WORLD_SIZE", "4");
  EXPECT_EQ(discover_ranks(), (RankInfo{3, 4, 0, "openmpi"}));
}

TEST(DiscoverRanks, PrecedenceOpenMpiTorchrunPmiSlurm) {
  LauncherEnv env;
  set_slurm(env, "0", "2", "0");
  EXPECT_EQ(discover_ranks().source, "slurm");
  set_pmi(env, "1", "3", "1");
  EXPECT_EQ(discover_ranks(), (RankInfo{1, 3, 1, "pmi"}));
  set_torchrun(env, "2", "4", "2");
  EXPECT_EQ(discover_ranks(), (RankInfo{2, 4, 2, "torchrun"}));
  set_openmpi(env, "3", "5", "3");
  EXPECT_EQ(discover_ranks(), (RankInfo{3, 5, 3, "openmpi"}));
  env.unset("OMPI_COMM_WORLD_RANK");
  EXPECT_EQ(discover_ranks().source, "torchrun");
  env.unset("RANK");
  EXPECT_EQ(discover_ranks().source, "pmi");
  env.unset("PMI_RANK");
  EXPECT_EQ(discover_ranks().source, "slurm");
}

TEST(DiscoverRanks, BlankRankVariableIsUnsetAndValuesAreTrimmed) {
  LauncherEnv env;
  set_slurm(env, "1", "2", "1");
  env.set("RANK", "  ");
  env.set("WORLD_SIZE", "4");
  EXPECT_EQ(discover_ranks().source, "slurm");
  env.set("RANK", " 3\t");
  env.set("WORLD_SIZE", " 4 ");
  env.set("LOCAL_RANK", "+1");
  EXPECT_EQ(discover_ranks(), (RankInfo{3, 4, 1, "torchrun"}));
}

TEST(DiscoverRanks, ErrorsNameTheVariablesAndValues) {
  LauncherEnv env;
  set_torchrun(env, "four", "8", "0");
  EXPECT_EQ(error_of_discover(),
            "Invalid integer for RANK: 'four'. Expected a non-negative integer (set by the "
            "torchrun launcher).");
  set_torchrun(env, "-1", "8", "0");
  EXPECT_EQ(error_of_discover(),
            "Invalid value for RANK: '-1'. Expected a non-negative integer (set by the torchrun "
            "launcher).");
  set_torchrun(env, "0", "0", "0");
  EXPECT_EQ(error_of_discover(),
            "Invalid value for WORLD_SIZE: '0'. Expected an integer >= 1 (set by the torchrun "
            "launcher).");
  set_torchrun(env, "0", "8.0", "0");
  EXPECT_EQ(error_of_discover(),
            "Invalid integer for WORLD_SIZE: '8.0'. Expected an integer >= 1 (set by the torchrun "
            "launcher).");
  set_torchrun(env, "8", "8", "0");
  EXPECT_EQ(error_of_discover(),
            "Inconsistent torchrun launcher environment: RANK='8' is not below WORLD_SIZE='8'.");
  set_torchrun(env, "7", "8", "8");
  EXPECT_EQ(error_of_discover(),
            "Inconsistent torchrun launcher environment: LOCAL_RANK='8' is not below "
            "WORLD_SIZE='8'.");
  set_torchrun(env, "7", "8", "-2");
  EXPECT_EQ(error_of_discover(),
            "Invalid value for LOCAL_RANK: '-2'. Expected a non-negative integer (set by the "
            "torchrun launcher).");
  env.unset("WORLD_SIZE");
  env.set("LOCAL_RANK", "0");
  EXPECT_EQ(error_of_discover(),
            "Inconsistent torchrun launcher environment: RANK='7' is set but WORLD_SIZE is not.");
  env.set("WORLD_SIZE", "  ");  // blank is unset
  EXPECT_EQ(error_of_discover(),
            "Inconsistent torchrun launcher environment: RANK='7' is set but WORLD_SIZE is not.");
}

TEST(DiscoverRanks, ErrorsOfEachLauncher) {
  {
    LauncherEnv env;
    set_openmpi(env, "2", "2", "0");
    EXPECT_EQ(error_of_discover(),
              "Inconsistent openmpi launcher environment: OMPI_COMM_WORLD_RANK='2' is not below "
              "OMPI_COMM_WORLD_SIZE='2'.");
  }
  {
    LauncherEnv env;
    set_pmi(env, "0", "2", "x");
    EXPECT_EQ(error_of_discover(),
              "Invalid integer for MPI_LOCALRANKID: 'x'. Expected a non-negative integer (set by "
              "the pmi launcher).");
    env.unset("MPI_LOCALRANKID");
    env.set("PMI_LOCAL_RANK", "5");
    EXPECT_EQ(error_of_discover(),
              "Inconsistent pmi launcher environment: PMI_LOCAL_RANK='5' is not below "
              "PMI_SIZE='2'.");
  }
  {
    LauncherEnv env;
    env.set("SLURM_PROCID", "0");
    EXPECT_EQ(error_of_discover(),
              "Inconsistent slurm launcher environment: SLURM_PROCID='0' is set but SLURM_NTASKS "
              "is not.");
  }
}

TEST(DiscoverRanks, ABrokenLauncherDoesNotFallThrough) {
  LauncherEnv env;
  set_slurm(env, "0", "2", "0");
  env.set("OMPI_COMM_WORLD_RANK", "1");
  EXPECT_THROW(discover_ranks(), ConfigError) << "OpenMPI's set but incomplete variables";
}

}  // namespace
}  // namespace nemo::lens
