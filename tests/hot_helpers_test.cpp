// The hand-written helpers of the span hot path, each against an independent implementation:
// copy_small and copy_within_page against memcpy (the latter at a page's end before an unmapped
// page), equal_short against std::string_view's ==, the encoders' word-wise
// string checks (is_plain, is_ascii) against byte-by-byte ones, the id generator against
// wyrand written with 32-bit limbs instead of a 128-bit multiply, the single-producer ring against
// std::deque (one thread), the ring between two threads (order kept, nothing lost or duplicated;
// run under TSan as a concurrency test), the read-only memory check against /proc/self/maps, and
// the cache-line hints' CPU checks against the kernel's /proc/cpuinfo.
#include <gnu/libc-version.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstring>
#include <deque>
#include <fstream>
#include <functional>
#include <memory>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "export/json_writer.hpp"
#include "export/otlp_common.hpp"
#include "strings.hpp"
#include "tracing/cache_lines.hpp"
#include "tracing/engine.hpp"
#include "tracing/ids.hpp"
#include "tracing/read_only_memory.hpp"
#include "tracing/spsc_ring.hpp"

namespace {

using nemo::lens::detail::copy_small;
using nemo::lens::detail::copy_within_page;
using nemo::lens::detail::equal_short;
using nemo::lens::detail::IdGenerator;
using nemo::lens::detail::in_read_only_memory;
using nemo::lens::detail::SpanRecord;
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

// A source at every offset of a page's last 48 bytes, the next page unmapped: copy_within_page()
// copies what memcpy copies, or declines, exactly when its 16-byte read would cross into that page
// (a read there would fault); under ASan and TSan it always copies, byte-exact.
TEST(CopyWithinPage, CopiesTheBytesOrDeclinesAtAPagesLast16) {
  const long page_size = ::sysconf(_SC_PAGESIZE);
  ASSERT_GE(page_size, 4096);
  const auto page = static_cast<std::size_t>(page_size);
  void* map = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  char* base = static_cast<char*>(map);
  ASSERT_EQ(::mprotect(base + page, page, PROT_NONE), 0);
  std::mt19937 rng(13);
  for (std::size_t i = 0; i < page; ++i) base[i] = static_cast<char>(rng());
  for (std::size_t back = 1; back <= 48; ++back) {
    const char* src = base + page - back;
    for (std::size_t n = 0; n <= std::min<std::size_t>(16, back); ++n) {
      char got[24], want[24];
      std::memset(got, '#', sizeof got);
      std::memset(want, '#', sizeof want);
      std::memcpy(want + 4, src, n);
      const bool copied = copy_within_page(got + 4, src, n);
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
      ASSERT_TRUE(copied);
      ASSERT_EQ(std::memcmp(got, want, sizeof got), 0) << "length " << n;
#else
      const bool near_end = (reinterpret_cast<std::uintptr_t>(src) & 4095) > 4096 - 16;
      ASSERT_EQ(copied, !near_end) << back << " bytes before the end, length " << n;
      if (copied) {
        ASSERT_EQ(std::memcmp(got + 4, want + 4, n), 0) << "length " << n;
        ASSERT_EQ(std::string(got, 4) + std::string(got + 20, 4), "########")
            << "nothing outside the 16 bytes";
      } else {
        ASSERT_EQ(std::string(got, sizeof got), std::string(sizeof got, '#')) << "nothing copied";
      }
#endif
    }
  }
  ::munmap(map, 2 * page);
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

// wyrand, one output: the state advanced by the increment, then the high and low halves of
// state * (state ^ mix) xored, the product computed from 32-bit halves by schoolbook
// multiplication.
std::uint64_t reference_wyrand(std::uint64_t& state) {
  state += IdGenerator::kIncrement;
  const std::uint64_t a = state, b = state ^ IdGenerator::kMix;
  const std::uint64_t a0 = a & 0xffffffffu, a1 = a >> 32, b0 = b & 0xffffffffu, b1 = b >> 32;
  const std::uint64_t p00 = a0 * b0, p01 = a0 * b1, p10 = a1 * b0, p11 = a1 * b1;
  const std::uint64_t middle = (p00 >> 32) + (p01 & 0xffffffffu) + (p10 & 0xffffffffu);
  const std::uint64_t low = (middle << 32) | (p00 & 0xffffffffu);
  const std::uint64_t high = p11 + (p01 >> 32) + (p10 >> 32) + (middle >> 32);
  return high ^ low;
}

std::uint64_t bytes_as_u64(const std::uint8_t* p) {
  std::uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

// Every length up to 40, each byte in turn made one that fails the check (and strings with none),
// the rest random bytes that pass it.
TEST(WordWiseStringChecks, AgreeWithByteByByteChecksForEveryLengthAndPosition) {
  const auto plain = [](unsigned char c) { return c >= 0x20 && c < 0x80 && c != '"' && c != '\\'; };
  const auto ascii = [](unsigned char c) { return c < 0x80; };
  const unsigned char unplain[] = {0x00, 0x1f, '"', '\\', 0x80, 0xff, 0xc3};
  std::mt19937 rng(11);
  int checked = 0;
  for (std::size_t n = 0; n <= 40; ++n) {
    for (std::size_t bad = 0; bad <= n; ++bad) {  // bad == n: none
      for (const unsigned char b : unplain) {
        std::string s(n, ' ');
        for (char& c : s) c = static_cast<char>(0x20 + rng() % 0x5f);  // printable ASCII
        for (char& c : s) c = plain(static_cast<unsigned char>(c)) ? c : 'x';
        if (bad < n) s[bad] = static_cast<char>(b);
        bool want_plain = true, want_ascii = true;
        for (const char c : s) {
          want_plain = want_plain && plain(static_cast<unsigned char>(c));
          want_ascii = want_ascii && ascii(static_cast<unsigned char>(c));
        }
        ASSERT_EQ(nemo::lens::detail::json::is_plain(s), want_plain) << n << " " << bad;
        ASSERT_EQ(nemo::lens::detail::otlp::is_ascii(s), want_ascii) << n << " " << bad;
        ++checked;
        if (bad == n) break;  // one clean string per length
      }
    }
  }
  EXPECT_GT(checked, 5000);
}

TEST(IdGenerator, ProducesWyrandsSequenceForSpanAndTraceIds) {
  for (std::uint64_t seed : {0ull, 1ull, 0x0123456789abcdefull, ~0ull}) {
    IdGenerator ids;
    ids.seed_with(seed);
    std::uint64_t state = seed;
    for (int i = 0; i < 1000; ++i) {
      const std::uint64_t want_span = reference_wyrand(state);
      const auto span = ids.span_id();
      ASSERT_EQ(bytes_as_u64(span.bytes.data()), want_span) << "seed " << seed << " step " << i;
      ASSERT_TRUE(span.is_valid());
      const std::uint64_t want_hi = reference_wyrand(state);
      const std::uint64_t want_lo = reference_wyrand(state);
      const auto trace = ids.trace_id();
      ASSERT_EQ(bytes_as_u64(trace.bytes.data()), want_hi);
      ASSERT_EQ(bytes_as_u64(trace.bytes.data() + 8), want_lo);
      ASSERT_TRUE(trace.is_valid());
    }
  }
}

TEST(IdGenerator, ReseedsInAForkedChildSoParentAndChildDiffer) {
  IdGenerator child;
  child.seed_with(42);
  // What a fork does to the child's view: the generation moves on, so the next id re-seeds from
  // the operating system instead of continuing the sequence the parent continues too.
  nemo::lens::detail::g_fork_generation.fetch_add(1);
  std::uint64_t parent_state = 42;
  const std::uint64_t parents_next = reference_wyrand(parent_state);
  EXPECT_NE(bytes_as_u64(child.span_id().bytes.data()), parents_next);
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
      } else if (rng() % 2 == 0) {
        int out = -1;
        const bool popped = ring.try_pop(out);
        ASSERT_EQ(popped, !model.empty());
        if (popped) {
          ASSERT_EQ(out, model.front());
          model.pop_front();
        }
      } else {
        // Several at once, across the end of the slots' array too.
        const std::size_t max = rng() % (capacity + 2);
        std::vector<int> out(max + 1, -1);
        const std::size_t n = ring.try_pop_many(out.data(), max);
        ASSERT_EQ(n, std::min(max, model.size()));
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(out[i], model.front());
          model.pop_front();
        }
        ASSERT_EQ(out[n], -1) << "nothing written past what was taken";
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
  std::uint64_t run[64];
  for (std::size_t take = 0; expected < kCount; ++take) {
    // One at a time and runs of every length, alternately.
    std::size_t n = 0;
    if (take % 2 == 0) {
      n = ring.try_pop(run[0]) ? 1 : 0;
    } else {
      n = ring.try_pop_many(run, 1 + take % 64);
    }
    if (n == 0) {
      std::this_thread::yield();
      continue;
    }
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(run[i], expected);
      ++expected;
    }
  }
  producer.join();
  std::uint64_t v = 0;
  EXPECT_FALSE(ring.try_pop(v)) << "nothing beyond what was pushed";
  EXPECT_EQ(ring.size_estimate(), 0u);
}

// Whether the kernel maps [p, p + n) without write permission, from /proc/self/maps.
bool mapped_without_write(const void* p, std::size_t n) {
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  std::ifstream maps("/proc/self/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::string perms;
    in >> std::hex >> begin >> dash >> end >> perms;
    if (a >= begin && a < end) return n <= end - a && perms.size() >= 2 && perms[1] != 'w';
  }
  return false;
}

int g_mutable_global = 1;

TEST(ReadOnlyMemory, LiteralsAndCodeAreReadOnlyAndTheKernelAgrees) {
  static const char* const literal = "a string literal of the test";
  const char* libc_literal = gnu_get_libc_version();  // in libc's read-only data
  const auto* code = reinterpret_cast<const void*>(&mapped_without_write);
  for (const void* p : {static_cast<const void*>(literal), static_cast<const void*>(libc_literal),
                        code}) {
    EXPECT_TRUE(in_read_only_memory(p, 8)) << p;
    EXPECT_TRUE(mapped_without_write(p, 8)) << p;  // the oracle confirms
  }
  EXPECT_FALSE(in_read_only_memory(literal, std::uintptr_t{1} << 40)) << "runs past its segment";
}

TEST(ReadOnlyMemory, StackHeapAndMutableGlobalsAreNot) {
  char stack[16] = "on the stack";
  auto heap = std::make_unique<char[]>(16);
  const std::string heap_string(40, 'h');
  for (const void* p : {static_cast<const void*>(stack), static_cast<const void*>(heap.get()),
                        static_cast<const void*>(heap_string.data()),
                        static_cast<const void*>(&g_mutable_global)}) {
    EXPECT_FALSE(in_read_only_memory(p, 4)) << p;
    EXPECT_FALSE(mapped_without_write(p, 4)) << p;
  }
  EXPECT_FALSE(in_read_only_memory(nullptr, 1));
}

// Every address the check calls read-only, the kernel maps without write: a sweep over the
// pages around a literal, the code and the stack.
TEST(ReadOnlyMemory, NeverCallsWritableMemoryReadOnly) {
  const char* literal = "another literal";
  int local = 0;
  for (const void* base : {static_cast<const void*>(literal), static_cast<const void*>(&local),
                           reinterpret_cast<const void*>(&mapped_without_write),
                           static_cast<const void*>(&g_mutable_global)}) {
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    for (std::intptr_t d = -(1 << 22); d <= (1 << 22); d += 4093) {
      const auto* p = reinterpret_cast<const void*>(b + static_cast<std::uintptr_t>(d));
      if (in_read_only_memory(p, 1)) {
        ASSERT_TRUE(mapped_without_write(p, 1)) << p;
      }
    }
  }
}

#if defined(__x86_64__)
// The CPU flags the kernel read for this machine (the first processor's), for the CPUID checks.
std::set<std::string> cpuinfo_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::set<std::string> flags;
    for (std::string w; words >> w;) flags.insert(w);
    return flags;
  }
  return {};
}
#endif

