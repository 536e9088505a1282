"""Test stand-in for ``opentelemetry.sdk.trace``: the SDK TracerProvider, its Tracer and spans,
ReadableSpan, Event and SpanProcessor.

A span's parent is trace.get_current_span(context) when that span's context is valid (same
trace id), else it is a root span with a new trace id. Sampling is always the SDK default,
ParentBased(ALWAYS_ON): a root span or a child of a sampled parent is recorded and sampled, a
child of an unsampled parent is a NonRecordingSpan. Unlike the real SDK, the `sampler` argument
is kept (``provider.sampler``) but not consulted; there are no span limits and attribute values
are not validated (list values are stored as tuples, as the SDK does); OTEL_SDK_DISABLED and
OTEL_TRACES_SAMPLER are not read; and there is no fork handling.
"""

import atexit
import contextlib
import json
import logging
import threading
import traceback
from time import time_ns
from types import MappingProxyType

from opentelemetry import trace as trace_api
from opentelemetry.sdk import util
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.id_generator import IdGenerator, RandomIdGenerator  # noqa: F401
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import NoOpTracer, SpanContext  # noqa: F401
from opentelemetry.trace.status import Status, StatusCode

logger = logging.getLogger(__name__)


class SpanProcessor:
    """Hooks called, in the order processors were added, as spans start and end."""

    def on_start(self, span, parent_context=None):
        """`span` (the live SDK span) has started; `parent_context` is the Context given to
        start_span()."""

    def _on_ending(self, span):
        """`span` is ending: its end time is set and it can still be read."""

    def on_end(self, span):
        """`span` (a ReadableSpan) has ended."""

    def shutdown(self):
        """The provider is shutting down."""

    def force_flush(self, timeout_millis=30000):
        """Exports what has not been exported yet; False when `timeout_millis` ran out."""
        return True


