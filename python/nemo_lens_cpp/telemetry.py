"""Set-up, the telemetry handle, export strategies and the in-memory exporter.

One process has one pipeline, shared by its Python code and every C++ extension that links the
same libnemo_lens: set it up once, from either side.
"""

from __future__ import annotations

import atexit
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional

from . import _core
from .config import ConfigError, NemoLensConfig
from .groups import _catalog_of

ExportStrategy = Callable[[NemoLensConfig, int, int], bool]


class AlreadySetUpError(ConfigError, RuntimeError):
    """setup_telemetry() was already called in this process (a ValueError and, as in NeMo Lens,
    a RuntimeError)."""


@dataclass
class FinishedSpan:
    """A span as an exporter received it (InMemorySpanExporter.get_finished_spans())."""

    name: str
    group: str
    trace_id: str
    span_id: str
    parent_span_id: Optional[str]
    parent_is_remote: bool
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Dict[str, Any]
    events: List[dict]
    links: List[dict]
    status_code: int
    status_message: str
    thread_id: int
    truncated: bool
    trace_flags: int = 0
    trace_state: str = ""


class InMemorySpanExporter:
    """Keeps every exported span in memory; pass it as setup_telemetry(span_exporter=...)."""

    def __init__(self) -> None:
        self._core = _core.InMemorySpanExporter()

    def get_finished_spans(self) -> List[FinishedSpan]:
        """The spans exported so far, in export order (call handle.force_flush() first)."""
        return [FinishedSpan(**d) for d in self._core.spans()]

    def clear(self) -> None:
        """Forgets the spans exported so far."""
        self._core.clear()


class TelemetryHandle:
    """What setup_telemetry() returns. force_flush() and shutdown() release the GIL while they
    wait; shutdown() is idempotent."""

    def __init__(self, core: Any) -> None:
        self._core = core

    @property
    def is_exporting(self) -> bool:
        """Whether this rank exports (enabled, and chosen by the export strategy)."""
        return self._core.is_exporting

    @property
    def tracer(self) -> Any:
        """The ``nemo.lens`` Tracer: OpenTelemetry's Tracer interface on lens spans."""
        from ._tracer import get_tracer

        return get_tracer("nemo.lens")

    @property
    def meter(self) -> Any:
        """The ``nemo.lens`` Meter (get_meter())."""
        return _core.get_meter("nemo.lens")

    @property
    def run_id(self) -> str:
        """The run id every rank of the run shares."""
        return self._core.run_id

    def force_flush(self, timeout_millis: float = 30000) -> bool:
        """Exports what was recorded so far; False when the timeout passed first."""
        return self._core.force_flush(timeout_millis)

    def shutdown(self, timeout_ms: float = 5000) -> bool:
        """Ends open spans (marked truncated), exports everything and stops the pipeline."""
        return self._core.shutdown(timeout_ms)

    def stats(self) -> Dict[str, int]:
        """The pipeline's counters: spans started, ended, exported, dropped (by reason), ..."""
        return self._core.stats()

    def resource(self) -> Dict[str, Any]:
        """The resource attributes every exported span carries."""
        return self._core.resource()


_handles: List[TelemetryHandle] = []


