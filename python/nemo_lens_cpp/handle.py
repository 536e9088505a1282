"""Set-up and the telemetry handle (NeMo Lens' ``nemo.lens.handle``)::

    from nemo_lens_cpp.handle import setup_telemetry
    handle = setup_telemetry(NemoLensConfig.from_env(), rank, world_size)
    ...
    handle.shutdown()
"""

import sys
import types
from typing import Optional

from . import telemetry
from .config import NemoLensConfig
from .telemetry import (
    AlreadySetUpError,
    ExportStrategy,
    TelemetryHandle,
    get_export_strategy,
    setup_telemetry,
)


class _HandleModule(types.ModuleType):
    """This module, with NeMo Lens' ``_INITIALIZED`` flag as a property."""

    @property
    def _INITIALIZED(self) -> bool:
        """True once setup_telemetry() succeeded in this process. A test suite written for NeMo
        Lens sets it back to False between tests: the next set-up then replaces the previous
        one, and span sites meanwhile use OpenTelemetry's global tracer, if one was set, as
        before any set-up."""
        return telemetry.is_initialized()

    @_INITIALIZED.setter
    def _INITIALIZED(self, value: bool) -> None:
        telemetry.set_initialized(value)


sys.modules[__name__].__class__ = _HandleModule


def _should_export(config: NemoLensConfig, rank: int, world_size: int,
                   override: Optional[ExportStrategy] = None) -> bool:
    """Whether `rank` exports: `override` when given, else the strategy config.export_strategy
    names (as NeMo Lens' helper of the same name, which code and tests call)."""
    strategy = override if override is not None else get_export_strategy(config.export_strategy)
    return bool(strategy(config, rank, world_size))


__all__ = ["AlreadySetUpError", "TelemetryHandle", "setup_telemetry"]