class SynchronousMultiSpanProcessor(SpanProcessor):
    """Calls each added processor in turn (what a TracerProvider holds)."""

    def __init__(self):
        self._span_processors = ()
        self._lock = threading.Lock()

    def add_span_processor(self, span_processor):
        with self._lock:
            self._span_processors += (span_processor,)

    def on_start(self, span, parent_context=None):
        for processor in self._span_processors:
            processor.on_start(span, parent_context=parent_context)

    def _on_ending(self, span):
        for processor in self._span_processors:
            processor._on_ending(span)  # pylint: disable=protected-access

    def on_end(self, span):
        for processor in self._span_processors:
            processor.on_end(span)

    def shutdown(self):
        for processor in self._span_processors:
            processor.shutdown()

    def force_flush(self, timeout_millis=30000):
        """Flushes each processor with what is left of the overall timeout; False as soon as
        it ran out or when any processor returned False."""
        deadline = time_ns() + timeout_millis * 1_000_000
        flushed = True
        for processor in self._span_processors:
            left = deadline - time_ns()
            if left <= 0:
                return False
            if processor.force_flush(left // 1_000_000) is False:
                flushed = False
        return flushed


class Event:
    """A named, timestamped (ns; now by default) annotation on a span, with attributes."""

    def __init__(self, name, attributes=None, timestamp=None):
        self._name = name
        self._attributes = attributes
        self._timestamp = time_ns() if timestamp is None else timestamp

    @property
    def name(self):
        return self._name

    @property
    def attributes(self):
        return self._attributes

    @property
    def timestamp(self):
        return self._timestamp

    @property
    def dropped_attributes(self):
        return 0


def _is_valid_link(context, attributes):
    return bool(context and (context.is_valid or attributes or context.trace_state))


def _frozen(attributes):
    return MappingProxyType(util._clean_attributes(attributes))


class ReadableSpan:
    """A read-only view of a span: what processors' on_end() and exporters receive."""

    def __init__(self, name, context=None, parent=None, resource=None, attributes=None,
                 events=(), links=(), kind=trace_api.SpanKind.INTERNAL,
                 instrumentation_info=None, status=Status(StatusCode.UNSET), start_time=None,
                 end_time=None, instrumentation_scope=None):
        self._name = name
        self._context = context
        self._parent = parent
        self._resource = Resource.create({}) if resource is None else resource
        self._attributes = attributes
        self._events = events
        self._links = links
        self._kind = kind
        self._instrumentation_info = instrumentation_info
        self._instrumentation_scope = instrumentation_scope
        self._status = status
        self._start_time = start_time
        self._end_time = end_time

    dropped_attributes = property(lambda self: 0)
    dropped_events = property(lambda self: 0)
    dropped_links = property(lambda self: 0)

    @property
    def name(self):
        return self._name

    def get_span_context(self):
        return self._context

    @property
    def context(self):
        return self._context

    @property
    def kind(self):
        return self._kind

    @property
    def parent(self):
        """The parent's SpanContext, or None for a root span."""
        return self._parent

    @property
    def start_time(self):
        return self._start_time

    @property
    def end_time(self):
        return self._end_time

    @property
    def status(self):
        return self._status

    @property
    def attributes(self):
        return MappingProxyType(self._attributes or {})

    @property
    def events(self):
        return tuple(self._events)

    @property
    def links(self):
        return tuple(self._links)

    @property
    def resource(self):
        return self._resource

    @property
    def instrumentation_info(self):
        return self._instrumentation_info

    @property
    def instrumentation_scope(self):
        return self._instrumentation_scope

    def to_json(self, indent=4):
        """The span as the SDK's console JSON (ids as 0x-prefixed hex, times as ISO 8601)."""
        status = {"status_code": self._status.status_code.name}
        if self._status.description:
            status["description"] = self._status.description
        document = {
            "name": self._name,
            "context": _context_json(self._context) if self._context else None,
            "kind": str(self._kind),
            "parent_id": (None if self._parent is None
                          else "0x" + trace_api.format_span_id(self._parent.span_id)),
            "start_time": util.ns_to_iso_str(self._start_time) if self._start_time else None,
            "end_time": util.ns_to_iso_str(self._end_time) if self._end_time else None,
            "status": status,
            "attributes": _attributes_json(self._attributes),
            "events": [{"name": e.name, "timestamp": util.ns_to_iso_str(e.timestamp),
                        "attributes": _attributes_json(e.attributes)} for e in self._events],
            "links": [{"context": _context_json(link.context),
                       "attributes": _attributes_json(link.attributes)} for link in self._links],
            "resource": json.loads(self._resource.to_json()),
        }
        return json.dumps(document, indent=indent)


def _context_json(context):
    return {"trace_id": "0x" + trace_api.format_trace_id(context.trace_id),
            "span_id": "0x" + trace_api.format_span_id(context.span_id),
            "trace_state": repr(context.trace_state)}


def _attributes_json(attributes):
    if attributes is None or isinstance(attributes, dict):
        return attributes
    return dict(attributes)


def _unless_ended(method):
    """Runs `method` only while the span has not ended; afterwards it logs a warning."""

    def guarded(self, *args, **kwargs):
        with self._lock:  # pylint: disable=protected-access
            ended = self._end_time is not None  # pylint: disable=protected-access
            if not ended:
                method(self, *args, **kwargs)
        if ended:
            logger.warning("Tried calling %s on an ended span.", method.__name__)

    guarded.__name__ = method.__name__
    return guarded


class Span(trace_api.Span, ReadableSpan):
    """The SDK's recording span; made by a Tracer (instantiate _Span, not Span)."""

    def __new__(cls, *args, **kwargs):
        if cls is Span:
            raise TypeError("Span must be instantiated via a tracer.")
        return super().__new__(cls)

    def __init__(self, name, context, parent=None, sampler=None, trace_config=None,
                 resource=None, attributes=None, events=None, links=(),
                 kind=trace_api.SpanKind.INTERNAL, span_processor=SpanProcessor(),
                 instrumentation_info=None, record_exception=True,
                 set_status_on_exception=True, limits=None, instrumentation_scope=None):
        super().__init__(name=name, context=context, parent=parent, kind=kind,
                         resource=Resource.create({}) if resource is None else resource,
                         instrumentation_info=instrumentation_info,
                         instrumentation_scope=instrumentation_scope)
        self._sampler = sampler
        self._record_exception = record_exception
        self._set_status_on_exception = set_status_on_exception
        self._span_processor = span_processor
        self._lock = threading.Lock()
        self._attributes = util._clean_attributes(attributes)
        self._events = [Event(e.name, _frozen(e.attributes), e.timestamp) for e in events or ()]
        self._links = [trace_api.Link(link.context, _frozen(link.attributes))
                       for link in links or () if link and _is_valid_link(link.context,
                                                                           link.attributes)]

    def __repr__(self):
        return f'{type(self).__name__}(name="{self._name}", context={self._context})'

    def get_span_context(self):
        return self._context

    def set_attributes(self, attributes):
        with self._lock:
            if self._end_time is not None:
                logger.warning("Setting attribute on ended span.")
                return
            self._attributes.update(util._clean_attributes(attributes))

    def set_attribute(self, key, value):
        self.set_attributes({key: value})

    @_unless_ended
    def _add_event(self, event):
        self._events.append(event)

    def add_event(self, name, attributes=None, timestamp=None):
        self._add_event(Event(name=name, attributes=_frozen(attributes), timestamp=timestamp))

    @_unless_ended
    def _add_link(self, link):
        self._links.append(link)

    def add_link(self, context, attributes=None):
        if _is_valid_link(context, attributes):
            self._add_link(trace_api.Link(context=context, attributes=_frozen(attributes)))

    def _readable_span(self):
        return ReadableSpan(
            name=self._name, context=self._context, parent=self._parent,
            resource=self._resource, attributes=dict(self._attributes),
            events=tuple(self._events), links=tuple(self._links), kind=self._kind,
            status=self._status, start_time=self._start_time, end_time=self._end_time,
            instrumentation_info=self._instrumentation_info,
            instrumentation_scope=self._instrumentation_scope)

    def start(self, start_time=None, parent_context=None):
        """Sets the start time (default: now) and calls the processors' on_start()."""
        with self._lock:
            if self._start_time is not None:
                logger.warning("Calling start() on a started span.")
                return
            self._start_time = time_ns() if start_time is None else start_time
        self._span_processor.on_start(self, parent_context=parent_context)

    def end(self, end_time=None):
        """Sets the end time (default: now) and calls the processors' on_end() with a
        ReadableSpan; a second call only logs a warning."""
        with self._lock:
            if self._start_time is None:
                raise RuntimeError("Calling end() on a not started span.")
            if self._end_time is not None:
                logger.warning("Calling end() on an ended span.")
                return
            self._end_time = time_ns() if end_time is None else end_time
        self._span_processor._on_ending(self)  # pylint: disable=protected-access
        self._span_processor.on_end(self._readable_span())

    @_unless_ended
    def update_name(self, name):
        self._name = name

    def is_recording(self):
        return self._end_time is None

    @_unless_ended
    def set_status(self, status, description=None):
        """Sets the status; an OK status is final, and UNSET is ignored."""
        if self._status and self._status.status_code is StatusCode.OK:
            return
        if isinstance(status, Status):
            if status.status_code is StatusCode.UNSET:
                return
            if description is not None:
                logger.warning("Description %s ignored. Use either `Status` or "
                               "`(StatusCode, Description)`", description)
            self._status = status
        elif isinstance(status, StatusCode):
            if status is StatusCode.UNSET:
                return
            self._status = Status(status, description)

    def __exit__(self, exc_type, exc_val, exc_tb):
        if exc_val is not None and self.is_recording():
            if self._record_exception:
                self.record_exception(exception=exc_val, escaped=True)
            if self._set_status_on_exception:
                self.set_status(Status(status_code=StatusCode.ERROR,
                                       description=f"{type(exc_val).__name__}: {exc_val}"))
        super().__exit__(exc_type, exc_val, exc_tb)

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False):
        """Adds an "exception" event with exception.type (module-qualified unless builtin),
        .message, .stacktrace and .escaped (a string), plus `attributes`."""
        cls = type(exception)
        qualified = (f"{cls.__module__}.{cls.__qualname__}"
                     if cls.__module__ and cls.__module__ != "builtins" else cls.__qualname__)
        event_attributes = {
            "exception.type": qualified,
            "exception.message": str(exception),
            "exception.stacktrace": "".join(traceback.format_exception(exception)),
            "exception.escaped": str(escaped),
        }
        event_attributes.update(attributes or {})
        self.add_event(name="exception", attributes=event_attributes, timestamp=timestamp)


