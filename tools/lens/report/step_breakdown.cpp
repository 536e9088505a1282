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

bool facts_less(const SpanFacts& a, const SpanFacts& b) {
  return std::tie(a.span_id, a.start_ns, a.end_ns, a.name_id, a.thread_id, a.parent_span_id) <
         std::tie(b.span_id, b.start_ns, b.end_ns, b.name_id, b.thread_id, b.parent_span_id);
}

// One trace's records: its spans, its GPU records, its iteration records and its capture records,
// each sorted by span id with one record per id (the least by content, so that the same is kept
// whatever their order).
struct SortedTrace {
  std::span<SpanFacts> spans;
  std::span<SpanFacts> gpu;
  std::span<SpanFacts> iterations;
  std::span<SpanFacts> captures;
  std::uint64_t duplicates = 0;  // span records dropped
};

SortedTrace sort_trace(std::span<SpanFacts> facts) {
  std::sort(facts.begin(), facts.end(), [](const SpanFacts& a, const SpanFacts& b) {
    return a.kind != b.kind ? a.kind < b.kind : facts_less(a, b);
  });
  auto of_kind = [&](FactsKind kind) {
    const auto first = std::partition_point(facts.begin(), facts.end(),
                                            [&](const SpanFacts& f) { return f.kind < kind; });
    const auto last = std::partition_point(first, facts.end(),
                                           [&](const SpanFacts& f) { return f.kind == kind; });
    const std::span<SpanFacts> part(first, last);
    const auto unique_end =
        std::unique(part.begin(), part.end(),
                    [](const SpanFacts& a, const SpanFacts& b) { return a.span_id == b.span_id; });
    return std::pair(part.first(static_cast<std::size_t>(unique_end - part.begin())), part.size());
  };
  SortedTrace out;
  std::size_t span_records = 0;
  std::tie(out.spans, span_records) = of_kind(FactsKind::kSpan);
  out.gpu = of_kind(FactsKind::kGpu).first;
  out.iterations = of_kind(FactsKind::kIteration).first;
  out.captures = of_kind(FactsKind::kCapture).first;
  out.duplicates = span_records - out.spans.size();
  return out;
}

// Per span of `spans`, the index of its record in `gpu` (both sorted by span id), or kNone.
std::vector<std::uint32_t> gpu_indices(std::span<const SpanFacts> spans,
                                       std::span<const SpanFacts> gpu) {
  std::vector<std::uint32_t> out(spans.size(), kNone);
  std::size_t j = 0;
  for (std::size_t i = 0; i < spans.size() && j < gpu.size(); ++i) {
    while (j < gpu.size() && gpu[j].span_id < spans[i].span_id) ++j;
    if (j < gpu.size() && gpu[j].span_id == spans[i].span_id) {
      out[i] = static_cast<std::uint32_t>(j);
    }
  }
  return out;
}

// The index of the span with id `id` in `spans` (sorted by id), or kNone.
std::uint32_t index_of(std::span<const SpanFacts> spans, std::uint64_t id) {
  const auto it =
      std::lower_bound(spans.begin(), spans.end(), id,
                       [](const SpanFacts& s, std::uint64_t v) { return s.span_id < v; });
  return it != spans.end() && it->span_id == id ? static_cast<std::uint32_t>(it - spans.begin())
                                                : kNone;
}

enum GpuFlags : std::uint32_t { kHasBusy = 1, kHasKernels = 2, kHasInterval = 4 };

}  // namespace

SpanFacts gpu_facts(const SpanFacts& span, const GpuFacts& gpu) {
  SpanFacts r;
  r.rank = span.rank;
  r.trace_key = span.trace_key;
  r.span_id = span.span_id;
  r.parent_span_id = gpu.busy_ns;
  r.start_ns = gpu.start_ns;
  r.end_ns = gpu.end_ns;
  r.thread_id = static_cast<std::int64_t>(gpu.kernels);
  r.name_id = (gpu.has_busy ? kHasBusy : 0u) | (gpu.has_kernels ? kHasKernels : 0u) |
              (gpu.has_interval ? kHasInterval : 0u);
  r.kind = FactsKind::kGpu;
  return r;
}

