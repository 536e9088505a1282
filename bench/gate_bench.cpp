// The cost of a span-group check: the call-site gate (off and on), lookup by name, and spec
// resolution, next to an empty loop so the ratio shows in one run.
//
//   build/bench/gate_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include "nemo/lens/lens.hpp"

namespace {

using nemo::lens::MegatronSpanGroup;
using nemo::lens::set_enabled_span_groups;

void BM_EmptyLoop(benchmark::State& state) {
  int x = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(x);
  }
}
BENCHMARK(BM_EmptyLoop);

void BM_SiteGateDisabled(benchmark::State& state) {
  set_enabled_span_groups({"job"});
  int x = 0;
  for (auto _ : state) {
    if (LENS_GROUP_ENABLED(MegatronSpanGroup::LAYER)) ++x;
    benchmark::DoNotOptimize(x);
  }
  set_enabled_span_groups({});
}
BENCHMARK(BM_SiteGateDisabled);

void BM_SiteGateEnabled(benchmark::State& state) {
  set_enabled_span_groups({"layer"});
  int x = 0;
  for (auto _ : state) {
    if (LENS_GROUP_ENABLED(MegatronSpanGroup::LAYER)) ++x;
    benchmark::DoNotOptimize(x);
  }
  set_enabled_span_groups({});
}
BENCHMARK(BM_SiteGateEnabled);

void BM_SiteGateDisabledTwoThreads(benchmark::State& state) {
  if (state.thread_index() == 0) set_enabled_span_groups({"job"});
  int x = 0;
  for (auto _ : state) {
    if (LENS_GROUP_ENABLED(MegatronSpanGroup::LAYER)) ++x;
    benchmark::DoNotOptimize(x);
  }
}
BENCHMARK(BM_SiteGateDisabledTwoThreads)->Threads(2);

void BM_IsSpanGroupEnabledByName(benchmark::State& state) {
  set_enabled_span_groups(MegatronSpanGroup::catalog().resolve("per_step"));
  std::string_view names[] = {"step", "layer", "communication", "microbatch"};
  std::size_t i = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(nemo::lens::is_span_group_enabled(names[i++ & 3]));
  }
  set_enabled_span_groups({});
}
BENCHMARK(BM_IsSpanGroupEnabledByName);

void BM_ResolveSpec(benchmark::State& state) {
  const auto& catalog = MegatronSpanGroup::catalog();
  for (auto _ : state) {
    benchmark::DoNotOptimize(catalog.resolve("per_step,layer,microbatch"));
  }
}
BENCHMARK(BM_ResolveSpec);

}  // namespace

BENCHMARK_MAIN();
