// NEMO_LENS_DISABLE compiles every macro to nothing, even with lens available and groups on.
#define NEMO_LENS_DISABLE
#include <gtest/gtest.h>

#include "nemo/lens/lens.hpp"

namespace {

int evaluations = 0;
[[maybe_unused]] const char* counted_group() {
  ++evaluations;
  return "step";
}

TEST(CompileTimeDisable, MacrosAreCompiledOut) {
  nemo::lens::set_enabled_span_groups({"step"});
  EXPECT_TRUE(nemo::lens::is_span_group_enabled("step"));  // the functions still work
  EXPECT_FALSE(LENS_GROUP_ENABLED(counted_group()));
  EXPECT_EQ(evaluations, 0);
  nemo::lens::set_enabled_span_groups({});
}

}  // namespace
