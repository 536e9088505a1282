// Producers on several threads while another thread flushes and shuts down; spans handed between
// threads. Run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

NemoLensConfig enabled() { return lens_test::enabled_config(); }

TEST(TracingConcurrency, ProducersWhileAnotherThreadFlushesAndShutsDown) {
  auto memory = std::make_shared<InMemorySpanExporter>();
  SetupOptions o;
  o.exporter = memory;
  auto h = setup_telemetry(enabled(), 0, 1, o);
  std::atomic<bool> stop{false};
  std::latch started(5);
  std::latch warmed_up(4);  // every producer has ended 200 spans
  std::vector<std::thread> producers;
  for (int t = 0; t < 4; ++t) {
    producers.emplace_back([&, t] {
      started.arrive_and_wait();
      for (int i = 0; !stop.load(std::memory_order_relaxed) || i < 2000; ++i) {
        LENS_SPAN(step, SpanGroup::STEP, "step", {"thread", t}, {"i", i});
        auto inner = managed_span("forward_backward", "fb");
        inner.set_attribute("loss", 0.5 * i).add_event("tick");
        if (i % 7 == 0) step.set_status(StatusCode::kOk);
        if (i == 200) warmed_up.count_down();
        if (i >= 20000) break;
      }
    });
  }
  std::thread controller([&] {
    started.arrive_and_wait();
    warmed_up.wait();
    for (int i = 0; i < 5; ++i) h.force_flush(std::chrono::seconds(10));
    h.shutdown(std::chrono::seconds(10));
    stop.store(true);
  });
  controller.join();
  for (auto& p : producers) p.join();
  const auto st = h.stats();
  EXPECT_EQ(memory->spans().size(), st.spans_exported);
  EXPECT_GT(st.spans_exported, 0u);
  EXPECT_LE(st.spans_exported, st.spans_ended + st.spans_truncated);
  EXPECT_FALSE(span_cm("after"));
}

TEST(TracingConcurrency, SpanEndedOnAnotherThreadLeavesBothStacksConsistent) {
  auto memory = std::make_shared<InMemorySpanExporter>();
  SetupOptions o;
  o.exporter = memory;
  auto h = setup_telemetry(enabled(), 0, 1, o);
  constexpr int kHandoffs = 500;
  std::vector<Span> handed(kHandoffs);
  std::latch ready(2);
  std::atomic<int> produced{0};
  std::thread owner([&] {
    ready.arrive_and_wait();
    for (int i = 0; i < kHandoffs; ++i) {
      handed[i] = span_cm("handed");  // stays current here until another thread ends it
      produced.store(i + 1, std::memory_order_release);
      auto local = span_cm("local");
    }
  });
  std::thread ender([&] {
    ready.arrive_and_wait();
    for (int i = 0; i < kHandoffs; ++i) {
      while (produced.load(std::memory_order_acquire) <= i) std::this_thread::yield();
      handed[i].end();
    }
  });
  owner.join();
  ender.join();
  EXPECT_FALSE(current_span_context().is_valid());
  ASSERT_TRUE(h.force_flush());
  int handed_count = 0, local_count = 0;
  for (const auto& s : memory->spans()) (s.name == "handed" ? handed_count : local_count)++;
  EXPECT_EQ(handed_count, kHandoffs);
  EXPECT_EQ(local_count, kHandoffs);
  h.shutdown();
}

}  // namespace
}  // namespace nemo::lens
