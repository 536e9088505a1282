// lens_train: a small data-parallel training job, traced with lens at every stage.
//
// Every MPI rank builds the same multi-layer perceptron, loads its own shard of a synthetic
// classification task, and trains with gradient accumulation over microbatches, an all-reduce of
// the gradients and Adam. Rank 0 prints the loss, every rank evaluates its share of a held-out set,
// rank 0 writes checkpoints that --resume continues from. The environment alone chooses how much is
// traced, by span group (job, model_init, load_checkpoint, data_loading, step, forward_backward,
// microbatch, layer, communication, optimizer, evaluate, checkpoint):
//
//   export NEMO_LENS_ENABLED=1 NEMO_LENS_SPAN_GROUPS=per_step NEMO_LENS_EXPORT_STRATEGY=all_ranks
//   mpirun -np 4 lens_train --steps 60
#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cinttypes>
#include <cmath>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "checkpoint.hpp"
#include "collectives.hpp"
#include "nemo/lens/lens.hpp"
#include "options.hpp"
#include "rng.hpp"
#include "trainer.hpp"

namespace {

namespace lens = nemo::lens;
using lens::MegatronSpanGroup;
using lens_train::Trainer;
using lens_train::World;

using Clock = std::chrono::steady_clock;

double milliseconds_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

/// printf to stdout on rank 0 only, flushed at once so that mpirun forwards it line by line.
__attribute__((format(printf, 2, 3))) void say(const World& world, const char* format, ...) {
  if (!world.is_root()) return;
  va_list args;
  va_start(args, format);
  std::vprintf(format, args);
  va_end(args);
  std::fflush(stdout);
}

/// Whether the environment variable `name` is set to something other than blanks.
bool env_is_set(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr &&
         std::string_view(value).find_first_not_of(" \t") != std::string_view::npos;
}

/// Rank 0's random run id, sent to every rank (a collective), so that all ranks' spans carry the
/// same nemo.run.id when neither NEMO_LENS_RUN_ID nor SLURM_JOB_ID names the run.
std::string shared_random_run_id(const World& world) {
  std::string id;
  if (world.is_root()) {
    std::uint64_t bits = 0;
    try {
      std::random_device device;
      bits = (static_cast<std::uint64_t>(device()) << 32) | device();
    } catch (const std::exception&) {  // no entropy source: the clock will do for a label
      bits = lens_train::mix(
          static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()),
          static_cast<std::uint64_t>(getpid()));
    }
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%012" PRIx64,
                  static_cast<std::uint64_t>(bits & 0xFFFFFFFFFFFFULL));
    id = hex;
  }
  lens_train::broadcast_string(id);
  return id;
}

/// Sets up lens from the environment (NEMO_LENS_*, OTEL_*), with the Megatron span groups. A bad
/// variable costs the run its spans, never the run: rank 0 prints why and training goes on.
lens::TelemetryHandle start_telemetry(const World& world) {
  const std::string run_id = shared_random_run_id(world);  // every rank, before anything can throw
  try {
    lens::NemoLensConfig config = lens::NemoLensConfig::from_env<MegatronSpanGroup>();
    if (!env_is_set("OTEL_SERVICE_NAME")) config.service_name = "lens_train";
    if (config.run_id.empty() && !env_is_set("SLURM_JOB_ID")) config.run_id = run_id;
    return lens::setup_telemetry(config, world.rank, world.size);
  } catch (const std::exception& e) {
    if (world.is_root()) std::fprintf(stderr, "lens_train: tracing is off: %s\n", e.what());
    return {};
  }
}

/// Prints on rank 0 what is traced and by how many ranks (a collective).
void report_tracing(const lens::TelemetryHandle& telemetry, const World& world) {
  const int exporting = lens_train::count_ranks(telemetry.is_exporting());
  if (!telemetry.enabled()) {
    say(world, "tracing: off (NEMO_LENS_ENABLED=1 turns it on)\n");
    return;
  }
  const lens::NemoLensConfig& config = telemetry.config();
  say(world, "tracing: span groups '%s', exporter %s, %d of %d ranks export (strategy %s)\n",
      config.span_groups.c_str(), config.exporter.c_str(), exporting, world.size,
      config.export_strategy.c_str());
}

/// Step times of this run, for the summary.
struct StepTimes {
  std::vector<double> ms;

