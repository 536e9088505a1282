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

}  // namespace
