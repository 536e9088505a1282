"""The documented opentelemetry.trace interfaces the bridge uses: SpanContext, get_current_span,
get/set_tracer_provider."""

import contextvars

_CURRENT = contextvars.ContextVar("otel_stub.current_span", default=None)
_PROVIDER = None


class SpanContext:
    def __init__(self, trace_id, span_id, is_remote=False, trace_flags=0):
        self.trace_id = trace_id
        self.span_id = span_id
        self.is_remote = is_remote
        self.trace_flags = trace_flags

    @property
    def is_valid(self):
        return self.trace_id != 0 and self.span_id != 0


INVALID_SPAN_CONTEXT = SpanContext(0, 0)


class NonRecordingSpan:
    def __init__(self, context):
        self._context = context

    def get_span_context(self):
        return self._context


INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


def get_current_span(context=None):
    span = _CURRENT.get()
    return span if span is not None else INVALID_SPAN


def set_tracer_provider(provider):
    global _PROVIDER
    _PROVIDER = provider


def get_tracer_provider():
    return _PROVIDER if _PROVIDER is not None else object()
