"""Spans from Python: managed_span, span_cm, trace_fn, and context propagation.

Python and C++ spans of one thread share one current span: a C++ ``LENS_SPAN`` in an extension
called inside ``with managed_span(...)`` is its child, and a Python span opened from a callback a
C++ span calls is that span's child. Within Python, the current span lives in a ``contextvars``
variable, so each thread and each asyncio task has its own: spans of concurrent tasks get their
own task's parent, never a sibling's.
"""

from __future__ import annotations

import functools
import inspect
import sys
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

from . import _core

SpanContext = _core.SpanContext

# The span (or attached remote context) current in this thread / asyncio task: a Span or a
# SpanContext. Shared with the compiled part, which reads it when a span starts.
_current = _core.current

# Whether lens is not set up in this process (set-up clears it, the last shutdown sets it again):
# span sites then use OpenTelemetry's global tracer when a program configured one.
_unset = True


def _set_unset(unset: bool) -> None:
    global _unset
    _unset = unset
    _core._set_unset_route(_unset_managed_span if unset else None)


class StatusCode:
    """A span's status (OpenTelemetry's values)."""

    UNSET = 0
    OK = 1
    ERROR = 2


class SpanKind:
    """A span's role in a request (OpenTelemetry's values)."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class Span(_core.SpanBase):
    """A span started from Python: what ``with managed_span(...) as span`` (or span_cm) yields
    when its group is enabled. A context manager: entering starts it and makes it current,
    leaving ends it (an exception leaving the block is recorded, status ERROR, and propagates).
    Every method ignores values it cannot record (never raises for a bad value) and does nothing
    once the span has ended or when it does not record (e.g. on a rank that does not export).

    Compiled methods: is_recording(), get_span_context(), end(end_time=None) (now, or at a time
    of its own in Unix nanoseconds: an end before the start is clamped to it and counted).
    """

    __slots__ = ()

    def set_attribute(self, key: str, value: Any) -> None:
        """Sets one attribute: bool, int, float, str or a list/tuple of one of those; None and
        anything else is skipped. String values of redacted keys become "[REDACTED]"."""
        self._set_attributes({key: value})

    def set_attributes(self, attributes: Dict[str, Any]) -> None:
        """Sets several attributes, as set_attribute() does."""
        self._set_attributes(dict(attributes))

    def add_event(self, name: str, attributes: Optional[Dict[str, Any]] = None) -> None:
        """Adds a timestamped event with attributes (kept as set_attribute() keeps them)."""
        self._add_event(str(name), dict(attributes or {}))

    def set_status(self, status: Any, description: str = "") -> None:
        """Sets the status: a StatusCode value, or an OpenTelemetry Status or StatusCode."""
        code = getattr(status, "status_code", status)
        code = getattr(code, "value", code)
        if not description:
            description = getattr(status, "description", None) or ""
        if isinstance(code, int) and code in (StatusCode.UNSET, StatusCode.OK, StatusCode.ERROR):
            self._set_status(int(code), str(description))

    def add_link(self, context: Any, attributes: Optional[Dict[str, Any]] = None) -> None:
        """Links this span to `context` (a SpanContext, or a Context from extract_context());
        an invalid or missing context is skipped."""
        if isinstance(context, Context):
            context = context.span_context
        if context is not None:
            self._add_link(context, dict(attributes or {}))

    def record_exception(self, exception: BaseException) -> None:
        """Records `exception` as an "exception" event (type, message) and sets status ERROR."""
        self._record_exception(type(exception).__qualname__, str(exception))


_core._set_span_type(Span)


class OpenTelemetryHook:
    """How the spans layer reaches OpenTelemetry Python without importing it: the one hook the
    OpenTelemetry adapter (``nemo_lens_cpp.otel``) plugs in with set_opentelemetry_hook(). This
    default is what a process without the adapter gets: nothing is joined, spans are lens' own.
    The adapter imports OpenTelemetry lazily, so every method costs nothing until OpenTelemetry
    Python is in the process."""

    def ensure(self) -> None:
        """Joins OpenTelemetry Python once its API has been imported (nothing by default)."""

    def context_entries(self, span_context: Optional[SpanContext],
                        baggage: List[Tuple[str, str]]) -> Dict[Any, Any]:
        """The OpenTelemetry Context entries an extracted Context carries (none by default)."""
        return {}

    def wrap(self, span: "Span") -> Any:
        """`span` as OpenTelemetry code expects a span (the span itself by default)."""
        return span

    def lens_context(self, obj: Any) -> Optional[SpanContext]:
        """The lens SpanContext of an OpenTelemetry object (a SpanContext, a span or a Context),
        or None (always None by default)."""
        return None

    def foreign_tracer(self, tracer: Any) -> Any:
        """The OpenTelemetry tracer a span site uses instead of lens' pipeline (the `tracer` a
        caller passed when it is not lens', else the global tracer of a program that configured
        OpenTelemetry itself while lens is not set up), or None (always None by default)."""
        return None

    def foreign_span(self, tracer: Any, name: str, attributes: Dict[str, Any],
                     record_exception: bool) -> Any:
        """A context manager running a span on `tracer` (from foreign_tracer()), as NeMo Lens
        runs managed_span on an OpenTelemetry tracer."""
        raise NotImplementedError("no OpenTelemetry adapter is plugged in")


_hook = OpenTelemetryHook()


def set_opentelemetry_hook(hook: OpenTelemetryHook) -> None:
    """Plugs the OpenTelemetry adapter in (``nemo_lens_cpp.otel`` does, when the package is
    imported); replaces the previous hook."""
    global _hook
    if not isinstance(hook, OpenTelemetryHook):
        raise TypeError(f"set_opentelemetry_hook() expects an OpenTelemetryHook, got "
                        f"{type(hook).__name__}")
    _hook = hook


def _enabled_managed_span(group: Any, name: Any, tracer: Any = None, **attributes: Any) -> Any:
    # What managed_span() calls for arguments its compiled fast path does not take: a `tracer`
    # that is not lens' own makes the span (as in NeMo Lens), behind lens' gate.
    if not isinstance(group, str) or not isinstance(name, str):
        raise TypeError(
            f"managed_span(group, name) expects two str, got {type(group).__name__} and "
            f"{type(name).__name__}"
        )
    if tracer is not None:
        foreign = _hook.foreign_tracer(tracer)
        if foreign is not None:
            return _hook.foreign_span(foreign, name, attributes, True)
    return _core.new_span(str(group), str(name), attributes, True, None, SpanKind.INTERNAL)


def _unset_managed_span(group: Any, name: Any, tracer: Any = None, **attributes: Any) -> Any:
    # managed_span() with its group enabled while lens is not set up: a program that configured
    # OpenTelemetry itself gets its span through OpenTelemetry's global tracer.
    if tracer is None and "opentelemetry.trace" in sys.modules:
        tracer = _hook.foreign_tracer(None)  # the foreign span joins OpenTelemetry when entered
    return _enabled_managed_span(group, name, tracer, **attributes)


_core._set_enabled_impl(_enabled_managed_span)
_core._set_unset_route(_unset_managed_span)

# managed_span(group, name, tracer=None, **attributes): written in C (_core); its docstring there.
managed_span = _core.managed_span


is_span_group_enabled = _core.is_span_group_enabled


def span_cm(name: str, tracer: Any = None, record_exception: bool = True, **attributes: Any
            ) -> Span:
    """A context manager for an ungated span named `name`: it records whenever tracing is set up
    on an exporting rank. Yields the Span. An OpenTelemetry `tracer` that is not lens' makes the
    span instead (as in NeMo Lens), and so does OpenTelemetry's global tracer while lens is not
    set up and a program configured OpenTelemetry itself."""
    if not isinstance(name, str):
        raise TypeError(f"span_cm(name) expects a str, got {type(name).__name__}")
    if tracer is not None or (_unset and "opentelemetry.trace" in sys.modules):
        foreign = _hook.foreign_tracer(tracer)
        if foreign is not None:
            return _hook.foreign_span(foreign, name, attributes, bool(record_exception))
    return _core.new_span("", name, attributes, bool(record_exception), None, SpanKind.INTERNAL)


def start_span(name: str, group: str = "", parent: Optional[SpanContext] = None,
               kind: int = SpanKind.INTERNAL, start_time: Optional[int] = None,
               **attributes: Any) -> Span:
    """A span started now (or at `start_time`, Unix nanoseconds, when it began earlier), under
    an explicit `parent` (a SpanContext, or a Context from extract_context()) or else the current
    span, with `kind`. As OpenTelemetry's tracer.start_span(), it is not current: end it with
    end() (or end(end_time)), or use it in a `with` block, which makes it current and ends it.
    With a `group` that is off, nothing is recorded."""
    if not isinstance(name, str) or not isinstance(group, str):
        raise TypeError("start_span(name, group) expects str")
    if isinstance(parent, Context):
        parent = parent.span_context
    span = _core.new_span(group, name, attributes, True, parent, int(kind))
    span._start(start_time)
    return span


def trace_fn(group: str, name: str, tracer: Any = None) -> Callable:
    """A decorator running every call of the function inside managed_span(group, name). The group
    is checked at call time. Works on plain and async functions."""

    def decorate(func: Callable) -> Callable:
        if inspect.iscoroutinefunction(func):
            @functools.wraps(func)
            async def async_wrapper(*args, **kwargs):
                with managed_span(group, name):
                    return await func(*args, **kwargs)
            return async_wrapper

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with managed_span(group, name):
                return func(*args, **kwargs)
        return wrapper

    return decorate


def get_current_span_context() -> Optional[SpanContext]:
    """The context of the current span as this code sees it: the thread's C++ span when Python
    was called back from one, else this thread's / asyncio task's Python span (or attached
    context), else OpenTelemetry's current span when OpenTelemetry Python is in use; None when
    there is none. Spans the flight recorder records without exporting them are left out, as the
    trace leaves them out: inside one, this is its nearest exported ancestor (what inject_context()
    and broadcast_trace_context() send)."""
    if "opentelemetry.context" in sys.modules:
        _hook.ensure()
    return _core.current_context()


class Context(dict):
    """What extract_context() returns: a remote span context (or none) and baggage. Use it as a
    context manager (or attach()/detach()) to make it the parent of the spans started meanwhile,
    Python and C++ alike; or pass `.span_context` as start_span(parent=...). When OpenTelemetry
    Python is joined (see docs/python.md) it is also an OpenTelemetry Context (a dict holding the
    span and baggage under OpenTelemetry's keys): ``trace.get_current_span(ctx)``,
    ``tracer.start_span(..., context=ctx)`` and ``context.attach(ctx)`` accept it. Compared by
    identity."""

    __slots__ = ("span_context", "baggage", "_tokens")
    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__  # type: ignore[assignment]

    def __init__(self, span_context: Optional[SpanContext], baggage: Iterable[Tuple[str, str]]):
        self.span_context = span_context
        self.baggage = list(baggage)
        self._tokens = []
        if "opentelemetry.trace" in sys.modules:
            dict.update(self, _hook.context_entries(span_context, self.baggage))

    def attach(self) -> object:
        """Makes the context current in this thread / task; returns a token for detach()."""
        if self.span_context is None:
            return (None, None)
        token = (_current.set(self.span_context), _core.attach_context(self.span_context))
        return token

    def detach(self, token: object) -> None:
        """Undoes attach()."""
        var_token, attached = token
        if attached is not None:
            attached.end()
        if var_token is not None:
            try:
                _current.reset(var_token)
            except ValueError:
                pass

    def __enter__(self) -> "Context":
        self._tokens.append(self.attach())
        return self

    def __exit__(self, *exc) -> bool:
        self.detach(self._tokens.pop())
        return False

    def __bool__(self) -> bool:
        return self.span_context is not None


def inject_context(carrier: dict, context: Optional[SpanContext] = None) -> dict:
    """Writes the current span's context (or `context`: a SpanContext, a Context, a span, or an
    OpenTelemetry SpanContext or Context) into `carrier` as W3C `traceparent` (and `tracestate`);
    writes nothing when there is none. The current span is lens' or, when OpenTelemetry Python is
    joined, whatever OpenTelemetry made current. Returns `carrier`."""
    ctx = get_current_span_context() if context is None else lens_span_context(context)
    if ctx is not None:
        _core.inject(ctx, carrier)
    return carrier


def lens_span_context(obj: Any) -> Optional[SpanContext]:
    """The lens SpanContext of `obj`: a lens SpanContext, Context or Span, or an OpenTelemetry
    SpanContext, span or Context; None when it holds no valid one."""
    if obj is None:
        return None
    if isinstance(obj, SpanContext):
        return obj if obj.is_valid else None
    if isinstance(obj, Context):
        return obj.span_context
    if isinstance(obj, Span):
        return obj.get_span_context()
    return _hook.lens_context(obj)


def extract_context(carrier: dict) -> Context:
    """Reads W3C `traceparent`, `tracestate` and `baggage` from `carrier` (header names in any
    case). Malformed values give an empty Context, never an exception."""
    if not isinstance(carrier, dict):
        return Context(None, [])
    ctx, baggage = _core.extract(carrier)
    return Context(ctx, baggage)


def child_environment() -> Dict[str, str]:
    """The environment variables (TRACEPARENT, TRACESTATE, BAGGAGE) a child process started now
    should get to continue this trace: the current span's context, else the one this process
    inherited through them at set-up. Merge them into the child's environment."""
    return dict(_core.child_environment())
