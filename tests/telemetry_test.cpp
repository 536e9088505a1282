#include "nemo/lens/telemetry.hpp"

#include <gtest/gtest.h>

#include <regex>

#include "nemo/lens/macros.hpp"
#include "nemo/lens/state.hpp"
#include "scoped_env.hpp"

namespace nemo::lens {
namespace {

using lens_test::ScopedEnv;

NemoLensConfig enabled_config(std::string spec = "default") {
  NemoLensConfig c;
  c.enabled = true;
  c.span_groups = std::move(spec);
  c.export_strategy = "all_ranks";
  c.exporter = "console";
  return c;
}

class Setup : public ::testing::Test {
 protected:
  void TearDown() override { set_enabled_span_groups({}); }
  ScopedEnv env_;
};

TEST_F(Setup, DefaultHandleIsInert) {
  TelemetryHandle h;
  EXPECT_FALSE(h.enabled());
  EXPECT_FALSE(h.is_exporting());
  EXPECT_TRUE(h.force_flush());
  EXPECT_TRUE(h.shutdown());
  EXPECT_FALSE(h.is_shut_down());
}

TEST_F(Setup, DisabledConfigIsANoOpWithEveryGroupOff) {
  set_enabled_span_groups({"job"});
  NemoLensConfig c;  // enabled = false
  auto h = setup_telemetry(c);
  EXPECT_FALSE(h.enabled());
  EXPECT_FALSE(h.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty()) << "a disabled set-up leaves every group off";
  // A disabled set-up does not count as the first set-up.
  auto h2 = setup_telemetry(enabled_config());
  EXPECT_TRUE(h2.is_exporting());
  // A disabled set-up while an enabled one is active leaves the active one's groups alone.
  auto h3 = setup_telemetry(c);
  EXPECT_FALSE(h3.is_exporting());
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"}));
  h3.shutdown();
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"}));
  h2.shutdown();
}

TEST_F(Setup, EnabledAndExportingRegistersTheResolvedGroups) {
  auto h = setup_telemetry(enabled_config("default,step"), 0, 1);
  EXPECT_TRUE(h.enabled());
  EXPECT_TRUE(h.is_exporting());
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"checkpoint", "evaluate", "job", "step"}));
  EXPECT_TRUE(LENS_GROUP_ENABLED(SpanGroup::STEP));
  EXPECT_FALSE(LENS_GROUP_ENABLED(SpanGroup::OPTIMIZER));
  EXPECT_TRUE(h.shutdown());
  EXPECT_TRUE(h.is_shut_down());
  EXPECT_TRUE(enabled_span_groups().empty()) << "shutdown switches every group off";
  EXPECT_FALSE(LENS_GROUP_ENABLED(SpanGroup::STEP));
}

TEST_F(Setup, EnabledButNotExportingLeavesEveryGroupOff) {
  NemoLensConfig c = enabled_config("all");
  c.export_strategy = "single_rank";  // the last rank exports
  auto h = setup_telemetry(c, 0, 4);
  EXPECT_TRUE(h.enabled());
  EXPECT_FALSE(h.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty());
  h.shutdown();
  auto last = setup_telemetry(c, 3, 4);
  EXPECT_TRUE(last.is_exporting());
  EXPECT_EQ(enabled_span_groups(), SpanGroup::catalog().groups());
  last.shutdown();
}

// NeMo Lens' single_rank exports from no rank when export_rank is not below the world size, and
// so does lens (both languages pick the same ranks), but rank 0 says so once at set-up.
TEST_F(Setup, AnExportRankBeyondTheWorldSizeExportsNothingAndRankZeroSaysSo) {
  env_.set("NEMO_LENS_CONTROL", "off");  // nothing else on stderr
  env_.set("NEMO_LENS_EXPORT_RANK", "2147483647");
  NemoLensConfig c = NemoLensConfig::from_env();
  c.enabled = true;
  c.exporter = "console";
  testing::internal::CaptureStderr();
  auto h = setup_telemetry(c, 0, 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(),
            "lens: NEMO_LENS_EXPORT_RANK is 2147483647, but the world size is 1: with "
            "export_strategy single_rank no rank exports. Give a rank from 0 to 0, or -1 for the "
            "last rank.\n");
  EXPECT_FALSE(h.is_exporting());
  EXPECT_TRUE(enabled_span_groups().empty());
  h.shutdown();

  NemoLensConfig d = enabled_config("all");  // set in the program: named as the field
  d.export_strategy = "single_rank";
  d.export_rank = 4;
  for (int rank = 0; rank < 4; ++rank) {
    testing::internal::CaptureStderr();
    auto r = setup_telemetry(d, rank, 4);
    EXPECT_EQ(testing::internal::GetCapturedStderr(),
              rank == 0 ? "lens: export_rank is 4, but the world size is 4: with export_strategy "
                          "single_rank no rank exports. Give a rank from 0 to 3, or -1 for the "
                          "last rank.\n"
                        : "")
        << rank;
    EXPECT_FALSE(r.is_exporting());
    r.shutdown();
  }
  d.export_rank = 3;  // in range, or another strategy: nothing to say
  testing::internal::CaptureStderr();
  auto last = setup_telemetry(d, 0, 4);
  last.shutdown();
  d.export_strategy = "all_ranks";
  d.export_rank = 9;
  auto all = setup_telemetry(d, 0, 4);
  EXPECT_TRUE(all.is_exporting());
  all.shutdown();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
}