TEST(CacheLines, CpuChecksAgreeWithTheKernel) {
#if defined(__x86_64__)
  const std::set<std::string> flags = cpuinfo_flags();
  ASSERT_FALSE(flags.empty()) << "no flags line in /proc/cpuinfo";
  EXPECT_EQ(nemo::lens::detail::g_cpu_prefetches_for_write, flags.count("3dnowprefetch") == 1);
  EXPECT_EQ(nemo::lens::detail::g_cpu_evicts_lines, flags.count("clflushopt") == 1);
#else
  GTEST_SKIP() << "x86 only";
#endif
}

// The lines a span wrote, counted as the distinct 64-byte lines its fixed fields and inline
// attributes in use cover, byte by byte; and evicting them keeps what they hold.
TEST(CacheLines, AnExportedRecordsWrittenLinesAreEvictedAndKeepTheirContents) {
  auto r = std::make_unique<SpanRecord>();
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(r.get()) % 64, 0u);
  for (std::uint8_t used = 0; used <= SpanRecord::kInlineAttributes; ++used) {
    r->inline_used = used;
    std::set<std::uintptr_t> lines;
    const auto* first = reinterpret_cast<const char*>(r.get());
    const auto* end = reinterpret_cast<const char*>(&r->attributes[0]) +
                      used * sizeof(nemo::lens::detail::InlineAttribute);
    for (const char* b = first; b < end; ++b) {
      lines.insert(reinterpret_cast<std::uintptr_t>(b) / 64);
    }
    EXPECT_EQ(nemo::lens::detail::record_lines_written(*r), lines.size()) << int(used);
    EXPECT_LE(nemo::lens::detail::record_lines_written(*r) * 64, sizeof(SpanRecord));
  }
  r->start_ticks = 11;
  r->end_ticks = 22;
  r->attributes[3].i = 33;
  nemo::lens::detail::evict_record(*r);
  EXPECT_EQ(r->start_ticks, 11u);
  EXPECT_EQ(r->end_ticks, 22u);
  EXPECT_EQ(r->attributes[3].i, 33);
  EXPECT_EQ(r->inline_used, SpanRecord::kInlineAttributes);
}

