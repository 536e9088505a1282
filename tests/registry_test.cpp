#include <gtest/gtest.h>

#include "nemo/lens/groups.hpp"

namespace nemo::lens {
namespace {

GroupSet set_of(std::initializer_list<const char*> names) {
  GroupSet s;
  for (const char* n : names) s.insert(n);
  return s;
}

TEST(SpanRegistry, EmptyRegistryHasOnlyAll) {
  SpanRegistry r;
  auto c = r.catalog();
  EXPECT_TRUE(c.groups().empty());
  EXPECT_EQ(c.presets().size(), 1u);
  EXPECT_EQ(c.resolve("all"), GroupSet{});
  EXPECT_TRUE(r.namespaces().empty());
}

TEST(SpanRegistry, CatalogIsTheUnionAndSharedGroupsAreOne) {
  SpanRegistry r;
  r.register_groups("megatron", {"job", "step", "layer"}, {{"default", {"job"}}});
  r.register_groups("rl", {"job", "rollout"}, {{"default", {"job", "rollout"}}});
  auto c = r.catalog();
  EXPECT_EQ(c.groups(), set_of({"job", "step", "layer", "rollout"}));
  EXPECT_EQ(c.presets().at("default"), set_of({"job", "rollout"}));  // merged by union
  EXPECT_EQ(c.presets().at("all"), c.groups());
  EXPECT_EQ(c.resolve("default,layer"), set_of({"job", "rollout", "layer"}));
  EXPECT_EQ(r.namespaces(), (std::vector<std::string>{"megatron", "rl"}));
}

TEST(SpanRegistry, AllIsReservedAndFollowsRegistrations) {
  SpanRegistry r;
  EXPECT_THROW(r.register_groups("x", {"a"}, {{"all", {"a"}}}), SpanGroupError);
  EXPECT_THROW(r.register_groups("x", {"all"}), SpanGroupError);
  r.register_groups("x", {"a"});
  EXPECT_EQ(r.catalog().resolve("all"), set_of({"a"}));
  r.register_groups("y", {"b"});
  EXPECT_EQ(r.catalog().resolve("all"), set_of({"a", "b"}));
  ASSERT_TRUE(r.unregister("x"));
  EXPECT_EQ(r.catalog().resolve("all"), set_of({"b"}));
}

TEST(SpanRegistry, RegisteringAgainReplaces) {
  SpanRegistry r;
  r.register_groups("lib", {"a", "b"}, {{"fast", {"a"}}});
  r.register_groups("lib", {"c"});
  auto c = r.catalog();
  EXPECT_EQ(c.groups(), set_of({"c"}));
  EXPECT_FALSE(c.has_preset("fast"));
}

TEST(SpanRegistry, PresetCollidingWithAGroupIsAnErrorAndChangesNothing) {
  SpanRegistry r;
  r.register_groups("a", {"step"});
  EXPECT_THROW(r.register_groups("b", {"x"}, {{"step", {"x"}}}), SpanGroupError);
  r.register_groups("c", {"y"}, {{"fast", {"y"}}});
  EXPECT_THROW(r.register_groups("d", {"fast"}), SpanGroupError);  // group vs existing preset
  EXPECT_THROW(r.register_groups("e", {"z"}, {{"z", {"z"}}}), SpanGroupError);  // own group
  EXPECT_EQ(r.namespaces(), (std::vector<std::string>{"a", "c"}));
  EXPECT_EQ(r.catalog().groups(), set_of({"step", "y"}));
}

TEST(SpanRegistry, ReplacingANamespaceMayDropItsOwnCollision) {
  SpanRegistry r;
  r.register_groups("a", {"fast"});
  // "a" is being replaced, so its old group "fast" does not block the new preset "fast".
  r.register_groups("a", {"x"}, {{"fast", {"x"}}});
  EXPECT_EQ(r.catalog().resolve("fast"), set_of({"x"}));
}

TEST(SpanRegistry, PresetMayOnlyNameItsNamespacesGroups) {
  SpanRegistry r;
  r.register_groups("a", {"step"});
  try {
    r.register_groups("b", {"x"}, {{"p", {"step"}}});
    FAIL();
  } catch (const SpanGroupError& e) {
    EXPECT_NE(std::string(e.what()).find("'b'"), std::string::npos) << e.what();
  }
}

TEST(SpanRegistry, NamesAreNormalisedAndNamespaceRequired) {
  SpanRegistry r;
  EXPECT_THROW(r.register_groups("  ", {"a"}), SpanGroupError);
  r.register_groups("lib", {" Layer "}, {{"Fine", {"LAYER"}}});
  EXPECT_EQ(r.catalog().resolve("fine"), set_of({"layer"}));
  EXPECT_FALSE(r.unregister("other"));
}

TEST(SpanRegistry, GlobalIsOneInstance) {
  EXPECT_EQ(&SpanRegistry::global(), &SpanRegistry::global());
  SpanRegistry::global().register_groups("registry_test", {"g1"});
  EXPECT_TRUE(SpanRegistry::global().catalog().has_group("g1"));
  EXPECT_TRUE(SpanRegistry::global().unregister("registry_test"));
}

}  // namespace
}  // namespace nemo::lens
