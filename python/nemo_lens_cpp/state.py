"""Span-group state and the pipeline-parallel trace carrier (NeMo Lens' ``nemo.lens.state``).

The enabled groups live in the compiled library, shared with every C++ extension of the process::

    from nemo_lens_cpp.state import is_span_group_enabled, set_pp_trace_carrier
    if is_span_group_enabled("step"):
        ...
    set_pp_trace_carrier(broadcast_trace_context(rank))
"""

from __future__ import annotations

import threading
from typing import Optional

from .spans import is_span_group_enabled
from .telemetry import enabled_span_groups, set_enabled_span_groups

_pp_lock = threading.Lock()
_pp_trace_carrier: Optional[dict] = None


def set_pp_trace_carrier(carrier: Optional[dict]) -> None:
    """Stores the carrier that pipeline-parallel stages link to (create_linked_span), e.g. what
    broadcast_trace_context() returned; None clears it."""
    global _pp_trace_carrier
    if carrier is not None and not isinstance(carrier, dict):
        raise TypeError(f"set_pp_trace_carrier() expects a dict or None, got "
                        f"{type(carrier).__name__}")
    with _pp_lock:
        _pp_trace_carrier = carrier


def get_pp_trace_carrier() -> Optional[dict]:
    """The carrier set_pp_trace_carrier() stored last, or None."""
    with _pp_lock:
        return _pp_trace_carrier


__all__ = ["enabled_span_groups", "get_pp_trace_carrier", "is_span_group_enabled",
           "set_enabled_span_groups", "set_pp_trace_carrier"]
