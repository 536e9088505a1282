"""Instrumentation helpers (NeMo Lens' ``nemo.lens.helpers``): the gated and ungated spans, the
decorator, and attribute redaction::

    from nemo_lens_cpp.helpers import managed_span, safe_set_span_attributes
    with managed_span("step", "train_step") as span:
        safe_set_span_attributes(span, {"prompt": text, "tokens": 12})   # prompt -> [REDACTED]

A face over ``nemo_lens_cpp.spans`` and ``nemo_lens_cpp.attributes``.
"""

from .attributes import DEFAULT_REDACT_KEYS, redact_value, safe_set_span_attributes
from .spans import managed_span, span_cm, trace_fn

__all__ = ["DEFAULT_REDACT_KEYS", "managed_span", "redact_value", "safe_set_span_attributes",
           "span_cm", "trace_fn"]