class _Span(Span):
    """The instantiable SDK span."""


class Tracer(trace_api.Tracer):
    """The SDK tracer: starts _Spans that report to the provider's span processors."""

    def __init__(self, sampler, resource, span_processor, id_generator,
                 instrumentation_info=None, span_limits=None, instrumentation_scope=None):
        self.sampler = sampler
        self.resource = resource
        self.span_processor = span_processor
        self.id_generator = id_generator
        self.instrumentation_info = instrumentation_info
        self._span_limits = span_limits
        self._instrumentation_scope = instrumentation_scope

    @contextlib.contextmanager
    def start_as_current_span(self, name, context=None, kind=trace_api.SpanKind.INTERNAL,
                              attributes=None, links=(), start_time=None, record_exception=True,
                              set_status_on_exception=True, end_on_exit=True):
        """On entering, start_span(), then use_span() on it (ending it on exit unless
        end_on_exit=False)."""
        span = self.start_span(name=name, context=context, kind=kind, attributes=attributes,
                               links=links, start_time=start_time,
                               record_exception=record_exception,
                               set_status_on_exception=set_status_on_exception)
        with trace_api.use_span(span, end_on_exit=end_on_exit,
                                record_exception=record_exception,
                                set_status_on_exception=set_status_on_exception) as current:
            yield current

    def start_span(self, name, context=None, kind=trace_api.SpanKind.INTERNAL, attributes=None,
                   links=(), start_time=None, record_exception=True,
                   set_status_on_exception=True):
        parent = trace_api.get_current_span(context).get_span_context()
        if parent is not None and not isinstance(parent, trace_api.SpanContext):
            raise TypeError("parent_span_context must be a SpanContext or None.")
        if parent is None or not parent.is_valid:
            parent = None
            trace_id = self.id_generator.generate_trace_id()
            random_trace_id = self.id_generator.is_trace_id_random()
            sampled = True
            trace_state = None
        else:
            trace_id = parent.trace_id
            random_trace_id = parent.trace_flags.random_trace_id
            sampled = parent.trace_flags.sampled  # ParentBased(ALWAYS_ON)
            trace_state = parent.trace_state
        flags = trace_api.TraceFlags.SAMPLED if sampled else trace_api.TraceFlags.DEFAULT
        if random_trace_id:
            flags |= trace_api.TraceFlags.RANDOM_TRACE_ID
        span_context = trace_api.SpanContext(trace_id, self.id_generator.generate_span_id(),
                                             is_remote=False,
                                             trace_flags=trace_api.TraceFlags(flags),
                                             trace_state=trace_state)
        if not sampled:
            return trace_api.NonRecordingSpan(context=span_context)
        span = _Span(name=name, context=span_context, parent=parent, sampler=self.sampler,
                     resource=self.resource, attributes=attributes,
                     span_processor=self.span_processor, kind=kind, links=links or (),
                     instrumentation_info=self.instrumentation_info,
                     record_exception=record_exception,
                     set_status_on_exception=set_status_on_exception,
                     limits=self._span_limits, instrumentation_scope=self._instrumentation_scope)
        span.start(start_time=start_time, parent_context=context)
        return span


