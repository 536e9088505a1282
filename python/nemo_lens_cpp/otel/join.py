"""Joining lens and OpenTelemetry Python in one process (OpenTelemetry imported by install()).

install() joins the two:
- OpenTelemetry's runtime context is wrapped, so ``trace.get_current_span()`` inside a lens span
  (Python, or C++ calling back into Python) is that span, OpenTelemetry's propagators inject it,
  and a context OpenTelemetry attaches (``use_span``, ``start_as_current_span`` of any tracer,
  ``context.attach``) is the lens parent of the spans started meanwhile, Python and C++ alike;
- lens spans handed to OpenTelemetry code are seen through OpenTelemetry's Span interface
  (wrap()), and contexts convert both ways (otel_span_context(), lens_context_of()).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Dict, List, Optional

from .. import _core
from .._tracer import Tracer
from ..spans import Span, SpanContext, _current, lens_span_context

_log = logging.getLogger("nemo_lens_cpp")

_active = False  # install() succeeded
_trace_api: Any = None  # opentelemetry.trace, once installed
_context: Any = None  # opentelemetry.context
_SPAN_KEY: Optional[str] = None
_BAGGAGE_KEY: Optional[str] = None
OtelSpan: Any = None  # the class of lens spans seen through OpenTelemetry's Span interface
_SpanContext: Any = None  # OpenTelemetry's SpanContext with lens' hex properties

# OpenTelemetry's SpanKind numbering (INTERNAL=0) against lens' (OTLP, INTERNAL=1).
_KIND_NAMES = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")


def ensure() -> None:
    """install(), once OpenTelemetry's API has been imported by anyone in this process."""
    if not _active and "opentelemetry.context" in sys.modules:
        install()


def install() -> bool:
    """Joins lens and OpenTelemetry Python when OpenTelemetry's API is importable; idempotent.
    Returns whether it is joined. Never raises."""
    global _active, _trace_api, _context, _SPAN_KEY, _BAGGAGE_KEY, OtelSpan, _SpanContext
    if _active:
        return True
    try:
        from opentelemetry import context as otel_context
        from opentelemetry import trace as otel_trace
        from opentelemetry.trace import propagation as otel_propagation
    except ImportError:
        return False
    try:
        baggage_key = getattr(sys.modules.get("opentelemetry.baggage"), "_BAGGAGE_KEY", None)
        if baggage_key is None:
            try:
                from opentelemetry import baggage as otel_baggage

                baggage_key = otel_baggage._BAGGAGE_KEY
            except (ImportError, AttributeError):
                baggage_key = None
        _trace_api, _context = otel_trace, otel_context
        _SPAN_KEY, _BAGGAGE_KEY = otel_propagation._SPAN_KEY, baggage_key
        OtelSpan = _make_span_class(otel_trace)
        _SpanContext = _make_span_context_class(otel_trace)
        otel_context._RUNTIME_CONTEXT = _make_runtime_context(otel_context)(
            otel_context._RUNTIME_CONTEXT)
        otel_trace.Tracer.register(Tracer)
        # The compiled side calls _current_otel_parent only when OpenTelemetry's own context
        # variable holds a span (its contextvars runtime context: the default one).
        _core._set_bridge_parent(_current_otel_parent, getattr(
            otel_context._RUNTIME_CONTEXT._inner, "_current_context", None), _SPAN_KEY)
        _active = True
    except Exception as error:  # an OpenTelemetry too different to join: lens works alone
        _log.warning("nemo_lens_cpp: cannot join OpenTelemetry Python (%s: %s); lens spans and "
                     "OpenTelemetry spans stay separate", type(error).__name__, error)
        return False
    return True


# --- Context conversions -------------------------------------------------------------------

def _trace_state(otel_trace: Any, header: str) -> Any:
    """OpenTelemetry's TraceState of a W3C tracestate header (empty when none or malformed)."""
    if header:
        try:
            return otel_trace.TraceState.from_header([header])
        except Exception:
            pass
    return otel_trace.TraceState()


