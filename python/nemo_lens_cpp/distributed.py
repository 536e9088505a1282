"""One trace across ranks, and links between pipeline stages (NeMo Lens' ``nemo.lens.distributed``)::

    from nemo_lens_cpp.distributed import broadcast_trace_context, create_linked_span
    torch.distributed.init_process_group("gloo")
    with managed_span("job", "train") as job:            # rank 0's span
        carrier = broadcast_trace_context(rank, src_rank=0)
    with extract_context(carrier):                        # every rank: spans join rank 0's trace
        ...
    stage = create_linked_span(None, "pp_stage", remote_carrier=carrier); ...; stage.end()

The carrier is NeMo Lens': UTF-8 JSON of ``traceparent`` / ``tracestate``, which C++
``deserialize_context`` reads too.
"""

from __future__ import annotations

import sys
from typing import Any, Optional

from .attributes import safe_set_span_attributes
from .contrib.nccl import deserialize_context, serialize_context
from .otel import join
from .otel.foreign import foreign_tracer
from .spans import extract_context, lens_span_context, start_span


def broadcast_trace_context(rank: int, src_rank: int = 0) -> Optional[dict]:
    """Sends the current span's context from `src_rank` to every rank over ``torch.distributed``
    (after ``init_process_group``; a collective: every rank must call it). Returns the carrier
    dict on every rank; None without torch, without an initialised process group, or when
    `src_rank` has no current span. Tensors go to the GPU when CUDA is available (as NCCL needs),
    else stay on the CPU (gloo)."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:
        return None
    if not dist.is_available() or not dist.is_initialized():
        return None
    device = "cuda" if torch.cuda.is_available() else "cpu"
    data = serialize_context() if rank == src_rank else b""
    if data == b"{}":
        data = b""  # no current span: nothing to share
    length = torch.tensor([len(data)], dtype=torch.long, device=device)
    dist.broadcast(length, src=src_rank)
    n = int(length.item())
    if n == 0:
        return None
    if rank == src_rank:
        payload = torch.tensor(list(data), dtype=torch.uint8, device=device)
    else:
        payload = torch.zeros(n, dtype=torch.uint8, device=device)
    dist.broadcast(payload, src=src_rank)
    return deserialize_context(bytes(payload.cpu().tolist()))


def create_linked_span(tracer: Any, name: str, remote_context: Any = None,
                       remote_carrier: Optional[dict] = None, **attributes: Any) -> Any:
    """A started span named `name` with a link to the remote span (`remote_context`, a Context
    from extract_context() or a SpanContext; else the context in `remote_carrier`), for stages
    that follow one another without being parent and child. Its parent is the current span.
    The caller ends it (``end()``, or a ``with`` block). Attributes as safe_set_span_attributes
    keeps them. An OpenTelemetry `tracer` that is not lens' makes the span (as in NeMo Lens)."""
    if remote_context is None and remote_carrier is not None:
        remote_context = extract_context(remote_carrier)
    target = lens_span_context(remote_context)
    foreign = foreign_tracer(tracer) if tracer is not None else None
    if foreign is not None:
        join.install()
        link = sys.modules["opentelemetry.trace"].Link
        links = [link(join.otel_span_context(target))] if target is not None else []
        span = foreign.start_span(name, links=links)
    else:
        span = start_span(name)
        if target is not None:
            span.add_link(target)
    if attributes:
        safe_set_span_attributes(span, attributes)
    return span


__all__ = ["broadcast_trace_context", "create_linked_span"]