  double median() const {
    if (ms.empty()) return 0.0;
    std::vector<double> sorted = ms;
    const auto middle = sorted.begin() + static_cast<std::ptrdiff_t>(sorted.size() / 2);
    std::nth_element(sorted.begin(), middle, sorted.end());
    return *middle;
  }
  double total() const {
    double sum = 0.0;
    for (const double t : ms) sum += t;
    return sum;
  }
};

/// Whether all ranks ended with the same parameters (a collective); says so, or complains.
bool check_in_sync(const Trainer& trainer, const World& world, lens::Span& job) {
  std::uint64_t checksum = 0;
  const bool in_sync = trainer.parameters_in_sync(&checksum);
  job.set_attribute("parameters_in_sync", in_sync);
  if (!in_sync) {
    std::fprintf(stderr,
                 "lens_train: rank %d: parameters differ across ranks (checksum %016" PRIx64 ")\n",
                 world.rank, checksum);
    job.set_status(lens::StatusCode::kError, "parameters differ across ranks");
    return false;
  }
  say(world, "parameters in sync on %d rank%s (checksum %016" PRIx64 ")\n", world.size,
      world.size == 1 ? "" : "s", checksum);
  return true;
}

/// With --resume, restores the latest checkpoint and says so; returns the step to continue after.
std::int64_t restore(Trainer& trainer, const lens_train::TrainOptions& options,
                     const World& world) {
  if (!options.resume) return 0;
  const Trainer::Restored restored = trainer.load_latest_checkpoint();
  if (restored.path.empty()) {
    say(world, "no checkpoint in %s: starting from step 0\n", options.checkpoint_dir.c_str());
  } else {
    say(world, "resumed from %s at step %" PRId64 "\n", restored.path.c_str(), restored.step);
  }
  return restored.step;
}

/// Whether step `step` of a run that started after `start` prints its loss.
bool logs_step(const lens_train::TrainOptions& options, std::int64_t start, std::int64_t step) {
  return step % options.log_every == 0 || step == start + 1 || step == options.steps;
}

/// The training run under the job span: set-up, the steps with their evaluations and
/// checkpoints, and the final check that the ranks stayed in sync. Returns the exit status.
int train(const lens_train::TrainOptions& options, const World& world, lens::Span& job) {
  Trainer trainer(options, world);
  const std::int64_t start = restore(trainer, options, world);
  trainer.load_data();
  std::string layers;
  for (const int width : trainer.layer_widths()) {
    layers += (layers.empty() ? "" : "-") + std::to_string(width);
  }
  say(world,
      "lens_train: %d rank%s, MLP %s (%zu parameters), %d samples per rank per step in %d "
      "microbatches, steps %" PRId64 "-%d\n",
      world.size, world.size == 1 ? "" : "s", layers.c_str(), trainer.parameter_count(),
      options.batch, options.microbatches, start + 1, options.steps);

  const double global_batch = static_cast<double>(options.batch) * world.size;
  // The dl.* step metrics (exported where metrics are enabled and the rank exports).
  const lens::TrainingMetrics training;
  StepTimes times;
  float loss = 0.0f;
  std::optional<Trainer::Evaluation> last_eval;
  for (std::int64_t step = start + 1; step <= options.steps; ++step) {
    const Clock::time_point began = Clock::now();
    {
      lens::Span step_span = lens_train::open_step_span(world, step);
      loss = trainer.train_step(step);
      times.ms.push_back(milliseconds_since(began));
      step_span.set_attributes({{"loss", loss},
                                {"learning_rate", trainer.last_learning_rate()},
                                {"grad_norm", trainer.last_grad_norm()},
                                {"samples_per_second", global_batch * 1000.0 / times.ms.back()}});
      lens::StepMetrics metrics;
      metrics.duration_s = times.ms.back() / 1000.0;
      metrics.samples_per_second = global_batch * 1000.0 / times.ms.back();
      metrics.loss = loss;
      metrics.learning_rate = trainer.last_learning_rate();
      metrics.grad_norm = trainer.last_grad_norm();
      training.record_step(metrics);
      if (!std::isfinite(loss)) {
        lens::log(lens::Severity::kError, "loss is not finite", {{"iteration", step}});
      }
    }
    if (logs_step(options, start, step)) {
      say(world,
          "step %5" PRId64 "/%d  loss %.4f  lr %.2e  grad_norm %.3f  %.2f ms  %.0f samples/s\n",
          step, options.steps, static_cast<double>(loss),
          static_cast<double>(trainer.last_learning_rate()),
          static_cast<double>(trainer.last_grad_norm()), times.ms.back(),
          global_batch * 1000.0 / times.ms.back());
    }
    if ((options.eval_every > 0 && step % options.eval_every == 0) || step == options.steps) {
      last_eval = trainer.evaluate(step);
      say(world, "eval        step %" PRId64 "  loss %.4f  accuracy %.1f%%\n", step,
          last_eval->loss, 100.0 * last_eval->accuracy);
    }
    if (options.checkpoint_every > 0 &&
        (step % options.checkpoint_every == 0 || step == options.steps)) {
      const Trainer::Saved saved = trainer.save_checkpoint(step);
      say(world, "checkpoint  step %" PRId64 " -> %s (%zu bytes)\n", step, saved.path.c_str(),
          saved.bytes);
      lens::log(lens::Severity::kInfo, "checkpoint saved",
                {{"iteration", step},
                 {"path", saved.path},
                 {"bytes", static_cast<std::int64_t>(saved.bytes)}});
    }
  }

  if (times.ms.empty()) {
    say(world, "nothing to do: the checkpoint is at step %" PRId64 ", --steps is %d\n", start,
        options.steps);
  } else {
    say(world, "done: %zu steps in %.2f s (mean %.2f ms, median %.2f ms per step)\n",
        times.ms.size(), times.total() / 1000.0,
        times.total() / static_cast<double>(times.ms.size()), times.median());
    job.set_attributes({{"final_loss", loss}, {"first_step", start + 1}});
  }
  if (last_eval) job.set_attribute("eval_accuracy", last_eval->accuracy);
  return check_in_sync(trainer, world, job) ? 0 : 1;
}

