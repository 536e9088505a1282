// Counts the instructions of a disabled call-site gate: run under callgrind, the difference
// between disabled_sites() and empty_loop() divided by the iterations is the cost per site.
//
//   bench/count_gate_instructions.sh build
#include <cstdio>
#include <cstdlib>

#include "nemo/lens/lens.hpp"

namespace {

volatile int g_sink = 0;

[[gnu::noinline]] void empty_loop(int n) {
  for (int i = 0; i < n; ++i) g_sink = i;
}

[[gnu::noinline]] void disabled_sites(int n) {
  for (int i = 0; i < n; ++i) {
    if (LENS_GROUP_ENABLED(nemo::lens::MegatronSpanGroup::LAYER)) g_sink = -i;
    g_sink = i;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const int n = argc > 1 ? std::atoi(argv[1]) : 1000000;
  nemo::lens::set_enabled_span_groups({"job"});
  disabled_sites(1);  // resolve the site outside the measured calls
  empty_loop(n);
  disabled_sites(n);
  std::printf("ran %d iterations\n", n);
  return 0;
}
