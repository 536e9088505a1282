"""Test stand-in for ``opentelemetry.trace``: the tracing API (spans, tracers, tracer
providers, the global tracer provider and use_span).

The global provider is ``_TRACER_PROVIDER`` (None until set_tracer_provider()), guarded by
``_TRACER_PROVIDER_SET_ONCE`` (an ``opentelemetry.util._once.Once``), as in the real module, so
test suites can reset both. Unlike the real module, OTEL_PYTHON_TRACER_PROVIDER is not read, and
start_as_current_span()/use_span() are plain contextlib context managers (usable as decorators
of plain functions, not of coroutine functions).
"""

import contextlib
import enum
import logging
from abc import ABC, abstractmethod

from opentelemetry import context as context_api
from opentelemetry.trace.propagation import _SPAN_KEY, get_current_span, set_span_in_context
from opentelemetry.trace.span import (
    DEFAULT_TRACE_OPTIONS,
    DEFAULT_TRACE_STATE,
    INVALID_SPAN,
    INVALID_SPAN_CONTEXT,
    INVALID_SPAN_ID,
    INVALID_TRACE_ID,
    NonRecordingSpan,
    Span,
    SpanContext,
    TraceFlags,
    TraceState,
    format_span_id,
    format_trace_id,
)
from opentelemetry.trace.status import Status, StatusCode
from opentelemetry.util._once import Once

logger = logging.getLogger(__name__)


class Link:
    """A link from a span to the span with SpanContext `context`, with optional attributes."""

    def __init__(self, context, attributes=None):
        self._context = context
        self._attributes = attributes

    @property
    def context(self):
        return self._context

    @property
    def attributes(self):
        return self._attributes

    @property
    def dropped_attributes(self):
        return 0


class SpanKind(enum.Enum):
    """The span's role relative to its parent and remote peers."""

    INTERNAL = 0
    SERVER = 1
    CLIENT = 2
    PRODUCER = 3
    CONSUMER = 4


class TracerProvider(ABC):
    """Hands out tracers."""

    @abstractmethod
    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None,
                   schema_url=None, attributes=None):
        """A Tracer for the named instrumentation scope."""


class Tracer(ABC):
    """Starts spans."""

    @abstractmethod
    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                   links=None, start_time=None, record_exception=True,
                   set_status_on_exception=True):
        """A started span, child of the current span of `context` (default: the current
        Context); it is not made current."""

    @abstractmethod
    def start_as_current_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                              links=None, start_time=None, record_exception=True,
                              set_status_on_exception=True, end_on_exit=True):
        """A context manager starting a span and making it current while it is entered."""


class NoOpTracer(Tracer):
    """A Tracer whose spans record nothing: start_span() passes the parent's context on."""

    def start_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                   links=None, start_time=None, record_exception=True,
                   set_status_on_exception=True):
        parent = get_current_span(context)
        if isinstance(parent, NonRecordingSpan):
            return parent
        parent_context = parent.get_span_context()
        if parent_context is not None and not isinstance(parent_context, SpanContext):
            logger.warning("Invalid span context for %s: %s", parent, parent_context)
            return INVALID_SPAN
        return NonRecordingSpan(context=parent_context)

    @contextlib.contextmanager
    def start_as_current_span(self, name, context=None, kind=SpanKind.INTERNAL, attributes=None,
                              links=None, start_time=None, record_exception=True,
                              set_status_on_exception=True, end_on_exit=True):
        span = self.start_span(name=name, context=context, kind=kind, attributes=attributes,
                               links=links, start_time=start_time,
                               record_exception=record_exception,
                               set_status_on_exception=set_status_on_exception)
        with use_span(span, end_on_exit=end_on_exit, record_exception=record_exception,
                      set_status_on_exception=set_status_on_exception) as current:
            yield current


class NoOpTracerProvider(TracerProvider):
    """A TracerProvider whose tracers are NoOpTracers."""

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None,
                   schema_url=None, attributes=None):
        return NoOpTracer()


