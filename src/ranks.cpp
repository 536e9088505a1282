// Rank discovery from the variables launchers set.
#include "nemo/lens/ranks.hpp"

#include <array>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "env.hpp"
#include "nemo/lens/errors.hpp"

namespace nemo::lens {

namespace {

struct Launcher {
  const char* source;
  const char* rank;
  const char* world_size;
  // Candidates for the local rank, the first set one wins; null entries are unused.
  std::array<const char*, 2> local_rank;
};

// In precedence order; see discover_ranks().
constexpr Launcher kLaunchers[] = {
    {"openmpi",
     "OMPI_COMM_WORLD_RANK",
     "OMPI_COMM_WORLD_SIZE",
     {"OMPI_COMM_WORLD_LOCAL_RANK", nullptr}},
    {"torchrun", "RANK", "WORLD_SIZE", {"LOCAL_RANK", nullptr}},
    {"pmi", "PMI_RANK", "PMI_SIZE", {"MPI_LOCALRANKID", "PMI_LOCAL_RANK"}},
    {"slurm", "SLURM_PROCID", "SLURM_NTASKS", {"SLURM_LOCALID", nullptr}},
};

// A variable that is set, with its trimmed value.
struct Variable {
  std::string name;
  std::string value;
};

std::optional<Variable> variable(const char* name) {
  auto value = detail::env_trimmed(name);
  if (!value) return std::nullopt;
  return Variable{name, std::move(*value)};
}

std::string quoted(const Variable& v) { return v.name + "='" + v.value + "'"; }

// `v` as an integer >= minimum; throws ConfigError naming it otherwise.
int parse(const Launcher& launcher, const Variable& v, int minimum) {
  const std::string what =
      std::string(minimum == 0 ? "a non-negative integer" : "an integer >= 1") + " (set by the " +
      launcher.source + " launcher)";
  const auto parsed = detail::parse_int(v.value);
  if (!parsed) {
    throw ConfigError("Invalid integer for " + v.name + ": '" + v.value + "'. Expected " + what +
                      ".");
  }
  if (*parsed < minimum) {
    throw ConfigError("Invalid value for " + v.name + ": '" + v.value + "'. Expected " + what +
                      ".");
  }
  return *parsed;
}

[[noreturn]] void inconsistent(const Launcher& launcher, const std::string& problem) {
  throw ConfigError(std::string("Inconsistent ") + launcher.source +
                    " launcher environment: " + problem + ".");
}

RankInfo read_launcher(const Launcher& launcher, const Variable& rank_var) {
  RankInfo info;
  info.source = launcher.source;
  info.rank = parse(launcher, rank_var, 0);
  const auto size_var = variable(launcher.world_size);
  if (!size_var) {
    inconsistent(launcher, quoted(rank_var) + " is set but " + launcher.world_size + " is not");
  }
  info.world_size = parse(launcher, *size_var, 1);
  if (info.rank >= info.world_size) {
    inconsistent(launcher, quoted(rank_var) + " is not below " + quoted(*size_var));
  }
  for (const char* name : launcher.local_rank) {
    if (name == nullptr) continue;
    const auto local_var = variable(name);
    if (!local_var) continue;
    info.local_rank = parse(launcher, *local_var, 0);
    if (info.local_rank >= info.world_size) {
      inconsistent(launcher, quoted(*local_var) + " is not below " + quoted(*size_var));
    }
    break;
  }
  return info;
}

}  // namespace

RankInfo discover_ranks() {
  for (const Launcher& launcher : kLaunchers) {
    if (const auto rank_var = variable(launcher.rank)) return read_launcher(launcher, *rank_var);
  }
  return RankInfo{};
}

}  // namespace nemo::lens
