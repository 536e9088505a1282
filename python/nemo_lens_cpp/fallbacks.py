"""No-op stand-ins with the public signatures, for code that must run where nemo_lens_cpp is
missing. Nothing but the standard library is imported::

    try:
        from nemo_lens_cpp.helpers import managed_span
        from nemo_lens_cpp.state import is_span_group_enabled
    except ImportError:
        from nemo_lens_cpp.fallbacks import managed_span, is_span_group_enabled
"""

from contextlib import contextmanager


def trace_fn(group, name, tracer=None):
    """A decorator that returns the function unchanged."""

    def decorator(func):
        return func

    return decorator


@contextmanager
def managed_span(group, name, tracer=None, **attributes):
    """A context manager that yields None."""
    yield None


@contextmanager
def span_cm(name, tracer=None, record_exception=True, **attributes):
    """A context manager that yields None."""
    yield None


def is_span_group_enabled(group):
    """Always False."""
    return False


def safe_set_span_attributes(span, attributes, redact_keys=None):
    """Does nothing."""