class ProxyTracer(Tracer):
    """A tracer from the ProxyTracerProvider: a no-op one until a global provider is set, then
    that provider's tracer for the same scope."""

    def __init__(self, instrumenting_module_name, instrumenting_library_version=None,
                 schema_url=None, attributes=None):
        self._scope = (instrumenting_module_name, instrumenting_library_version, schema_url,
                       attributes)
        self._real_tracer = None
        self._noop_tracer = NoOpTracer()

    @property
    def _tracer(self):
        if self._real_tracer:
            return self._real_tracer
        if _TRACER_PROVIDER:
            self._real_tracer = _TRACER_PROVIDER.get_tracer(*self._scope)
            return self._real_tracer
        return self._noop_tracer

    def start_span(self, *args, **kwargs):
        return self._tracer.start_span(*args, **kwargs)

    @contextlib.contextmanager
    def start_as_current_span(self, *args, **kwargs):
        with self._tracer.start_as_current_span(*args, **kwargs) as span:
            yield span


class ProxyTracerProvider(TracerProvider):
    """What get_tracer_provider() returns until set_tracer_provider(): its get_tracer() is
    the global provider's once one is set, else a ProxyTracer."""

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None,
                   schema_url=None, attributes=None):
        if _TRACER_PROVIDER:
            return _TRACER_PROVIDER.get_tracer(instrumenting_module_name,
                                               instrumenting_library_version, schema_url,
                                               attributes)
        return ProxyTracer(instrumenting_module_name, instrumenting_library_version,
                           schema_url, attributes)


_TRACER_PROVIDER_SET_ONCE = Once()
_TRACER_PROVIDER = None
_PROXY_TRACER_PROVIDER = ProxyTracerProvider()


def get_tracer(instrumenting_module_name, instrumenting_library_version=None,
               tracer_provider=None, schema_url=None, attributes=None):
    """A tracer from `tracer_provider`, by default the global one."""
    provider = get_tracer_provider() if tracer_provider is None else tracer_provider
    return provider.get_tracer(instrumenting_module_name, instrumenting_library_version,
                               schema_url, attributes)


def _set_tracer_provider(tracer_provider, log):
    def store():
        global _TRACER_PROVIDER  # pylint: disable=global-statement
        _TRACER_PROVIDER = tracer_provider

    if not _TRACER_PROVIDER_SET_ONCE.do_once(store) and log:
        logger.warning("Overriding of current TracerProvider is not allowed")


def set_tracer_provider(tracer_provider):
    """Sets the global TracerProvider; only the first call counts, later ones log a warning."""
    _set_tracer_provider(tracer_provider, log=True)


def get_tracer_provider():
    """The global TracerProvider, or the ProxyTracerProvider while none is set."""
    if _TRACER_PROVIDER is None:
        return _PROXY_TRACER_PROVIDER
    return _TRACER_PROVIDER


@contextlib.contextmanager
def use_span(span, end_on_exit=False, record_exception=True, set_status_on_exception=True):
    """Makes `span` the current span while entered. An Exception escaping the block is
    recorded on a recording span and sets its status to ERROR (as asked) and is re-raised;
    BaseExceptions that are not Exceptions are left alone. With end_on_exit the span is ended
    on leaving."""
    try:
        token = context_api.attach(context_api.set_value(_SPAN_KEY, span))
        try:
            yield span
        finally:
            context_api.detach(token)
    except Exception as error:  # pylint: disable=broad-except
        if isinstance(span, Span) and span.is_recording():
            if record_exception:
                span.record_exception(error)
            if set_status_on_exception:
                span.set_status(Status(status_code=StatusCode.ERROR,
                                       description=f"{type(error).__name__}: {error}"))
        raise
    finally:
        if end_on_exit:
            span.end()


__all__ = [
    "DEFAULT_TRACE_OPTIONS", "DEFAULT_TRACE_STATE", "INVALID_SPAN", "INVALID_SPAN_CONTEXT",
    "INVALID_SPAN_ID", "INVALID_TRACE_ID", "NonRecordingSpan", "Link", "Span", "SpanContext",
    "SpanKind", "TraceFlags", "TraceState", "TracerProvider", "Tracer", "format_span_id",
    "format_trace_id", "get_current_span", "get_tracer", "get_tracer_provider",
    "set_tracer_provider", "set_span_in_context", "use_span", "Status", "StatusCode",
]
