#include "report/stragglers.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <tuple>
#include <utility>

namespace nemo::lens::cli {

namespace {

// The MAD of normal noise is 0.6745 of its standard deviation: 1.4826 x MAD estimates the latter.
constexpr double kMadScale = 1.4826;
// The standard error of the median of n normal draws is sqrt(pi / 2) times that of their mean.
constexpr double kSqrtHalfPi = 1.2533141373155003;

// Ranks in order, the one without dl.rank last.
bool rank_before(std::int64_t a, std::int64_t b) {
  if ((a == kNoRank) != (b == kNoRank)) return b == kNoRank;
  return a < b;
}

std::optional<std::int64_t> rank_of(std::int64_t key) {
  return key == kNoRank ? std::nullopt : std::optional(key);
}

// A wait of one rank at one collective: [start, end), caused by the rank that arrived last.
struct Wait {
  std::uint64_t start_ns;
  std::uint64_t end_ns;
  std::uint32_t last;  // the sample that arrived last
};

}  // namespace

double median_of(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  const std::size_t n = values.size();
  if (n == 0) return 0;
  return n % 2 == 1 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

double trimmed_mean(std::vector<double>& values) {
  std::sort(values.begin(), values.end());
  const std::size_t cut = values.size() / 10;
  if (values.size() <= 2 * cut) return 0;
  double sum = 0;
  for (std::size_t i = cut; i < values.size() - cut; ++i) sum += values[i];
  return sum / static_cast<double>(values.size() - 2 * cut);
}

double trimmed_mean_standard_error(std::vector<double>& values) {
  const std::size_t n = values.size();
  if (n < 2) return 0;
  std::sort(values.begin(), values.end());
  const std::size_t g = n / 10;
  // Winsorized: the g lowest raised to the lowest kept, the g highest lowered to the highest kept.
  auto at = [&](std::size_t i) { return values[std::clamp(i, g, n - 1 - g)]; };
  double mean = 0;
  for (std::size_t i = 0; i < n; ++i) mean += at(i);
  mean /= static_cast<double>(n);
  double squares = 0;
  for (std::size_t i = 0; i < n; ++i) squares += (at(i) - mean) * (at(i) - mean);
  const double sd = std::sqrt(squares / static_cast<double>(n - 1));
  const double kept = 1 - 2 * static_cast<double>(g) / static_cast<double>(n);
  return sd / (kept * std::sqrt(static_cast<double>(n)));
}

namespace {

// The median absolute deviation of `values` from their median `m`.
double mad_around(std::span<const double> values, double m) {
  std::vector<double> deviations;
  deviations.reserve(values.size());
  for (const double v : values) deviations.push_back(std::fabs(v - m));
  return median_of(deviations);
}

}  // namespace

double median_standard_error(std::vector<double>& values) {
  const std::size_t n = values.size();
  if (n < 2) return 0;
  const double m = median_of(values);
  return kSqrtHalfPi * kMadScale * mad_around(values, m) / std::sqrt(static_cast<double>(n));
}

std::vector<bool> robust_outliers(std::span<const double> values, double floor,
                                  std::span<const double> standard_errors) {
  std::vector<bool> out(values.size(), false);
  if (values.size() < 3) return out;
  std::vector<double> sorted(values.begin(), values.end());
  const double m = median_of(sorted);
  const double bound = std::max(kStragglerMads * kMadScale * mad_around(values, m), floor);
  // The median's own error, were each figure's that of the median figure's: sqrt(pi / 2) times it
  // over sqrt(n), as for the median of n draws.
  const bool with_errors = standard_errors.size() == values.size();
  double median_error = 0;
  if (with_errors) {
    std::vector<double> errors(standard_errors.begin(), standard_errors.end());
    median_error = kSqrtHalfPi * median_of(errors) / std::sqrt(static_cast<double>(values.size()));
  }
  for (std::size_t i = 0; i < values.size(); ++i) {
    const double own = with_errors ? standard_errors[i] : 0;
    out[i] = values[i] - m > std::max(bound, kStragglerMads * std::hypot(own, median_error));
  }
  return out;
}

void StragglerAnalysis::add_step(std::int64_t rank, const StepResult& step) {
  Sample s;
  s.rank = rank;
  s.name_id = step.name_id;
  s.has_iteration = step.iteration.has_value();
  s.iteration = step.iteration.value_or(0);
  s.span_id = step.span_id;
  s.start_ns = step.start_ns;
  s.duration_ns = step.duration_ns;
  if (step.gpu.timed) s.gpu_busy_ns = step.gpu.busy_ns;
  s.collectives_begin = static_cast<std::uint32_t>(collectives_.size());
  collectives_.insert(collectives_.end(), step.collectives.begin(), step.collectives.end());
  s.collectives_end = static_cast<std::uint32_t>(collectives_.size());
  samples_.push_back(s);
  RankSteps& r = ranks_[{step.name_id, rank}];
  ++r.steps;
  for (const auto& [id, ns] : step.within_by_name) ++r.present[id];
  for (const auto& [id, ns] : step.own_by_name) r.own[id] += ns;
  for (const auto& [group, ns] : step.gpu_busy_by_group) r.gpu_busy[group] += ns;
}

std::vector<StepNameFindings> StragglerAnalysis::finish(const NameTables& tables,
                                                        const StragglerOptions& options) const {
  std::map<std::uint32_t, std::vector<std::uint32_t>> by_name;  // step name id -> samples
  for (std::uint32_t i = 0; i < samples_.size(); ++i) by_name[samples_[i].name_id].push_back(i);
  std::vector<StepNameFindings> out;
  for (auto& [name_id, indices] : by_name) {
    StepNameFindings f;
    f.name = tables.names[name_id];
    // The samples by rank, then start: a rank's steps in order.
    std::sort(indices.begin(), indices.end(), [&](std::uint32_t a, std::uint32_t b) {
      const Sample &x = samples_[a], &y = samples_[b];
      if (x.rank != y.rank) return rank_before(x.rank, y.rank);
      return std::tie(x.start_ns, x.duration_ns, x.span_id) <
             std::tie(y.start_ns, y.duration_ns, y.span_id);
    });
    // Each rank's range of `indices`.
    std::vector<std::pair<std::size_t, std::size_t>> ranges;
    for (std::size_t i = 0; i < indices.size(); ++i) {
      if (i == 0 || samples_[indices[i]].rank != samples_[indices[i - 1]].rank) {
        ranges.push_back({i, i});
      }
      ranges.back().second = i + 1;
    }

    // Step keys: the iteration attribute when every step has one, once per rank; else the order.
    f.by_iteration = true;
    for (const auto& [begin, end] : ranges) {
      std::vector<std::int64_t> seen;
      for (std::size_t i = begin; i < end; ++i) {
        const Sample& s = samples_[indices[i]];
        if (!s.has_iteration) f.by_iteration = false;
        seen.push_back(s.iteration);
      }
      std::sort(seen.begin(), seen.end());
      if (std::adjacent_find(seen.begin(), seen.end()) != seen.end()) f.by_iteration = false;
    }
    std::vector<std::int64_t> key(samples_.size(), 0);  // by sample index
    for (const auto& [begin, end] : ranges) {
      for (std::size_t i = begin; i < end; ++i) {
        key[indices[i]] =
            f.by_iteration ? samples_[indices[i]].iteration : static_cast<std::int64_t>(i - begin);
      }
    }

    // Figures per rank, and roles: the span names in at least half of a rank's steps.
    std::map<std::vector<std::uint32_t>, std::uint32_t> role_of_signature;
    std::vector<const RankSteps*> rank_steps;
    for (const auto& [begin, end] : ranges) {
      const std::int64_t rank = samples_[indices[begin]].rank;
      const RankSteps& steps = ranks_.at({name_id, rank});
      rank_steps.push_back(&steps);
      std::vector<std::uint32_t> signature;
      for (const auto& [id, count] : steps.present) {
        if (2 * count >= steps.steps) signature.push_back(id);
      }
      const auto [it, added] = role_of_signature.try_emplace(
          signature, static_cast<std::uint32_t>(role_of_signature.size()));
      if (added) {
        RoleFindings role;
        for (const std::uint32_t id : signature) {
          role.names.push_back(tables.group_names[tables.kinds[id].group_id] + "/" +
                               tables.names[id]);
        }
        std::sort(role.names.begin(), role.names.end());
        f.roles.push_back(std::move(role));
      }
      RankFigures r;
      r.rank = rank_of(rank);
      r.role = it->second;
      r.steps = end - begin;
      std::vector<double> durations, gpu;
      for (std::size_t i = begin; i < end; ++i) {
        const Sample& s = samples_[indices[i]];
        durations.push_back(static_cast<double>(s.duration_ns));
        if (s.gpu_busy_ns != kNoGpu) gpu.push_back(static_cast<double>(s.gpu_busy_ns));
      }
      r.step_p50_ns = median_of(durations);
      r.step_p50_se_ns = median_standard_error(durations);
      r.gpu_steps = gpu.size();
      r.gpu_busy_p50_ns = median_of(gpu);
      r.gpu_busy_p50_se_ns = median_standard_error(gpu);
      ++f.roles[r.role].ranks;
      f.ranks.push_back(std::move(r));
    }
    std::map<std::int64_t, std::size_t> figure_of;  // rank key -> index into f.ranks
    for (std::size_t k = 0; k < ranges.size(); ++k) {
      figure_of[samples_[indices[ranges[k].first]].rank] = k;
    }
    auto figures = [&](std::uint32_t sample) -> RankFigures& {
      return f.ranks[figure_of.at(samples_[sample].rank)];
    };

    // The collectives of each step matched across the ranks of a role: by step key, then name
    // and occurrence within the step.
    std::vector<double> late(samples_.size(), std::numeric_limits<double>::quiet_NaN());
    std::vector<std::map<std::string, LastInto>> last_into(f.ranks.size());
    for (std::uint32_t role = 0; role < f.roles.size(); ++role) {
      std::map<std::int64_t, std::vector<std::uint32_t>> by_key;
      for (const std::uint32_t i : indices) {
        if (figures(i).role == role) by_key[key[i]].push_back(i);
      }
      for (const auto& [k, group] : by_key) {
        if (group.size() < 2) continue;
        // (name, occurrence) -> its (sample, collective) pairs.
        std::map<std::pair<std::uint32_t, std::uint32_t>,
                 std::vector<std::pair<std::uint32_t, std::uint32_t>>>
            instances;
        for (const std::uint32_t i : group) {
          std::map<std::uint32_t, std::uint32_t> occurrence;
          const Sample& s = samples_[i];
          for (std::uint32_t c = s.collectives_begin; c < s.collectives_end; ++c) {
            const std::uint32_t name = collectives_[c].name_id;
            instances[{name, occurrence[name]++}].push_back({i, c});
          }
        }
        std::map<std::uint32_t, std::vector<Wait>> waits;  // sample -> its waits
        for (const auto& [instance, members] : instances) {
          if (members.size() < 2) continue;
          ++f.matched_collectives;
          // The last to arrive (of two at once, the later rank).
          auto last = members.front();
          for (const auto& m : members) {
            const std::uint64_t a = collectives_[m.second].start_ns;
            const std::uint64_t b = collectives_[last.second].start_ns;
            if (a > b ||
                (a == b && rank_before(samples_[last.first].rank, samples_[m.first].rank))) {
              last = m;
            }
          }
          const std::uint64_t arrival = collectives_[last.second].start_ns;
          const std::string& name = tables.names[instance.first];
          for (const auto& [i, c] : members) {
            RankFigures& r = figures(i);
            LastInto& counts = last_into[figure_of.at(samples_[i].rank)][name];
            ++r.collectives;
            ++counts.of;
            waits[i];  // matched, even without a wait
            if (c == last.second) {
              ++r.last_count;
              ++counts.last;
              continue;
            }
            const Collective& x = collectives_[c];
            const std::uint64_t to = std::min(arrival, x.end_ns);
            if (to > x.start_ns) waits[i].push_back({x.start_ns, to, last.first});
          }
        }
        if (waits.size() < 2) continue;
        // Each rank's waits in this step: their union, each instant charged to the wait that
        // began first, so that overlapping collectives count once.
        std::vector<double> waited;
        std::map<std::uint32_t, std::uint64_t> waited_of;
        std::uint64_t step_sum = 0;
        for (auto& [i, list] : waits) {
          std::sort(list.begin(), list.end(), [](const Wait& a, const Wait& b) {
            return std::tie(a.start_ns, a.end_ns, a.last) < std::tie(b.start_ns, b.end_ns, b.last);
          });
          std::uint64_t covered = 0, total = 0;
          for (const Wait& w : list) {
            const std::uint64_t from = std::max(w.start_ns, covered);
            if (w.end_ns > from) {
              total += w.end_ns - from;
              figures(w.last).caused_ns += w.end_ns - from;
            }
            covered = std::max(covered, w.end_ns);
          }
          waited_of[i] = total;
          waited.push_back(static_cast<double>(total));
          step_sum += samples_[i].duration_ns;
        }
        const double median_wait = median_of(waited);
        for (const auto& [i, total] : waited_of) {
          RankFigures& r = figures(i);
          late[i] = median_wait - static_cast<double>(total);
          ++r.matched_steps;
          r.matched_step_ns += samples_[i].duration_ns;
          r.waited_ns += total;
          r.caused_waits += waits.size() - 1;
          r.others_step_ns += step_sum - samples_[i].duration_ns;
        }
      }
    }
    for (std::size_t k = 0; k < f.ranks.size(); ++k) {
      std::vector<double> lates;
      for (std::size_t i = ranges[k].first; i < ranges[k].second; ++i) {
        if (!std::isnan(late[indices[i]])) lates.push_back(late[indices[i]]);
      }
      f.ranks[k].late_ns = trimmed_mean(lates);
      f.ranks[k].late_se_ns = trimmed_mean_standard_error(lates);
      for (auto& [name, counts] : last_into[k]) {
        counts.name = name;
        f.ranks[k].last_into.push_back(counts);
      }
      std::stable_sort(f.ranks[k].last_into.begin(), f.ranks[k].last_into.end(),
                       [](const LastInto& a, const LastInto& b) { return a.last > b.last; });
    }

    // Time per step per group (own time, and GPU busy) against the median rank of the role.
    for (std::uint32_t role = 0; role < f.roles.size(); ++role) {
      std::vector<std::size_t> members;
      for (std::size_t k = 0; k < f.ranks.size(); ++k) {
        if (f.ranks[k].role == role) members.push_back(k);
      }
      auto per_step = [&](bool gpu) {
        std::vector<std::map<std::uint32_t, double>> rows(members.size());
        std::map<std::uint32_t, std::vector<double>> columns;
        for (std::size_t m = 0; m < members.size(); ++m) {
          const RankSteps& steps = *rank_steps[members[m]];
          if (gpu) {
            const double n = static_cast<double>(f.ranks[members[m]].gpu_steps);
            if (n == 0) continue;
            for (const auto& [group, ns] : steps.gpu_busy) rows[m][group] += ns / n;
          } else {
            const double n = static_cast<double>(steps.steps);
            for (const auto& [id, ns] : steps.own) rows[m][tables.kinds[id].group_id] += ns / n;
          }
          for (const auto& [group, ns] : rows[m]) columns[group];
        }
        for (auto& [group, values] : columns) {
          for (std::size_t m = 0; m < members.size(); ++m) {
            if (gpu && f.ranks[members[m]].gpu_steps == 0) continue;
            const auto it = rows[m].find(group);
            values.push_back(it == rows[m].end() ? 0.0 : it->second);
          }
        }
        std::map<std::uint32_t, double> medians;
        for (auto& [group, values] : columns) medians[group] = median_of(values);
        for (std::size_t m = 0; m < members.size(); ++m) {
          RankFigures& r = f.ranks[members[m]];
          if (gpu && r.gpu_steps == 0) continue;
          std::vector<GroupPerStep>& out_groups = gpu ? r.gpu_groups : r.groups;
          for (const auto& [group, median] : medians) {
            const auto it = rows[m].find(group);
            out_groups.push_back(
                {tables.group_names[group], it == rows[m].end() ? 0.0 : it->second, median});
          }
          std::sort(out_groups.begin(), out_groups.end(),
                    [](const GroupPerStep& a, const GroupPerStep& b) {
                      const double x = a.ns - a.median_ns, y = b.ns - b.median_ns;
                      return x != y ? x > y : a.group < b.group;
                    });
        }
      };
      per_step(false);
      per_step(true);

      // The rule, per measure, over the role's ranks that have it.
      RoleFindings& r = f.roles[role];
      std::vector<double> steps;
      for (const std::size_t k : members) steps.push_back(f.ranks[k].step_p50_ns);
      r.median_step_ns = median_of(steps);
      r.floor_ns = options.floor_pct / 100 * r.median_step_ns;
      // Returns the median of the values the rule saw.
      auto flag = [&](StragglerMeasure measure, auto has, auto value, auto standard_error) {
        std::vector<std::size_t> who;
        std::vector<double> values, errors;
        for (const std::size_t k : members) {
          if (!has(f.ranks[k])) continue;
          who.push_back(k);
          values.push_back(value(f.ranks[k]));
          errors.push_back(standard_error(f.ranks[k]));
        }
        const std::vector<bool> out_of_line = robust_outliers(values, r.floor_ns, errors);
        for (std::size_t j = 0; j < who.size(); ++j) {
          if (out_of_line[j]) f.ranks[who[j]].flagged_by.push_back(measure);
        }
        return median_of(values);
      };
      r.median_late_ns = flag(
          StragglerMeasure::kArrival, [](const RankFigures& x) { return x.matched_steps > 0; },
          [](const RankFigures& x) { return x.late_ns; },
          [](const RankFigures& x) { return x.late_se_ns; });
      flag(
          StragglerMeasure::kStepTime, [](const RankFigures&) { return true; },
          [](const RankFigures& x) { return x.step_p50_ns; },
          [](const RankFigures& x) { return x.step_p50_se_ns; });
      r.median_gpu_busy_ns = flag(
          StragglerMeasure::kGpuBusy, [](const RankFigures& x) { return x.gpu_steps > 0; },
          [](const RankFigures& x) { return x.gpu_busy_p50_ns; },
          [](const RankFigures& x) { return x.gpu_busy_p50_se_ns; });
    }

    if (options.heatmap) fill_heatmap(f, indices, ranges, key, late, options);
    out.push_back(std::move(f));
  }
  std::sort(out.begin(), out.end(),
            [](const StepNameFindings& a, const StepNameFindings& b) { return a.name < b.name; });
  return out;
}

void StragglerAnalysis::fill_heatmap(StepNameFindings& f, const std::vector<std::uint32_t>& indices,
                                     const std::vector<std::pair<std::size_t, std::size_t>>& ranges,
                                     const std::vector<std::int64_t>& key,
                                     const std::vector<double>& late,
                                     const StragglerOptions& options) const {
  // A row per rank, the step keys binned into columns.
  Heatmap& h = f.heatmap;
  std::vector<std::int64_t> keys;
  for (const std::uint32_t i : indices) keys.push_back(key[i]);
  std::sort(keys.begin(), keys.end());
  keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
  h.steps = keys.size();
  const std::size_t rows = f.ranks.size();
  const std::size_t columns = std::max<std::size_t>(
      1, std::min({keys.size(), options.max_heatmap_columns,
                   std::max<std::size_t>(
                       1, options.max_heatmap_cells / std::max<std::size_t>(rows, 1))}));
  h.per_column = (keys.size() + columns - 1) / columns;
  const bool any_late = f.matched_collectives > 0;
  for (std::size_t k = 0; k < rows; ++k) {
    h.ranks.push_back(f.ranks[k].rank);
    std::vector<double> step_sum(columns, 0), late_sum(columns, 0);
    std::vector<std::uint32_t> step_n(columns, 0), late_n(columns, 0);
    for (std::size_t i = ranges[k].first; i < ranges[k].second; ++i) {
      const std::uint32_t s = indices[i];
      const auto at = static_cast<std::size_t>(std::lower_bound(keys.begin(), keys.end(), key[s]) -
                                               keys.begin());
      const std::size_t column = at / h.per_column;
      step_sum[column] += static_cast<double>(samples_[s].duration_ns);
      ++step_n[column];
      if (!std::isnan(late[s])) {
        late_sum[column] += late[s];
        ++late_n[column];
      }
    }
    auto cells = [&](const std::vector<double>& sum, const std::vector<std::uint32_t>& n) {
      std::vector<std::optional<double>> row(columns);
      for (std::size_t c = 0; c < columns; ++c) {
        if (n[c] > 0) row[c] = sum[c] / n[c];
      }
      return row;
    };
    h.step_ns.push_back(cells(step_sum, step_n));
    if (any_late) h.late_ns.push_back(cells(late_sum, late_n));
  }
}

}  // namespace nemo::lens::cli
