"""Test stand-in for ``opentelemetry.sdk.trace.export.in_memory_span_exporter``."""

import collections
import threading

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class InMemorySpanExporter(SpanExporter):
    """Keeps exported spans in memory (at most `max_spans`, the newest) for tests to read."""

    def __init__(self, max_spans=None):
        self._finished_spans = collections.deque(maxlen=max_spans)
        self._stopped = False
        self._lock = threading.Lock()

    def clear(self):
        """Forgets the spans kept so far."""
        with self._lock:
            self._finished_spans.clear()

    def get_finished_spans(self):
        """The spans kept, oldest first, as a tuple."""
        with self._lock:
            return tuple(self._finished_spans)

    def export(self, spans):
        """Keeps `spans`; FAILURE once shut down."""
        if self._stopped:
            return SpanExportResult.FAILURE
        with self._lock:
            self._finished_spans.extend(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self):
        """Makes later export() calls fail."""
        self._stopped = True

    def force_flush(self, timeout_millis=30000):
        return True
