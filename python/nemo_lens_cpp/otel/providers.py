"""OpenTelemetry's TracerProvider and MeterProvider on lens' pipeline, and the global ones.

set_global_providers() (set-up calls it) makes them OpenTelemetry's global providers when
OpenTelemetry Python is importable, so ``trace.get_tracer(__name__)`` and instrumentation libraries
make lens spans and lens instruments. The classes are made on first use, on the richest base
OpenTelemetry offers then: the SDK's ``TracerProvider`` when the SDK is importable (so
``isinstance(provider, opentelemetry.sdk.trace.TracerProvider)`` holds and its ``sampler``,
``id_generator`` and ``resource`` are there, as NeMo Lens' provider has them), else the API's
interface, else a plain class. Importing this module imports no OpenTelemetry.
"""

from __future__ import annotations

import logging
import os
import random
import sys
from typing import Any, Dict, Optional, Tuple

from .. import _core, _setups
from .._tracer import get_tracer
from ..sampling import RankAwareSampler
from . import join

_log = logging.getLogger("nemo_lens_cpp")


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


# The provider classes, made once (isinstance must see one class per process).
_classes: Dict[str, type] = {}


def _base(sdk_module: str, sdk_name: str, api_module: str, api_name: str) -> Tuple[type, bool]:
    # The SDK's class when importable, else the API's, else object; and whether it is the SDK's.
    for module, name, is_sdk in ((sdk_module, sdk_name, True), (api_module, api_name, False)):
        try:
            return getattr(__import__(module, fromlist=[name]), name), is_sdk
        except (ImportError, AttributeError):
            continue
    return object, False


def _sdk_resource(attributes: Dict[str, Any]) -> Any:
    # The SDK's Resource of lens' resource attributes (a dict without the SDK).
    try:
        from opentelemetry.sdk.resources import Resource
    except ImportError:
        return dict(attributes)
    return Resource(dict(attributes))


def tracer_provider_class() -> type:
    """LensTracerProvider: made on first use (see the module's doc)."""
    cls = _classes.get("tracer")
    if cls is None:
        cls = _classes.setdefault("tracer", _make_tracer_provider_class())
    return cls


def meter_provider_class() -> type:
    """LensMeterProvider: made on first use."""
    cls = _classes.get("meter")
    if cls is None:
        cls = _classes.setdefault("meter", _make_meter_provider_class())
    return cls


def _make_tracer_provider_class() -> type:
    base, sdk = _base("opentelemetry.sdk.trace", "TracerProvider", "opentelemetry.trace",
                      "TracerProvider")

    class LensTracerProvider(base):  # type: ignore[misc,valid-type]
        """OpenTelemetry's TracerProvider on lens: its tracers make lens spans (same trace,
        parentage, exporter and rank decisions as managed_span). ``sampler`` is the
        RankAwareSampler set-up installed (lens applies the same rule in C++), ``id_generator``
        a SeedIndependentIdGenerator, ``resource`` lens' resource."""

        def __init__(self, sampler: Any = None, resource: Any = None) -> None:
            if sdk:
                super().__init__(sampler=sampler, resource=resource, shutdown_on_exit=False,
                                 id_generator=SeedIndependentIdGenerator())
            else:
                self.sampler = sampler
                self.id_generator = SeedIndependentIdGenerator()
                self._resource = resource

        if not sdk:
            @property
            def resource(self) -> Any:
                """lens' resource attributes (a dict without OpenTelemetry's SDK)."""
                return self._resource

        def get_tracer(self, instrumenting_module_name: str = "nemo.lens", *args: Any,
                       **kwargs: Any) -> Any:
            """The lens Tracer named `instrumenting_module_name` (version, schema_url,
            attributes are accepted as OpenTelemetry takes them)."""
            return get_tracer(instrumenting_module_name or "nemo.lens")

        def add_span_processor(self, span_processor: Any) -> None:
            """Accepted, and shut down with the provider; it receives no span: lens spans go to
            lens' exporter (setup_telemetry(span_exporter=...) takes an OpenTelemetry
            SpanExporter)."""
            _log.warning("nemo_lens_cpp: add_span_processor(%s) on lens' TracerProvider: lens "
                         "spans go to lens' exporter, not to span processors; pass an "
                         "OpenTelemetry SpanExporter as setup_telemetry(span_exporter=...)",
                         type(span_processor).__name__)
            if sdk:
                super().add_span_processor(span_processor)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            """Exports what every live set-up recorded so far; False when a timeout passed
            first."""
            return _setups.flush_live(timeout_millis)

        def shutdown(self) -> None:
            """Shuts every live set-up down (as handle.shutdown())."""
            _setups.shut_live_down()
            if sdk:
                super().shutdown()

    return LensTracerProvider


def _make_meter_provider_class() -> type:
    base, _ = _base("opentelemetry.metrics", "MeterProvider", "opentelemetry.metrics",
                    "MeterProvider")

    class LensMeterProvider(base):  # type: ignore[misc,valid-type]
        """OpenTelemetry's MeterProvider on lens: its meters are lens meters (get_meter())."""

        def get_meter(self, name: str = "nemo.lens", *args: Any, **kwargs: Any) -> Any:
            """The lens Meter named `name` (version, schema_url, attributes are accepted)."""
            return _core.get_meter(str(name or "nemo.lens"))

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            """Exports what every live set-up recorded so far."""
            return _setups.flush_live(timeout_millis)

        def shutdown(self) -> None:
            """Shuts every live set-up down."""
            _setups.shut_live_down()

    return LensMeterProvider


def is_lens_provider(provider: Any) -> bool:
    """Whether `provider` is lens' TracerProvider or MeterProvider."""
    return any(isinstance(provider, cls) for cls in _classes.values())


def is_unset(provider: Any) -> bool:
    """Whether `provider` is OpenTelemetry's default global: a proxy with nothing behind it."""
    name = type(provider).__name__
    return name.startswith("_Proxy") or name.startswith("Proxy")


def set_global_providers(config: Any, rank: int, world_size: int,
                         resource: Optional[Dict[str, Any]]) -> None:
    """Makes lens' TracerProvider and MeterProvider OpenTelemetry's global ones, unless a program
    set its own (kept: its spans still parent lens spans through the shared context). A lens
    provider already global takes this set-up's sampler and resource."""
    if not join.install():
        return
    otel_trace = sys.modules["opentelemetry.trace"]
    sampler = (RankAwareSampler(rank, world_size, config.export_sample_rate)
               if config.sampler_enabled else None)
    cls = tracer_provider_class()
    current = otel_trace.get_tracer_provider()
    if isinstance(current, cls):
        current.sampler = sampler if sampler is not None else cls(None, None).sampler
        current._resource = _sdk_resource(resource or {})
    elif is_unset(current):
        otel_trace.set_tracer_provider(cls(sampler, _sdk_resource(resource or {})))
    else:
        _log.info("nemo_lens_cpp: OpenTelemetry already has a TracerProvider (%s); its spans "
                  "join lens' trace but go to its own exporter", type(current).__name__)
    try:
        from opentelemetry import metrics as otel_metrics
    except ImportError:
        return
    if is_unset(otel_metrics.get_meter_provider()):
        otel_metrics.set_meter_provider(meter_provider_class()())
