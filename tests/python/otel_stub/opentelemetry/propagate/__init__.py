"""Test stand-in for ``opentelemetry.propagate``: inject/extract through the global text-map
propagator. Unlike the real module, the default is the W3C Trace Context propagator alone (the
real default, from OTEL_PROPAGATORS, also carries W3C baggage) and OTEL_PROPAGATORS is not read.
"""

from opentelemetry.propagators import textmap
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_HTTP_TEXT_FORMAT = TraceContextTextMapPropagator()


def extract(carrier, context=None, getter=textmap.default_getter):
    """The global propagator's extract()."""
    return get_global_textmap().extract(carrier, context, getter=getter)


def inject(carrier, context=None, setter=textmap.default_setter):
    """The global propagator's inject()."""
    get_global_textmap().inject(carrier, context=context, setter=setter)


def get_global_textmap():
    return _HTTP_TEXT_FORMAT


def set_global_textmap(http_text_format):
    global _HTTP_TEXT_FORMAT  # pylint: disable=global-statement
    _HTTP_TEXT_FORMAT = http_text_format
