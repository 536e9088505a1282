"""Test stand-in for ``opentelemetry.trace.propagation.tracecontext``: the W3C Trace Context
(traceparent / tracestate) propagator."""

import re

from opentelemetry import trace
from opentelemetry.context.context import Context
from opentelemetry.propagators import textmap
from opentelemetry.trace import format_span_id, format_trace_id
from opentelemetry.trace.span import TraceState


class TraceContextTextMapPropagator(textmap.TextMapPropagator):
    """Reads and writes the lowercase ``traceparent`` and ``tracestate`` keys."""

    _TRACEPARENT_HEADER_NAME = "traceparent"
    _TRACESTATE_HEADER_NAME = "tracestate"
    # version-traceid-parentid-flags, lowercase hex, optional tail (for versions above 00)
    _TRACEPARENT_HEADER_FORMAT_RE = re.compile(
        r"^[ \t]*([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?[ \t]*$")

    def extract(self, carrier, context=None, getter=textmap.default_getter):
        """`context` (default: an empty Context) with a remote NonRecordingSpan for the
        carrier's traceparent as current span; `context` itself when there is no valid one."""
        if context is None:
            context = Context()
        values = getter.get(carrier, self._TRACEPARENT_HEADER_NAME)
        if not values:
            return context
        match = self._TRACEPARENT_HEADER_FORMAT_RE.search(values[0])
        if match is None:
            return context
        version, trace_id, span_id, flags, tail = match.groups()
        if trace_id == "0" * 32 or span_id == "0" * 16:
            return context
        if version == "ff" or (version == "00" and tail):
            return context
        states = getter.get(carrier, self._TRACESTATE_HEADER_NAME)
        trace_state = None if states is None else TraceState.from_header(states)
        span_context = trace.SpanContext(
            trace_id=int(trace_id, 16), span_id=int(span_id, 16), is_remote=True,
            trace_flags=trace.TraceFlags(int(flags, 16)), trace_state=trace_state)
        return trace.set_span_in_context(trace.NonRecordingSpan(span_context), context)

    def inject(self, carrier, context=None, setter=textmap.default_setter):
        """Writes the traceparent of get_current_span(context), and its tracestate when not
        empty; nothing when that span's context is INVALID_SPAN_CONTEXT."""
        span_context = trace.get_current_span(context).get_span_context()
        if span_context == trace.INVALID_SPAN_CONTEXT:
            return
        setter.set(carrier, self._TRACEPARENT_HEADER_NAME,
                   f"00-{format_trace_id(span_context.trace_id)}-"
                   f"{format_span_id(span_context.span_id)}-{span_context.trace_flags:02x}")
        if span_context.trace_state:
            setter.set(carrier, self._TRACESTATE_HEADER_NAME,
                       span_context.trace_state.to_header())

    @property
    def fields(self):
        return {self._TRACEPARENT_HEADER_NAME, self._TRACESTATE_HEADER_NAME}