def setup_telemetry(
    config: NemoLensConfig,
    rank: int = 0,
    world_size: int = 1,
    resource_attributes: Optional[Dict[str, Any]] = None,
    span_exporter: Optional[InMemorySpanExporter] = None,
    metric_reader: Any = None,
    export_strategy: Optional[ExportStrategy] = None,
    _allow_reinit: bool = False,
) -> TelemetryHandle:
    """Sets telemetry up for this process, as NeMo Lens' setup_telemetry does.

    Disabled: nothing is recorded. Enabled, and this rank exports (by `export_strategy`, else the
    strategy config.export_strategy names): the pipeline, with the groups of config.span_groups
    enabled. Enabled on a rank that does not export: sites cost only the gate. A second enabled
    call raises AlreadySetUpError unless `_allow_reinit`. Raises ConfigError / SpanGroupError
    (ValueErrors) naming a bad value.
    """
    if not isinstance(config, NemoLensConfig):
        raise TypeError("setup_telemetry() expects a NemoLensConfig")
    if span_exporter is not None and not isinstance(span_exporter, InMemorySpanExporter):
        raise TypeError(
            "span_exporter must be a nemo_lens_cpp.InMemorySpanExporter; other destinations are "
            "chosen with config.exporter (otlp, console, file) and the OTEL_EXPORTER_OTLP_* "
            "variables"
        )
    if metric_reader is not None:
        raise TypeError("metric_reader is not supported: metrics follow config.exporter")
    if export_strategy is not None and not callable(export_strategy):
        raise TypeError("export_strategy must be a callable (config, rank, world_size) -> bool")
    groups, presets = _catalog_of(config.span_group_cls)
    try:
        core = _core.setup_telemetry(
            config._fields(), groups, presets, int(rank), int(world_size),
            dict(resource_attributes or {}),
            span_exporter._core if span_exporter is not None else None,
            export_strategy, _config_from_fields, bool(_allow_reinit))
    except ConfigError as e:
        if str(e).startswith("setup_telemetry was already called"):
            # NeMo Lens' phrase first: its callers match on it.
            raise AlreadySetUpError(
                f"setup_telemetry() has already been initialised for this process: {e}"
            ) from None
        raise
    handle = TelemetryHandle(core)
    _handles.append(handle)
    return handle


def _config_from_fields(fields: dict) -> NemoLensConfig:
    return NemoLensConfig._from_fields(dict(fields))


@atexit.register
def _shutdown_at_exit() -> None:
    # Interpreter exit: shut every set-up down once, before Python finalises (the C++ exit handler
    # would do it too, later; by then no Python object may be touched).
    for handle in _handles:
        handle.shutdown(5000)
    _handles.clear()


def set_enabled_span_groups(groups: Iterable[str]) -> None:
    """Replaces the enabled span groups, for Python and C++ sites alike (lock-protected writer)."""
    if isinstance(groups, str):
        raise TypeError("set_enabled_span_groups() expects a set of group names, not a str")
    _core.set_enabled_span_groups(sorted(str(g) for g in groups))


def enabled_span_groups() -> FrozenSet[str]:
    """The enabled span groups."""
    return frozenset(_core.enabled_span_groups())


# The callables registered from Python, by name: get_export_strategy() returns them as they were
# registered (the compiled registry, which C++ set-ups read too, holds a wrapper).
_python_strategies: Dict[str, ExportStrategy] = {}


def register_export_strategy(name: str, strategy: ExportStrategy, *,
                             allow_override: bool = False) -> None:
    """Registers `strategy` (config, rank, world_size) -> bool under `name`, for C++ and Python
    set-ups alike. Built-in names cannot be replaced; another name only with allow_override."""
    if not callable(strategy):
        raise TypeError("strategy must be a callable (config, rank, world_size) -> bool")
    _core.register_export_strategy(name, strategy, _config_from_fields, allow_override)
    _python_strategies[name] = strategy


def unregister_export_strategy(name: str) -> None:
    """Removes a registered strategy (built-ins cannot be removed)."""
    _core.unregister_export_strategy(name)
    _python_strategies.pop(name, None)


def registered_strategies() -> List[str]:
    """Every registered strategy name, sorted."""
    return list(_core.registered_strategies())


def get_export_strategy(name: str) -> ExportStrategy:
    """The strategy registered under `name`: the callable itself when it was registered from
    Python, else one that runs the compiled strategy. Raises ConfigError (a ValueError) naming
    the registered strategies when `name` is unknown."""
    if name not in registered_strategies():
        _python_strategies.pop(name, None)  # unregistered from C++ meanwhile
        _core.should_export(name, NemoLensConfig()._fields(), 0, 1)  # raises, naming the options
    registered = _python_strategies.get(name)
    if registered is not None:
        return registered

    def strategy(config: NemoLensConfig, rank: int, world_size: int) -> bool:
        return _core.should_export(name, config._fields(), rank, world_size)

    strategy.__name__ = strategy.__qualname__ = name
    return strategy
