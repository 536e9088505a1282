"""The OpenTelemetry adapter: one pipeline with OpenTelemetry Python, when it is importable.

It plugs into the spans layer through the one hook that layer offers
(``spans.set_opentelemetry_hook``), at import: the spans layer never imports it. OpenTelemetry
itself is imported only once a program uses it, or at set-up when it is importable.

- ``join``: OpenTelemetry's context and lens' as one (``trace.get_current_span()`` inside a lens
  span, OpenTelemetry spans as lens parents), lens spans through OpenTelemetry's Span interface;
- ``providers``: lens' TracerProvider and MeterProvider, made OpenTelemetry's global ones;
- ``foreign``: managed_span and span_cm on a caller's own OpenTelemetry tracer;
- ``exporter``: lens' spans to an OpenTelemetry SpanExporter;
- ``metric_reader``: lens' metrics to an OpenTelemetry MetricReader.
"""

from __future__ import annotations

from .. import spans
from . import join
from .foreign import ForeignSpan, foreign_tracer
from .join import ensure, install


class _Hook(spans.OpenTelemetryHook):
    """The spans layer's hook, answered by this adapter (the functions themselves: one call)."""

    ensure = staticmethod(join.ensure)
    context_entries = staticmethod(join.context_entries)
    wrap = staticmethod(join.wrap)
    lens_context = staticmethod(join.lens_context)
    foreign_tracer = staticmethod(foreign_tracer)
    foreign_span = staticmethod(ForeignSpan)


spans.set_opentelemetry_hook(_Hook())

__all__ = ["ensure", "install"]
