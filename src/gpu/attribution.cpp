// GPU time of spans: the bookkeeping (see attribution.hpp).
#include "gpu/attribution.hpp"

#include <algorithm>

namespace nemo::lens::detail {

void GpuAttribution::launch(std::uint64_t correlation, const GpuChain& given,
                            std::uint32_t records) {
  // Spans taken already (a launch from another thread that read a span just as it ended) are
  // left out: the launch counts for the enclosing ones, or its activity counts late.
  GpuChain chain;
  for (std::uint8_t i = 0; i < given.size; ++i) {
    if (!taken_.contains(given.spans[i])) chain.spans[chain.size++] = given.spans[i];
  }
  chain.kernel_spans = given.kernel_spans && chain.size > 0 && chain.spans[0] == given.spans[0];
  if (chain.size == 0) {
    if (given.size > 0) retire(correlation);
    return;
  }
  if (launches_.size() >= max_launches_) {
    ++launches_dropped_;
    return;
  }
  auto [it, inserted] = launches_.try_emplace(correlation);
  if (!inserted) return;  // a correlation id is seen once
  Launch& l = it->second;
  l.chain = chain;
  l.expected = records;
  for (std::uint8_t i = 0; i < chain.size; ++i) ++spans_[chain.spans[i]].waiting;
  spans_[chain.spans[chain.size - 1]].outermost_of.push_back(correlation);
  if (records == 0) settle(l);
}

void GpuAttribution::settle(Launch& l) {
  if (l.seen) return;
  l.seen = true;
  for (std::uint8_t i = 0; i < l.chain.size; ++i) {
    auto s = spans_.find(l.chain.spans[i]);
    if (s != spans_.end() && s->second.waiting > 0) --s->second.waiting;
  }
}

std::unordered_map<std::uint64_t, GpuAttribution::Launch>::iterator GpuAttribution::find_launch(
    std::uint64_t correlation) {
  auto it = launches_.find(correlation);
  if (it == launches_.end()) {
    if (auto al = aliases_.find(correlation); al != aliases_.end()) it = launches_.find(al->second);
  }
  return it;
}

void GpuAttribution::cancel(std::uint64_t correlation) {
  auto it = find_launch(correlation);
  if (it != launches_.end()) settle(it->second);
}

void GpuAttribution::add(Span& s, const GpuActivity& a) {
  ++s.activities;
  if (a.kind == GpuActivityKind::kKernel) ++s.kernels;
  s.start_ns = std::min(s.start_ns, a.start_ns);
  s.end_ns = std::max(s.end_ns, a.end_ns);
  std::int64_t lo = std::max(a.start_ns, s.folded_until);
  std::int64_t hi = a.end_ns;
  if (hi <= lo) return;
  auto& v = s.intervals;
  // The first interval that ends at or after lo: everything from there that starts at or before hi
  // merges with [lo, hi).
  auto first = std::lower_bound(v.begin(), v.end(), lo,
                                [](const auto& iv, std::int64_t x) { return iv.second < x; });
  auto last = first;
  while (last != v.end() && last->first <= hi) {
    lo = std::min(lo, last->first);
    hi = std::max(hi, last->second);
    ++last;
  }
  if (first == last) {
    v.insert(first, {lo, hi});
  } else {
    *first = {lo, hi};
    v.erase(first + 1, last);
  }
  if (v.size() > kMaxIntervals) {
    const std::size_t half = v.size() / 2;
    for (std::size_t i = 0; i < half; ++i) s.folded_ns += v[i].second - v[i].first;
    s.folded_until = v[half - 1].second;
    v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(half));
  }
}

void GpuAttribution::alias(std::uint64_t alias, std::uint64_t correlation) {
  auto it = launches_.find(correlation);
  if (it == launches_.end() || it->second.alias != 0 || launches_.contains(alias)) return;
  it->second.alias = alias;
  aliases_[alias] = correlation;
}

void GpuAttribution::activity(const GpuActivity& a) {
  const bool valid = a.start_ns > 0 && a.end_ns >= a.start_ns;
  if (!valid) ++invalid_;
  auto it = find_launch(a.correlation);
  if (it == launches_.end()) {
    if (!valid) return;
    if (retired_.contains(a.correlation)) {
      ++late_;
    } else {
      ++unattributed_;
    }
    return;
  }
  Launch& l = it->second;
  bool owner_taken = false;
  for (std::uint8_t i = 0; i < l.chain.size && valid; ++i) {
    auto s = spans_.find(l.chain.spans[i]);
    if (s == spans_.end()) {
      if (i == 0) owner_taken = true;
      continue;
    }
    add(s->second, a);
    if (i == 0 && l.chain.kernel_spans) {
      Span& owner = s->second;
      if (owner.children.size() < kMaxKernelSpans) {
        owner.children.push_back(a);
      } else {
        ++owner.children_dropped;
      }
    }
  }
  // A graph's nodes each bring a record with the launch's id: settled at the last expected one.
  if (l.expected > 0) --l.expected;
  if (l.expected == 0) settle(l);
  if (owner_taken) ++late_;
}

bool GpuAttribution::settled(std::uint64_t span) const noexcept {
  auto it = spans_.find(span);
  return it == spans_.end() || it->second.waiting == 0;
}

void GpuAttribution::retire(std::uint64_t correlation) {
  if (!retired_.insert(correlation).second) return;
  retired_order_.push_back(correlation);
  if (retired_order_.size() > kMaxRetired) {
    retired_.erase(retired_order_.front());
    retired_order_.pop_front();
  }
}

GpuTime GpuAttribution::take(std::uint64_t span) {
  GpuTime t;
  if (taken_.insert(span).second) {
    taken_order_.push_back(span);
    if (taken_order_.size() > kMaxRetired) {
      taken_.erase(taken_order_.front());
      taken_order_.pop_front();
    }
  }
  auto it = spans_.find(span);
  if (it == spans_.end()) return t;
  Span& s = it->second;
  t.busy_ns = s.folded_ns;
  for (const auto& [lo, hi] : s.intervals) t.busy_ns += hi - lo;
  t.kernels = s.kernels;
  t.activities = s.activities;
  if (s.activities > 0) {
    t.start_ns = s.start_ns;
    t.end_ns = s.end_ns;
  }
  t.complete = s.waiting == 0;
  t.children = std::move(s.children);
  t.children_dropped = s.children_dropped;
  // The launches that end at this span count for no span any more: forgotten, and remembered as
  // retired (a kernel graph's later kernels, or a record that comes after all, counts late).
  for (std::uint64_t c : s.outermost_of) {
    auto l = launches_.find(c);
    if (l == launches_.end()) continue;
    if (l->second.alias != 0) {
      aliases_.erase(l->second.alias);
      retire(l->second.alias);
    }
    launches_.erase(l);
    retire(c);
  }
  spans_.erase(it);
  return t;
}

}  // namespace nemo::lens::detail
