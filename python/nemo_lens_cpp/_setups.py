"""The set-ups of this process, as the layers below set-up see them: the OpenTelemetry adapter's
providers flush and shut down "every live set-up" without importing set-up. setup_telemetry()
registers each handle here; a handle is anything with ``is_shut_down``, ``force_flush(ms)`` and
``shutdown()``."""

from __future__ import annotations

from typing import Any, List

#: Every handle setup_telemetry() returned, in order (shut down ones included).
handles: List[Any] = []


def live() -> List[Any]:
    """The handles not shut down yet."""
    return [h for h in handles if not h.is_shut_down]


def flush_live(timeout_millis: int) -> bool:
    """Flushes every live set-up, even after one timed out; False when one did."""
    return all([h.force_flush(timeout_millis) for h in live()])


def shut_live_down() -> None:
    """Shuts every live set-up down."""
    for handle in live():
        handle.shutdown()
