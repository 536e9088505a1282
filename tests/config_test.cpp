#include "nemo/lens/config.hpp"

#include <gtest/gtest.h>

#include "scoped_env.hpp"

namespace nemo::lens {
namespace {

using lens_test::ScopedEnv;

std::string error_of(const std::function<void()>& f) {
  return lens_test::error_message_of<ConfigError>(f);
}

TEST(Config, DefaultsMatchNemoLens) {
  NemoLensConfig c;
  EXPECT_FALSE(c.enabled);
  EXPECT_EQ(c.service_name, "nemo");
  EXPECT_EQ(c.export_strategy, "single_rank");
  EXPECT_EQ(c.export_rank, -1);
  EXPECT_EQ(c.export_sample_rate, 1.0);
  EXPECT_FALSE(c.sampler_enabled);
  EXPECT_TRUE(c.traces_enabled);
  EXPECT_TRUE(c.metrics_enabled);
  EXPECT_FALSE(c.logs_enabled);
  EXPECT_EQ(c.span_groups, "default");
  EXPECT_EQ(c.exporter, "otlp");
  EXPECT_EQ(c.run_id, "");
  EXPECT_EQ(c.user, "");
  EXPECT_EQ(c.wandb_entity, "");
  EXPECT_EQ(c.wandb_project, "");
  EXPECT_EQ(&c.catalog(), &SpanGroup::catalog());
  EXPECT_EQ(c.resolved_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"}));
}

TEST(Config, FromEnvWithNothingSetGivesDefaults) {
  ScopedEnv env;
  auto c = NemoLensConfig::from_env();
  NemoLensConfig d;
  EXPECT_EQ(c.enabled, d.enabled);
  EXPECT_EQ(c.service_name, d.service_name);
  EXPECT_EQ(c.export_strategy, d.export_strategy);
  EXPECT_EQ(c.export_rank, d.export_rank);
  EXPECT_EQ(c.span_groups, d.span_groups);
  EXPECT_EQ(c.exporter, d.exporter);
  EXPECT_EQ(c.env_prefix, "NEMO_LENS");
  EXPECT_EQ(c.env_fallback_prefix, "");
}

TEST(Config, EveryKeyIsRead) {
  ScopedEnv env;
  env.set("NEMO_LENS_ENABLED", "true");
  env.set("OTEL_SERVICE_NAME", "trainer");
  env.set("NEMO_LENS_EXPORT_STRATEGY", "all_ranks");
  env.set("NEMO_LENS_EXPORT_RANK", "3");
  env.set("NEMO_LENS_EXPORT_SAMPLE_RATE", "0.25");
  env.set("NEMO_LENS_SAMPLER_ENABLED", "yes");
  env.set("NEMO_LENS_TRACES_ENABLED", "off");
  env.set("NEMO_LENS_METRICS_ENABLED", "0");
  env.set("NEMO_LENS_LOGS_ENABLED", "ON");
  env.set("NEMO_LENS_SPAN_GROUPS", "per_step");
  env.set("NEMO_LENS_EXPORTER", "console");
  env.set("NEMO_LENS_RUN_ID", "run-42");
  env.set("NEMO_LENS_USER_ID", "alice");
  env.set("WANDB_ENTITY", "team");
  env.set("WANDB_PROJECT", "proj");
  auto c = NemoLensConfig::from_env();
  EXPECT_TRUE(c.enabled);
  EXPECT_EQ(c.service_name, "trainer");
  EXPECT_EQ(c.export_strategy, "all_ranks");
  EXPECT_EQ(c.export_rank, 3);
  EXPECT_EQ(c.export_sample_rate, 0.25);
  EXPECT_TRUE(c.sampler_enabled);
  EXPECT_FALSE(c.traces_enabled);
  EXPECT_FALSE(c.metrics_enabled);
  EXPECT_TRUE(c.logs_enabled);
  EXPECT_EQ(c.span_groups, "per_step");
  EXPECT_EQ(c.exporter, "console");
  EXPECT_EQ(c.run_id, "run-42");
  EXPECT_EQ(c.user, "alice");
  EXPECT_EQ(c.wandb_entity, "team");
  EXPECT_EQ(c.wandb_project, "proj");
}

TEST(Config, BooleanSpellings) {
  for (const char* t : {"1", "true", "TRUE", "True", "yes", "Yes", "on", "ON", " true "}) {
    ScopedEnv env;
    env.set("NEMO_LENS_ENABLED", t);
    EXPECT_TRUE(NemoLensConfig::from_env().enabled) << t;
  }
  for (const char* f : {"0", "false", "FALSE", "no", "NO", "off", "Off"}) {
    ScopedEnv env;
    env.set("NEMO_LENS_ENABLED", f);
    env.set("NEMO_LENS_TRACES_ENABLED", f);
    EXPECT_FALSE(NemoLensConfig::from_env().traces_enabled) << f;
  }
}

TEST(Config, BadBooleanNamesVariableValueAndChoices) {
  ScopedEnv env;
  env.set("NEMO_LENS_SAMPLER_ENABLED", "maybe");
  EXPECT_EQ(error_of([] { NemoLensConfig::from_env(); }),
            "Invalid boolean for NEMO_LENS_SAMPLER_ENABLED: 'maybe'. Expected one of 1/0, "
            "true/false, yes/no, on/off (any case).");
  env.set("NEMO_LENS_SAMPLER_ENABLED", "2");
  EXPECT_THROW(NemoLensConfig::from_env(), ConfigError);
}

TEST(Config, IntegersMustParseWhole) {
  for (const char* bad : {"1.5", "3x", "x3", "0x10", "--1", "+-1", "1 2", "99999999999"}) {
    ScopedEnv env;
    env.set("NEMO_LENS_EXPORT_RANK", bad);
    std::string msg = error_of([] { NemoLensConfig::from_env(); });
    EXPECT_NE(msg.find("NEMO_LENS_EXPORT_RANK"), std::string::npos) << bad << ": " << msg;
    EXPECT_NE(msg.find(std::string("'") + bad + "'"), std::string::npos) << bad << ": " << msg;
  }
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_RANK", " +7 ");
  EXPECT_EQ(NemoLensConfig::from_env().export_rank, 7);
  env.set("NEMO_LENS_EXPORT_RANK", "-2");
  EXPECT_NE(error_of([] { NemoLensConfig::from_env(); }).find("-1 for the last rank"),
            std::string::npos);
}

TEST(Config, FloatsMustParseWholeAndLieInUnitInterval) {
  for (const char* bad : {"half", "0.5.1", "0,5", "nan", "inf", "1e"}) {
    ScopedEnv env;
    env.set("NEMO_LENS_EXPORT_SAMPLE_RATE", bad);
    std::string msg = error_of([] { NemoLensConfig::from_env(); });
    EXPECT_NE(msg.find("NEMO_LENS_EXPORT_SAMPLE_RATE"), std::string::npos) << bad << ": " << msg;
  }
  for (const char* out : {"1.5", "-0.1", "2"}) {
    ScopedEnv env;
    env.set("NEMO_LENS_EXPORT_SAMPLE_RATE", out);
    std::string msg = error_of([] { NemoLensConfig::from_env(); });
    EXPECT_NE(msg.find("NEMO_LENS_EXPORT_SAMPLE_RATE: '" + std::string(out) + "'"),
              std::string::npos)
        << msg;
    // NeMo Lens' phrase, which its callers match on.
    EXPECT_NE(msg.find("export_sample_rate must be in [0.0, 1.0]"), std::string::npos) << msg;
  }
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_SAMPLE_RATE", "5e-1");
  EXPECT_EQ(NemoLensConfig::from_env().export_sample_rate, 0.5);
  env.set("NEMO_LENS_EXPORT_SAMPLE_RATE", "0");
  EXPECT_EQ(NemoLensConfig::from_env().export_sample_rate, 0.0);
}

TEST(Config, PrefixThenFallbackOnlyWhenPrimaryUnsetOrBlank) {
  ScopedEnv env;
  env.set("MEGATRON_OTEL_ENABLED", "1");
  env.set("NEMO_LENS_ENABLED", "0");
  env.set("MEGATRON_OTEL_SPAN_GROUPS", "   ");  // blank: falls back
  env.set("NEMO_LENS_SPAN_GROUPS", "per_step,layer");
  env.set("NEMO_LENS_EXPORTER", "console");
  auto c = NemoLensConfig::from_env<MegatronSpanGroup>("MEGATRON_OTEL", "NEMO_LENS");
  EXPECT_TRUE(c.enabled);                       // primary wins
  EXPECT_EQ(c.span_groups, "per_step,layer");   // blank primary -> fallback
  EXPECT_EQ(c.exporter, "console");             // unset primary -> fallback
  EXPECT_EQ(c.env_prefix, "MEGATRON_OTEL");
  EXPECT_EQ(c.env_fallback_prefix, "NEMO_LENS");
  EXPECT_EQ(c.resolved_span_groups().size(), 12u);  // megatron per_step (11) + layer
  EXPECT_TRUE(c.resolved_span_groups().count("layer"));
  // Without a fallback prefix the NEMO_LENS variables are not read.
  auto alone = NemoLensConfig::from_env("MEGATRON_OTEL");
  EXPECT_EQ(alone.span_groups, "default");
  EXPECT_EQ(alone.exporter, "otlp");
}

TEST(Config, ErrorNamesTheFallbackVariableItCameFrom) {
  ScopedEnv env;
  env.set("NEMO_LENS_LOGS_ENABLED", "sometimes");
  std::string msg = error_of([] { NemoLensConfig::from_env("MY_LIB", "NEMO_LENS"); });
  EXPECT_NE(msg.find("NEMO_LENS_LOGS_ENABLED: 'sometimes'"), std::string::npos) << msg;
}

TEST(Config, ResolvesAgainstTheCatalogItWasBuiltWith) {
  ScopedEnv env;
  env.set("NEMO_LENS_SPAN_GROUPS", "default");
  auto base = NemoLensConfig::from_env();
  auto megatron = NemoLensConfig::from_env<MegatronSpanGroup>();
  EXPECT_EQ(base.resolved_span_groups(), (GroupSet{"checkpoint", "evaluate", "job"}));
  EXPECT_EQ(megatron.resolved_span_groups(), (GroupSet{"checkpoint", "evaluate", "inference", "job"}));
  // A temporary catalog is kept alive by the config.
  auto custom = NemoLensConfig::from_env("NEMO_LENS", {}, SpanGroupCatalog({"x"}, {{"default", {"x"}}}));
  EXPECT_EQ(custom.resolved_span_groups(), (GroupSet{"x"}));
  env.set("NEMO_LENS_SPAN_GROUPS", "layer");
  EXPECT_THROW(NemoLensConfig::from_env().resolved_span_groups(), SpanGroupError);
  EXPECT_NO_THROW(NemoLensConfig::from_env<MegatronSpanGroup>().resolved_span_groups());
}

TEST(Config, OtelSdkDisabledForcesOff) {
  ScopedEnv env;
  env.set("NEMO_LENS_ENABLED", "1");
  env.set("OTEL_SDK_DISABLED", "TRUE");
  EXPECT_FALSE(NemoLensConfig::from_env().enabled);
  env.set("OTEL_SDK_DISABLED", "false");
  EXPECT_TRUE(NemoLensConfig::from_env().enabled);
  env.set("OTEL_SDK_DISABLED", "1");
  EXPECT_NE(error_of([] { NemoLensConfig::from_env(); }).find("OTEL_SDK_DISABLED: '1'"),
            std::string::npos);
}

TEST(Config, EnvHelperFollowsThePrefixRule) {
  ScopedEnv env;
  env.set("NEMO_LENS_EXPORT_PATH", " /tmp/x.jsonl ");
  NemoLensConfig c = NemoLensConfig::from_env("APP", "NEMO_LENS");
  EXPECT_EQ(c.env("EXPORT_PATH"), "/tmp/x.jsonl");
  env.set("APP_EXPORT_PATH", "/tmp/y.jsonl");
  EXPECT_EQ(c.env("EXPORT_PATH"), "/tmp/y.jsonl");
  EXPECT_FALSE(c.env("NOT_SET").has_value());
}

TEST(Config, ValidateChecksTheSampleRate) {
  NemoLensConfig c;
  c.export_sample_rate = 1.5;
  EXPECT_THROW(c.validate(), ConfigError);
  c.export_sample_rate = 0.0;
  EXPECT_NO_THROW(c.validate());
}

}  // namespace
}  // namespace nemo::lens

namespace nemo::lens {
namespace {

TEST(Config, EnvVariableNamesWhereAValueCameFrom) {
  lens_test::ScopedEnv env;
  NemoLensConfig c = NemoLensConfig::from_env("APP", "NEMO_LENS");
  EXPECT_FALSE(c.env_variable("SPAN_GROUPS").has_value());
  env.set("NEMO_LENS_SPAN_GROUPS", "all");
  EXPECT_EQ(c.env_variable("SPAN_GROUPS"), "NEMO_LENS_SPAN_GROUPS");
  env.set("APP_SPAN_GROUPS", " \t");
  EXPECT_EQ(c.env_variable("SPAN_GROUPS"), "NEMO_LENS_SPAN_GROUPS");  // blank primary
  env.set("APP_SPAN_GROUPS", "default");
  EXPECT_EQ(c.env_variable("SPAN_GROUPS"), "APP_SPAN_GROUPS");
}

}  // namespace
}  // namespace nemo::lens
