// A synthetic synchronous training job as OTLP JSON Lines on standard output, for the straggler
// tests of `lens report` (docs/report.md#stragglers): every rank's step is get_batch
// (data_loading), forward_backward, then an all-reduce of group communication that ends for
// every rank of its stage when the last one has arrived, then optimizer_step; each rank's next
// step starts when its optimizer is done. So a slow rank does not take longer steps: it arrives
// last at the all-reduce, and the others wait for it. Deterministic for a seed (its own noise,
// not the standard library's distributions, so every platform writes the same bytes).
//
//   report_sync_job [--ranks N] [--steps S] [--seed X] [--noise PCT] [--buckets B]
//                   [--slow RANK:FACTOR[:GROUP]]... [--last-stage K] [--no-iteration]
//                   [--stall RANK:STEP:MS] [--captured STEP]
//
//   --ranks N         ranks (default 4)
//   --steps S         steps per rank (default 30)
//   --seed X          the noise's seed (default 1)
//   --noise PCT       each duration varies by PCT % (a standard deviation; default 2)
//   --buckets B       B all-reduces per step, DDP-like: started on a communication thread while
//                     forward_backward runs, at (b+1)/B of it; the optimizer waits for the last
//                     (default 1: one all-reduce after forward_backward, on the step's thread)
//   --slow R:F[:G]    rank R's spans of group G (forward_backward, data_loading or optimizer;
//                     default forward_backward) take F times as long; repeatable
//   --last-stage K    the last K ranks are a pipeline's last stage: a longer forward_backward
//                     with a compute_loss span in it, and their own all-reduce among themselves
//   --no-iteration    no iteration attributes (the report matches steps by their order)
//   --stall R:S:MS    rank R's forward_backward of step S (1-based) takes MS ms longer, in its
//                     second microbatch's last layer
//   --captured S      every rank's step S carries the flight recorder's detail, as a capture
//                     of the slow step exports it: 4 microbatch spans in forward_backward, 3
//                     layer_forward spans in each, marked lens.capture.reason = slow_step and
//                     lens.capture.id = 1 (each rank's first capture)
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "otlp_lines.hpp"

namespace {

using report_test::Attr;
using report_test::make_span;
using report_test::SpanSpec;

constexpr std::uint64_t kT0 = 1'718'000'000'000'000'000ull;
constexpr double kMs = 1e6;

// splitmix64: a small generator whose output is the same everywhere.
struct Noise {
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return static_cast<double>(next() >> 11) / 9007199254740992.0; }
  // A standard normal value (Box-Muller).
  double normal() {
    const double u = std::max(uniform(), 1e-12), v = uniform();
    return std::sqrt(-2 * std::log(u)) * std::cos(6.283185307179586 * v);
  }
};

struct Slow {
  int rank;
  double factor;
  std::string group;
};

[[noreturn]] void usage(const std::string& error) {
  std::cerr << "report_sync_job: " << error
            << "\nusage: report_sync_job [--ranks N] [--steps S] [--seed X] [--noise PCT] "
               "[--buckets B] [--slow RANK:FACTOR[:GROUP]]... [--last-stage K] [--no-iteration] "
               "[--stall RANK:STEP:MS] [--captured STEP]\n";
  std::exit(2);
}

}  // namespace

