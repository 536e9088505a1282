// The command line of lens_train: every flag, its default and its check.
//
//   lens_train::ParsedOptions parsed = lens_train::parse_options(argc, argv);
//   if (parsed.outcome == lens_train::ParseOutcome::kError) {
//     std::fputs(parsed.message.c_str(), stderr);  // names the flag
//     return 2;
//   }
#pragma once

#include <cstdint>
#include <string>

namespace lens_train {

/// The run's settings. The defaults make a demo of a few seconds on four ranks.
struct TrainOptions {
  int steps = 60;             // train until this step (a resumed run counts the steps it resumed)
  int microbatches = 4;       // gradient-accumulation parts of each step's batch
  int batch = 64;             // samples per rank per step
  int eval_every = 20;        // evaluate every K steps and after the last (0: only after the last)
  int checkpoint_every = 20;  // save every C steps and after the last (0: never)
  std::string checkpoint_dir = "lens_train_checkpoints";
  bool resume = false;        // continue from the latest checkpoint in checkpoint_dir
  double lr = 5e-3;           // Adam's peak learning rate
  std::uint64_t seed = 1234;  // defines the task, the initial weights and the data order
  int log_every = 5;          // print the training loss every N steps
  int hidden = 128;           // width of the three hidden layers
  int slow_rank = -1;         // this rank's forward_backward takes slow_factor as long (-1: none)
  double slow_factor = 2;     // for a straggler the report should name (docs/report.md)
  int stall_step = 0;         // this step stalls on stall_rank (0: none), for the flight recorder
  int stall_ms = 200;         // how long, inside its second microbatch's last layer_forward
  int stall_rank = 0;
};

enum class ParseOutcome { kRun, kHelp, kError };

struct ParsedOptions {
  ParseOutcome outcome = ParseOutcome::kRun;
  TrainOptions options;
  std::string message;  // the usage text for kHelp, the error (naming the flag) for kError
};

/// Parses `--flag value` and `--flag=value`. Never throws.
ParsedOptions parse_options(int argc, const char* const* argv);

/// The --help text.
std::string usage_text();

}  // namespace lens_train
