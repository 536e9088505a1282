#include "nemo/lens/groups.hpp"

#include <gtest/gtest.h>

#include <string>

namespace nemo::lens {
namespace {

GroupSet set_of(std::initializer_list<const char*> names) {
  GroupSet s;
  for (const char* n : names) s.insert(n);
  return s;
}

const GroupSet kBaseAll = set_of({"job", "checkpoint", "evaluate", "model_init", "load_checkpoint",
                                  "step", "forward_backward", "optimizer"});

TEST(SpanGroup, ConstantsAreTheSeedNames) {
  EXPECT_EQ(SpanGroup::JOB, "job");
  EXPECT_EQ(SpanGroup::CHECKPOINT, "checkpoint");
  EXPECT_EQ(SpanGroup::EVALUATE, "evaluate");
  EXPECT_EQ(SpanGroup::MODEL_INIT, "model_init");
  EXPECT_EQ(SpanGroup::LOAD_CHECKPOINT, "load_checkpoint");
  EXPECT_EQ(SpanGroup::STEP, "step");
  EXPECT_EQ(SpanGroup::FORWARD_BACKWARD, "forward_backward");
  EXPECT_EQ(SpanGroup::OPTIMIZER, "optimizer");
  EXPECT_EQ(MegatronSpanGroup::MICROBATCH, "microbatch");
  EXPECT_EQ(MegatronSpanGroup::COMMUNICATION, "communication");
  EXPECT_EQ(MegatronSpanGroup::ACTIVATION_OFFLOAD, "activation_offload");
  EXPECT_EQ(MegatronSpanGroup::DATA_LOADING, "data_loading");
  EXPECT_EQ(MegatronSpanGroup::INFERENCE, "inference");
  EXPECT_EQ(MegatronSpanGroup::LAYER, "layer");
  EXPECT_EQ(MegatronSpanGroup::JOB, "job");  // inherited
}

TEST(SpanGroup, BaseCatalogGroupsAndPresets) {
  const auto& c = SpanGroup::catalog();
  EXPECT_EQ(c.groups(), kBaseAll);
  ASSERT_EQ(c.presets().size(), 3u);
  EXPECT_EQ(c.presets().at("default"), set_of({"job", "checkpoint", "evaluate"}));
  EXPECT_EQ(c.presets().at("per_step"), kBaseAll);
  EXPECT_EQ(c.presets().at("all"), kBaseAll);
}

TEST(SpanGroup, MegatronCatalogIsTheSeedExample) {
  const auto& c = MegatronSpanGroup::catalog();
  GroupSet all = kBaseAll;
  all.insert({"microbatch", "communication", "activation_offload", "data_loading", "inference",
              "layer"});
  EXPECT_EQ(c.groups().size(), 14u);
  EXPECT_EQ(c.groups(), all);
  EXPECT_EQ(c.presets().at("default"), set_of({"job", "checkpoint", "evaluate", "inference"}));
  GroupSet per_step = kBaseAll;
  per_step.insert({"communication", "data_loading", "inference"});
  EXPECT_EQ(c.presets().at("per_step"), per_step);
  EXPECT_EQ(c.presets().at("all"), all);
  // The base catalog is unchanged by the derivation.
  EXPECT_EQ(SpanGroup::catalog().groups().size(), 8u);
}

// Every example of the seed's "Specification String" section.
TEST(Resolve, SeedExamples) {
  const auto& c = SpanGroup::catalog();
  EXPECT_EQ(c.resolve("default"), set_of({"job", "checkpoint", "evaluate"}));
  EXPECT_EQ(c.resolve("per_step"), kBaseAll);
  EXPECT_EQ(c.resolve("default,step"), set_of({"job", "checkpoint", "evaluate", "step"}));
  EXPECT_EQ(c.resolve("step,optimizer,checkpoint"), set_of({"step", "optimizer", "checkpoint"}));
  EXPECT_EQ(c.resolve("all"), kBaseAll);
}

TEST(Resolve, CaseWhitespaceAndEmptyParts) {
  const auto& c = SpanGroup::catalog();
  EXPECT_EQ(c.resolve("  DEFAULT , Step\t"), set_of({"job", "checkpoint", "evaluate", "step"}));
  EXPECT_EQ(c.resolve(",,step,,"), set_of({"step"}));
  EXPECT_EQ(c.resolve(""), GroupSet{});
  EXPECT_EQ(c.resolve(" , ,"), GroupSet{});
  EXPECT_EQ(c.resolve("step,step,STEP"), set_of({"step"}));
}

TEST(Resolve, MegatronPresetsDifferFromBase) {
  EXPECT_EQ(MegatronSpanGroup::catalog().resolve("default,layer"),
            set_of({"job", "checkpoint", "evaluate", "inference", "layer"}));
  EXPECT_EQ(MegatronSpanGroup::catalog().resolve("all").size(), 14u);
  EXPECT_THROW(SpanGroup::catalog().resolve("layer"), SpanGroupError);
}

TEST(Resolve, UnknownNameListsEveryValidOptionSorted) {
  try {
    SpanGroup::catalog().resolve("default,Bogus");
    FAIL() << "expected SpanGroupError";
  } catch (const SpanGroupError& e) {
    EXPECT_EQ(std::string(e.what()),
              "Unknown span group or preset: 'bogus'. Valid options: ['all', 'checkpoint', "
              "'default', 'evaluate', 'forward_backward', 'job', 'load_checkpoint', 'model_init', "
              "'optimizer', 'per_step', 'step']");
  }
}

TEST(Resolve, ErrorIsAConfigErrorAndInvalidArgument) {
  EXPECT_THROW(SpanGroup::catalog().resolve("nope"), ConfigError);
  EXPECT_THROW(SpanGroup::catalog().resolve("nope"), std::invalid_argument);
}

TEST(Catalog, ValidOptionsAreSortedGroupsAndPresets) {
  auto opts = MegatronSpanGroup::catalog().valid_options();
  EXPECT_TRUE(std::is_sorted(opts.begin(), opts.end()));
  EXPECT_EQ(opts.size(), 14u + 3u);
  EXPECT_TRUE(MegatronSpanGroup::catalog().has_group("layer"));
  EXPECT_FALSE(MegatronSpanGroup::catalog().has_group("per_step"));
  EXPECT_TRUE(MegatronSpanGroup::catalog().has_preset("per_step"));
  EXPECT_FALSE(SpanGroup::catalog().has_preset("layer"));
}

TEST(Catalog, ConstructionNormalisesNames) {
  SpanGroupCatalog c({" Alpha ", "beta"}, {{"Both", {"ALPHA", "beta "}}});
  EXPECT_EQ(c.groups(), set_of({"alpha", "beta"}));
  EXPECT_EQ(c.presets().at("both"), set_of({"alpha", "beta"}));
  EXPECT_EQ(c.presets().at("all"), set_of({"alpha", "beta"}));
  EXPECT_EQ(c.resolve("BOTH"), set_of({"alpha", "beta"}));
}

TEST(Catalog, RejectsInconsistentDefinitions) {
  EXPECT_THROW(SpanGroupCatalog({"a"}, {{"all", {"a"}}}), SpanGroupError);   // reserved preset
  EXPECT_THROW(SpanGroupCatalog({"all"}, {}), SpanGroupError);               // reserved name
  EXPECT_THROW(SpanGroupCatalog({"a"}, {{"a", {"a"}}}), SpanGroupError);     // preset == group
  EXPECT_THROW(SpanGroupCatalog({"a"}, {{"p", {"b"}}}), SpanGroupError);     // unknown member
  EXPECT_THROW(SpanGroupCatalog({""}, {}), SpanGroupError);                  // empty group
  EXPECT_THROW(SpanGroupCatalog({"a,b"}, {}), SpanGroupError);               // unparseable
  try {
    SpanGroupCatalog({"a"}, {{"p", {"b"}}});
  } catch (const SpanGroupError& e) {
    EXPECT_NE(std::string(e.what()).find("preset 'p' names 'b'"), std::string::npos) << e.what();
  }
}

TEST(Catalog, ExtendInheritsAndOverridesPresets) {
  auto derived = SpanGroup::catalog().extend({"rollout", "Reward"},
                                             {{"per_step", {"step", "rollout"}}});
  EXPECT_EQ(derived.groups().size(), 10u);
  EXPECT_TRUE(derived.has_group("reward"));
  EXPECT_EQ(derived.presets().at("default"), set_of({"job", "checkpoint", "evaluate"}));  // kept
  EXPECT_EQ(derived.presets().at("per_step"), set_of({"step", "rollout"}));  // replaced
  EXPECT_EQ(derived.presets().at("all"), derived.groups());                  // recomputed
  EXPECT_THROW(SpanGroup::catalog().extend({"x"}, {{"new", {"missing"}}}), SpanGroupError);
  EXPECT_THROW(SpanGroup::catalog().extend({"default"}), SpanGroupError);  // collides with preset
}

}  // namespace
}  // namespace nemo::lens
