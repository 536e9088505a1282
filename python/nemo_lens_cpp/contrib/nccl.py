"""The trace context as bytes, to send beside an activation tensor between pipeline stages
(NeMo Lens' UTF-8 JSON carrier, which C++ ``deserialize_context`` reads too)::

    from nemo_lens_cpp.contrib.nccl import serialize_context, extract_nccl_context
    payload = serialize_context()                  # b'{"traceparent": "00-..."}'
    with extract_nccl_context(payload):            # on the receiving stage
        ...
"""

from __future__ import annotations

import json
from typing import Optional

from ..spans import Context, extract_context, inject_context


def serialize_context() -> bytes:
    """The current span's context as NeMo Lens' carrier: UTF-8 JSON of ``traceparent`` (and
    ``tracestate``); ``b"{}"`` outside a span."""
    return json.dumps(inject_context({})).encode("utf-8")


def deserialize_context(data: bytes) -> Optional[dict]:
    """The carrier dict in `data`, or None when it is not UTF-8 JSON."""
    try:
        carrier = json.loads(bytes(data).decode("utf-8"))
    except (ValueError, TypeError):
        return None
    return carrier if isinstance(carrier, dict) else None


def extract_nccl_context(data: bytes) -> Context:
    """The context in `data` (an empty Context when it carries none or is malformed)."""
    carrier = deserialize_context(data)
    return extract_context(carrier if carrier is not None else {})


__all__ = ["deserialize_context", "extract_nccl_context", "serialize_context"]