SpanFacts iteration_facts(const SpanFacts& span, std::int64_t iteration) {
  SpanFacts r;
  r.rank = span.rank;
  r.trace_key = span.trace_key;
  r.span_id = span.span_id;
  r.start_ns = static_cast<std::uint64_t>(iteration);
  r.kind = FactsKind::kIteration;
  return r;
}

SpanFacts capture_facts(const SpanFacts& span, const CaptureMark& mark) {
  SpanFacts r;
  r.rank = span.rank;
  r.trace_key = span.trace_key;
  r.span_id = span.span_id;
  r.start_ns = static_cast<std::uint64_t>(mark.capture_id);
  r.end_ns = mark.reason_id;
  r.kind = FactsKind::kCapture;
  return r;
}

GpuFacts gpu_of(const SpanFacts& record) {
  GpuFacts g;
  g.has_busy = (record.name_id & kHasBusy) != 0;
  g.has_kernels = (record.name_id & kHasKernels) != 0;
  g.has_interval = (record.name_id & kHasInterval) != 0;
  g.busy_ns = record.parent_span_id;
  g.kernels = static_cast<std::uint64_t>(record.thread_id);
  g.start_ns = record.start_ns;
  g.end_ns = record.end_ns;
  return g;
}

void for_each_gpu_leaf(std::span<SpanFacts> facts,
                       const std::function<void(const SpanFacts&, const GpuFacts&)>& fn) {
  const SortedTrace trace = sort_trace(facts);
  if (trace.gpu.empty()) return;
  const std::vector<std::uint32_t> gpu = gpu_indices(trace.spans, trace.gpu);
  // Mark every ancestor of a GPU-timed span; a walk stops at a span already marked (whose
  // ancestors are), which also ends it in a cycle of parent ids.
  std::vector<bool> above(trace.spans.size(), false);
  for (std::uint32_t i = 0; i < trace.spans.size(); ++i) {
    if (gpu[i] == kNone) continue;
    std::uint64_t parent = trace.spans[i].parent_span_id;
    for (std::uint32_t x = parent == 0 ? kNone : index_of(trace.spans, parent);
         x != kNone && x != i && !above[x];) {
      above[x] = true;
      parent = trace.spans[x].parent_span_id;
      x = parent == 0 ? kNone : index_of(trace.spans, parent);
    }
  }
  for (std::uint32_t i = 0; i < trace.spans.size(); ++i) {
    if (gpu[i] != kNone && !above[i]) fn(trace.spans[i], gpu_of(trace.gpu[gpu[i]]));
  }
}

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

