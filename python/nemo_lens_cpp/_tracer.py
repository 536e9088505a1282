"""OpenTelemetry's Tracer interface on lens spans: what ``handle.tracer`` and ``get_tracer()``
return, with or without OpenTelemetry Python installed::

    tracer = lens.get_tracer(__name__)
    with tracer.start_as_current_span("load", attributes={"shard": 3}) as span:
        ...
    span = tracer.start_span("request", context=lens.extract_context(headers)); ...; span.end()
"""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, Optional, Sequence

from . import _core, spans
from .spans import SpanKind, _current, lens_span_context

# OpenTelemetry's SpanKind members by name -> lens' (OTLP) values.
_KINDS = {"INTERNAL": SpanKind.INTERNAL, "SERVER": SpanKind.SERVER, "CLIENT": SpanKind.CLIENT,
          "PRODUCER": SpanKind.PRODUCER, "CONSUMER": SpanKind.CONSUMER}


def _lens_kind(kind: Any) -> int:
    name = getattr(kind, "name", None)
    if isinstance(name, str) and name in _KINDS:
        return _KINDS[name]  # an OpenTelemetry SpanKind
    if isinstance(kind, int) and kind in _KINDS.values():
        return kind
    return SpanKind.INTERNAL


class Tracer:
    """OpenTelemetry's ``Tracer`` on lens' pipeline: its spans are lens spans (same trace,
    parentage, exporter and rank decisions as managed_span). Not gated by a span group, as an
    OpenTelemetry tracer is not; it records whenever set-up made this rank export. ``start_time``
    (Unix nanoseconds, as OpenTelemetry's) backdates a span, and ``end(end_time)`` ends it at a
    time of its own; an end before the start is clamped to it (counted in stats())."""

    def __init__(self, name: str = "nemo.lens") -> None:
        self.name = name

    def start_span(self, name: str, context: Any = None, kind: Any = None,
                   attributes: Optional[Dict[str, Any]] = None,
                   links: Optional[Sequence[Any]] = None, start_time: Optional[int] = None,
                   record_exception: bool = True, set_status_on_exception: bool = True) -> Any:
        """A span started now and not current, child of `context` (a Context from
        extract_context(), an OpenTelemetry Context or a SpanContext) or else of the current
        span; the caller ends it."""
        span = _core.new_span("", str(name), dict(attributes or {}), bool(record_exception),
                              lens_span_context(context), _lens_kind(kind))
        span._start(start_time)
        for link in links or ():
            target = lens_span_context(getattr(link, "context", link))
            if target is not None:
                span.add_link(target, dict(getattr(link, "attributes", None) or {}))
        return spans._hook.wrap(span)

    def start_as_current_span(self, name: str, context: Any = None, kind: Any = None,
                              attributes: Optional[Dict[str, Any]] = None,
                              links: Optional[Sequence[Any]] = None,
                              start_time: Optional[int] = None, record_exception: bool = True,
                              set_status_on_exception: bool = True,
                              end_on_exit: bool = True) -> Any:
        """A context manager: the span is current for the block (Python and C++ children) and,
        with `end_on_exit`, ends with it; an exception leaving the block is recorded (when
        `record_exception`) and propagates."""
        if links or not end_on_exit or start_time is not None:
            return self._current_span(name, context, kind, attributes, links, start_time,
                                      record_exception, set_status_on_exception, end_on_exit)
        # The common case: an unstarted span (or its OpenTelemetry view), which entering starts
        # and makes current and leaving ends.
        span = _core.new_span("", name if type(name) is str else str(name),
                              dict(attributes) if attributes else None, bool(record_exception),
                              lens_span_context(context) if context is not None else None,
                              _lens_kind(kind) if kind is not None else SpanKind.INTERNAL)
        return spans._hook.wrap(span)

    @contextlib.contextmanager
    def _current_span(self, name: str, context: Any, kind: Any, attributes: Any, links: Any,
                      start_time: Any, record_exception: bool, set_status_on_exception: bool,
                      end_on_exit: bool) -> Iterator[Any]:
        span = self.start_span(name, context, kind, attributes, links, start_time,
                               record_exception, set_status_on_exception)
        if end_on_exit:
            with span:
                yield span
            return
        lens_span = getattr(span, "_lens", span)
        token = _current.set(lens_span)
        attached = _core.attach_context(lens_span.get_span_context()) \
            if lens_span.get_span_context() is not None else None
        try:
            yield span
        finally:
            if attached is not None:
                attached.end()
            _current.reset(token)


_tracers: Dict[str, Tracer] = {}


def get_tracer(name: str = "nemo.lens", *args: Any, **kwargs: Any) -> Tracer:
    """The Tracer named `name` (its instrumentation scope); the same object for the same name.
    Extra arguments (version, schema_url, ...) are accepted as OpenTelemetry's get_tracer takes
    them."""
    tracer = _tracers.get(name)
    if tracer is None:
        tracer = _tracers.setdefault(name, Tracer(name))
    return tracer
