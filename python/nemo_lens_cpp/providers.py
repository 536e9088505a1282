"""OpenTelemetry providers on lens' pipeline (NeMo Lens' ``nemo.lens.providers``), a face over
the OpenTelemetry adapter (``nemo_lens_cpp.otel.providers``) and set-up.

setup_telemetry() makes lens' TracerProvider and MeterProvider OpenTelemetry's global ones when
OpenTelemetry Python is importable, so ``trace.get_tracer(__name__)`` and instrumentation
libraries make lens spans. build_providers() does that set-up for an exporting rank whose
decision was already made; build_noop_providers() installs OpenTelemetry's no-op providers.
Importable without OpenTelemetry; only the two build functions need it. ``LensTracerProvider``
and ``LensMeterProvider`` are made when first asked for (on the SDK's TracerProvider when the SDK
is importable).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Dict, Optional

from .otel.providers import SeedIndependentIdGenerator, meter_provider_class, tracer_provider_class
from .telemetry import setup_telemetry

_MISSING = ("nemo_lens_cpp.providers.{name}() needs OpenTelemetry Python's API (the "
            "opentelemetry-api package), which could not be imported: {error}")


def __getattr__(name: str) -> Any:
    # LensTracerProvider / LensMeterProvider: made on first use, on what OpenTelemetry offers then.
    if name == "LensTracerProvider":
        return tracer_provider_class()
    if name == "LensMeterProvider":
        return meter_provider_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
