"""Test stand-in for ``opentelemetry.trace.propagation``: the current span in a Context."""

from opentelemetry.context import create_key, get_value, set_value
from opentelemetry.trace.span import INVALID_SPAN, Span

SPAN_KEY = "current-span"
_SPAN_KEY = create_key("current-span")


def set_span_in_context(span, context=None):
    """A new Context: `context` (default: the current one) with `span` as its current span."""
    return set_value(_SPAN_KEY, span, context=context)


def get_current_span(context=None):
    """The span under the span key of `context` (default: the current Context) when that is a
    Span, else INVALID_SPAN."""
    span = get_value(_SPAN_KEY, context=context)
    return span if isinstance(span, Span) else INVALID_SPAN
