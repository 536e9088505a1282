// Export strategies: which ranks of a distributed job export telemetry. Four built-ins
// (single_rank, all_ranks, first_rank_per_node, sampled) decide exactly as NeMo Lens does; a
// program may register its own under a name and select it with NEMO_LENS_EXPORT_STRATEGY.
//
//   nemo::lens::register_export_strategy("even_ranks",
//       [](const nemo::lens::NemoLensConfig&, int rank, int) { return rank % 2 == 0; });
//   bool exports = nemo::lens::get_export_strategy("even_ranks")(cfg, rank, world_size);
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "nemo/lens/config.hpp"
#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// Decides for (config, rank, world_size) whether this rank exports. Called at set-up, once.
using ExportStrategy = std::function<bool(const NemoLensConfig&, int rank, int world_size)>;

/// Registers `strategy` under `name`. Throws ConfigError when `name` is empty, `strategy` is
/// empty, or `name` is already registered (built-ins included) and `allow_override` is false.
/// Thread-safe.
NEMO_LENS_API void register_export_strategy(std::string_view name, ExportStrategy strategy,
                                            bool allow_override = false);

/// Removes a registered strategy. Throws ConfigError for a built-in or an unknown name.
NEMO_LENS_API void unregister_export_strategy(std::string_view name);

/// The strategy registered under `name` (a copy). Throws ConfigError listing the registered names
/// when there is none.
NEMO_LENS_API ExportStrategy get_export_strategy(std::string_view name);

/// The registered names, built-ins included, sorted.
NEMO_LENS_API std::vector<std::string> registered_strategies();

/// The NeMo Lens rank-sampling rule: true when (MD5 of the decimal rank, read as a 128-bit
/// integer, mod 10000) / 10000 < rate. Deterministic, so every library picks the same ranks.
NEMO_LENS_API bool rank_in_sample(int rank, double rate) noexcept;

/// The local rank of this process on its node: `LOCAL_RANK` when it is set (as NeMo Lens reads
/// it), else discover_ranks().local_rank (0 without launcher variables). Throws ConfigError when
/// `LOCAL_RANK` is set but not an integer, or discover_ranks() throws.
NEMO_LENS_API int local_rank_from_env();

}  // namespace nemo::lens