void StepAnalyzer::analyze(std::span<SpanFacts> facts,
                           const std::function<void(const StepResult&)>& on_step) {
  // Sorted by id, then by everything else, so that of two spans with one id the same is kept
  // whatever their order; the GPU records apart.
  const SortedTrace trace = sort_trace(facts);
  counts_.duplicates += trace.duplicates;
  const std::span<SpanFacts> spans = trace.spans;
  const auto n = static_cast<std::uint32_t>(spans.size());
  gpu_.clear();
  for (const SpanFacts& g : trace.gpu) gpu_.push_back(gpu_of(g));
  gpu_index_.clear();
  if (!gpu_.empty()) gpu_index_ = gpu_indices(spans, trace.gpu);
  iterations_ = trace.iterations;
  captures_ = trace.captures;

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
  r.gpu.timed = false;
  r.gpu.busy_ns = r.gpu.idle_ns = r.gpu.exposed_comm_ns = 0;
  r.gpu.boxes.clear();
  r.collectives.clear();
  r.gpu_busy_by_group.clear();
  r.gpu_in_step_by_name.clear();
  r.iteration.reset();
  r.captured_spans = 0;
  r.captures.clear();
  r.spans_by_name.clear();
  r.longest_by_name.clear();
  r.boxes.clear();
  r.boxes_dropped = 0;
  if (const std::uint32_t at = index_of(iterations_, s.span_id); at != kNone) {
    r.iteration = static_cast<std::int64_t>(iterations_[at].start_ns);
  }

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

  // The spans the flight recorder captured (only some steps have any).
  captured_.assign(nodes_.size(), false);
  if (!captures_.empty()) {
    for (std::uint32_t k = 0; k < nodes_.size(); ++k) {
      const std::uint32_t at = index_of(captures_, spans[nodes_[k].index].span_id);
      if (at == kNone) continue;
      captured_[k] = true;
      ++r.captured_spans;
      r.captures.push_back({static_cast<std::int64_t>(captures_[at].start_ns),
                            static_cast<std::uint32_t>(captures_[at].end_ns)});
    }
    std::sort(r.captures.begin(), r.captures.end());
    r.captures.erase(std::unique(r.captures.begin(), r.captures.end()), r.captures.end());
  }
  if (r.captured_spans > 0) boxes_of_step(spans, r);

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

  // The collectives: the outermost communication spans below the step (nodes_ is breadth
  // first, so a span's parent has its flag before it), cut to the step.
  {
    std::vector<bool> in_communication(nodes_.size(), false);
    for (std::uint32_t k = 1; k < nodes_.size(); ++k) {
      const Node& x = nodes_[k];
      const bool communication = kinds_[spans[x.index].name_id].is_communication;
      in_communication[k] = communication || in_communication[x.parent];
      if (!communication || in_communication[x.parent] || captured_[k]) continue;
      const SpanFacts& span = spans[x.index];
      if (span.thread_id == kGpuKernelThread) continue;  // an NCCL kernel, not the collective
      const std::uint64_t start = std::clamp(span.start_ns, s.start_ns, s.end_ns);
      r.collectives.push_back({span.name_id, start, std::clamp(span.end_ns, start, s.end_ns)});
    }
    std::sort(r.collectives.begin(), r.collectives.end(),
              [](const Collective& a, const Collective& b) {
                return std::tie(a.start_ns, a.end_ns, a.name_id) <
                       std::tie(b.start_ns, b.end_ns, b.name_id);
              });
  }
  analyze_gpu(spans, r);
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

void StepAnalyzer::boxes_of_step(std::span<const SpanFacts> spans, StepResult& r) {
  // Depth in the tree below the step (nodes_ is breadth first: a parent comes before its
  // children).
  std::vector<std::uint32_t> depth(nodes_.size(), 0);
  for (std::uint32_t k = 1; k < nodes_.size(); ++k) depth[k] = depth[nodes_[k].parent] + 1;
  for (std::uint32_t k = 0; k < nodes_.size(); ++k) {
    const Node& x = nodes_[k];
    const std::uint32_t name = spans[x.index].name_id;
    add_to(r.spans_by_name, name, 1);
    const std::uint64_t length = x.end_ns - x.start_ns;
    auto longest = std::find_if(r.longest_by_name.begin(), r.longest_by_name.end(),
                                [&](const auto& p) { return p.first == name; });
    if (longest == r.longest_by_name.end()) {
      r.longest_by_name.emplace_back(name, length);
    } else {
      longest->second = std::max(longest->second, length);
    }
    r.boxes.push_back({{x.start_ns, x.end_ns}, name, depth[k], captured_[k]});
  }
  auto by_start = [](const StepBox& a, const StepBox& b) {
    return std::tie(a.interval.start_ns, a.depth, a.interval.end_ns, a.name_id, a.captured) <
           std::tie(b.interval.start_ns, b.depth, b.interval.end_ns, b.name_id, b.captured);
  };
  if (r.boxes.size() > kMaxStepBoxes) {
    // The longest, the same ones whatever the order the spans came in.
    std::sort(r.boxes.begin(), r.boxes.end(), [&](const StepBox& a, const StepBox& b) {
      const std::uint64_t la = a.interval.end_ns - a.interval.start_ns;
      const std::uint64_t lb = b.interval.end_ns - b.interval.start_ns;
      return la != lb ? la > lb : by_start(a, b);
    });
    r.boxes_dropped = r.boxes.size() - kMaxStepBoxes;
    r.boxes.resize(kMaxStepBoxes);
  }
  std::sort(r.boxes.begin(), r.boxes.end(), by_start);
}

void StepAnalyzer::analyze_gpu(std::span<const SpanFacts> spans, StepResult& r) {
  if (gpu_.empty()) return;
  // Which of the step's spans have a GPU-timed descendant (nodes_ is breadth first: children
  // after their parents).
  auto gpu_at = [&](std::uint32_t k) { return gpu_index_[nodes_[k].index]; };
  std::vector<bool> below(nodes_.size(), false);
  for (std::uint32_t k = static_cast<std::uint32_t>(nodes_.size()); k-- > 0;) {
    if (gpu_at(k) != kNone) r.gpu.timed = true;
    if (k > 0 && (gpu_at(k) != kNone || below[k])) below[nodes_[k].parent] = true;
  }
  if (!r.gpu.timed) return;

  // GPU intervals start no earlier than the step (the window's start).
  const std::uint64_t step_start = r.start_ns;
  std::vector<Interval> all, communication, other;
  std::vector<std::pair<std::uint32_t, Interval>> leaves;  // by group
  std::uint64_t window_end = step_start + r.duration_ns;
  const std::uint64_t step_end = window_end;
  // Per name: the busy time of its outermost GPU-timed spans, and their GPU intervals in the step.
  std::vector<std::pair<std::uint32_t, Interval>> name_intervals;
  IdTimes name_busy;
  for (std::uint32_t k = 0; k < nodes_.size(); ++k) {
    if (gpu_at(k) == kNone) continue;
    const GpuFacts& g = gpu_[gpu_at(k)];
    const std::uint32_t name = spans[nodes_[k].index].name_id;
    bool outermost = true;
    for (std::uint32_t up = k; up != 0 && outermost;) {
      up = nodes_[up].parent;
      outermost = !(gpu_at(up) != kNone && spans[nodes_[up].index].name_id == name);
    }
    if (!g.has_interval) {
      if (!below[k] && g.has_busy)
        add_to(r.gpu_busy_by_group, group_of(spans[nodes_[k].index]), g.busy_ns);
      continue;
    }
    const std::uint64_t start = std::max(g.start_ns, step_start);
    const Interval interval{start, std::max(start, g.end_ns)};
    all.push_back(interval);
    window_end = std::max(window_end, interval.end_ns);
    if (outermost) {
      add_to(name_busy, name, g.has_busy ? g.busy_ns : g.end_ns - g.start_ns);
      const Interval in_step{std::min(interval.start_ns, step_end),
                             std::min(interval.end_ns, step_end)};
      if (in_step.end_ns > in_step.start_ns) name_intervals.push_back({name, in_step});
    }
    if (below[k]) continue;  // not a leaf
    const NameKind& kind = kinds_[name];
    (kind.is_communication ? communication : other).push_back(interval);
    leaves.push_back({kind.group_id, interval});
    add_to(r.gpu_busy_by_group, kind.group_id, g.has_busy ? g.busy_ns : g.end_ns - g.start_ns);
  }
  for (const auto& [name, list] : unions_by_id(name_intervals)) {
    const auto busy = std::find_if(name_busy.begin(), name_busy.end(),
                                   [&](const auto& b) { return b.first == name; });
    r.gpu_in_step_by_name.emplace_back(name, std::min(busy->second, length(list)));
  }
  merge_intervals(all);
  const std::uint32_t own = gpu_at(0);
  r.gpu.busy_ns = own != kNone && gpu_[own].has_busy ? gpu_[own].busy_ns : length(all);
  const std::uint64_t window = window_end - step_start;
  r.gpu.idle_ns = window > r.gpu.busy_ns ? window - r.gpu.busy_ns : 0;
  merge_intervals(communication);
  merge_intervals(other);
  r.gpu.exposed_comm_ns = length(communication) - intersection_ns(communication, other);
  for (const auto& [group, list] : unions_by_id(leaves)) {
    for (const Interval& i : list) r.gpu.boxes.push_back({i, group});
  }
  std::sort(r.gpu.boxes.begin(), r.gpu.boxes.end(), [](const GpuBox& a, const GpuBox& b) {
    return std::tie(a.interval.start_ns, a.interval.end_ns, a.group_id) <
           std::tie(b.interval.start_ns, b.interval.end_ns, b.group_id);
  });
}

}  // namespace nemo::lens::cli
