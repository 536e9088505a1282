"""One pipeline with OpenTelemetry Python, when it is importable (imported only from here).

install() joins the two:
- OpenTelemetry's runtime context is wrapped, so ``trace.get_current_span()`` inside a lens span
  (Python, or C++ calling back into Python) is that span, OpenTelemetry's propagators inject it,
  and a context OpenTelemetry attaches (``use_span``, ``start_as_current_span`` of any tracer,
  ``context.attach``) is the lens parent of the spans started meanwhile, Python and C++ alike;
- the global TracerProvider and MeterProvider (when none was set) are lens': spans and
  instruments made through OpenTelemetry's API are lens spans and lens instruments.

It also turns what lens exports into OpenTelemetry ReadableSpans for an OpenTelemetry
SpanExporter given to setup_telemetry(span_exporter=...), and runs managed_span/span_cm on a
caller's own OpenTelemetry tracer (tracer=, or the global one when lens is not set up).
"""

from __future__ import annotations

import logging
import sys
from typing import Any, Dict, List, Optional

from . import _core, spans
from .spans import Span, _current

_log = logging.getLogger("nemo_lens_cpp")

_active = False  # install() succeeded
_otel: Any = None  # opentelemetry.trace, once installed
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
    global _active, _otel, _context, _SPAN_KEY, _BAGGAGE_KEY, OtelSpan, _SpanContext
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
        _otel, _context = otel_trace, otel_context
        _SPAN_KEY, _BAGGAGE_KEY = otel_propagation._SPAN_KEY, baggage_key
        OtelSpan = _make_span_class(otel_trace)
        _SpanContext = _make_span_context_class(otel_trace)
        otel_context._RUNTIME_CONTEXT = _make_runtime_context(otel_context)(
            otel_context._RUNTIME_CONTEXT)
        from ._tracer import Tracer

        otel_trace.Tracer.register(Tracer)
        _core._set_bridge_parent(_current_otel_parent)
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
                        _otel.TraceFlags(ctx.trace_flags), _trace_state(_otel, ctx.trace_state))


def lens_context_of(obj: Any) -> Optional[spans.SpanContext]:
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


def context_entries(span_context: Optional[spans.SpanContext], baggage: List[Any]) -> Dict:
    """The OpenTelemetry Context entries of an extracted lens context (empty when not joined)."""
    ensure()
    if not _active:
        return {}
    out: Dict[str, Any] = {}
    if span_context is not None:
        out[_SPAN_KEY] = _otel.NonRecordingSpan(otel_span_context(span_context))
    if baggage and _BAGGAGE_KEY is not None:
        out[_BAGGAGE_KEY] = dict(baggage)
    return out


def _current_otel_parent() -> Optional[spans.SpanContext]:
    # The lens parent when no lens span is current: OpenTelemetry's current span (e.g. one
    # attached before install(), or a context lens' wrapper did not see attached).
    span = _context._RUNTIME_CONTEXT._inner.get_current().get(_SPAN_KEY)
    if span is None or not isinstance(span, _otel.Span):
        return None
    if isinstance(span, OtelSpan):
        return span._lens.get_span_context()
    return lens_context_of(span.get_span_context())


def _lens_target(context: Any) -> Any:
    # What attaching `context` makes the lens parent: a lens Span, a SpanContext, or None.
    get = getattr(context, "get", None)
    span = get(_SPAN_KEY) if callable(get) else None
    if span is None or not isinstance(span, _otel.Span):
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
                have = present.get_span_context() if isinstance(present, _otel.Span) else None
                if have is not None and have.span_id == lens_ctx.span_id:
                    return ctx
            python = _current.get()
            if isinstance(python, Span) and python.get_span_context() == lens_ctx:
                view = OtelSpan(python)
            else:  # a C++ span, or an attached remote context
                view = _otel.NonRecordingSpan(otel_span_context(lens_ctx))
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
            self._lens.end()

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


# --- Providers ------------------------------------------------------------------------------

def set_global_providers() -> None:
    """Makes lens' TracerProvider and MeterProvider OpenTelemetry's global ones, unless a program
    set its own (kept: its spans still parent lens spans through the shared context)."""
    if not install():
        return
    from . import providers

    tracer_provider = providers.LensTracerProvider()
    current = _otel.get_tracer_provider()
    if not isinstance(current, providers.LensTracerProvider):
        if _is_unset(current):
            _otel.set_tracer_provider(tracer_provider)
        else:
            _log.info("nemo_lens_cpp: OpenTelemetry already has a TracerProvider (%s); its spans "
                      "join lens' trace but go to its own exporter", type(current).__name__)
    try:
        from opentelemetry import metrics as otel_metrics
    except ImportError:
        return
    if _is_unset(otel_metrics.get_meter_provider()):
        otel_metrics.set_meter_provider(providers.LensMeterProvider())


def _is_unset(provider: Any) -> bool:
    # OpenTelemetry's default global: a proxy with nothing behind it.
    return type(provider).__name__.startswith("_Proxy") or type(provider).__name__.startswith(
        "Proxy")


