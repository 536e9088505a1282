#include "report/step_breakdown.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>

namespace nemo::lens::cli {

namespace {

constexpr std::uint32_t kNone = UINT32_MAX;

void add_to(IdTimes& sums, std::uint32_t id, std::uint64_t ns) {
  for (auto& [key, sum] : sums) {
    if (key == id) {
      sum += ns;
      return;
    }
  }
  sums.emplace_back(id, ns);
}

std::uint64_t length(const std::vector<Interval>& intervals) {
  std::uint64_t sum = 0;
  for (const Interval& i : intervals) sum += i.end_ns - i.start_ns;
  return sum;
}

// a ∩ b of two sorted lists of disjoint intervals.
std::vector<Interval> intersect(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  std::vector<Interval> out;
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const std::uint64_t lo = std::max(a[i].start_ns, b[j].start_ns);
    const std::uint64_t hi = std::min(a[i].end_ns, b[j].end_ns);
    if (lo < hi) out.push_back({lo, hi});
    (a[i].end_ns < b[j].end_ns ? i : j)++;
  }
  return out;
}

// (id, interval) pairs -> the union per id, as (id, intervals) in id order.
std::vector<std::pair<std::uint32_t, std::vector<Interval>>> unions_by_id(
    std::vector<std::pair<std::uint32_t, Interval>>& tagged) {
  std::sort(tagged.begin(), tagged.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first, a.second.start_ns, a.second.end_ns) <
           std::tie(b.first, b.second.start_ns, b.second.end_ns);
  });
  std::vector<std::pair<std::uint32_t, std::vector<Interval>>> out;
  for (const auto& [id, interval] : tagged) {
    if (out.empty() || out.back().first != id) out.push_back({id, {}});
    std::vector<Interval>& list = out.back().second;
    if (!list.empty() && interval.start_ns <= list.back().end_ns) {
      list.back().end_ns = std::max(list.back().end_ns, interval.end_ns);
    } else {
      list.push_back(interval);
    }
  }
  return out;
}

}  // namespace

std::uint64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b) {
  return length(intersect(a, b));
}

void merge_intervals(std::vector<Interval>& intervals) {
  std::sort(intervals.begin(), intervals.end(), [](const Interval& a, const Interval& b) {
    return std::tie(a.start_ns, a.end_ns) < std::tie(b.start_ns, b.end_ns);
  });
  std::size_t out = 0;
  for (const Interval& i : intervals) {
    if (out > 0 && i.start_ns <= intervals[out - 1].end_ns) {
      intervals[out - 1].end_ns = std::max(intervals[out - 1].end_ns, i.end_ns);
    } else {
      intervals[out++] = i;
    }
  }
  intervals.resize(out);
}

void StepAnalyzer::analyze(std::span<SpanFacts> spans,
                           const std::function<void(const StepResult&)>& on_step) {
  // Sorted by id, then by everything else, so that of two spans with one id the same is kept
  // whatever their order.
  std::sort(spans.begin(), spans.end(), [](const SpanFacts& a, const SpanFacts& b) {
    return std::tie(a.span_id, a.start_ns, a.end_ns, a.name_id, a.thread_id, a.parent_span_id) <
           std::tie(b.span_id, b.start_ns, b.end_ns, b.name_id, b.thread_id, b.parent_span_id);
  });
  const auto last =
      std::unique(spans.begin(), spans.end(),
                  [](const SpanFacts& a, const SpanFacts& b) { return a.span_id == b.span_id; });
  counts_.duplicates += static_cast<std::uint64_t>(spans.end() - last);
  spans = spans.first(static_cast<std::size_t>(last - spans.begin()));
  const auto n = static_cast<std::uint32_t>(spans.size());

  // Parents, and children in CSR form (each span's children in id order).
  parent_.assign(n, kNone);
  std::vector<std::uint64_t> missing;
  child_begin_.assign(n + 1, 0);
  for (std::uint32_t i = 0; i < n; ++i) {
    const std::uint64_t p = spans[i].parent_span_id;
    if (p == 0) continue;
    const auto it =
        std::lower_bound(spans.begin(), spans.end(), p,
                         [](const SpanFacts& s, std::uint64_t id) { return s.span_id < id; });
    if (it != spans.end() && it->span_id == p && it->span_id != spans[i].span_id) {
      parent_[i] = static_cast<std::uint32_t>(it - spans.begin());
      ++child_begin_[parent_[i] + 1];
    } else {
      missing.push_back(p);
    }
  }
  std::sort(missing.begin(), missing.end());
  counts_.missing_parents +=
      static_cast<std::uint64_t>(std::unique(missing.begin(), missing.end()) - missing.begin());
  for (std::uint32_t i = 0; i < n; ++i) child_begin_[i + 1] += child_begin_[i];
  children_.assign(child_begin_[n], 0);
  {
    std::vector<std::uint32_t> next(child_begin_.begin(), child_begin_.end() - 1);
    for (std::uint32_t i = 0; i < n; ++i) {
      if (parent_[i] != kNone) children_[next[parent_[i]]++] = i;
    }
  }

  // From each root down to the first span of the step group on each path: a top-level step.
  on_step_ = &on_step;
  std::uint64_t reached = 0;
  for (std::uint32_t root = 0; root < n; ++root) {
    if (parent_[root] != kNone) continue;
    stack_.assign(1, root);
    while (!stack_.empty()) {
      const std::uint32_t x = stack_.back();
      stack_.pop_back();
      if (kinds_[spans[x].name_id].is_step) {
        analyze_step(spans, x);
        reached += nodes_.size();
        continue;
      }
      ++reached;
      for (std::uint32_t c = child_begin_[x + 1]; c-- > child_begin_[x];) {
        stack_.push_back(children_[c]);
      }
    }
  }
  counts_.cycles += n - reached;
  on_step_ = nullptr;
}

