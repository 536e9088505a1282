"""The bridge to OpenTelemetry Python (what NeMo Lens' Python library runs on).

After bridge_opentelemetry(), lens spans, Python or C++, started while an OpenTelemetry span is
open on that thread (or, for Python spans, current in that asyncio task) are its children, in
its trace: a job keeps NeMo Lens for its Python code and gets its C++ extensions' spans in the
same trace. OpenTelemetry is imported only here, when the bridge is installed.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

from . import _core, spans
from ._tracer import lens_span_context

_MISSING = (
    "nemo_lens_cpp.bridge_opentelemetry() needs OpenTelemetry Python (the opentelemetry-api and "
    "opentelemetry-sdk packages), which could not be imported: {error}. Install them (e.g. pip "
    "install opentelemetry-sdk) or leave the bridge out: the rest of nemo_lens_cpp works "
    "without them."
)


def bridge_opentelemetry(tracer_provider: Any = None) -> Any:
    """Makes lens spans started under an OpenTelemetry span its children.

    Installs a span processor on `tracer_provider` (default: the global one, which must be an SDK
    TracerProvider): while an OpenTelemetry span is open, it is the thread's current span for
    lens, so a C++ LENS_SPAN or a Python managed_span started meanwhile is its child. Python lens
    spans also take the current OpenTelemetry span as parent when no lens span is current.
    Returns the processor. Raises ImportError naming the missing packages, or TypeError when the
    provider cannot take a span processor.
    """
    try:
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.trace import SpanProcessor
    except ImportError as error:
        raise ImportError(_MISSING.format(error=error)) from error

    provider = tracer_provider if tracer_provider is not None else otel_trace.get_tracer_provider()
    if not hasattr(provider, "add_span_processor"):
        raise TypeError(
            "bridge_opentelemetry() needs an OpenTelemetry SDK TracerProvider (one with "
            f"add_span_processor()), got {type(provider).__name__}: call "
            "trace.set_tracer_provider(TracerProvider()) first or pass tracer_provider="
        )

    class LensBridgeProcessor(SpanProcessor):
        """Makes each OpenTelemetry span, while open, the lens parent on its thread."""

        def __init__(self) -> None:
            self._open: Dict[int, tuple] = {}

        def on_start(self, span: Any, parent_context: Any = None) -> None:
            ctx = lens_span_context(span.get_span_context())
            if ctx is None:
                return
            self._open[span.get_span_context().span_id] = (
                spans._current.set(ctx), _core.attach_context(ctx))

        def on_end(self, span: Any) -> None:
            entry = self._open.pop(span.get_span_context().span_id, None)
            if entry is None:
                return
            token, attached = entry
            attached.end()
            try:
                spans._current.reset(token)
            except ValueError:  # ended in another context than it started in
                pass

        def shutdown(self) -> None:
            for _token, attached in self._open.values():
                attached.end()
            self._open.clear()

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

    processor = LensBridgeProcessor()
    provider.add_span_processor(processor)

    def current_otel_parent() -> Optional[spans.SpanContext]:
        return lens_span_context(otel_trace.get_current_span().get_span_context())

    _core._set_bridge_parent(current_otel_parent)
    return processor
