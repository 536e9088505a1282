// `lens report` on a large input: writes about SPANS spans (default 1,000,000) over RANKS ranks
// (default 8) as OTLP JSON Lines of 512 spans each, the shape the file exporter writes (a job
// span per rank, steps of 8 spans: step, data loading, forward/backward with 4 microbatches,
// optimizer), runs `lens report --json` on them and checks the counts it reports. Prints the
// wall time and the peak resident memory of the report (no limit is asserted: the machine is
// shared). ctest runs it with the defaults (label "perf"); by hand:
//
//   build/tests/report/report_scale build/tools/lens/lens /tmp/scale 1000000 8 [--keep]
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "otlp_lines.hpp"

namespace {

using report_test::make_span;
using report_test::SpanSpec;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::size_t kBatch = 512;

struct RankWriter {
  std::ofstream out;
  std::vector<report_test::Attr> resource;
  std::vector<SpanSpec> batch;
  std::string line;
  std::uint64_t spans = 0;

  void add(SpanSpec s) {
    batch.push_back(std::move(s));
    ++spans;
    if (batch.size() == kBatch) flush();
  }
  void flush() {
    if (batch.empty()) return;
    line = report_test::request_line(resource, batch);
    line += '\n';
    out.write(line.data(), static_cast<std::streamsize>(line.size()));
    batch.clear();
  }
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::cerr << "usage: report_scale LENS_BINARY OUT_DIR [SPANS] [RANKS] [--keep]\n";
    return 2;
  }
  const std::string lens = argv[1];
  const std::filesystem::path dir = argv[2];
  const std::uint64_t target = argc > 3 ? std::stoull(argv[3]) : 1'000'000;
  const int ranks = argc > 4 ? std::stoi(argv[4]) : 8;
  const bool keep = argc > 5 && std::strcmp(argv[5], "--keep") == 0;
  std::filesystem::create_directories(dir);

  const std::uint64_t steps = (target - static_cast<std::uint64_t>(ranks)) / (8ull * ranks);
  const std::uint64_t base = 1'718'000'000'000'000'000ull;
  std::vector<std::string> files;
  std::uint64_t total_spans = 0, bytes = 0;
  const auto gen_start = std::chrono::steady_clock::now();
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string path = (dir / ("scale-rank" + std::to_string(rank) + ".jsonl")).string();
    files.push_back(path);
    RankWriter w{
        std::ofstream(path, std::ios::binary), report_test::rank_resource(rank), {}, {}, 0};
    const std::int64_t tid = 1000 + rank;
    std::uint64_t next_id = (static_cast<std::uint64_t>(rank) << 40) + 1;
    const std::uint64_t job_id = next_id++;
    // The last rank is 30 % slower; every step varies by up to 9 ms.
    const std::uint64_t step_ms = rank == ranks - 1 ? 130 : 100;
    std::uint64_t t = base;
    for (std::uint64_t i = 0; i < steps; ++i) {
      const std::uint64_t d = step_ms * kMs + (i * 7919 % 10) * kMs;
      const std::uint64_t step_id = next_id++, fb_id = next_id++;
      const std::vector<report_test::Attr> it = {{"iteration", static_cast<std::int64_t>(i)}};
      w.add(make_span(next_id++, step_id, "get_batch", "data_loading", t, t + 5 * kMs, tid, it));
      const std::uint64_t fb_end = t + d - 15 * kMs;
      const std::uint64_t mb = (fb_end - t - 5 * kMs) / 4;
      for (int m = 0; m < 4; ++m) {
        w.add(make_span(next_id++, fb_id, "microbatch", "microbatch", t + 5 * kMs + m * mb,
                        t + 5 * kMs + (m + 1) * mb, tid, {{"microbatch", std::int64_t{m}}}));
      }
      w.add(make_span(fb_id, step_id, "forward_backward", "forward_backward", t + 5 * kMs, fb_end,
                      tid, it));
      w.add(make_span(next_id++, step_id, "optimizer_step", "optimizer", fb_end, t + d - 2 * kMs,
                      tid, it));
      w.add(make_span(step_id, job_id, "train_step", "step", t, t + d, tid, it));
      t += d + kMs;
    }
    SpanSpec job = make_span(job_id, 0, "pretrain", "job", base - kMs, t, tid);
    job.truncated = true;
    w.add(std::move(job));
    w.flush();
    w.out.close();
    total_spans += w.spans;
    bytes += std::filesystem::file_size(path);
  }
  const double gen_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - gen_start).count();
  std::printf("report_scale: wrote %llu spans (%d ranks, %llu steps each), %.1f MB, in %.2f s\n",
              static_cast<unsigned long long>(total_spans), ranks,
              static_cast<unsigned long long>(steps), bytes / 1e6, gen_seconds);

  std::vector<std::string> command = {lens, "report", "--json"};
  command.insert(command.end(), files.begin(), files.end());
  const report_test::RunResult r = report_test::run(command, dir.string());
  int failures = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) {
      std::printf("FAIL: %s\n", what.c_str());
      ++failures;
    }
  };
  check(r.status == 0, "lens report exited with " + std::to_string(r.status) + ": " + r.err);
  if (r.status == 0) {
    const auto j = nlohmann::json::parse(r.out);
    check(j["input"]["spans"] == total_spans, "input.spans is " + j["input"]["spans"].dump());
    check(j["input"]["malformed_lines"] == 0, "malformed lines reported");
    check(j["ranks"].size() == static_cast<std::size_t>(ranks), "rank count");
    check(j["step"]["count"] == steps * ranks, "step count is " + j["step"]["count"].dump());
    check(j["truncated"]["count"] == ranks, "truncated count");
    check(j["stragglers"]["ranks"].size() == 1 && j["stragglers"]["ranks"][0]["rank"] == ranks - 1,
          "the last rank is the one straggler: " + j["stragglers"].dump());
    check(j["ancestry"]["unresolved"] == 0 && j["ancestry"]["cycles"] == 0,
          "every parent found: " + j["ancestry"].dump());
    // Every span of the steps ran on the step's thread: the groups' own time is the step time.
    std::uint64_t own = 0;
    for (const auto& g : j["groups"]) own += g["in_step_self_ns"].get<std::uint64_t>();
    check(own == j["step"]["total_ns"].get<std::uint64_t>(), "own time adds up to the steps");
  }
  std::printf(
      "report_scale: lens report on %llu spans (%.1f MB): %.2f s, %.2f M spans/s, "
      "%.0f MB/s, peak RSS %.1f MiB\n",
      static_cast<unsigned long long>(total_spans), bytes / 1e6, r.seconds,
      total_spans / r.seconds / 1e6, bytes / r.seconds / 1e6, r.max_rss_kib / 1024.0);
  if (!keep) {
    for (const auto& f : files) std::filesystem::remove(f);
  }
  return failures == 0 ? 0 : 1;
}
