// fallback.hpp with lens available: it must be the real API.
#include "nemo/lens/fallback.hpp"

#include <gtest/gtest.h>

static_assert(NEMO_LENS_AVAILABLE == 1, "lens is on the include path, so fallback.hpp uses it");

namespace {

TEST(Fallback, WithLensItIsTheRealApi) {
  nemo::lens::set_enabled_span_groups({"step"});
  EXPECT_TRUE(nemo::lens::is_span_group_enabled("step"));
  EXPECT_TRUE(LENS_GROUP_ENABLED("step"));
  nemo::lens::set_enabled_span_groups({});
  EXPECT_FALSE(LENS_GROUP_ENABLED("step"));
}

TEST(Fallback, WithLensSpansAreReal) {
  nemo::lens::NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = "step";
  nemo::lens::SetupOptions o;
  auto memory = std::make_shared<nemo::lens::InMemorySpanExporter>();
  o.exporter = memory;
  auto h = nemo::lens::setup_telemetry(c, 0, 1, o);
  { LENS_SPAN(span, "step", "real", {"k", 1}); }
  h.force_flush();
  EXPECT_EQ(memory->spans().size(), 1u);
  h.shutdown();
}

}  // namespace
