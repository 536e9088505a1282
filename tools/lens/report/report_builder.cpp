#include "report/report_builder.hpp"

#include <algorithm>
#include <utility>

namespace nemo::lens::cli {

// ---- TimelineSampler ----

void TimelineSampler::add(const TimelineStep& step) {
  if (seen_++ % stride_ != 0) return;
  kept_.push_back(step);
  if (kept_.size() <= limit_) return;
  std::size_t out = 0;
  for (std::size_t i = 0; i < kept_.size(); i += 2) kept_[out++] = kept_[i];
  kept_.resize(out);
  stride_ *= 2;
}

void TimelineSampler::merge(const TimelineSampler& other) {
  for (const TimelineStep& s : other.kept_) add(s);
}

// ---- ReportBuilder ----

namespace {

void add_to(std::vector<std::pair<std::uint32_t, std::uint64_t>>& sums, std::uint32_t id,
            std::uint64_t ns) {
  for (auto& [key, sum] : sums) {
    if (key == id) {
      sum += ns;
      return;
    }
  }
  sums.emplace_back(id, ns);
}

// The median of `values` (sorted in place): the middle one, or the mean of the two middle ones.
double median(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace

ReportBuilder::ReportBuilder() { recent_ring_.reserve(kRecentSpans); }

ReportBuilder::ReportBuilder(std::string run_id) : ReportBuilder() {
  run_filter_ = std::move(run_id);
}

std::uint32_t ReportBuilder::name_id(const SpanRecord& span) {
  const std::string_view group =
      span.has_group && !span.group.empty() ? std::string_view(span.group) : kNoGroup;
  key_buffer_.assign(group).append(1, '\x1f').append(span.name);
  if (auto it = name_ids_.find(key_buffer_); it != name_ids_.end()) return it->second;
  const auto id = static_cast<std::uint32_t>(names_.size());
  name_ids_.emplace(key_buffer_, id);
  NameStats& stats = names_.emplace_back();
  stats.group = std::string(group);
  stats.name = span.name;
  stats.is_step = group == kStepGroup;
  return id;
}

void ReportBuilder::add_log(const LogEntry& log, const SpanResource& resource) {
  if (!run_filter_.empty() && resource.run_id != run_filter_) return;
  ++log_count_;
  constexpr int kWarn = 13;
  LogRow row{resource.rank, log.time_ns, log.severity_number, log.severity_text, log.body};
  if (logs_.size() < kMaxLogRows) {
    if (row.severity_number < kWarn) ++logs_below_warn_;
    logs_.push_back(std::move(row));
    return;
  }
  // Full: a warning or worse takes the place of the latest record below WARN, so that errors
  // are shown even after thousands of info lines.
  if (row.severity_number < kWarn || logs_below_warn_ == 0) return;
  for (auto it = logs_.rbegin(); it != logs_.rend(); ++it) {
    if (it->severity_number < kWarn) {
      *it = std::move(row);
      --logs_below_warn_;
      return;
    }
  }
}

void ReportBuilder::add(const ParsedRequest& request) {
  for (const SpanResource& r : request.resources) {
    if (!r.run_id.empty() && run_ids_.size() < kMaxRunIds &&
        std::find(run_ids_.begin(), run_ids_.end(), r.run_id) == run_ids_.end()) {
      run_ids_.push_back(r.run_id);
    }
  }
  if (!request.metrics.empty()) metrics_.add(request, run_filter_);
  for (const LogEntry& log : request.logs) add_log(log, request.resources[log.resource]);
  for (const SpanRecord& span : request.spans()) {
    const SpanResource& resource = request.resources[span.resource];
    if (!run_filter_.empty() && resource.run_id != run_filter_) continue;
    const RankKey rank = resource.rank.value_or(kUnknownRank);
    RankState& state = ranks_[rank];
    if (state.spans++ == 0) state.instance_id = resource.instance_id;
    add_span(rank, span);
  }
}

void ReportBuilder::add_span(RankKey rank, const SpanRecord& span) {
  const std::uint32_t id = name_id(span);
  NameStats& stats = names_[id];
  const std::uint64_t duration = span.duration_ns();
  stats.durations.add(duration);
  if (span.truncated) {
    ++truncated_count_;
    if (truncated_.size() < kMaxTruncatedRows) {
      truncated_.push_back({rank == kUnknownRank ? std::nullopt : std::optional(rank), stats.group,
                            stats.name, duration});
    }
  }

  // What this span's descendants left waiting for it.
  const PendingKey self_key{rank, span.span_id};
  Pending mine = take_pending(self_key);
  const std::uint64_t self = duration > mine.children_ns ? duration - mine.children_ns : 0;
  Pending up;  // what this span and its descendants contribute to its ancestors
  if (stats.is_step) {
    // The span's descendants are inside a step; the span itself is inside one (itself, or a step
    // ancestor) too. Whether it is a top-level step is known when its ancestors are.
    resolve_inside_step(mine);
    stats.in_step_ns += duration;
    stats.in_step_self_ns += self;
    StepCandidates& c = up.candidates.emplace_back(StepCandidates{id, {}, {}});
    c.durations.add(duration);
    c.timeline.add({span.start_ns, duration});
  } else {
    up = std::move(mine);
    up.children_ns = 0;
    add_to(up.total, id, duration);
    add_to(up.self, id, self);
  }

  // Hand it to the parent: waiting for it, or, when the parent came first (a child exported in a
  // later batch), along the ancestors already seen.
  std::uint64_t parent = span.parent_span_id;
  bool direct_child = true;
  for (int hops = 0;; ++hops) {
    if (parent == 0 || hops > 64) {
      resolve_as_root(rank, up);
      break;
    }
    const PendingKey parent_key{rank, parent};
    auto seen = recent_.find(parent_key);
    if (seen == recent_.end()) {
      Pending& target = pending_for(parent_key);
      if (direct_child) target.children_ns += duration;
      merge_into(target, std::move(up));
      break;
    }
    if (seen->second.is_step) {
      resolve_inside_step(up);
      break;
    }
    parent = seen->second.parent;
    direct_child = false;
  }
  remember(self_key, {stats.is_step, span.parent_span_id});
}

ReportBuilder::Pending ReportBuilder::take_pending(const PendingKey& key) {
  auto it = pending_.find(key);
  if (it == pending_.end()) return {};
  Pending p = std::move(it->second);
  pending_age_.erase(p.age);
  pending_.erase(it);
  return p;
}

ReportBuilder::Pending& ReportBuilder::pending_for(const PendingKey& key) {
  if (auto it = pending_.find(key); it != pending_.end()) return it->second;
  if (pending_.size() >= kMaxPendingParents) {
    const PendingKey oldest = pending_age_.front();
    Pending p = take_pending(oldest);
    resolve_as_root(oldest.rank, p);
    ++ancestry_.evicted;
  }
  Pending& p = pending_[key];
  p.age = pending_age_.insert(pending_age_.end(), key);
  ancestry_.peak_pending = std::max<std::uint64_t>(ancestry_.peak_pending, pending_.size());
  return p;
}

void ReportBuilder::merge_into(Pending& into, Pending&& from) {
  if (into.total.empty() && into.self.empty() && into.candidates.empty()) {
    into.total = std::move(from.total);
    into.self = std::move(from.self);
    into.candidates = std::move(from.candidates);
    return;
  }
  for (const auto& [id, ns] : from.total) add_to(into.total, id, ns);
  for (const auto& [id, ns] : from.self) add_to(into.self, id, ns);
  for (StepCandidates& c : from.candidates) {
    auto same = std::find_if(into.candidates.begin(), into.candidates.end(),
                             [&](const StepCandidates& o) { return o.name_id == c.name_id; });
    if (same == into.candidates.end()) {
      into.candidates.push_back(std::move(c));
    } else {
      same->durations.merge(c.durations);
      same->timeline.merge(c.timeline);
    }
  }
}

void ReportBuilder::resolve_inside_step(Pending& p) {
  for (const auto& [id, ns] : p.total) names_[id].in_step_ns += ns;
  for (const auto& [id, ns] : p.self) names_[id].in_step_self_ns += ns;
  p.total.clear();
  p.self.clear();
  p.candidates.clear();  // step spans below a step span are not top-level steps
}

void ReportBuilder::resolve_as_root(RankKey rank, Pending& p) {
  if (p.candidates.empty()) return;
  RankState& state = ranks_[rank];
  for (const StepCandidates& c : p.candidates) {
    state.steps[c.name_id].merge(c.durations);
    state.timeline.merge(c.timeline);
    step_total_ns_ += c.durations.sum();
    step_count_ += c.durations.count();
  }
  p.candidates.clear();
}

void ReportBuilder::remember(const PendingKey& key, const Recent& value) {
  if (recent_ring_.size() < kRecentSpans) {
    recent_ring_.push_back(key);
  } else {
    recent_.erase(recent_ring_[recent_next_]);
    recent_ring_[recent_next_] = key;
    recent_next_ = (recent_next_ + 1) % kRecentSpans;
  }
  recent_[key] = value;
}

void ReportBuilder::add_malformed(const MalformedLine& line) {
  if (malformed_.size() < kMaxMalformedRows) {
    malformed_.push_back({std::string(line.file), line.line, line.error});
  }
}

Report ReportBuilder::finish(const ReportOptions& options, const ReaderCounts& input) {
  // Descendants whose ancestors never arrived: their chains end there.
  ancestry_.unresolved = pending_.size();
  while (!pending_age_.empty()) {
    const PendingKey oldest = pending_age_.front();
    Pending p = take_pending(oldest);
    resolve_as_root(oldest.rank, p);
  }
  recent_.clear();
  recent_ring_.clear();

  Report report;
  report.files = files_;
  report.input = input;
  report.run_ids = run_ids_;
  report.step_total_ns = step_total_ns_;
  report.step_count = step_count_;
  report.straggler_threshold_pct = options.straggler_threshold_pct;
  report.truncated_count = truncated_count_;
  report.truncated = truncated_;
  report.malformed = malformed_;
  report.ancestry = ancestry_;
  report.metrics = metrics_.finish();
  report.log_count = log_count_;
  report.logs = logs_;
  std::stable_sort(report.logs.begin(), report.logs.end(),
                   [](const LogRow& a, const LogRow& b) { return a.time_ns < b.time_ns; });

  std::map<std::string, GroupRow> groups;
  for (const NameStats& s : names_) {
    NameRow row;
    row.group = s.group;
    row.name = s.name;
    row.count = s.durations.count();
    row.total_ns = s.durations.sum();
    row.mean_ns = s.durations.mean();
    row.p50_ns = s.durations.quantile(0.5);
    row.p95_ns = s.durations.quantile(0.95);
    row.max_ns = s.durations.max();
    row.in_step_ns = s.in_step_ns;
    row.in_step_self_ns = s.in_step_self_ns;
    GroupRow& g = groups[s.group];
    g.group = s.group;
    g.count += row.count;
    g.total_ns += row.total_ns;
    g.in_step_ns += row.in_step_ns;
    g.in_step_self_ns += row.in_step_self_ns;
    report.names.push_back(std::move(row));
  }
  std::sort(report.names.begin(), report.names.end(), [](const NameRow& a, const NameRow& b) {
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    if (a.group != b.group) return a.group < b.group;
    return a.name < b.name;
  });
  for (auto& [name, g] : groups) report.groups.push_back(std::move(g));
  std::sort(report.groups.begin(), report.groups.end(), [](const GroupRow& a, const GroupRow& b) {
    if (a.in_step_self_ns != b.in_step_self_ns) return a.in_step_self_ns > b.in_step_self_ns;
    if (a.total_ns != b.total_ns) return a.total_ns > b.total_ns;
    return a.group < b.group;
  });

  // Ranks in order, the one without dl.rank last.
  std::vector<std::pair<RankKey, const RankState*>> ordered;
  for (const auto& [rank, state] : ranks_) {
    if (rank != kUnknownRank) ordered.emplace_back(rank, &state);
  }
  if (auto unknown = ranks_.find(kUnknownRank); unknown != ranks_.end()) {
    ordered.emplace_back(kUnknownRank, &unknown->second);
  }
  const std::size_t rank_count = std::max<std::size_t>(ordered.size(), 1);
  const std::size_t per_rank = std::min(
      options.timeline_per_rank, std::max<std::size_t>(options.timeline_total / rank_count, 50));
  bool have_origin = false;
  for (const auto& [rank, state] : ordered) {
    RankRow row;
    if (rank != kUnknownRank) row.rank = rank;
    row.instance_id = state->instance_id;
    row.spans = state->spans;
    for (const auto& [id, sketch] : state->steps) {
      RankStepRow step;
      step.name = names_[id].name;
      step.count = sketch.count();
      step.total_ns = sketch.sum();
      step.p50_ns = sketch.quantile(0.5);
      step.p95_ns = sketch.quantile(0.95);
      step.max_ns = sketch.max();
      row.timeline_steps += step.count;
      row.steps.push_back(std::move(step));
    }
    std::sort(row.steps.begin(), row.steps.end(), [](const RankStepRow& a, const RankStepRow& b) {
      return a.count != b.count ? a.count > b.count : a.name < b.name;
    });
    const std::vector<TimelineStep>& kept = state->timeline.steps();
    if (kept.size() <= per_rank) {
      row.timeline = kept;
    } else {
      for (std::size_t i = 0; i < per_rank; ++i)
        row.timeline.push_back(kept[i * kept.size() / per_rank]);
    }
    std::sort(row.timeline.begin(), row.timeline.end(),
              [](const TimelineStep& a, const TimelineStep& b) { return a.start_ns < b.start_ns; });
    if (!row.timeline.empty() &&
        (!have_origin || row.timeline.front().start_ns < report.timeline_origin_ns)) {
      report.timeline_origin_ns = row.timeline.front().start_ns;
      have_origin = true;
    }
    report.ranks.push_back(std::move(row));
  }

  // Stragglers, per step name: ranks whose median exceeds the median of the ranks' medians.
  std::map<std::string, std::vector<std::pair<RankRow*, RankStepRow*>>> by_name;
  for (RankRow& r : report.ranks) {
    for (RankStepRow& s : r.steps) by_name[s.name].emplace_back(&r, &s);
  }
  const double factor = 1 + options.straggler_threshold_pct / 100;
  for (auto& [name, rows] : by_name) {
    std::vector<double> medians;
    for (const auto& [r, s] : rows) medians.push_back(s->p50_ns);
    const double m = median(medians);
    report.step_names.push_back({name, rows.size(), m});
    if (rows.size() < 2 || m <= 0) continue;
    for (const auto& [r, s] : rows) {
      if (s->p50_ns > m * factor) {
        s->straggler = true;
        report.stragglers.push_back({r->rank, name, s->p50_ns, m, (s->p50_ns / m - 1) * 100});
      }
    }
  }
  std::stable_sort(
      report.stragglers.begin(), report.stragglers.end(),
      [](const StragglerRow& a, const StragglerRow& b) { return a.excess_pct > b.excess_pct; });
  return report;
}

}  // namespace nemo::lens::cli