# --- Exporting to an OpenTelemetry SpanExporter ---------------------------------------------

class ExporterAdapter:
    """Feeds an OpenTelemetry SpanExporter from lens' exporter thread."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self._resource_key: Any = None
        self._resource: Any = None
        self._convert = _readable_span_factory()

    def export(self, batch: List[dict], resource: Dict[str, Any]) -> bool:
        key = tuple(sorted((k, repr(v)) for k, v in resource.items()))
        if key != self._resource_key:
            self._resource_key, self._resource = key, self._convert.resource(resource)
        readable = [self._convert(d, self._resource) for d in batch]
        try:
            result = self.exporter.export(readable)
        except Exception:  # as OpenTelemetry's batch processor: logged, the batch dropped
            _log.exception("nemo_lens_cpp: span_exporter.export() raised; %d spans dropped "
                           "(counted in stats()['spans_dropped_export_failed'])", len(readable))
            return False
        if result is None or result is True:
            return True
        if result is False:
            return False
        return getattr(result, "name", None) != "FAILURE"

    def flush(self, timeout_millis: int) -> bool:
        flush = getattr(self.exporter, "force_flush", None)
        if not callable(flush):
            return True
        result = flush(timeout_millis)
        return result is None or bool(result)

    def shutdown(self) -> None:
        stop = getattr(self.exporter, "shutdown", None)
        if callable(stop):
            stop()

    def core(self) -> Any:
        return _core.PythonSpanExporter(self.export, self.flush, self.shutdown)


def _readable_span_factory() -> Any:
    try:
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, Status, StatusCode
    except ImportError:
        return _PlainSpans()
    from .package_info import __version__

    scope = InstrumentationScope("nemo.lens", __version__)
    kinds = [getattr(otel_trace.SpanKind, n) for n in _KIND_NAMES]

    def context(trace_id: str, span_id: str, flags: int, state: str, remote: bool) -> Any:
        return otel_trace.SpanContext(int(trace_id, 16), int(span_id, 16), remote,
                                      otel_trace.TraceFlags(flags), _trace_state(otel_trace, state))

    def convert(d: dict, resource: Any) -> Any:
        ctx = context(d["trace_id"], d["span_id"], d["trace_flags"], d["trace_state"], False)
        parent = None
        if d["parent_span_id"]:
            parent = context(d["trace_id"], d["parent_span_id"], d["trace_flags"],
                             d["trace_state"], d["parent_is_remote"])
        code = StatusCode(d["status_code"])
        status = Status(code, d["status_message"] or None) if code is StatusCode.ERROR \
            else Status(code)
        return ReadableSpan(
            name=d["name"], context=ctx, parent=parent, resource=resource,
            attributes=_tuples(d["attributes"]),
            events=[Event(e["name"], _tuples(e["attributes"]), e["time_unix_nano"])
                    for e in d["events"]],
            links=[Link(context(link["trace_id"], link["span_id"], 0, "", False),
                        _tuples(link["attributes"])) for link in d["links"]],
            kind=kinds[d["kind"] - 1] if 1 <= d["kind"] <= 5 else kinds[0],
            status=status, start_time=d["start_time_unix_nano"],
            end_time=d["end_time_unix_nano"], instrumentation_scope=scope)

    convert.resource = lambda attributes: Resource(_tuples(attributes))  # type: ignore
    return convert


def _tuples(attributes: Dict[str, Any]) -> Dict[str, Any]:
    # OpenTelemetry keeps sequence attributes as tuples.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attributes.items()}


class _PlainSpans:
    """Without OpenTelemetry's SDK: the FinishedSpan records lens' own exporter gives."""

    def __call__(self, d: dict, resource: Any) -> Any:
        from .telemetry import FinishedSpan

        return FinishedSpan(**d)

    @staticmethod
    def resource(attributes: Dict[str, Any]) -> Any:
        return dict(attributes)


# --- managed_span / span_cm on a caller's OpenTelemetry tracer ------------------------------

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
        from .helpers import safe_set_span_attributes

        install()
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
                from opentelemetry.trace import StatusCode

                span.record_exception(exc)
                span.set_status(StatusCode.ERROR, str(exc))
        finally:
            sys.modules["opentelemetry.context"].detach(self._token)
            span.end()
        return False


def foreign_tracer(tracer: Any) -> Any:
    """The OpenTelemetry tracer a span site should use instead of lens' pipeline, or None: the
    `tracer` a caller passed when it is not lens', else (while lens is not set up) the global
    tracer of a program that configured OpenTelemetry itself."""
    from ._tracer import Tracer

    if tracer is not None:
        return None if isinstance(tracer, Tracer) else tracer
    otel_trace = sys.modules.get("opentelemetry.trace")
    if otel_trace is None:
        return None
    from .providers import LensTracerProvider

    provider = otel_trace.get_tracer_provider()
    if isinstance(provider, LensTracerProvider) or _is_unset(provider):
        return None
    return provider.get_tracer("nemo.lens")
