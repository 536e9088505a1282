#include "nemo/lens/strategies.hpp"

#include <openssl/evp.h>

#include <map>
#include <mutex>
#include <string>

#include "env.hpp"
#include "nemo/lens/ranks.hpp"
#include "strings.hpp"

namespace nemo::lens {

namespace {

constexpr std::string_view kBuiltins[] = {"all_ranks", "first_rank_per_node", "sampled",
                                          "single_rank"};

bool is_builtin(std::string_view name) {
  for (auto b : kBuiltins) {
    if (b == name) return true;
  }
  return false;
}

struct StrategyRegistry {
  std::mutex mu;
  std::map<std::string, ExportStrategy, std::less<>> strategies;

  StrategyRegistry() {
    strategies.emplace("all_ranks", [](const NemoLensConfig&, int, int) { return true; });
    strategies.emplace("single_rank", [](const NemoLensConfig& c, int rank, int world_size) {
      return rank == (c.export_rank >= 0 ? c.export_rank : world_size - 1);
    });
    strategies.emplace("sampled", [](const NemoLensConfig& c, int rank, int) {
      return rank_in_sample(rank, c.export_sample_rate);
    });
    strategies.emplace("first_rank_per_node",
                       [](const NemoLensConfig&, int, int) { return local_rank_from_env() == 0; });
  }
};

StrategyRegistry& registry() {
  static auto* r = new StrategyRegistry();  // never destroyed: usable from static destructors
  return *r;
}

}  // namespace

void register_export_strategy(std::string_view name, ExportStrategy strategy,
                              bool allow_override) {
  if (name.empty()) throw ConfigError("Export strategy name must be a non-empty string.");
  if (!strategy) {
    throw ConfigError("Export strategy '" + std::string(name) + "' has an empty callable.");
  }
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.strategies.find(name);
  if (it != r.strategies.end() && !allow_override) {
    throw ConfigError("Export strategy '" + std::string(name) +
                      "' is already registered. Pass allow_override=true to replace it.");
  }
  r.strategies.insert_or_assign(std::string(name), std::move(strategy));
}

void unregister_export_strategy(std::string_view name) {
  if (is_builtin(name)) {
    throw ConfigError("Cannot unregister built-in export strategy '" + std::string(name) + "'.");
  }
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.strategies.find(name);
  if (it == r.strategies.end()) {
    throw ConfigError("Export strategy '" + std::string(name) + "' is not registered.");
  }
  r.strategies.erase(it);
}

ExportStrategy get_export_strategy(std::string_view name) {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  auto it = r.strategies.find(name);
  if (it == r.strategies.end()) {
    std::vector<std::string> names;
    for (const auto& [n, s] : r.strategies) names.push_back(n);
    throw ConfigError("Unknown export_strategy '" + std::string(name) +
                      "'. Registered strategies: " + detail::quoted_list(names) + ".");
  }
  return it->second;
}

std::vector<std::string> registered_strategies() {
  auto& r = registry();
  std::lock_guard lock(r.mu);
  std::vector<std::string> names;
  for (const auto& [n, s] : r.strategies) names.push_back(n);
  return names;
}

bool rank_in_sample(int rank, double rate) noexcept {
  const std::string text = std::to_string(rank);
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  if (EVP_Digest(text.data(), text.size(), digest, &len, EVP_md5(), nullptr) != 1 || len != 16) {
    return false;  // no MD5 available: keep nothing rather than guess
  }
  // The digest is a big-endian 128-bit integer; reduce it mod 10000 byte by byte.
  unsigned value = 0;
  for (unsigned i = 0; i < len; ++i) value = (value * 256 + digest[i]) % 10000;
  return static_cast<double>(value) / 10000.0 < rate;
}

int local_rank_from_env() {
  auto v = detail::env_trimmed("LOCAL_RANK");
  if (!v) return discover_ranks().local_rank;
  if (auto i = detail::parse_int(*v)) return *i;
  throw ConfigError("Invalid integer for LOCAL_RANK: '" + *v +
                    "'. Expected the process's rank on its node, e.g. 0.");
}

}  // namespace nemo::lens
