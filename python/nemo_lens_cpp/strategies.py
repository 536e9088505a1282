"""Which ranks export (NeMo Lens' ``nemo.lens.strategies``): the four built-in strategies and a
registry shared with C++ set-ups::

    from nemo_lens_cpp.strategies import register_export_strategy
    register_export_strategy("even_ranks", lambda config, rank, world_size: rank % 2 == 0)
    # NEMO_LENS_EXPORT_STRATEGY=even_ranks
"""

import threading
from typing import FrozenSet, Iterator, MutableMapping

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



class _RegistryView(MutableMapping):
    """The registry as a name -> strategy mapping (NeMo Lens' ``_REGISTRY``, which test suites
    snapshot and restore): reads, registers and unregisters through the shared registry.
    Built-in entries stay; setting one to its own strategy is accepted and changes nothing."""

    def __getitem__(self, name: str) -> ExportStrategy:
        if name not in registered_strategies():
            raise KeyError(name)
        return get_export_strategy(name)

    def __setitem__(self, name: str, strategy: ExportStrategy) -> None:
        if name in BUILTIN_STRATEGIES:
            if strategy is not get_export_strategy(name):
                register_export_strategy(name, strategy, allow_override=True)  # raises, naming it
            return
        register_export_strategy(name, strategy, allow_override=True)

    def __delitem__(self, name: str) -> None:
        if name not in registered_strategies():
            raise KeyError(name)
        if name not in BUILTIN_STRATEGIES:
            unregister_export_strategy(name)

    def __iter__(self) -> Iterator[str]:
        return iter(registered_strategies())

    def __len__(self) -> int:
        return len(registered_strategies())

    def clear(self) -> None:
        for name in registered_strategies():
            if name not in BUILTIN_STRATEGIES:
                unregister_export_strategy(name)


_REGISTRY: MutableMapping[str, ExportStrategy] = _RegistryView()
_REGISTRY_LOCK = threading.RLock()

__all__ = ["BUILTIN_STRATEGIES", "ExportStrategy", "get_export_strategy",
           "register_export_strategy", "registered_strategies", "unregister_export_strategy"]
