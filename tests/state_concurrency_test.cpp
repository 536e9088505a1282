// Readers on several threads use the gate while a writer switches the enabled set. Run under TSan.
#include <gtest/gtest.h>

#include <atomic>
#include <latch>
#include <thread>
#include <vector>

#include "nemo/lens/macros.hpp"
#include "nemo/lens/state.hpp"

namespace nemo::lens {
namespace {

bool site_step() { return LENS_GROUP_ENABLED("step"); }
bool site_a() { return LENS_GROUP_ENABLED("a"); }
bool site_never() { return LENS_GROUP_ENABLED("never_enabled"); }

TEST(StateConcurrency, ReadersSeeOnlyWholePublishedSets) {
  const GroupSet x{"job", "step", "a"};
  const GroupSet y{"job", "step", "b"};
  set_enabled_span_groups(x);
  std::atomic<bool> stop{false};
  std::atomic<long> violations{0};
  std::atomic<long> reads{0};
  std::atomic<long> saw_a{0};

  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&] {
      long local_reads = 0;
      while (!stop.load(std::memory_order_relaxed)) {
        GroupSet s = enabled_span_groups();
        if (s != x && s != y) violations.fetch_add(1);
        // Groups in both sets never flicker off; a group in neither never turns on.
        if (!is_span_group_enabled("job") || !site_step()) violations.fetch_add(1);
        if (is_span_group_enabled("never_enabled") || site_never()) violations.fetch_add(1);
        if (site_a()) saw_a.fetch_add(1, std::memory_order_relaxed);
        ++local_reads;
      }
      reads.fetch_add(local_reads);
    });
  }
  std::thread writer([&] {
    for (int i = 0; i < 20000; ++i) set_enabled_span_groups(i % 2 ? x : y);
    stop.store(true);
  });
  writer.join();
  for (auto& r : readers) r.join();
  EXPECT_EQ(violations.load(), 0);
  EXPECT_GT(reads.load(), 0);
  EXPECT_EQ(enabled_span_groups(), x);  // the last write (i = 19999) published x
  EXPECT_TRUE(site_a());
  set_enabled_span_groups({});
  EXPECT_FALSE(site_a());
}

TEST(StateConcurrency, ManyThreadsResolveTheSameSiteAtOnce) {
  set_enabled_span_groups({"fresh_group"});
  std::latch start(8);
  std::atomic<int> enabled_count{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t) {
    threads.emplace_back([&] {
      start.arrive_and_wait();
      for (int i = 0; i < 1000; ++i) {
        if (LENS_GROUP_ENABLED("fresh_group")) enabled_count.fetch_add(1, std::memory_order_relaxed);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(enabled_count.load(), 8000);
  set_enabled_span_groups({});
}

TEST(StateConcurrency, LookupsOfUnknownNamesWhileSwitching) {
  std::atomic<bool> stop{false};
  std::thread writer([&] {
    for (int i = 0; !stop.load(); ++i) {
      set_enabled_span_groups({"n" + std::to_string(i % 50)});
    }
  });
  std::vector<std::thread> threads;
  std::atomic<long> wrong{0};
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 2000; ++i) {
        // Names only the readers use are never enabled.
        if (is_span_group_enabled("reader_only_" + std::to_string(t * 2000 + i))) wrong.fetch_add(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  stop.store(true);
  writer.join();
  EXPECT_EQ(wrong.load(), 0);
  set_enabled_span_groups({});
}

}  // namespace
}  // namespace nemo::lens
