"""Test stand-in for ``opentelemetry.context``: keys, values and the current Context.

get_current(), attach() and detach() look up the module global ``_RUNTIME_CONTEXT`` on every
call, so code that swaps it for a wrapper is honoured. Unlike the real module, this one does
not read OTEL_PYTHON_CONTEXT: the runtime context is always the ContextVar one.
"""

import logging
from uuid import uuid4

from opentelemetry.context.context import Context, _RuntimeContext  # noqa: F401
from opentelemetry.context.contextvars_context import ContextVarsRuntimeContext

logger = logging.getLogger(__name__)

_RUNTIME_CONTEXT = ContextVarsRuntimeContext()


def create_key(keyname):
    """A key unique to the caller: `keyname` followed by "-" and a random UUID."""
    return f"{keyname}-{uuid4()}"


def get_value(key, context=None):
    """The value under `key` in `context` (default: the current Context), or None."""
    source = get_current() if context is None else context
    return source.get(key)


def set_value(key, value, context=None):
    """A new Context: a copy of `context` (default: the current one) with `key` set to `value`."""
    values = dict(get_current() if context is None else context)
    values[key] = value
    return Context(values)


def get_current():
    """The Context current in this thread or task."""
    return _RUNTIME_CONTEXT.get_current()


def attach(context):
    """Makes `context` current and returns the token that detach() takes to undo it."""
    return _RUNTIME_CONTEXT.attach(context)


def detach(token):
    """Undoes the attach() that returned `token`; a failure is logged, not raised."""
    try:
        _RUNTIME_CONTEXT.detach(token)
    except Exception:  # pylint: disable=broad-except
        logger.exception("Failed to detach context")


_ON_EMIT_RECURSION_COUNT_KEY = create_key("on_emit_recursion_count")
_SUPPRESS_INSTRUMENTATION_KEY = create_key("suppress_instrumentation")
_SUPPRESS_HTTP_INSTRUMENTATION_KEY = create_key("suppress_http_instrumentation")

__all__ = ["Context", "attach", "create_key", "detach", "get_current", "get_value", "set_value"]