def otel_span_context(ctx: Any) -> Any:
    """OpenTelemetry's SpanContext for a lens SpanContext (with lens' trace_id_hex and
    span_id_hex as extra properties)."""
    return _SpanContext(ctx.trace_id, ctx.span_id, bool(ctx.is_remote),
                        _trace_api.TraceFlags(ctx.trace_flags), _trace_state(_trace_api, ctx.trace_state))


def lens_context_of(obj: Any) -> Optional[SpanContext]:
    """The lens SpanContext of an OpenTelemetry SpanContext (int ids), or None."""
    trace_id, span_id = getattr(obj, "trace_id", 0), getattr(obj, "span_id", 0)
    if not isinstance(trace_id, int) or not isinstance(span_id, int) or not trace_id or not span_id:
        return None
    trace_state = getattr(obj, "trace_state", None)
    header = ""
    if trace_state is not None and not isinstance(trace_state, str):
        to_header = getattr(trace_state, "to_header", None)
        header = to_header() if callable(to_header) else ""
    elif isinstance(trace_state, str):
        header = trace_state
    return _core.make_context(format(trace_id, "032x"), format(span_id, "016x"),
                              int(getattr(obj, "trace_flags", 0)),
                              bool(getattr(obj, "is_remote", False)), header)


def context_entries(span_context: Optional[SpanContext], baggage: List[Any]) -> Dict:
    """The OpenTelemetry Context entries of an extracted lens context (empty when not joined)."""
    ensure()
    if not _active:
        return {}
    out: Dict[str, Any] = {}
    if span_context is not None:
        out[_SPAN_KEY] = _trace_api.NonRecordingSpan(otel_span_context(span_context))
    if baggage and _BAGGAGE_KEY is not None:
        out[_BAGGAGE_KEY] = dict(baggage)
    return out


def _current_otel_parent() -> Optional[SpanContext]:
    # The lens parent when no lens span is current: OpenTelemetry's current span (e.g. one
    # attached before install(), or a context lens' wrapper did not see attached).
    span = _context._RUNTIME_CONTEXT._inner.get_current().get(_SPAN_KEY)
    if span is None or not isinstance(span, _trace_api.Span):
        return None
    if isinstance(span, OtelSpan):
        return span._lens.get_span_context()
    return lens_context_of(span.get_span_context())


def _lens_target(context: Any) -> Any:
    # What attaching `context` makes the lens parent: a lens Span, a SpanContext, or None.
    get = getattr(context, "get", None)
    span = get(_SPAN_KEY) if callable(get) else None
    if span is None or not isinstance(span, _trace_api.Span):
        return None
    if isinstance(span, OtelSpan):
        return span._lens
    return lens_context_of(span.get_span_context())


def _make_runtime_context(otel_context: Any) -> type:
    base = otel_context.context._RuntimeContext

    class LensRuntimeContext(base):
        """OpenTelemetry's runtime context, with lens' current span as its current span."""

        def __init__(self, inner: Any) -> None:
            self._inner = inner

        def attach(self, context: Any) -> Any:
            token = self._inner.attach(context)
            target = _lens_target(context)
            if target is None:
                return (token, None, None)
            ctx = target.get_span_context() if isinstance(target, Span) else target
            if ctx is None or not ctx.is_valid:
                return (token, None, None)
            return (token, _current.set(target), _core.attach_context(ctx))

        def detach(self, token: Any) -> None:
            inner, var_token, attached = token
            if attached is not None:
                attached.end()
            if var_token is not None:
                try:
                    _current.reset(var_token)
                except ValueError:  # detached in another context than attached in
                    pass
            self._inner.detach(inner)

        def get_current(self) -> Any:
            ctx = self._inner.get_current()
            lens_ctx = _core.current_context()
            if lens_ctx is None:
                return ctx
            present = ctx.get(_SPAN_KEY)
            if present is not None:
                have = present.get_span_context() if isinstance(present, _trace_api.Span) else None
                if have is not None and have.span_id == lens_ctx.span_id:
                    return ctx
            python = _current.get()
            if isinstance(python, Span) and python.get_span_context() == lens_ctx:
                view = OtelSpan(python)
            else:  # a C++ span, or an attached remote context
                view = _trace_api.NonRecordingSpan(otel_span_context(lens_ctx))
            out = dict(ctx)
            out[_SPAN_KEY] = view
            return otel_context.Context(out)

    return LensRuntimeContext


