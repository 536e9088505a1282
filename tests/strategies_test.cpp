#include "nemo/lens/strategies.hpp"

#include <gtest/gtest.h>

#include "launcher_env.hpp"
#include "nemo/lens/sampling.hpp"

namespace nemo::lens {
namespace {

using lens_test::LauncherEnv;

std::vector<int> kept(double rate, int n = 16) {
  std::vector<int> out;
  for (int r = 0; r < n; ++r) {
    if (rank_in_sample(r, rate)) out.push_back(r);
  }
  return out;
}

// Expected values computed independently with Python:
//   [r for r in range(16) if int(hashlib.md5(str(r).encode()).hexdigest(), 16) % 10000 / 10000 < rate]
TEST(Sampled, MatchesTheNemoLensMd5Rule) {
  EXPECT_EQ(kept(0.1), (std::vector<int>{3, 5, 6}));
  EXPECT_EQ(kept(0.5), (std::vector<int>{3, 4, 5, 6, 8, 10, 11, 13}));
  EXPECT_EQ(kept(1.0).size(), 16u);
  EXPECT_TRUE(kept(0.0).empty());
  // Boundaries: md5("6") mod 10000 = 412 and md5("0") mod 10000 = 7850.
  EXPECT_FALSE(rank_in_sample(6, 0.0412));
  EXPECT_TRUE(rank_in_sample(6, 0.0413));
  EXPECT_FALSE(rank_in_sample(0, 0.785));
  EXPECT_TRUE(rank_in_sample(0, 0.7851));
}

TEST(Strategies, BuiltinsAreRegistered) {
  auto names = registered_strategies();
  for (const char* b : {"all_ranks", "first_rank_per_node", "sampled", "single_rank"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), b), names.end()) << b;
  }
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
}

TEST(Strategies, SingleRankDefaultsToTheLastRank) {
  NemoLensConfig c;
  auto s = get_export_strategy("single_rank");
  EXPECT_FALSE(s(c, 0, 4));
  EXPECT_FALSE(s(c, 2, 4));
  EXPECT_TRUE(s(c, 3, 4));
  EXPECT_TRUE(s(c, 0, 1));
  c.export_rank = 0;
  EXPECT_TRUE(s(c, 0, 4));
  EXPECT_FALSE(s(c, 3, 4));
  c.export_rank = 7;  // beyond the world: nobody exports
  for (int r = 0; r < 4; ++r) EXPECT_FALSE(s(c, r, 4));
}

TEST(Strategies, AllRanks) {
  NemoLensConfig c;
  auto s = get_export_strategy("all_ranks");
  for (int r = 0; r < 8; ++r) EXPECT_TRUE(s(c, r, 8));
}

TEST(Strategies, SampledUsesTheConfiguredRate) {
  NemoLensConfig c;
  c.export_sample_rate = 0.5;
  auto s = get_export_strategy("sampled");
  std::vector<int> got;
  for (int r = 0; r < 16; ++r) {
    if (s(c, r, 16)) got.push_back(r);
  }
  EXPECT_EQ(got, kept(0.5));
}

TEST(Strategies, FirstRankPerNodeReadsLocalRank) {
  LauncherEnv env;
  NemoLensConfig c;
  auto s = get_export_strategy("first_rank_per_node");
  EXPECT_TRUE(s(c, 5, 8));  // LOCAL_RANK missing means 0
  env.set("LOCAL_RANK", "1");
  EXPECT_FALSE(s(c, 5, 8));
  env.set("LOCAL_RANK", "0");
  EXPECT_TRUE(s(c, 4, 8));
  env.set("LOCAL_RANK", "first");
  EXPECT_THROW(s(c, 4, 8), ConfigError);
  env.set("LOCAL_RANK", "3");
  EXPECT_EQ(local_rank_from_env(), 3);
}

TEST(Strategies, FirstRankPerNodeFallsBackToTheDiscoveredLocalRank) {
  LauncherEnv env;
  NemoLensConfig c;
  auto s = get_export_strategy("first_rank_per_node");
  env.set("SLURM_PROCID", "5");
  env.set("SLURM_NTASKS", "8");
  env.set("SLURM_LOCALID", "1");
  EXPECT_EQ(local_rank_from_env(), 1);
  EXPECT_FALSE(s(c, 5, 8));
  env.set("SLURM_LOCALID", "0");
  EXPECT_TRUE(s(c, 4, 8));
  env.set("OMPI_COMM_WORLD_RANK", "6");  // OpenMPI's variables win over SLURM's
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  EXPECT_EQ(local_rank_from_env(), 2);
  EXPECT_FALSE(s(c, 6, 8));
  env.set("PMI_RANK", "1");  // PMI comes after OpenMPI: no change
  env.set("PMI_SIZE", "8");
  env.set("MPI_LOCALRANKID", "0");
  EXPECT_EQ(local_rank_from_env(), 2);
}

