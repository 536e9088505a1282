// Heap allocations per enabled span in steady state, counted on the instrumented thread by a
// replacement global operator new. Target zero; the bar is at most one.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>

#include "nemo/lens/lens.hpp"
#include "scoped_env.hpp"

namespace {
thread_local bool t_counting = false;
thread_local std::size_t t_allocations = 0;
}  // namespace

// The replacements pair malloc with free; GCC cannot see that operator new here is malloc.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"

void* operator new(std::size_t n) {
  if (t_counting) ++t_allocations;
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }

namespace nemo::lens {
namespace {

class NullExporter : public SpanExporter {
 public:
  ExportResult export_spans(std::span<const SpanData* const>, const Resource&,
                            std::chrono::steady_clock::time_point) noexcept override {
    return ExportResult::kSuccess;
  }
};

std::size_t allocations_per_1000_spans() {
  t_allocations = 0;
  t_counting = true;
  for (int i = 0; i < 1000; ++i) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.25 * i});
  }
  t_counting = false;
  return t_allocations;
}

TEST(Allocations, EnabledSpanWithTwoNumericAttributesInSteadyState) {
  // One batch holds a whole round, so the exporter runs only at the flush and every round reuses
  // exactly the records of the round before (otherwise how many records circulate depends on how
  // far the exporter lags, and a slow build may legitimately create a few more).
  lens_test::ScopedEnv env;
  env.set("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "2048");
  env.set("OTEL_BSP_SCHEDULE_DELAY", "600000");
  NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = "step";
  // Spans only: the default OTLP metric exporter would open a gRPC channel, whose nothrow
  // allocations this test's counting operator delete does not pair.
  c.metrics_enabled = false;
  SetupOptions o;
  o.exporter = std::make_shared<NullExporter>();
  auto h = setup_telemetry(c, 0, 1, o);
  // Warm up: records are created, exported and come back to the free pool.
  for (int round = 0; round < 3; ++round) {
    allocations_per_1000_spans();
    ASSERT_TRUE(h.force_flush());
  }
  const std::size_t n = allocations_per_1000_spans();
  std::printf("heap allocations on the caller's thread: %zu per 1000 spans\n", n);
  RecordProperty("allocations_per_1000_spans", static_cast<int>(n));
  EXPECT_LE(n, 1000u) << "the bar: at most one allocation per span";
  EXPECT_EQ(n, 0u) << "the target: none";
  h.shutdown();
}

TEST(Allocations, DisabledSiteAllocatesNothing) {
  set_enabled_span_groups({});
  allocations_per_1000_spans();  // the first pass resolves the site (interns its group once)
  EXPECT_EQ(allocations_per_1000_spans(), 0u);
}

}  // namespace
}  // namespace nemo::lens
