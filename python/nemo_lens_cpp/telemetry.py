"""Set-up: setup_telemetry(), the telemetry handle, the enabled groups and the export strategies'
registry. The top of the package's layers below NeMo Lens' faces (docs/layout.md): it wires the
compiled pipeline, lens' spans and the OpenTelemetry adapter together.

One process has one pipeline, shared by its Python code and every C++ extension that links the
same libnemo_lens: set it up once, from either side.
"""

from __future__ import annotations

import atexit
import logging
import sys
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional

from . import _core, _setups, spans
from ._tracer import Tracer, get_tracer
from .config import ConfigError, NemoLensConfig
from .exporters import InMemorySpanExporter
from .groups import _catalog_of
from .otel.exporter import ExporterAdapter
from .otel.metric_reader import ReaderAdapter, check_reader
from .otel.providers import is_lens_provider, set_global_providers

ExportStrategy = Callable[[NemoLensConfig, int, int], bool]


class AlreadySetUpError(ConfigError, RuntimeError):
    """setup_telemetry() was already called in this process (a ValueError and, as in NeMo Lens,
    a RuntimeError)."""


class TelemetryHandle:
    """What setup_telemetry() returns. force_flush() and shutdown() release the GIL while they
    wait; shutdown() is idempotent."""

    def __init__(self, core: Any, metric_reader: Optional[ReaderAdapter] = None) -> None:
        self._core = core
        self._metric_reader = metric_reader

    @property
    def is_exporting(self) -> bool:
        """Whether this rank exports (enabled, and chosen by the export strategy)."""
        return self._core.is_exporting

    @property
    def is_shut_down(self) -> bool:
        """Whether shutdown() was called."""
        return self._core.is_shut_down

    @property
    def tracer(self) -> Tracer:
        """The ``nemo.lens`` Tracer: OpenTelemetry's Tracer interface on lens spans."""
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
        """Exports what was recorded so far (and flushes setup_telemetry's metric_reader);
        False when the timeout passed first."""
        done = self._core.force_flush(timeout_millis)
        if self._metric_reader is not None and not self._core.is_shut_down:
            done = self._metric_reader.force_flush(timeout_millis) and done
        return done

    def shutdown(self, timeout_ms: float = 5000) -> bool:
        """Ends open spans (marked truncated), exports everything and stops the pipeline."""
        first = not self._core.is_shut_down
        done = self._core.shutdown(timeout_ms)
        if first:
            if self._metric_reader is not None:
                self._metric_reader.detach()
            _shutdown_otel_providers(timeout_ms)
        if all(h.is_shut_down for h in _setups.handles):
            spans._set_unset(True)  # OpenTelemetry's global tracer again, if a program set one
        return done

    def stats(self) -> Dict[str, int]:
        """The pipeline's counters: spans started, ended, exported, dropped (by reason), ..."""
        return self._core.stats()

    def resource(self) -> Dict[str, Any]:
        """The resource attributes every exported span carries."""
        return self._core.resource()


# Whether setup_telemetry() succeeded in this process: NeMo Lens' ``handle._INITIALIZED``, which
# a test suite written for NeMo Lens sets back to False between tests (handle.py's face).
_initialized = False


def is_initialized() -> bool:
    """Whether setup_telemetry() succeeded in this process (and was not marked undone)."""
    return _initialized


def set_initialized(value: bool) -> None:
    """Marks set-up done or undone. Undone, the next setup_telemetry() replaces the previous
    set-up, and span sites meanwhile use OpenTelemetry's global tracer, if a program set one, as
    before any set-up."""
    global _initialized
    _initialized = bool(value)
    if not _initialized:
        spans._set_unset(True)


def _shutdown_otel_providers(timeout_ms: float) -> None:
    # As NeMo Lens' shutdown: flush and shut down OpenTelemetry's global providers (a program's
    # own; lens' are the pipeline just shut down). Never raises into the program.
    trace = sys.modules.get("opentelemetry.trace")
    metrics = sys.modules.get("opentelemetry.metrics")
    for module, getter in ((trace, "get_tracer_provider"), (metrics, "get_meter_provider")):
        if module is None:
            continue
        try:
            provider = getattr(module, getter)()
            if is_lens_provider(provider):
                continue
            for method, args in (("force_flush", (int(timeout_ms),)), ("shutdown", ())):
                call = getattr(provider, method, None)
                if callable(call):
                    call(*args)
        except Exception:
            logging.getLogger("nemo_lens_cpp").debug("OpenTelemetry provider shutdown failed",
                                                     exc_info=True)


