// The open spans read through the control endpoint while threads open and end spans (recorded and
// tracked-only, ended on their own thread and on another) and the groups switch back and forth.
// Run under TSan: the reader copies records under their owner's lock, and light entries either
// so or, when the lock stays busy, through the registry's sequence counter.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "control_client.hpp"
#include "nemo/lens/lens.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

TEST(ControlConcurrency, DumpsAreConsistentWhileSpansOpenEndAndGroupsSwitch) {
  lens_test::ScopedEnv env;
  lens_test::TempDir dir;
  env.set("NEMO_LENS_CONTROL_DIR", (dir.path() / "ctl").string());
  env.set("NEMO_LENS_TRACK_OPEN", "all");
  NemoLensConfig c = lens_test::enabled_config("default");
  c.span_group_catalog = std::make_shared<SpanGroupCatalog>(MegatronSpanGroup::catalog());
  SetupOptions o;
  o.exporter = std::make_shared<InMemorySpanExporter>();
  auto h = setup_telemetry(c, 0, 1, o);
  const auto sockets = lens_test::control_sockets(dir.path() / "ctl");
  ASSERT_EQ(sockets.size(), 1u);

  std::atomic<bool> stop{false};
  std::latch started(4);
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t) {
    writers.emplace_back([&, t] {
      started.arrive_and_wait();
      for (int i = 0; !stop.load(std::memory_order_relaxed); ++i) {
        LENS_SPAN(outer, "step", "outer", {"i", i});
        auto mid = managed_span("layer", "mid");
        Span inner = managed_span("microbatch", "inner");
        if ((i + t) % 3 == 0) {
          std::thread([s = std::move(inner)]() mutable { s.end(); }).join();
        }
      }
    });
  }
  started.arrive_and_wait();
  const std::vector<std::string> nesting = {"step/outer", "layer/mid", "microbatch/inner"};
  int dumps = 0, spans_seen = 0;
  for (int round = 0; round < 60; ++round) {
    if (round % 10 == 5) {
      lens_test::control_request(
          sockets[0], round % 20 == 5 ? "lens-ctl/1 groups all" : "lens-ctl/1 groups-reset");
    }
    const auto dump = lens_test::control_request(sockets[0], "lens-ctl/1 dump");
    ASSERT_EQ(dump["ok"], true) << dump.dump();
    ++dumps;
    for (const auto& thread : dump["threads"]) {
      // Every thread's stack is a prefix of the nesting, in order. A thread whose owner held its
      // lock through every try shows its light entries only: some of the nesting, in order.
      const bool busy = thread.value("owner_busy", false);
      std::size_t depth = 0;
      for (const auto& s : thread["spans"]) {
        const std::string name = s["group"].get<std::string>() + "/" + s["name"].get<std::string>();
        if (busy) {
          EXPECT_FALSE(s["exported"].get<bool>()) << "busy: light entries only";
          while (depth < nesting.size() && nesting[depth] != name) ++depth;
        }
        ASSERT_LT(depth, nesting.size()) << thread.dump();
        EXPECT_EQ(name, nesting[depth]) << thread.dump();
        ++depth;
        ++spans_seen;
      }
    }
  }
  stop = true;
  for (auto& w : writers) w.join();
  EXPECT_EQ(dumps, 60);
  EXPECT_GT(spans_seen, 0);
  const auto after = lens_test::control_request(sockets[0], "lens-ctl/1 dump");
  EXPECT_TRUE(after["threads"].empty()) << after.dump();
  h.shutdown();
}

}  // namespace
}  // namespace nemo::lens
