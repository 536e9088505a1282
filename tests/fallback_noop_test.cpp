// fallback.hpp without lens: this file is compiled with only a copy of fallback.hpp on the include
// path and without linking lens, as a consumer library building without lens would be.
#include "nemo/lens/fallback.hpp"

#include <gtest/gtest.h>

#include <stdexcept>

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
  LENS_SPAN(span, counted_group(), "name", {"k", counted_group()});
  EXPECT_FALSE(span);
  EXPECT_EQ(evaluations, 0);
}

TEST(FallbackNoop, TheInstrumentationApiCompilesAndDoesNothing) {
  auto s = nemo::lens::managed_span("step", "x", {{"iteration", 1}, {"loss", 0.5}});
  s.set_attribute("k", "v").set_attributes({{"a", 1}}).add_event("e", {{"b", true}});
  s.set_status(nemo::lens::StatusCode::kError, "m").set_kind(nemo::lens::SpanKind::kClient);
  s.record_exception(std::runtime_error("x"));
  s.end();
  EXPECT_FALSE(s.is_recording());
  EXPECT_FALSE(nemo::lens::span_cm("y"));
  auto twice = nemo::lens::trace_fn("step", "twice", [](int x) { return 2 * x; });
  EXPECT_EQ(twice(21), 42);
}

}  // namespace