// The common end's one-word test of five fields against the same test field by field, for every
// combination of values that matter (and some that do not: the other mode bits).
TEST(EndWord, AgreesWithTheFieldsTestedOneByOne) {
  using nemo::lens::detail::end_word;
  using nemo::lens::detail::end_word_is_common;
  using nemo::lens::detail::kModeGpu;
  auto r = std::make_unique<SpanRecord>();
  int common = 0;
  for (std::uint32_t nvtx : {0u, 1u, 0x100u, 0x10000u, 0x80000000u}) {
    for (int recording = 0; recording < 2; ++recording) {
      for (int orphaned = 0; orphaned < 2; ++orphaned) {
        for (int mode = 0; mode < 16; ++mode) {
          for (int unix_times = 0; unix_times < 2; ++unix_times) {
            r->nvtx = nvtx;
            r->recording = recording != 0;
            r->orphaned = orphaned != 0;
            r->mode = static_cast<std::uint8_t>(mode);
            r->unix_times = unix_times != 0;
            const bool expected = nvtx == 0 && recording != 0 && orphaned == 0 &&
                                  (mode & kModeGpu) == 0 && unix_times == 0;
            ASSERT_EQ(end_word_is_common(end_word(*r)), expected)
                << nvtx << " " << recording << " " << orphaned << " " << mode << " "
                << unix_times;
            common += expected ? 1 : 0;
          }
        }
      }
    }
  }
  EXPECT_EQ(common, 8);  // nvtx 0, recording, not orphaned, no unix times: the 8 modes without GPU
}

