"""The trace across Ray remote calls: the driver sends a carrier, the worker continues the trace.
Ray itself is not imported::

    from nemo_lens_cpp.contrib.ray import ray_dispatch_with_context, traced_remote_call
    worker_fn = traced_remote_call(worker_fn)          # on the worker: a span per call
    ray_dispatch_with_context(actor.step, batch)       # on the driver
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Optional

from ..spans import Context, extract_context, inject_context, span_cm


def inject_ray_context() -> dict:
    """A carrier with the current span's context, to pass to a remote call."""
    return inject_context({})


def extract_ray_context(carrier: Optional[dict] = None) -> Context:
    """The context a remote call received (an empty Context for None)."""
    return extract_context(carrier if carrier is not None else {})


def traced_remote_call(method: Callable, tracer: Any = None) -> Callable:
    """Wraps `method` so that each call takes an ``_otel_carrier`` keyword and runs inside a
    span named after the method, child of the caller's span. `tracer` is accepted for NeMo
    Lens compatibility."""

    @functools.wraps(method)
    def wrapper(*args: Any, _otel_carrier: Optional[dict] = None, **kwargs: Any) -> Any:
        with extract_ray_context(_otel_carrier), span_cm(method.__qualname__):
            return method(*args, **kwargs)

    return wrapper


def ray_dispatch_with_context(remote_fn: Any, *args: Any, _carrier: Optional[dict] = None,
                              **kwargs: Any) -> Any:
    """``remote_fn.remote(*args, _otel_carrier=<current context>, **kwargs)``."""
    if _carrier is None:
        _carrier = inject_ray_context()
    return remote_fn.remote(*args, _otel_carrier=_carrier, **kwargs)


__all__ = ["extract_ray_context", "inject_ray_context", "ray_dispatch_with_context",
           "traced_remote_call"]
