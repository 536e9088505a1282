"""Test stand-in for ``opentelemetry.context.contextvars_context``: the runtime context kept in
a ContextVar (one per thread and asyncio task)."""

from contextvars import ContextVar

from opentelemetry.context.context import Context, _RuntimeContext


class ContextVarsRuntimeContext(_RuntimeContext):
    """The current Context held in a ContextVar whose default is an empty Context."""

    _CONTEXT_KEY = "current_context"

    def __init__(self):
        self._current_context = ContextVar(self._CONTEXT_KEY, default=Context())

    def attach(self, context):
        return self._current_context.set(context)

    def get_current(self):
        return self._current_context.get()

    def detach(self, token):
        self._current_context.reset(token)


__all__ = ["ContextVarsRuntimeContext"]
