"""Attribute values as NeMo Lens keeps them, and redaction (NeMo Lens' ``helpers``, whose face
re-exports them)::

    safe_set_span_attributes(span, {"prompt": text, "tokens": 12})   # prompt -> [REDACTED]

Works on any span with ``is_recording()`` and ``set_attribute()``: lens' own and OpenTelemetry's.
"""

from __future__ import annotations

from typing import Any, FrozenSet, Mapping

DEFAULT_REDACT_KEYS: FrozenSet[str] = frozenset(
    {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
)

_SCALARS = (bool, int, float, str)


def redact_value(key: str, value: Any, redact_keys: FrozenSet[str] = DEFAULT_REDACT_KEYS) -> Any:
    """``"[REDACTED]"`` when `key` is one of `redact_keys`, else `value` unchanged."""
    return "[REDACTED]" if key in redact_keys else value


def safe_set_span_attributes(span: Any, attributes: Mapping[str, Any],
                             redact_keys: FrozenSet[str] = DEFAULT_REDACT_KEYS) -> None:
    """Sets the attributes OpenTelemetry can carry on `span` and skips the rest, as NeMo Lens does:
    None and values other than bool/int/float/str or a list/tuple of them are left out; string
    values of `redact_keys` become ``"[REDACTED]"``; lists are set as lists. Does nothing for
    None (a disabled managed_span) or a span that is not recording."""
    if span is None or not span.is_recording():
        return
    for key, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, _SCALARS):
            if isinstance(value, str):
                value = redact_value(key, value, redact_keys)
            span.set_attribute(key, value)
        elif isinstance(value, (list, tuple)) and all(isinstance(v, _SCALARS) for v in value):
            span.set_attribute(key, list(value))


__all__ = ["DEFAULT_REDACT_KEYS", "redact_value", "safe_set_span_attributes"]
