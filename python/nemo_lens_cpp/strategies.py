"""Which ranks export (NeMo Lens' ``nemo.lens.strategies``): the four built-in strategies and a
registry shared with C++ set-ups::

    from nemo_lens_cpp.strategies import register_export_strategy
    register_export_strategy("even_ranks", lambda config, rank, world_size: rank % 2 == 0)
    # NEMO_LENS_EXPORT_STRATEGY=even_ranks
"""

from typing import FrozenSet

from .telemetry import (
    ExportStrategy,
    get_export_strategy,
    register_export_strategy,
    registered_strategies,
    unregister_export_strategy,
)

#: The built-in strategies: they cannot be unregistered.
BUILTIN_STRATEGIES: FrozenSet[str] = frozenset(
    {"all_ranks", "single_rank", "sampled", "first_rank_per_node"}
)

__all__ = ["BUILTIN_STRATEGIES", "ExportStrategy", "get_export_strategy",
           "register_export_strategy", "registered_strategies", "unregister_export_strategy"]
