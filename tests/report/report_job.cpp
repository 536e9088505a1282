// A small training loop instrumented with lens and exported by the `file` exporter: what
// `lens report` reads in the real world. Every step of STEP_MS milliseconds: get_batch
// (data_loading, 10 %), forward_backward holding two microbatch spans (60 %), optimizer_step
// (10 %); the steps run inside a "pretrain" span of group job that is still open at shutdown, so
// it is exported truncated.
//
//   report_job RANK WORLD_SIZE STEPS STEP_MS OUT_PATTERN   # OUT_PATTERN: e.g.
//   dir/trace-{rank}.jsonl
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nemo/lens/lens.hpp>
#include <string>
#include <thread>

namespace lens = nemo::lens;

int main(int argc, char** argv) {
  if (argc != 6) {
    std::fprintf(stderr, "usage: report_job RANK WORLD_SIZE STEPS STEP_MS OUT_PATTERN\n");
    return 2;
  }
  const int rank = std::atoi(argv[1]);
  const int world_size = std::atoi(argv[2]);
  const int steps = std::atoi(argv[3]);
  const int step_ms = std::atoi(argv[4]);
  setenv("NEMO_LENS_ENABLED", "1", 1);
  setenv("NEMO_LENS_EXPORTER", "file", 1);
  setenv("NEMO_LENS_EXPORT_PATH", argv[5], 1);
  // The job records no metrics; left on, their file (default path) would land in the cwd.
  setenv("NEMO_LENS_METRICS_ENABLED", "0", 1);
  setenv("NEMO_LENS_EXPORT_STRATEGY", "all_ranks", 1);
  setenv("NEMO_LENS_SPAN_GROUPS", "all", 1);
  setenv("NEMO_LENS_RUN_ID", "job-test", 1);
  auto sleep = [](int ms) { std::this_thread::sleep_for(std::chrono::milliseconds(ms)); };

  auto telemetry = lens::setup_telemetry(lens::NemoLensConfig::from_env<lens::MegatronSpanGroup>(),
                                         rank, world_size);
  auto job = lens::managed_span(lens::SpanGroup::JOB, "pretrain");
  for (int it = 0; it < steps; ++it) {
    LENS_SPAN(step, lens::SpanGroup::STEP, "train_step", {"iteration", it});
    {
      LENS_SPAN(data, lens::MegatronSpanGroup::DATA_LOADING, "get_batch");
      sleep(step_ms / 10);
    }
    {
      LENS_SPAN(fb, lens::SpanGroup::FORWARD_BACKWARD, "forward_backward");
      for (int mb = 0; mb < 2; ++mb) {
        LENS_SPAN(micro, lens::MegatronSpanGroup::MICROBATCH, "microbatch", {"microbatch", mb});
        sleep(step_ms * 3 / 10);
      }
    }
    {
      LENS_SPAN(opt, lens::SpanGroup::OPTIMIZER, "optimizer_step");
      sleep(step_ms / 10);
    }
  }
  return telemetry.shutdown() ? 0 : 1;  // `job` is still open: exported truncated
}
