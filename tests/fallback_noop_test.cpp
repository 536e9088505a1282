// fallback.hpp without lens: this file is compiled with only a copy of fallback.hpp on the include
// path and without linking lens, as a consumer library building without lens would be.
#include "nemo/lens/fallback.hpp"

#include <gtest/gtest.h>

static_assert(NEMO_LENS_AVAILABLE == 0, "lens is not on the include path");

namespace {

int evaluations = 0;
[[maybe_unused]] const char* counted_group() {
  ++evaluations;
  return "step";
}

TEST(FallbackNoop, EverythingIsOffAndArgumentsAreNotEvaluated) {
  EXPECT_FALSE(nemo::lens::is_span_group_enabled("step"));
  EXPECT_FALSE(LENS_GROUP_ENABLED(counted_group()));
  EXPECT_EQ(evaluations, 0);
}

}  // namespace
