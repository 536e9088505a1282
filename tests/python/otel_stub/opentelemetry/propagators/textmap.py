"""Test stand-in for ``opentelemetry.propagators.textmap``: the text-map propagator interface
and the dict getter and setter used by default."""

import abc
import typing
from collections.abc import Iterable

from opentelemetry.context.context import Context  # noqa: F401

CarrierT = typing.TypeVar("CarrierT")
CarrierValT = typing.Union[typing.List[str], str]


class Getter(abc.ABC, typing.Generic[CarrierT]):
    """Reads values out of a carrier."""

    @abc.abstractmethod
    def get(self, carrier, key):
        """The list of values under `key`, or None when there is none."""

    @abc.abstractmethod
    def keys(self, carrier):
        """All the keys of `carrier`."""


class Setter(abc.ABC, typing.Generic[CarrierT]):
    """Writes values into a carrier."""

    @abc.abstractmethod
    def set(self, carrier, key, value):
        """Stores `value` under `key`."""


class DefaultGetter(Getter):
    """A Getter for a mapping: a string value comes back as a one-element list."""

    def get(self, carrier, key):
        value = carrier.get(key, None)
        if value is None:
            return None
        if isinstance(value, Iterable) and not isinstance(value, str):
            return list(value)
        return [value]

    def keys(self, carrier):
        return list(carrier.keys())


class DefaultSetter(Setter):
    """A Setter for a mutable mapping."""

    def set(self, carrier, key, value):
        carrier[key] = value


default_getter = DefaultGetter()
default_setter = DefaultSetter()


class TextMapPropagator(abc.ABC):
    """Moves context in and out of string key/value carriers such as HTTP headers."""

    @abc.abstractmethod
    def extract(self, carrier, context=None, getter=default_getter):
        """A Context built on `context` (default: an empty one) with what `carrier` holds."""

    @abc.abstractmethod
    def inject(self, carrier, context=None, setter=default_setter):
        """Writes what `context` (default: the current one) holds into `carrier`."""

    @property
    @abc.abstractmethod
    def fields(self):
        """The carrier keys inject() may set."""