// A thread's stack of open records: top() is the newest or null, iteration sees only records.
TEST(RecordStack, TopIsTheNewestOrNullAndIterationSeesOnlyRecords) {
  nemo::lens::detail::RecordStack stack;
  SpanRecord a, b, c;
  EXPECT_TRUE(stack.empty());
  EXPECT_EQ(stack.size(), 0u);
  EXPECT_EQ(stack.top(), nullptr);
  EXPECT_EQ(stack.begin(), stack.end());
  EXPECT_EQ(stack.rbegin(), stack.rend());
  stack.push_back(&a);
  stack.push_back(&b);
  stack.push_back(&c);
  EXPECT_EQ(stack.size(), 3u);
  EXPECT_EQ(stack.top(), &c);
  EXPECT_EQ(std::vector<SpanRecord*>(stack.begin(), stack.end()),
            (std::vector<SpanRecord*>{&a, &b, &c}));
  EXPECT_EQ(std::vector<SpanRecord*>(stack.rbegin(), stack.rend()),
            (std::vector<SpanRecord*>{&c, &b, &a}));
  stack.erase(std::next(stack.rbegin(), 2).base() - 1);  // a, the oldest, through its reverse
  EXPECT_EQ(std::vector<SpanRecord*>(stack.begin(), stack.end()),
            (std::vector<SpanRecord*>{&b, &c}));
  stack.pop_back();
  EXPECT_EQ(stack.top(), &b);
  while (!stack.full()) stack.push_back(&a);
  EXPECT_EQ(stack.top(), &a);
  stack.clear();
  EXPECT_TRUE(stack.empty());
  EXPECT_EQ(stack.top(), nullptr);
}

