"""The documented opentelemetry.sdk.trace interfaces the bridge and its tests use: TracerProvider
(add_span_processor, get_tracer), Tracer (start_span, start_as_current_span), SpanProcessor."""

import contextlib
import os

from opentelemetry import trace as api


class SpanProcessor:
    def on_start(self, span, parent_context=None):
        pass

    def on_end(self, span):
        pass

    def shutdown(self):
        pass

    def force_flush(self, timeout_millis=30000):
        return True


class Span:
    def __init__(self, name, context, parent, processors):
        self.name = name
        self._context = context
        self.parent = parent
        self._processors = processors
        self._ended = False

    def get_span_context(self):
        return self._context

    def end(self):
        if self._ended:
            return
        self._ended = True
        for p in self._processors:
            p.on_end(self)


class Tracer:
    def __init__(self, provider):
        self._provider = provider

    def start_span(self, name, context=None):
        parent = api.get_current_span().get_span_context()
        trace_id = parent.trace_id if parent.is_valid else int.from_bytes(os.urandom(16), "big")
        ctx = api.SpanContext(trace_id, int.from_bytes(os.urandom(8), "big"), trace_flags=1)
        span = Span(name, ctx, parent if parent.is_valid else None, self._provider._processors)
        for p in self._provider._processors:
            p.on_start(span, parent_context=context)
        return span

    @contextlib.contextmanager
    def start_as_current_span(self, name):
        span = self.start_span(name)
        token = api._CURRENT.set(span)
        try:
            yield span
        finally:
            api._CURRENT.reset(token)
            span.end()


class TracerProvider:
    def __init__(self):
        self._processors = []

    def add_span_processor(self, processor):
        self._processors.append(processor)

    def get_tracer(self, name, *args, **kwargs):
        return Tracer(self)
