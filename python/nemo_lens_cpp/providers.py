"""OpenTelemetry providers on lens' pipeline (NeMo Lens' ``nemo.lens.providers``).

setup_telemetry() makes lens' TracerProvider and MeterProvider OpenTelemetry's global ones when
OpenTelemetry Python is importable, so ``trace.get_tracer(__name__)`` and instrumentation
libraries make lens spans. build_providers() does that set-up for an exporting rank whose
decision was already made; build_noop_providers() installs OpenTelemetry's no-op providers.
Importable without OpenTelemetry; only the two build functions need it.
"""

from __future__ import annotations

import dataclasses
import os
import random
from typing import Any, Dict, Optional

from . import _core

# The interfaces, when OpenTelemetry's API is there; plain classes otherwise.
try:
    from opentelemetry.trace import TracerProvider as _TracerProviderBase
except ImportError:
    _TracerProviderBase = object  # type: ignore[assignment,misc]
try:
    from opentelemetry.metrics import MeterProvider as _MeterProviderBase
except ImportError:
    _MeterProviderBase = object  # type: ignore[assignment,misc]

_MISSING = ("nemo_lens_cpp.providers.{name}() needs OpenTelemetry Python's API (the "
            "opentelemetry-api package), which could not be imported: {error}")


def _live_handles() -> list:
    from .telemetry import _handles

    return [h for h in _handles if not h._core.is_shut_down]


def _flush_live(timeout_millis: int) -> bool:
    # Every live handle is flushed, even after one timed out.
    return all([h.force_flush(timeout_millis) for h in _live_handles()])


def _shut_live_down() -> None:
    for handle in _live_handles():
        handle.shutdown()


class LensTracerProvider(_TracerProviderBase):
    """OpenTelemetry's TracerProvider on lens: its tracers make lens spans (same trace,
    parentage, exporter and rank decisions as managed_span)."""

    def get_tracer(self, instrumenting_module_name: str = "nemo.lens", *args: Any,
                   **kwargs: Any) -> Any:
        """The lens Tracer named `instrumenting_module_name` (version, schema_url, attributes
        are accepted as OpenTelemetry takes them)."""
        from ._tracer import get_tracer

        return get_tracer(instrumenting_module_name or "nemo.lens")

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports what every live set-up recorded so far; False when a timeout passed first."""
        return _flush_live(timeout_millis)

    def shutdown(self) -> None:
        """Shuts every live set-up down (as handle.shutdown())."""
        _shut_live_down()


class LensMeterProvider(_MeterProviderBase):
    """OpenTelemetry's MeterProvider on lens: its meters are lens meters (get_meter())."""

    def get_meter(self, name: str = "nemo.lens", *args: Any, **kwargs: Any) -> Any:
        """The lens Meter named `name` (version, schema_url, attributes are accepted)."""
        return _core.get_meter(str(name or "nemo.lens"))

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Exports what every live set-up recorded so far."""
        return _flush_live(timeout_millis)

    def shutdown(self) -> None:
        """Shuts every live set-up down."""
        _shut_live_down()


class SeedIndependentIdGenerator:
    """An OpenTelemetry IdGenerator whose ids do not follow ``random.seed()``: training
    frameworks seed the global generator identically on every rank, which would give every rank
    the same ids. Draws from a private generator seeded by the OS, reseeded in forked children.
    (lens' own spans take their ids from a per-thread generator seeded the same way.)"""

    def __init__(self) -> None:
        self._random = random.Random()
        os.register_at_fork(after_in_child=self._random.seed)

    def generate_span_id(self) -> int:
        """A random non-zero 64-bit span id."""
        return self._random.getrandbits(64) or 1

    def generate_trace_id(self) -> int:
        """A random non-zero 128-bit trace id."""
        return self._random.getrandbits(128) or 1

    def is_trace_id_random(self) -> bool:
        """True: trace ids are random (W3C Trace Context level 2's random flag)."""
        return True


def build_providers(config: Any, rank: int = 0, world_size: int = 1,
                    resource_attributes: Optional[Dict[str, Any]] = None,
                    span_exporter: Any = None, metric_reader: Any = None) -> None:
    """Sets lens' pipeline up for an exporting rank (the decision already made: no export
    strategy runs) and makes its providers OpenTelemetry's global ones. `span_exporter` is any
    OpenTelemetry SpanExporter (or lens' InMemorySpanExporter); `metric_reader` as
    setup_telemetry() takes it. Replaces an earlier set-up. Raises ImportError naming the
    package when OpenTelemetry's API is missing."""
    try:
        import opentelemetry.trace  # noqa: F401
    except ImportError as error:
        raise ImportError(_MISSING.format(name="build_providers", error=error)) from error
    from .telemetry import setup_telemetry

    setup_telemetry(dataclasses.replace(config, enabled=True), rank, world_size,
                    resource_attributes, span_exporter, metric_reader,
                    export_strategy=_always, _allow_reinit=True)


def _always(config: Any, rank: int, world_size: int) -> bool:
    return True


def build_noop_providers() -> None:
    """Makes OpenTelemetry's no-op TracerProvider and MeterProvider the global ones (for a rank
    that does not export, or disabled telemetry), as NeMo Lens does. Lens' own span sites are
    unaffected: their gate and set-up decide. Raises ImportError naming the package when
    OpenTelemetry's API is missing."""
    try:
        from opentelemetry import metrics, trace
    except ImportError as error:
        raise ImportError(_MISSING.format(name="build_noop_providers", error=error)) from error
    trace.set_tracer_provider(trace.NoOpTracerProvider())
    metrics.set_meter_provider(metrics.NoOpMeterProvider())


__all__ = ["LensMeterProvider", "LensTracerProvider", "SeedIndependentIdGenerator",
           "build_noop_providers", "build_providers"]
