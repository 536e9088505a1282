"""Test stand-in for ``opentelemetry.sdk.trace.export``: the SpanExporter interface and the
simple and batch span processors.

BatchSpanProcessor has no worker thread, unlike the real one: it queues ended sampled spans and
exports them, on the calling thread, when max_export_batch_size of them are queued and on
force_flush() and shutdown(); schedule_delay_millis and export_timeout_millis are validated and
kept but do not schedule anything, and the OTEL_BSP_* variables are not read.
"""

import collections
import enum
import logging
import threading

from opentelemetry.context import _SUPPRESS_INSTRUMENTATION_KEY, attach, detach, set_value
from opentelemetry.sdk.trace import ReadableSpan, Span, SpanProcessor  # noqa: F401

logger = logging.getLogger(__name__)


class SpanExportResult(enum.Enum):
    SUCCESS = 0
    FAILURE = 1


class SpanExporter:
    """Receives batches of ended spans (ReadableSpans)."""

    def export(self, spans):
        """Exports `spans`; returns a SpanExportResult."""

    def shutdown(self):
        """Releases the exporter; called once, when the SDK shuts down."""

    def force_flush(self, timeout_millis=30000):
        """Finishes exporting what export() was given."""


def _export(exporter, spans, what):
    """exporter.export(spans) with instrumentation suppressed; an exception is logged."""
    token = attach(set_value(_SUPPRESS_INSTRUMENTATION_KEY, True))
    try:
        exporter.export(spans)
    except Exception:  # pylint: disable=broad-except
        logger.exception("Exception while exporting %s.", what)
    finally:
        detach(token)


class _ExportingProcessor(SpanProcessor):
    """What both processors share: nothing to do at a span's start, only sampled spans exported."""

    def on_start(self, span, parent_context=None):
        pass

    def _on_ending(self, span):
        pass

    @staticmethod
    def _sampled(span):
        return bool(span.context and span.context.trace_flags.sampled)


class SimpleSpanProcessor(_ExportingProcessor):
    """Exports each ended sampled span at once, on the thread that ended it."""

    def __init__(self, span_exporter):
        self.span_exporter = span_exporter
        self._shutdown = False

    def on_end(self, span):
        if not self._sampled(span):
            return
        if self._shutdown:
            logger.warning("Processor is already shutdown, ignoring call")
            return
        _export(self.span_exporter, (span,), "Span")

    def shutdown(self):
        self._shutdown = True
        self.span_exporter.shutdown()

    def force_flush(self, timeout_millis=30000):
        return True


class BatchSpanProcessor(_ExportingProcessor):
    """Queues ended sampled spans (dropping the oldest beyond max_queue_size) and exports them
    in batches of up to max_export_batch_size, oldest first: whenever a full batch is queued,
    and on force_flush() and shutdown()."""

    def __init__(self, span_exporter, max_queue_size=None, schedule_delay_millis=None,
                 max_export_batch_size=None, export_timeout_millis=None):
        max_queue_size = 2048 if max_queue_size is None else max_queue_size
        schedule_delay_millis = 5000 if schedule_delay_millis is None else schedule_delay_millis
        max_export_batch_size = 512 if max_export_batch_size is None else max_export_batch_size
        export_timeout_millis = 30000 if export_timeout_millis is None else export_timeout_millis
        if max_queue_size <= 0:
            raise ValueError("max_queue_size must be a positive integer.")
        if schedule_delay_millis <= 0:
            raise ValueError("schedule_delay_millis must be positive.")
        if max_export_batch_size <= 0:
            raise ValueError("max_export_batch_size must be a positive integer.")
        if max_export_batch_size > max_queue_size:
            raise ValueError("max_export_batch_size must be less than or equal to "
                             "max_queue_size.")
        self._exporter = span_exporter
        self._max_queue_size = max_queue_size
        self._schedule_delay_millis = schedule_delay_millis
        self._max_export_batch_size = max_export_batch_size
        self._export_timeout_millis = export_timeout_millis
        self._queue = collections.deque(maxlen=max_queue_size)
        self._lock = threading.RLock()
        self._shutdown = False

    @property
    def span_exporter(self):
        return self._exporter

    def on_end(self, span):
        if not self._sampled(span):
            return
        if self._shutdown:
            logger.info("Shutdown called, ignoring Span.")
            return
        with self._lock:
            if len(self._queue) == self._max_queue_size:
                logger.warning("Queue full, dropping Span.")
            self._queue.append(span)
            if len(self._queue) >= self._max_export_batch_size:
                self._export_batches(everything=False)

    def _export_batches(self, everything):
        """Exports full batches, and with `everything` the partial one left too."""
        with self._lock:
            while self._queue and (everything
                                   or len(self._queue) >= self._max_export_batch_size):
                count = min(self._max_export_batch_size, len(self._queue))
                batch = [self._queue.popleft() for _ in range(count)]
                _export(self._exporter, batch, "Span")

    def force_flush(self, timeout_millis=None):
        """Exports everything queued; False after shutdown."""
        if self._shutdown:
            return False
        self._export_batches(everything=True)
        return True

    def shutdown(self):
        """Exports everything queued, then shuts the exporter down; later spans are ignored."""
        if self._shutdown:
            return
        self._export_batches(everything=True)
        self._shutdown = True
        self._exporter.shutdown()