TEST(Strategies, LocalRankVariableWinsOverTheLauncher) {
  LauncherEnv env;
  NemoLensConfig c;
  auto s = get_export_strategy("first_rank_per_node");
  env.set("OMPI_COMM_WORLD_RANK", "6");
  env.set("OMPI_COMM_WORLD_SIZE", "8");
  env.set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  env.set("LOCAL_RANK", "0");  // as NeMo Lens reads it, even without RANK
  EXPECT_EQ(local_rank_from_env(), 0);
  EXPECT_TRUE(s(c, 6, 8));
  env.set("OMPI_COMM_WORLD_SIZE", "6");  // inconsistent, but LOCAL_RANK is all that is read
  EXPECT_EQ(local_rank_from_env(), 0);
  env.unset("LOCAL_RANK");
  EXPECT_THROW(local_rank_from_env(), ConfigError);
  EXPECT_THROW(s(c, 6, 8), ConfigError);
}

TEST(Strategies, CustomRegistrationOverrideAndUnregister) {
  register_export_strategy("even", [](const NemoLensConfig&, int r, int) { return r % 2 == 0; });
  NemoLensConfig c;
  EXPECT_TRUE(get_export_strategy("even")(c, 2, 4));
  EXPECT_FALSE(get_export_strategy("even")(c, 1, 4));
  EXPECT_THROW(register_export_strategy("even", [](const NemoLensConfig&, int, int) { return true; }),
               ConfigError);
  register_export_strategy("even", [](const NemoLensConfig&, int, int) { return true; }, true);
  EXPECT_TRUE(get_export_strategy("even")(c, 1, 4));
  unregister_export_strategy("even");
  EXPECT_THROW(get_export_strategy("even"), ConfigError);
  EXPECT_THROW(unregister_export_strategy("even"), ConfigError);
}

TEST(Strategies, BuiltinsAreProtected) {
  EXPECT_THROW(unregister_export_strategy("single_rank"), ConfigError);
  EXPECT_THROW(register_export_strategy("all_ranks", [](const NemoLensConfig&, int, int) { return false; }),
               ConfigError);
  // With allow_override a built-in may be replaced, and still not unregistered.
  register_export_strategy("all_ranks", [](const NemoLensConfig&, int, int) { return false; }, true);
  EXPECT_FALSE(get_export_strategy("all_ranks")(NemoLensConfig{}, 0, 1));
  EXPECT_THROW(unregister_export_strategy("all_ranks"), ConfigError);
}

TEST(Strategies, InvalidRegistrations) {
  EXPECT_THROW(register_export_strategy("", [](const NemoLensConfig&, int, int) { return true; }),
               ConfigError);
  EXPECT_THROW(register_export_strategy("empty", ExportStrategy{}), ConfigError);
}

TEST(Strategies, UnknownNameListsRegistered) {
  try {
    get_export_strategy("every_other");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Unknown export_strategy 'every_other'. Registered strategies: ['all_ranks', "
              "'first_rank_per_node', 'sampled', 'single_rank'].");
  }
}

TEST(RankAwareSampler, AllOrNothingPerRank) {
  for (int r = 0; r < 16; ++r) {
    EXPECT_TRUE(RankAwareSampler(r, 16, 1.0).should_sample());
    EXPECT_FALSE(RankAwareSampler(r, 16, 0.0).should_sample());
    EXPECT_EQ(RankAwareSampler(r, 16, 0.1).should_sample(), rank_in_sample(r, 0.1)) << r;
    EXPECT_EQ(RankAwareSampler(r, 16, 0.5).should_sample(), rank_in_sample(r, 0.5)) << r;
  }
  EXPECT_EQ(RankAwareSampler(3, 16, 0.5).description(),
            "RankAwareSampler(rank=3, world_size=16, rate=0.5)");
}

}  // namespace
}  // namespace nemo::lens