class TracerProvider(trace_api.TracerProvider):
    """The SDK tracer provider: one Tracer per instrumentation scope, all sharing the span
    processors added with add_span_processor(). Shut down at exit unless shutdown_on_exit=False.
    """

    def __init__(self, sampler=None, resource=None, shutdown_on_exit=True,
                 active_span_processor=None, id_generator=None, span_limits=None):
        self._active_span_processor = active_span_processor or SynchronousMultiSpanProcessor()
        self.id_generator = RandomIdGenerator() if id_generator is None else id_generator
        self._resource = Resource.create({}) if resource is None else resource
        self.sampler = sampler
        self._span_limits = span_limits
        self._tracers = {}
        self._tracers_lock = threading.Lock()
        self._atexit_handler = atexit.register(self.shutdown) if shutdown_on_exit else None

    @property
    def resource(self):
        return self._resource

    def get_tracer(self, instrumenting_module_name, instrumenting_library_version=None,
                   schema_url=None, attributes=None):
        """The Tracer for this scope (the same one for the same scope)."""
        if not instrumenting_module_name:
            instrumenting_module_name = ""
            logger.error("get_tracer called with missing module name.")
        if instrumenting_library_version is None:
            instrumenting_library_version = ""
        scope = InstrumentationScope(instrumenting_module_name, instrumenting_library_version,
                                     schema_url, attributes)
        with self._tracers_lock:
            tracer = self._tracers.get(scope)
            if tracer is None:
                tracer = Tracer(self.sampler, self._resource, self._active_span_processor,
                                self.id_generator, None, self._span_limits, scope)
                self._tracers[scope] = tracer
        return tracer

    def add_span_processor(self, span_processor):
        """Adds a processor; processors are called in the order they were added."""
        self._active_span_processor.add_span_processor(span_processor)

    def shutdown(self):
        """Shuts the span processors down."""
        self._active_span_processor.shutdown()
        if self._atexit_handler is not None:
            atexit.unregister(self._atexit_handler)
            self._atexit_handler = None

    def force_flush(self, timeout_millis=30000):
        """Flushes the span processors in turn; False when the timeout ran out."""
        return self._active_span_processor.force_flush(timeout_millis)