TEST_F(Setup, SecondEnabledSetupThrowsUnlessAllowReinit) {
  auto first = setup_telemetry(enabled_config("default"));
  try {
    setup_telemetry(enabled_config("all"));
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("allow_reinit"), std::string::npos) << e.what();
  }
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"})) << "unchanged";
  SetupOptions opts;
  opts.allow_reinit = true;
  auto second = setup_telemetry(enabled_config("all"), 0, 1, opts);
  EXPECT_EQ(enabled_span_groups(), SpanGroup::catalog().groups());
  EXPECT_TRUE(first.is_shut_down()) << "the replaced set-up is shut down";
  // Shutting down the replaced handle must not switch off the new set-up's groups.
  EXPECT_TRUE(first.shutdown());
  EXPECT_EQ(enabled_span_groups(), SpanGroup::catalog().groups());
  second.shutdown();
  // After a shutdown a new set-up is allowed without allow_reinit.
  auto third = setup_telemetry(enabled_config("default"));
  EXPECT_TRUE(third.is_exporting());
  third.shutdown();
}

TEST_F(Setup, DroppingEveryHandleKeepsTheSetUpActive) {
  { auto dropped = setup_telemetry(enabled_config("default")); }
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"}));
  EXPECT_THROW(setup_telemetry(enabled_config("all")), ConfigError) << "still the active set-up";
  SetupOptions o;
  o.allow_reinit = true;
  auto h = setup_telemetry(enabled_config("all"), 0, 1, o);
  EXPECT_EQ(enabled_span_groups(), SpanGroup::catalog().groups());
  h.shutdown();
}

TEST_F(Setup, ShutdownIsIdempotentAndSharedByCopies) {
  auto h = setup_telemetry(enabled_config());
  TelemetryHandle copy = h;
  EXPECT_TRUE(copy.shutdown());
  EXPECT_TRUE(h.is_shut_down());
  EXPECT_TRUE(h.shutdown());
  EXPECT_TRUE(h.force_flush());
}

TEST_F(Setup, ErrorsChangeNothing) {
  set_enabled_span_groups({"job"});
  EXPECT_THROW(setup_telemetry(enabled_config("default,bogus")), SpanGroupError);
  NemoLensConfig bad_strategy = enabled_config();
  bad_strategy.export_strategy = "nope";
  EXPECT_THROW(setup_telemetry(bad_strategy), ConfigError);
  NemoLensConfig bad_rate = enabled_config();
  bad_rate.export_sample_rate = 2;
  EXPECT_THROW(setup_telemetry(bad_rate), ConfigError);
  EXPECT_THROW(setup_telemetry(enabled_config(), 4, 4), ConfigError);
  EXPECT_THROW(setup_telemetry(enabled_config(), -1, 4), ConfigError);
  EXPECT_THROW(setup_telemetry(enabled_config(), 0, 0), ConfigError);
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"job"}));
  // None of the failures counts as an active set-up.
  auto h = setup_telemetry(enabled_config());
  EXPECT_TRUE(h.is_exporting());
  h.shutdown();
}

TEST_F(Setup, CustomStrategyFromOptions) {
  SetupOptions opts;
  int calls = 0;
  opts.strategy = [&](const NemoLensConfig&, int rank, int world) {
    ++calls;
    return rank == 1 && world == 2;
  };
  auto h = setup_telemetry(enabled_config(), 1, 2, opts);
  EXPECT_TRUE(h.is_exporting());
  EXPECT_EQ(calls, 1);
  EXPECT_EQ(h.rank(), 1);
  EXPECT_EQ(h.world_size(), 2);
  h.shutdown();
}

TEST_F(Setup, RunIdComesFromConfigThenSlurmThenRandom) {
  NemoLensConfig c = enabled_config();
  c.run_id = "explicit";
  auto h = setup_telemetry(c);
  EXPECT_EQ(h.config().run_id, "explicit");
  h.shutdown();

  env_.set("SLURM_JOB_ID", "123456");
  auto s = setup_telemetry(enabled_config());
  EXPECT_EQ(s.config().run_id, "123456");
  s.shutdown();

  env_.unset("SLURM_JOB_ID");
  auto r1 = setup_telemetry(enabled_config());
  std::string id1 = r1.config().run_id;
  r1.shutdown();
  auto r2 = setup_telemetry(enabled_config());
  std::string id2 = r2.config().run_id;
  r2.shutdown();
  EXPECT_TRUE(std::regex_match(id1, std::regex("[0-9a-f]{12}"))) << id1;
  EXPECT_TRUE(std::regex_match(id2, std::regex("[0-9a-f]{12}"))) << id2;
  EXPECT_NE(id1, id2);
}

TEST_F(Setup, RandomRunIdIgnoresProgramSeeding) {
  std::srand(1);
  auto a = setup_telemetry(enabled_config());
  std::string id_a = a.config().run_id;
  a.shutdown();
  std::srand(1);
  auto b = setup_telemetry(enabled_config());
  std::string id_b = b.config().run_id;
  b.shutdown();
  EXPECT_NE(id_a, id_b);
}

}  // namespace
}  // namespace nemo::lens