// clean_record() sets every field the common start does not write, and record_is_clean() notices
// each of them set otherwise.
TEST(CleanRecord, SetsWhatTheCommonStartLeavesAndTheCheckSeesEachField) {
  using nemo::lens::detail::clean_record;
  using nemo::lens::detail::record_is_clean;
  auto r = std::make_unique<SpanRecord>();
  const std::vector<std::function<void(SpanRecord&)>> dirty = {
      [](SpanRecord& x) { x.span_id = *nemo::lens::SpanId::from_hex("00f067aa0ba902b7"); },
      [](SpanRecord& x) { x.nvtx = 7; },
      [](SpanRecord& x) { x.recording = false; },
      [](SpanRecord& x) { x.orphaned = true; },
      [](SpanRecord& x) { x.unix_times = true; },
      [](SpanRecord& x) { x.dropped_attributes_count = 2; },
      [](SpanRecord& x) { x.is_remote = true; },
      [](SpanRecord& x) { x.kind = nemo::lens::SpanKind::kClient; },
      [](SpanRecord& x) { x.status_code = nemo::lens::StatusCode::kError; },
      [](SpanRecord& x) { x.exception_recorded = true; },
      [](SpanRecord& x) { x.status_final = true; },
      [](SpanRecord& x) { x.truncated = true; },
      [](SpanRecord& x) { x.not_current = true; },
      [](SpanRecord& x) {
        x.trace_id = *nemo::lens::TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
      },
      [](SpanRecord& x) { x.parent_span_id = *nemo::lens::SpanId::from_hex("00f067aa0ba902b7"); },
      [](SpanRecord& x) { x.parent_is_remote = true; },
      [](SpanRecord& x) { x.trace_flags = 0x01; },
      [](SpanRecord& x) { x.inline_room = 1; },
  };
  for (std::size_t i = 0; i < dirty.size(); ++i) {
    clean_record(*r);
    ASSERT_TRUE(record_is_clean(*r));
    dirty[i](*r);
    EXPECT_FALSE(record_is_clean(*r)) << "field " << i;
  }
  for (const auto& d : dirty) d(*r);
  clean_record(*r);
  EXPECT_TRUE(record_is_clean(*r));
}

}  // namespace
