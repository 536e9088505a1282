"""managed_span / span_cm / create_linked_span on an OpenTelemetry tracer that is not lens':
the `tracer=` a caller passes, or OpenTelemetry's global tracer of a program that configured
OpenTelemetry itself while lens is not set up."""

from __future__ import annotations

import sys
from typing import Any, Dict

from .._tracer import Tracer
from ..attributes import safe_set_span_attributes
from . import join
from .providers import is_lens_provider, is_unset

class ForeignSpan:
    """managed_span / span_cm on an OpenTelemetry tracer that is not lens': NeMo Lens' own
    behaviour (start, set the attributes, attach, yield; record an exception; detach, end)."""

    __slots__ = ("_tracer", "_name", "_attributes", "_record", "_span", "_token")

    def __init__(self, tracer: Any, name: str, attributes: Dict[str, Any],
                 record_exception: bool = True) -> None:
        self._tracer, self._name = tracer, name
        self._attributes, self._record = attributes, record_exception
        self._span = self._token = None

    def __enter__(self) -> Any:
        join.install()
        otel_context = sys.modules["opentelemetry.context"]
        otel_trace = sys.modules["opentelemetry.trace"]
        span = self._span = self._tracer.start_span(self._name)
        if self._attributes:
            safe_set_span_attributes(span, self._attributes)
        self._token = otel_context.attach(otel_trace.set_span_in_context(span))
        return span

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        span = self._span
        try:
            if self._record and isinstance(exc, Exception):
                span.record_exception(exc)
                span.set_status(sys.modules["opentelemetry.trace"].StatusCode.ERROR, str(exc))
        finally:
            sys.modules["opentelemetry.context"].detach(self._token)
            span.end()
        return False


def foreign_tracer(tracer: Any) -> Any:
    """The OpenTelemetry tracer a span site should use instead of lens' pipeline, or None: the
    `tracer` a caller passed when it is not lens', else (while lens is not set up) the global
    tracer of a program that configured OpenTelemetry itself."""
    if tracer is not None:
        return None if isinstance(tracer, Tracer) else tracer
    otel_trace = sys.modules.get("opentelemetry.trace")
    if otel_trace is None:
        return None
    provider = otel_trace.get_tracer_provider()
    if is_lens_provider(provider) or is_unset(provider):
        return None
    return provider.get_tracer("nemo.lens")
