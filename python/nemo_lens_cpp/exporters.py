"""Where a span goes once it ended, in Python: FinishedSpan, the record an exporter receives, and
InMemorySpanExporter, which keeps them (setup_telemetry(span_exporter=...))."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from . import _core


@dataclass
class FinishedSpan:
    """A span as an exporter received it (InMemorySpanExporter.get_finished_spans())."""

    name: str
    group: str
    trace_id: str
    span_id: str
    parent_span_id: Optional[str]
    parent_is_remote: bool
    kind: int
    start_time_unix_nano: int
    end_time_unix_nano: int
    attributes: Dict[str, Any]
    events: List[dict]
    links: List[dict]
    status_code: int
    status_message: str
    thread_id: int
    truncated: bool
    trace_flags: int = 0
    trace_state: str = ""


class InMemorySpanExporter:
    """Keeps every exported span in memory; pass it as setup_telemetry(span_exporter=...)."""

    def __init__(self) -> None:
        self._core = _core.InMemorySpanExporter()

    def get_finished_spans(self) -> List[FinishedSpan]:
        """The spans exported so far, in export order (call handle.force_flush() first)."""
        return [FinishedSpan(**d) for d in self._core.spans()]

    def clear(self) -> None:
        """Forgets the spans exported so far."""
        self._core.clear()