/// The job on this rank: telemetry up, training under the job span, telemetry down.
int run(const lens_train::TrainOptions& options, const World& world) {
  lens::TelemetryHandle telemetry = start_telemetry(world);
  report_tracing(telemetry, world);
  int status = 1;
  try {
    LENS_SPAN(job, MegatronSpanGroup::JOB, "train_job", {"world_size", world.size},
              {"steps", options.steps}, {"batch_per_rank", options.batch},
              {"microbatches", options.microbatches}, {"resume", options.resume});
    status = train(options, world, job);
  } catch (const lens_train::CheckpointError& e) {
    // Raised on every rank alike (the outcome is broadcast), so all ranks stop here together.
    if (world.is_root()) std::fprintf(stderr, "lens_train: %s\n", e.what());
  }
  telemetry.shutdown();  // exports the spans still queued; before MPI_Finalize
  return status;
}

/// This process's rank as the launcher tells it, before MPI is up: to print usage only once.
int launcher_rank() {
  try {
    return lens::discover_ranks().rank;
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const lens_train::ParsedOptions parsed = lens_train::parse_options(argc, argv);
  if (parsed.outcome != lens_train::ParseOutcome::kRun) {
    const bool help = parsed.outcome == lens_train::ParseOutcome::kHelp;
    if (launcher_rank() == 0) std::fputs(parsed.message.c_str(), help ? stdout : stderr);
    return help ? 0 : 2;
  }
  MPI_Init(&argc, &argv);
  const World world = World::from_mpi();
  // Every rank sees these: all leave alike.
  for (const auto& [flag, rank] : {std::pair{"--slow-rank", parsed.options.slow_rank},
                                   std::pair{"--stall-rank", parsed.options.stall_rank}}) {
    if (rank < world.size) continue;
    if (world.is_root()) {
      std::fprintf(stderr, "lens_train: %s %d: the job has %d rank%s (see --help)\n", flag, rank,
                   world.size, world.size == 1 ? "" : "s");
    }
    MPI_Finalize();
    return 2;
  }
  int status = 1;
  try {
    status = run(parsed.options, world);
  } catch (const std::exception& e) {
    // Not known to be raised on every rank: the others may wait in a collective, so abort the job.
    std::fprintf(stderr, "lens_train: rank %d: %s\n", world.rank, e.what());
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  MPI_Finalize();
  return status;
}