# --- Lens spans through OpenTelemetry's Span interface -------------------------------------

def _make_span_context_class(otel_trace: Any) -> type:
    class LensSpanContext(otel_trace.SpanContext):
        """OpenTelemetry's SpanContext of a lens span, with lens' hex ids beside the ints."""

        __slots__ = ()

        @property
        def trace_id_hex(self) -> str:
            """The trace id as 32 lowercase hex digits."""
            return format(self.trace_id, "032x")

        @property
        def span_id_hex(self) -> str:
            """The span id as 16 lowercase hex digits."""
            return format(self.span_id, "016x")

    return LensSpanContext


def _make_span_class(otel_trace: Any) -> type:
    class LensOtelSpan(otel_trace.Span):
        """A lens span seen through OpenTelemetry's Span interface: what ``handle.tracer``,
        ``get_tracer()`` and OpenTelemetry's global tracer return, and what
        ``trace.get_current_span()`` is inside a lens span. ``with span`` makes it current
        (Python and C++) and ends it."""

        __slots__ = ("_lens", "_otel_context")

        def __init__(self, lens_span: Span) -> None:
            self._lens = lens_span
            self._otel_context = None

        def get_span_context(self) -> Any:
            if self._otel_context is None:
                ctx = self._lens.get_span_context()
                self._otel_context = (otel_span_context(ctx) if ctx is not None
                                      else otel_trace.INVALID_SPAN_CONTEXT)
            return self._otel_context

        def is_recording(self) -> bool:
            return self._lens.is_recording()

        def set_attribute(self, key: str, value: Any) -> None:
            self._lens.set_attribute(key, value)

        def set_attributes(self, attributes: Dict[str, Any]) -> None:
            self._lens.set_attributes(attributes)

        def add_event(self, name: str, attributes: Any = None, timestamp: Any = None) -> None:
            self._lens.add_event(name, dict(attributes or {}))

        def add_link(self, context: Any, attributes: Any = None) -> None:
            target = lens_context_of(context)
            if target is not None:
                self._lens.add_link(target, dict(attributes or {}))

        def update_name(self, name: str) -> None:
            """Not supported: a lens span's name is fixed at its start (the call is ignored)."""

        def set_status(self, status: Any, description: Optional[str] = None) -> None:
            self._lens.set_status(status, description or "")

        def record_exception(self, exception: BaseException, attributes: Any = None,
                             timestamp: Any = None, escaped: bool = False) -> None:
            self._lens.record_exception(exception)

        def end(self, end_time: Optional[int] = None) -> None:
            self._lens.end(end_time)

        def __enter__(self) -> "LensOtelSpan":
            self._lens.__enter__()
            return self

        def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
            self._lens.__exit__(exc_type, exc, tb)

        def __eq__(self, other: Any) -> bool:
            return isinstance(other, LensOtelSpan) and other._lens is self._lens

        def __hash__(self) -> int:
            return id(self._lens)

        def __repr__(self) -> str:
            return f"LensOtelSpan({self._lens!r})"

    return LensOtelSpan


def wrap(span: Span) -> Any:
    """`span` as OpenTelemetry code expects a span (itself when not joined)."""
    return OtelSpan(span) if _active else span


def lens_context(obj: Any) -> Optional[SpanContext]:
    """The lens SpanContext of an OpenTelemetry object: a lens span seen through OpenTelemetry's
    interface, an OpenTelemetry SpanContext (int ids), span or Context (its current span); None
    when it holds no valid one."""
    lens_span = getattr(obj, "_lens", None)  # a lens span through OpenTelemetry's interface
    if isinstance(lens_span, Span):
        return lens_span.get_span_context()
    if isinstance(getattr(obj, "trace_id", None), int):  # OpenTelemetry's SpanContext
        return lens_context_of(obj)
    get_span_context = getattr(obj, "get_span_context", None)
    if callable(get_span_context):  # an OpenTelemetry span
        return lens_span_context(get_span_context())
    if isinstance(obj, dict) and install():  # an OpenTelemetry Context: its current span
        try:
            return lens_span_context(_trace_api.get_current_span(obj).get_span_context())
        except Exception:
            return None
    return None
