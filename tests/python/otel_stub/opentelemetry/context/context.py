"""Test stand-in for ``opentelemetry.context.context``: the Context mapping and the interface
of a runtime context (where the current Context lives)."""

from abc import ABC, abstractmethod


class Context(dict):
    """A read-only dict of context values. Derive a new one with context.set_value()."""

    def _read_only(self, *args, **kwargs):
        raise ValueError

    __setitem__ = _read_only
    __delitem__ = _read_only
    __ior__ = _read_only
    setdefault = _read_only
    pop = _read_only
    popitem = _read_only
    clear = _read_only
    update = _read_only


class _RuntimeContext(ABC):
    """Keeps the current Context for the running thread or task."""

    @abstractmethod
    def attach(self, context):
        """Makes `context` current; returns a token for detach()."""

    @abstractmethod
    def get_current(self):
        """The current Context."""

    @abstractmethod
    def detach(self, token):
        """Restores the Context that was current before the attach() that returned `token`."""


__all__ = ["Context"]
