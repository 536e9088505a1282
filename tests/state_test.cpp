#include "nemo/lens/state.hpp"

#include <gtest/gtest.h>

#include "nemo/lens/macros.hpp"

namespace nemo::lens {
namespace {

// Must run first in this process: nothing has been enabled yet.
TEST(State, A_BeforeSetupEveryGroupIsOff) {
  EXPECT_TRUE(enabled_span_groups().empty());
  EXPECT_FALSE(is_span_group_enabled("job"));
  EXPECT_FALSE(LENS_GROUP_ENABLED("job"));
  EXPECT_FALSE(LENS_GROUP_ENABLED(SpanGroup::STEP));
}

TEST(State, SetAndReadBack) {
  set_enabled_span_groups({"job", "step"});
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"job", "step"}));
  EXPECT_TRUE(is_span_group_enabled("job"));
  EXPECT_TRUE(is_span_group_enabled("step"));
  EXPECT_FALSE(is_span_group_enabled("optimizer"));
  EXPECT_FALSE(is_span_group_enabled("Job"));  // exact match
  EXPECT_FALSE(is_span_group_enabled(""));
  set_enabled_span_groups({});
  EXPECT_FALSE(is_span_group_enabled("job"));
  EXPECT_TRUE(enabled_span_groups().empty());
}

bool step_site() { return LENS_GROUP_ENABLED(SpanGroup::STEP); }

TEST(Gate, SiteSeesEveryLaterSwitch) {
  set_enabled_span_groups({});
  EXPECT_FALSE(step_site());  // resolves here, while off
  set_enabled_span_groups({"step"});
  EXPECT_TRUE(step_site());
  set_enabled_span_groups({"job"});
  EXPECT_FALSE(step_site());
  set_enabled_span_groups({"job", "step"});
  EXPECT_TRUE(step_site());
  set_enabled_span_groups({});
  EXPECT_FALSE(step_site());
}

bool custom_site() { return LENS_GROUP_ENABLED("my_library_custom_group"); }

TEST(Gate, UnknownGroupIsOffUnlessExplicitlyEnabled) {
  set_enabled_span_groups(SpanGroup::catalog().resolve("all"));
  EXPECT_FALSE(custom_site());
  EXPECT_FALSE(is_span_group_enabled("my_library_custom_group"));
  set_enabled_span_groups({"my_library_custom_group"});
  EXPECT_TRUE(custom_site());
  EXPECT_TRUE(is_span_group_enabled("my_library_custom_group"));
  set_enabled_span_groups({});
}

TEST(Gate, SiteResolvedWhileEnabledStartsEnabled) {
  set_enabled_span_groups({"late_group"});
  EXPECT_TRUE(LENS_GROUP_ENABLED("late_group"));  // first evaluation of this site
  set_enabled_span_groups({});
}

TEST(Gate, ManyDistinctNamesStayCorrect) {
  // More names than fit a small table: lookups by name and sites stay exact.
  GroupSet even;
  for (int i = 0; i < 600; ++i) {
    if (i % 2 == 0) even.insert("bulk_" + std::to_string(i));
  }
  set_enabled_span_groups(even);
  for (int i = 0; i < 600; ++i) {
    EXPECT_EQ(is_span_group_enabled("bulk_" + std::to_string(i)), i % 2 == 0) << i;
  }
  set_enabled_span_groups({});
  EXPECT_FALSE(is_span_group_enabled("bulk_0"));
}

TEST(State, SwitchingBackAndForthReusesSnapshots) {
  for (int i = 0; i < 1000; ++i) {
    set_enabled_span_groups(i % 2 ? GroupSet{"a"} : GroupSet{"b"});
  }
  EXPECT_EQ(enabled_span_groups(), (GroupSet{"a"}));
  set_enabled_span_groups({});
}

}  // namespace
}  // namespace nemo::lens

namespace nemo::lens {
namespace {

TEST(State, BeyondTheInternTableCapacityLookupsStayExact) {
  // 5000 distinct names exceed the 4096 interned slots; the rest are answered from the snapshot.
  GroupSet many;
  for (int i = 0; i < 5000; ++i) many.insert("cap_" + std::to_string(i));
  set_enabled_span_groups(many);
  for (int i = 0; i < 5000; i += 7) EXPECT_TRUE(is_span_group_enabled("cap_" + std::to_string(i)));
  EXPECT_FALSE(is_span_group_enabled("cap_5000"));
  EXPECT_TRUE(LENS_GROUP_ENABLED("cap_4999"));  // a site that cannot be interned
  set_enabled_span_groups({"cap_1"});
  EXPECT_FALSE(is_span_group_enabled("cap_4999"));
  EXPECT_TRUE(is_span_group_enabled("cap_1"));
  set_enabled_span_groups({});
}

}  // namespace
}  // namespace nemo::lens
