// The hand-written helpers of the span hot path, each against an independent implementation:
// copy_small against memcpy, equal_short against std::string_view's ==, the single-producer ring
// against std::deque (one thread), and the ring between two threads (order kept, nothing lost or
// duplicated; run under TSan as a concurrency test).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "strings.hpp"
#include "tracing/spsc_ring.hpp"

namespace {

using nemo::lens::detail::copy_small;
using nemo::lens::detail::equal_short;
using nemo::lens::detail::SpscRing;

TEST(CopySmall, CopiesExactlyTheBytesMemcpyCopiesForEveryLength) {
  std::mt19937 rng(7);
  for (std::size_t n = 0; n <= 24; ++n) {
    for (int trial = 0; trial < 50; ++trial) {
      char src[24], got[32], want[32];
      for (char& c : src) c = static_cast<char>(rng());
      std::memset(got, '#', sizeof got);
      std::memset(want, '#', sizeof want);
      copy_small(got + 3, src, n);
      std::memcpy(want + 3, src, n);
      ASSERT_EQ(std::memcmp(got, want, sizeof got), 0) << "length " << n;  // nothing around it
    }
  }
}

TEST(EqualShort, AgreesWithStringViewEqualityForEveryLengthAndDifference) {
  std::mt19937 rng(11);
  for (std::size_t n = 0; n <= 40; ++n) {
    for (int trial = 0; trial < 50; ++trial) {
      std::string a(n, '\0');
      for (char& c : a) c = static_cast<char>('a' + rng() % 3);
      std::string b = a;
      if (n > 0 && trial % 2 == 1) b[rng() % n] ^= static_cast<char>(1 + rng() % 7);  // one byte off
      ASSERT_EQ(equal_short(a, b), std::string_view(a) == std::string_view(b)) << a << " " << b;
      const std::string longer = a + "x";
      ASSERT_FALSE(equal_short(a, longer));
      ASSERT_FALSE(equal_short(longer, a));
    }
  }
}

TEST(SpscRing, BehavesAsABoundedDequeOnOneThread) {
  for (std::size_t capacity : {1u, 2u, 3u, 7u, 64u}) {
    SpscRing<int> ring(capacity);
    std::deque<int> model;
    std::mt19937 rng(static_cast<unsigned>(capacity));
    int next = 0;
    for (int step = 0; step < 5000; ++step) {
      if (rng() % 2 == 0) {
        const bool pushed = ring.try_push(next);
        ASSERT_EQ(pushed, model.size() < capacity) << "capacity " << capacity;
        if (pushed) model.push_back(next);
        ++next;
      } else {
        int out = -1;
        const bool popped = ring.try_pop(out);
        ASSERT_EQ(popped, !model.empty());
        if (popped) {
          ASSERT_EQ(out, model.front());
          model.pop_front();
        }
      }
      ASSERT_EQ(ring.size_estimate(), model.size());
    }
  }
}

TEST(SpscRingConcurrency, TwoThreadsKeepOrderAndLoseNothing) {
  constexpr std::uint64_t kCount = 200'000;
  SpscRing<std::uint64_t> ring(100);  // small: the producer often finds it full
  std::thread producer([&] {
    for (std::uint64_t i = 0; i < kCount;) {
      if (ring.try_push(i)) {
        ++i;
      } else {
        std::this_thread::yield();  // full: the consumer catches up
      }
    }
  });
  std::uint64_t expected = 0;
  while (expected < kCount) {
    std::uint64_t v = 0;
    if (!ring.try_pop(v)) {
      std::this_thread::yield();
      continue;
    }
    ASSERT_EQ(v, expected);
    ++expected;
  }
  producer.join();
  std::uint64_t v = 0;
  EXPECT_FALSE(ring.try_pop(v)) << "nothing beyond what was pushed";
  EXPECT_EQ(ring.size_estimate(), 0u);
}

}  // namespace
