// libFuzzer target: a stream of launches, aliases, activity records and takes, as a GPU source
// and the exporter thread would drive GpuTiming's bookkeeping (src/gpu/attribution.cpp), in any
// order and with any values (records before their launch, duplicates, reversed intervals,
// unknown spans). Properties: a span's busy time is the length of the union of the intervals
// counted for it (computed here by a sweep), never more than its first start to last end; its
// kernels never exceed its activities; nothing crashes or leaks.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "fuzz_check.hpp"
#include "gpu/attribution.hpp"

namespace {

using nemo::lens::detail::GpuActivity;
using nemo::lens::detail::GpuActivityKind;
using nemo::lens::detail::GpuAttribution;
using nemo::lens::detail::GpuChain;

struct Reader {
  const std::uint8_t* p;
  std::size_t n;
  std::uint8_t byte() {
    if (n == 0) return 0;
    --n;
    return *p++;
  }
  std::int64_t small() { return static_cast<std::int64_t>(byte()) * 16 + byte() % 16; }
};

std::int64_t union_length(std::vector<std::pair<std::int64_t, std::int64_t>> v) {
  std::sort(v.begin(), v.end());
  std::int64_t total = 0, lo = 0, hi = 0;
  bool open = false;
  for (auto [a, b] : v) {
    if (b <= a) continue;
    if (open && a <= hi) {
      hi = std::max(hi, b);
      continue;
    }
    if (open) total += hi - lo;
    lo = a;
    hi = b;
    open = true;
  }
  if (open) total += hi - lo;
  return total;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  Reader in{data, size};
  GpuAttribution a;
  // What the harness expects each span to have counted: the launches' chains it saw, and the
  // intervals of the records that reached a span not taken yet.
  std::map<std::uint64_t, GpuChain> chains;        // correlation -> chain
  std::map<std::uint64_t, std::uint64_t> aliases;  // alias -> correlation
  std::map<std::uint64_t, std::vector<std::pair<std::int64_t, std::int64_t>>> counted;
  std::map<std::uint64_t, bool> taken;
  while (in.n > 0) {
    switch (in.byte() % 4) {
      case 0: {  // launch
        const std::uint64_t corr = in.byte() % 32;
        GpuChain c;
        c.size = static_cast<std::uint8_t>(in.byte() % (GpuChain::kMaxSpans + 1));
        for (std::uint8_t i = 0; i < c.size; ++i) c.spans[i] = 1 + in.byte() % 8;
        // Distinct spans in a chain (a span encloses itself once).
        std::sort(c.spans, c.spans + c.size);
        c.size = static_cast<std::uint8_t>(std::unique(c.spans, c.spans + c.size) - c.spans);
        const bool fresh = !chains.contains(corr) && !aliases.contains(corr) && c.size > 0;
        bool any_taken = false;
        for (std::uint8_t i = 0; i < c.size; ++i) any_taken = any_taken || taken[c.spans[i]];
        // A taken span is never launched into again (it ended): keep the stream realistic there.
        if (!fresh || any_taken) break;
        a.launch(corr, c);
        chains[corr] = c;
        break;
      }
      case 1: {  // alias
        const std::uint64_t alias = 100 + in.byte() % 32;
        const std::uint64_t corr = in.byte() % 32;
        if (aliases.contains(alias) || !chains.contains(corr)) break;
        bool has = false;
        for (auto& [al, c] : aliases) has = has || c == corr;
        if (has) break;
        a.alias(alias, corr);
        aliases[alias] = corr;
        break;
      }
      case 2: {  // activity
        std::uint64_t corr = in.byte() % 140;
        const std::int64_t start = in.small();
        const std::int64_t end = start + in.small() - 64;  // sometimes reversed
        const auto kind = static_cast<GpuActivityKind>(in.byte() % 3);
        a.activity({corr, kind, in.byte() % 2u, in.byte() % 4u, start, end});
        // A record without a usable interval (a start at or before 0, an end before the start:
        // CUPTI's when it could not time the work) adds nothing.
        if (start <= 0 || end < start) break;
        if (auto al = aliases.find(corr); al != aliases.end()) corr = al->second;
        auto c = chains.find(corr);
        if (c == chains.end()) break;
        // Retired once its outermost span was taken.
        if (taken[c->second.spans[c->second.size - 1]]) break;
        for (std::uint8_t i = 0; i < c->second.size; ++i) {
          const std::uint64_t s = c->second.spans[i];
          if (!taken[s]) counted[s].push_back({start, end});
        }
        break;
      }
      case 3: {  // take
        const std::uint64_t s = 1 + in.byte() % 8;
        const auto t = a.take(s);
        LENS_FUZZ_CHECK(t.busy_ns >= 0);
        LENS_FUZZ_CHECK(t.kernels <= t.activities);
        if (!taken[s]) {
          LENS_FUZZ_CHECK(t.busy_ns == union_length(counted[s]));
          if (t.activities > 0)
            LENS_FUZZ_CHECK(t.busy_ns <= std::max<std::int64_t>(0, t.end_ns - t.start_ns));
        }
        // Taking forgets: a later launch into it starts afresh in both.
        if (a.known(s)) break;
        taken[s] = true;
        counted.erase(s);
        break;
      }
    }
  }
  return 0;
}