def setup_telemetry(
    config: NemoLensConfig,
    rank: int = 0,
    world_size: int = 1,
    resource_attributes: Optional[Dict[str, Any]] = None,
    span_exporter: Any = None,
    metric_reader: Any = None,
    export_strategy: Optional[ExportStrategy] = None,
    _allow_reinit: bool = False,
) -> TelemetryHandle:
    """Sets telemetry up for this process, as NeMo Lens' setup_telemetry does.

    Disabled: nothing is recorded. Enabled, and this rank exports (by `export_strategy`, else the
    strategy config.export_strategy names): the pipeline, with the groups of config.span_groups
    enabled, exporting where config.exporter says or to `span_exporter` (lens'
    InMemorySpanExporter, or any OpenTelemetry SpanExporter: it gets ReadableSpans on lens'
    exporter thread). When OpenTelemetry Python is importable, lens' providers become its global
    ones (see docs/python.md). Enabled on a rank that does not export: sites cost only the gate.
    A second enabled call raises AlreadySetUpError unless `_allow_reinit`. Raises ConfigError /
    SpanGroupError (ValueErrors) naming a bad value, TypeError for a rank or world size that is not
    an int.
    """
    if not isinstance(config, NemoLensConfig):
        raise TypeError("setup_telemetry() expects a NemoLensConfig")
    exporter = _core_exporter(span_exporter)
    if metric_reader is not None:
        check_reader(metric_reader)
    if export_strategy is not None and not callable(export_strategy):
        raise TypeError("export_strategy must be a callable (config, rank, world_size) -> bool")
    for name, value in (("rank", rank), ("world_size", world_size)):
        if not isinstance(value, int) or isinstance(value, bool):
            raise TypeError(f"setup_telemetry: {name} must be an int, got {value!r} "
                            f"({type(value).__name__})")
    if world_size < 1 or world_size > 2**31 - 1:
        raise ConfigError(
            f"setup_telemetry: world_size must be in [1, 2147483647], got {world_size}")
    if not 0 <= rank < world_size:
        raise ConfigError(f"setup_telemetry: rank must be in [0, {world_size - 1}], got {rank}")
    groups, presets = _catalog_of(config.span_group_cls)
    # A test suite written for NeMo Lens resets nemo.lens.handle._INITIALIZED between tests.
    reinit = bool(_allow_reinit) or (bool(_setups.handles) and not _initialized)
    try:
        core = _core.setup_telemetry(
            config._fields(), groups, presets, int(rank), int(world_size),
            dict(resource_attributes or {}), exporter, export_strategy, _config_from_fields,
            reinit, metric_reader is not None)
    except ConfigError as e:
        if str(e).startswith("setup_telemetry was already called"):
            # NeMo Lens' phrase first: its callers match on it.
            raise AlreadySetUpError(
                f"setup_telemetry() has already been initialised for this process: {e}"
            ) from None
        raise
    reader = None
    if metric_reader is not None and core.is_exporting and config.metrics_enabled:
        reader = ReaderAdapter(metric_reader, core.resource())
        reader.attach()
    handle = TelemetryHandle(core, reader)
    _setups.handles.append(handle)
    set_initialized(True)
    if config.enabled:
        spans._set_unset(False)
    set_global_providers(config, rank, world_size, handle.resource())
    return handle


def _core_exporter(span_exporter: Any) -> Any:
    # The compiled exporter for setup_telemetry(span_exporter=...).
    if span_exporter is None:
        return None
    if isinstance(span_exporter, InMemorySpanExporter):
        return span_exporter._core
    if callable(getattr(span_exporter, "export", None)):
        return ExporterAdapter(span_exporter).core()
    raise TypeError(
        f"span_exporter must be an OpenTelemetry SpanExporter (an object with export(spans)) or "
        f"a nemo_lens_cpp.InMemorySpanExporter, not {type(span_exporter).__name__}; other "
        "destinations are chosen with config.exporter (otlp, console, file) and the "
        "OTEL_EXPORTER_OTLP_* variables"
    )


def _config_from_fields(fields: dict) -> NemoLensConfig:
    return NemoLensConfig._from_fields(dict(fields))


@atexit.register
def _shutdown_at_exit() -> None:
    # Interpreter exit: shut every set-up down once, before Python finalises (the C++ exit handler
    # would do it too, later; by then no Python object may be touched).
    for handle in _setups.handles:
        handle.shutdown(5000)
    _setups.handles.clear()


def capture(reason: str = "manual") -> int:
    """Exports what the flight recorder holds now (``NEMO_LENS_RECORD_GROUPS``,
    docs/flight-recorder.md): every recorded span of every thread, C++ and Python alike, and the
    recorded spans open now as truncated copies, each marked ``lens.capture.reason`` = `reason`
    and one new ``lens.capture.id``. Returns how many spans; 0 when the recorder is off. Never
    waits for the export."""
    return _core.capture(str(reason) or "manual")


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
    _compiled_strategies.pop(name, None)


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
        _compiled_strategies.pop(name, None)
        _core.should_export(name, NemoLensConfig()._fields(), 0, 1)  # raises, naming the options
    registered = _python_strategies.get(name) or _compiled_strategies.get(name)
    if registered is not None:
        return registered

    def strategy(config: NemoLensConfig, rank: int, world_size: int) -> bool:
        return _core.should_export(name, config._fields(), rank, world_size)

    strategy.__name__ = strategy.__qualname__ = name
    return _compiled_strategies.setdefault(name, strategy)


# One callable per compiled strategy (built-in, or registered from C++), so that asking twice
# gives the same object.
_compiled_strategies: Dict[str, ExportStrategy] = {}