void StepAnalyzer::analyze_step(std::span<const SpanFacts> spans, std::uint32_t step) {
  const SpanFacts& s = spans[step];
  StepResult& r = result_;
  r.rank = s.rank;
  r.span_id = s.span_id;
  r.name_id = s.name_id;
  r.start_ns = s.start_ns;
  r.duration_ns = s.end_ns - s.start_ns;
  r.own_by_name.clear();
  r.within_by_name.clear();
  r.within_by_group.clear();
  r.overlap_by_name.clear();
  r.overlap_by_group.clear();
  r.overlapped.clear();
  r.exposed.clear();

  // The step's spans, breadth first, with the thread each ran on.
  const std::int64_t thread = s.thread_id;
  nodes_.clear();
  nodes_.push_back({s.start_ns, s.end_ns, thread, step, 0, 0, true});
  for (std::uint32_t k = 0; k < nodes_.size(); ++k) {
    const Node x = nodes_[k];
    for (std::uint32_t c = child_begin_[x.index]; c < child_begin_[x.index + 1]; ++c) {
      const SpanFacts& cs = spans[children_[c]];
      Node node{};
      node.index = children_[c];
      node.parent = k;
      node.thread = cs.thread_id != kNoThread ? cs.thread_id : x.thread;
      // Without the step's thread, everything counts as on it (the files of an older exporter).
      node.own = x.own && (thread == kNoThread || node.thread == thread);
      nodes_.push_back(node);
    }
  }

  // A span of the step's thread inside which another span of that thread, not its descendant,
  // started was not that thread's current span then: it ran beside the thread (a span started
  // and ended elsewhere, such as a DDP hook's all-reduce waiting for gloo's thread), as do its
  // descendants.
  {
    std::vector<std::uint32_t> by_start;
    for (std::uint32_t k = 1; k < nodes_.size(); ++k) {
      if (nodes_[k].own) by_start.push_back(k);
    }
    std::sort(by_start.begin(), by_start.end(), [&](std::uint32_t a, std::uint32_t b) {
      return spans[nodes_[a].index].start_ns < spans[nodes_[b].index].start_ns;
    });
    std::vector<bool> beside(nodes_.size(), false);
    std::multimap<std::uint64_t, std::uint32_t> open;  // by end
    for (const std::uint32_t y : by_start) {
      const std::uint64_t start = spans[nodes_[y].index].start_ns;
      open.erase(open.begin(), open.upper_bound(start));
      for (const auto& [end, x] : open) {
        if (spans[nodes_[x].index].start_ns == start) continue;
        std::uint32_t up = nodes_[y].parent;
        while (up != 0 && up != x) up = nodes_[up].parent;
        if (up != x) beside[x] = true;
      }
      open.emplace(spans[nodes_[y].index].end_ns, y);
    }
    for (std::uint32_t k = 1; k < nodes_.size(); ++k) {
      nodes_[k].own = nodes_[k].own && !beside[k] && nodes_[nodes_[k].parent].own;
    }
  }

  // On the step's thread each span is cut to its parent (a thread's spans nest); beside it, to
  // the step.
  for (std::uint32_t k = 1; k < nodes_.size(); ++k) {
    Node& node = nodes_[k];
    const Node& bounds = node.own ? nodes_[node.parent] : nodes_[0];
    const SpanFacts& cs = spans[node.index];
    node.start_ns = std::max(cs.start_ns, bounds.start_ns);
    node.end_ns = std::max(node.start_ns, std::min(cs.end_ns, bounds.end_ns));
    node.depth = node.own ? nodes_[node.parent].depth + 1 : 0;
  }

  // The step's thread, instant by instant: the innermost open span (deepest; of two at one
  // depth, the later start, then the larger id) has it.
  struct Event {
    std::uint64_t t;
    bool start;
    std::uint32_t node;
  };
  std::vector<Event> events;
  for (std::uint32_t k = 0; k < nodes_.size(); ++k) {
    const Node& x = nodes_[k];
    if (!x.own || x.end_ns <= x.start_ns) continue;
    events.push_back({x.start_ns, true, k});
    events.push_back({x.end_ns, false, k});
  }
  std::sort(events.begin(), events.end(), [](const Event& a, const Event& b) {
    return std::tie(a.t, a.start, a.node) < std::tie(b.t, b.start, b.node);  // ends first
  });
  using Key = std::tuple<std::uint32_t, std::uint64_t, std::uint64_t, std::uint32_t>;
  auto key = [&](std::uint32_t k) {
    const SpanFacts& span = spans[nodes_[k].index];
    return Key{nodes_[k].depth, span.start_ns, span.span_id, k};
  };
  struct Segment {
    Interval interval;
    std::uint32_t node;
  };
  std::vector<Segment> segments;
  std::set<Key> open;
  std::uint64_t previous = s.start_ns;
  for (const Event& e : events) {
    if (!open.empty() && e.t > previous) {
      const std::uint32_t current = std::get<3>(*open.rbegin());
      add_to(r.own_by_name, spans[nodes_[current].index].name_id, e.t - previous);
      if (!segments.empty() && segments.back().node == current &&
          segments.back().interval.end_ns == previous) {
        segments.back().interval.end_ns = e.t;
      } else {
        segments.push_back({{previous, e.t}, current});
      }
    }
    previous = e.t;
    if (e.start) {
      open.insert(key(e.node));
    } else {
      open.erase(key(e.node));
    }
  }

  // Every span of the step within it, per name and group.
  std::vector<std::pair<std::uint32_t, Interval>> by_name, by_group;
  std::vector<std::pair<std::uint32_t, Interval>> beside_by_name, beside_by_group;
  for (const Node& x : nodes_) {
    if (x.end_ns <= x.start_ns) continue;
    const SpanFacts& span = spans[x.index];
    const Interval within{std::max(x.start_ns, s.start_ns), std::min(x.end_ns, s.end_ns)};
    by_name.push_back({span.name_id, within});
    by_group.push_back({group_of(span), within});
    if (!x.own) {
      beside_by_name.push_back({span.name_id, within});
      beside_by_group.push_back({group_of(span), within});
      r.overlapped.push_back(within);
    }
  }
  for (const auto& [id, list] : unions_by_id(by_name))
    r.within_by_name.emplace_back(id, length(list));
  for (const auto& [id, list] : unions_by_id(by_group)) {
    r.within_by_group.emplace_back(id, length(list));
  }
  if (r.overlapped.empty()) {
    (*on_step_)(r);
    return;
  }
  merge_intervals(r.overlapped);

  // Exposed: where the step's thread was in a span of the overlapping spans' group, or in none
  // but the step.
  auto idle_or_in_group = [&](std::uint32_t group) {
    std::vector<Interval> w;
    for (const Segment& seg : segments) {
      if (seg.node != 0 && group_of(spans[nodes_[seg.node].index]) != group) continue;
      if (!w.empty() && w.back().end_ns == seg.interval.start_ns) {
        w.back().end_ns = seg.interval.end_ns;
      } else {
        w.push_back(seg.interval);
      }
    }
    return w;
  };
  auto count_spans = [](const std::vector<std::pair<std::uint32_t, Interval>>& tagged,
                        std::uint32_t id) {
    return static_cast<std::uint64_t>(
        std::count_if(tagged.begin(), tagged.end(), [&](const auto& t) { return t.first == id; }));
  };
  std::vector<std::pair<std::uint32_t, std::vector<Interval>>> waiting;  // group -> intervals
  for (const auto& [group, list] : unions_by_id(beside_by_group)) {
    std::vector<Interval> w = idle_or_in_group(group);
    std::vector<Interval> exposed = intersect(list, w);
    r.overlap_by_group.push_back(
        {group, count_spans(beside_by_group, group), length(list), length(exposed)});
    r.exposed.insert(r.exposed.end(), exposed.begin(), exposed.end());
    waiting.emplace_back(group, std::move(w));
  }
  merge_intervals(r.exposed);
  for (const auto& [name, list] : unions_by_id(beside_by_name)) {
    const std::uint32_t group = kinds_[name].group_id;
    const auto w = std::find_if(waiting.begin(), waiting.end(),
                                [&](const auto& g) { return g.first == group; });
    r.overlap_by_name.push_back(
        {name, count_spans(beside_by_name, name), length(list), intersection_ns(list, w->second)});
  }
  (*on_step_)(r);
}

}  // namespace nemo::lens::cli