int main(int argc, char** argv) {
  int ranks = 4, steps = 30, buckets = 1, last_stage = 0;
  int stall_rank = -1, stall_step = -1, captured_step = -1;
  double stall_ms = 0;
  std::uint64_t seed = 1;
  double noise = 2;
  bool iteration = true;
  std::vector<Slow> slow;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--ranks") {
      ranks = std::stoi(value());
    } else if (arg == "--steps") {
      steps = std::stoi(value());
    } else if (arg == "--seed") {
      seed = std::stoull(value());
    } else if (arg == "--noise") {
      noise = std::stod(value());
    } else if (arg == "--buckets") {
      buckets = std::stoi(value());
    } else if (arg == "--last-stage") {
      last_stage = std::stoi(value());
    } else if (arg == "--no-iteration") {
      iteration = false;
    } else if (arg == "--stall") {
      const std::string v = value();
      const std::size_t a = v.find(':'), b = v.find(':', a + 1);
      if (a == std::string::npos || b == std::string::npos) {
        usage("--stall wants RANK:STEP:MS, got '" + v + "'");
      }
      stall_rank = std::stoi(v.substr(0, a));
      stall_step = std::stoi(v.substr(a + 1, b - a - 1));
      stall_ms = std::stod(v.substr(b + 1));
    } else if (arg == "--captured") {
      captured_step = std::stoi(value());
    } else if (arg == "--slow") {
      const std::string v = value();
      const std::size_t a = v.find(':'), b = v.find(':', a + 1);
      if (a == std::string::npos) usage("--slow wants RANK:FACTOR[:GROUP], got '" + v + "'");
      slow.push_back({std::stoi(v.substr(0, a)), std::stod(v.substr(a + 1, b - a - 1)),
                      b == std::string::npos ? "forward_backward" : v.substr(b + 1)});
    } else {
      usage("unknown option '" + arg + "'");
    }
  }
  if (ranks < 1 || steps < 1 || buckets < 1 || last_stage < 0 || last_stage >= ranks) {
    usage("--ranks, --steps and --buckets must be >= 1, --last-stage below --ranks");
  }

  Noise rng{seed};
  auto factor_of = [&](int rank, const std::string& group) {
    double f = 1;
    for (const Slow& s : slow) {
      if (s.rank == rank && s.group == group) f *= s.factor;
    }
    return f;
  };
  auto vary = [&](double ms) { return std::max(ms * 0.5, ms * (1 + noise / 100 * rng.normal())); };
  auto stage_of = [&](int rank) { return rank >= ranks - last_stage ? 1 : 0; };

  std::vector<double> clock(ranks, 0);  // each rank's time, ms from kT0
  for (int r = 0; r < ranks; ++r) clock[r] = vary(1.0);
  std::vector<std::vector<SpanSpec>> pending(ranks);
  std::vector<std::uint64_t> next_id(ranks);
  std::vector<std::uint64_t> job_id(ranks);
  for (int r = 0; r < ranks; ++r) {
    next_id[r] = (static_cast<std::uint64_t>(r + 1) << 32) + 1;
    job_id[r] = next_id[r]++;
  }
  auto at = [](double ms) { return kT0 + static_cast<std::uint64_t>(std::llround(ms * kMs)); };
  auto flush = [&](int r) {
    if (pending[r].empty()) return;
    std::cout << report_test::request_line(report_test::rank_resource(r, "sync-run"), pending[r])
              << '\n';
    pending[r].clear();
  };

  for (int step = 1; step <= steps; ++step) {
    const std::vector<Attr> it =
        iteration ? std::vector<Attr>{{"iteration", std::int64_t{step}}} : std::vector<Attr>{};
    struct RankStep {
      double start, fb_start, fb_end;
      std::vector<double> arrivals;  // per bucket
      std::uint64_t step_id;
    };
    std::vector<RankStep> s(ranks);
    for (int r = 0; r < ranks; ++r) {
      RankStep& x = s[r];
      x.start = clock[r];
      x.step_id = next_id[r]++;
      const double load = vary(5) * factor_of(r, "data_loading");
      x.fb_start = x.start + load;
      const double stall = r == stall_rank && step == stall_step ? stall_ms : 0;
      const double fb = vary(stage_of(r) == 1 ? 60 : 40) * factor_of(r, "forward_backward") + stall;
      x.fb_end = x.fb_start + fb;
      pending[r].push_back(make_span(next_id[r]++, x.step_id, "get_batch", "data_loading",
                                     at(x.start), at(x.fb_start), 1, it));
      const std::uint64_t fb_id = next_id[r]++;
      pending[r].push_back(make_span(fb_id, x.step_id, "forward_backward", "forward_backward",
                                     at(x.fb_start), at(x.fb_end), 1, it));
      if (stage_of(r) == 1) {
        pending[r].push_back(make_span(next_id[r]++, fb_id, "compute_loss", "forward_backward",
                                       at(x.fb_end - fb * 0.2), at(x.fb_end), 1, it));
      }
      if (step == captured_step) {
        // The detail the flight recorder captured: microbatches of three layers and a gap, the
        // stall in the second microbatch's last layer (no noise: the other spans stay the same).
        const std::vector<Attr> marks = {{"lens.capture.reason", std::string("slow_step")},
                                         {"lens.capture.id", std::int64_t{1}}};
        const double quarter = (fb - stall) / 4;
        double t = x.fb_start;
        for (int m = 0; m < 4; ++m) {
          const std::uint64_t mb_id = next_id[r]++;
          const double mb_start = t;
          for (int l = 0; l < 3; ++l) {
            const double d = quarter * 0.3 + (m == 1 && l == 2 ? stall : 0);
            std::vector<Attr> attrs = marks;
            attrs.push_back({"layer", std::int64_t{l}});
            pending[r].push_back(make_span(next_id[r]++, mb_id, "layer_forward", "layer", at(t),
                                           at(t + d), 1, attrs));
            t += d;
          }
          t += quarter * 0.1;
          std::vector<Attr> attrs = marks;
          attrs.push_back({"microbatch", std::int64_t{m}});
          pending[r].push_back(make_span(mb_id, fb_id, "microbatch", "microbatch", at(mb_start),
                                         at(m == 3 ? x.fb_end : t), 1, attrs));
        }
      }
      for (int b = 0; b < buckets; ++b) {
        x.arrivals.push_back(buckets == 1 ? x.fb_end : x.fb_start + fb * (b + 1) / buckets);
      }
    }
    // Each bucket's all-reduce ends for a stage when its last rank has arrived, plus the transfer.
    for (int r = 0; r < ranks; ++r) {
      RankStep& x = s[r];
      double last_end = x.fb_end;
      for (int b = 0; b < buckets; ++b) {
        double last = 0;
        for (int o = 0; o < ranks; ++o) {
          if (stage_of(o) == stage_of(r)) last = std::max(last, s[o].arrivals[b]);
        }
        const double end = last + 2.0;
        last_end = std::max(last_end, end);
        std::vector<Attr> attrs = it;
        attrs.push_back({"bucket", std::int64_t{b}});
        pending[r].push_back(make_span(
            next_id[r]++, x.step_id, buckets == 1 ? "allreduce_gradients" : "allreduce_bucket",
            "communication", at(x.arrivals[b]), at(end), buckets == 1 ? 1 : 2, attrs));
      }
      const double opt_end = last_end + vary(10) * factor_of(r, "optimizer");
      pending[r].push_back(make_span(next_id[r]++, x.step_id, "optimizer_step", "optimizer",
                                     at(last_end), at(opt_end), 1, it));
      pending[r].push_back(
          make_span(x.step_id, job_id[r], "train_step", "step", at(x.start), at(opt_end), 1, it));
      clock[r] = opt_end + vary(1.0);
      if (pending[r].size() >= 256) flush(r);
    }
  }
  for (int r = 0; r < ranks; ++r) {
    pending[r].push_back(make_span(job_id[r], 0, "pretrain", "job", at(0), at(clock[r]), 1, {}));
    flush(r);
  }
  return 0;
}
