#include "options.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <string_view>
#include <system_error>

namespace lens_train {

namespace {

/// Parses a whole decimal integer in [min, max]; false otherwise.
template <class T>
bool parse_integer(std::string_view text, T min, T max, T& out) {
  T value{};
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || value < min || value > max) {
    return false;
  }
  out = value;
  return true;
}

/// Parses a whole finite number > 0; false otherwise.
bool parse_positive_double(std::string_view text, double& out) {
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value) ||
      value <= 0) {
    return false;
  }
  out = value;
  return true;
}

/// A flag that takes a value: stores it and returns an empty string, or returns what is wrong.
using ValueFlag = std::function<std::string(std::string_view value)>;

ValueFlag int_flag(int& target, int min, int max) {
  return [&target, min, max](std::string_view value) -> std::string {
    if (parse_integer(value, min, max, target)) return {};
    return "must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
  };
}

constexpr int kMaxSteps = 100'000'000;
constexpr int kMaxBatch = 1 << 20;

}  // namespace

std::string usage_text() {
  const TrainOptions d;
  std::string text =
      "usage: mpirun -np N lens_train [options]\n"
      "\n"
      "Trains a small MLP data-parallel over MPI ranks on a synthetic classification task,\n"
      "traced with lens. Tracing is configured by the environment (NEMO_LENS_ENABLED,\n"
      "NEMO_LENS_SPAN_GROUPS=default|per_step|all|..., NEMO_LENS_EXPORTER, OTEL_*).\n"
      "\n"
      "options:\n";
  auto option = [&text](std::string_view flag, const std::string& help) {
    text += "  ";
    text += flag;
    text.append(flag.size() < 22 ? 22 - flag.size() : 1, ' ');
    text += help;
    text += '\n';
  };
  auto with_default = [](const std::string& help, const std::string& value) {
    return help + " (default " + value + ")";
  };
  option("--steps N", with_default("train until step N", std::to_string(d.steps)));
  option("--microbatches M", with_default("split each step's batch into M microbatches",
                                          std::to_string(d.microbatches)));
  option("--batch B",
         with_default("samples per rank per step, a multiple of M", std::to_string(d.batch)));
  option("--eval-every K", with_default("evaluate every K steps and after the last (0: last only)",
                                        std::to_string(d.eval_every)));
  option("--checkpoint-every C", with_default("save every C steps and after the last (0: never)",
                                              std::to_string(d.checkpoint_every)));
  option("--checkpoint-dir DIR", with_default("where checkpoints go", d.checkpoint_dir));
  option("--resume", "continue from the latest checkpoint in DIR (none: start afresh)");
  char lr[32];
  std::snprintf(lr, sizeof(lr), "%g", d.lr);
  option("--lr X", with_default("Adam's peak learning rate, > 0", lr));
  option("--seed S", with_default("seed of the task, the initial weights and the data order",
                                  std::to_string(d.seed)));
  option("--log-every N",
         with_default("print the training loss every N steps", std::to_string(d.log_every)));
  option("--hidden W", with_default("width of the three hidden layers", std::to_string(d.hidden)));
  option("--slow-rank R", "make rank R a straggler: its forward_backward takes F times as long");
  char factor[32];
  std::snprintf(factor, sizeof(factor), "%g", d.slow_factor);
  option("--slow-factor F", with_default("how much longer the slow rank computes, >= 1", factor));
  option("--stall-step K",
         "stall step K once on the stall rank, inside its second microbatch's "
         "last layer_forward: a slow step for the flight recorder to capture");
  option("--stall-ms M",
         with_default("how long the stall lasts, in ms", std::to_string(d.stall_ms)));
  option("--stall-rank R", with_default("the rank that stalls", std::to_string(d.stall_rank)));
  option("--help", "print this text");
  return text;
}

ParsedOptions parse_options(int argc, const char* const* argv) {
  ParsedOptions parsed;
  TrainOptions& o = parsed.options;
  const std::map<std::string_view, ValueFlag> value_flags = {
      {"--steps", int_flag(o.steps, 1, kMaxSteps)},
      {"--microbatches", int_flag(o.microbatches, 1, kMaxBatch)},
      {"--batch", int_flag(o.batch, 1, kMaxBatch)},
      {"--eval-every", int_flag(o.eval_every, 0, kMaxSteps)},
      {"--checkpoint-every", int_flag(o.checkpoint_every, 0, kMaxSteps)},
      {"--log-every", int_flag(o.log_every, 1, kMaxSteps)},
      {"--hidden", int_flag(o.hidden, 1, 4096)},
      {"--slow-rank", int_flag(o.slow_rank, 0, 1 << 20)},
      {"--stall-step", int_flag(o.stall_step, 1, kMaxSteps)},
      {"--stall-ms", int_flag(o.stall_ms, 1, 600'000)},
      {"--stall-rank", int_flag(o.stall_rank, 0, 1 << 20)},
      {"--slow-factor",
       [&o](std::string_view value) -> std::string {
         return parse_positive_double(value, o.slow_factor) && o.slow_factor >= 1
                    ? ""
                    : "must be a number >= 1";
       }},
      {"--checkpoint-dir",
       [&o](std::string_view value) -> std::string {
         if (value.empty()) return "must not be empty";
         o.checkpoint_dir = std::string(value);
         return {};
       }},
      {"--lr",
       [&o](std::string_view value) -> std::string {
         return parse_positive_double(value, o.lr) ? "" : "must be a number > 0";
       }},
      {"--seed",
       [&o](std::string_view value) -> std::string {
         return parse_integer<std::uint64_t>(value, 0, UINT64_MAX, o.seed)
                    ? ""
                    : "must be a non-negative integer";
       }},
  };
  auto fail = [&parsed](const std::string& message) {
    parsed.outcome = ParseOutcome::kError;
    parsed.message = "lens_train: " + message + " (see --help)\n";
    return parsed;
  };

  for (int i = 1; i < argc; ++i) {
    std::string_view arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      parsed.outcome = ParseOutcome::kHelp;
      parsed.message = usage_text();
      return parsed;
    }
    if (arg == "--resume") {
      o.resume = true;
      continue;
    }
    std::string_view name = arg;
    std::string_view value;
    bool has_value = false;
    if (const auto eq = arg.find('='); eq != std::string_view::npos && arg.starts_with("--")) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      has_value = true;
    }
    const auto flag = value_flags.find(name);
    if (flag == value_flags.end()) {
      return fail("unknown option '" + std::string(name) + "'");
    }
    if (!has_value) {
      if (i + 1 >= argc) return fail(std::string(name) + " needs a value");
      value = argv[++i];
    }
    if (std::string problem = flag->second(value); !problem.empty()) {
      return fail(std::string(name) + " " + problem + ", got '" + std::string(value) + "'");
    }
  }
  if (o.batch % o.microbatches != 0) {
    return fail("--batch (" + std::to_string(o.batch) + ") must be a multiple of --microbatches (" +
                std::to_string(o.microbatches) + ")");
  }
  return parsed;
}

}  // namespace lens_train
