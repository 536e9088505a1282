"""Test stand-in for ``opentelemetry.sdk.util.instrumentation``: InstrumentationScope."""

import json
from types import MappingProxyType

from opentelemetry.sdk.util import _clean_attributes


class InstrumentationScope:
    """The name, version, schema URL and attributes of what emits telemetry (the arguments of
    get_tracer()). A missing schema URL is ""; the attributes are a read-only mapping. Unlike the
    real one, attribute values are not validated."""

    __slots__ = ("_name", "_version", "_schema_url", "_attributes")

    def __init__(self, name, version=None, schema_url=None, attributes=None):
        self._name = name
        self._version = version
        self._schema_url = "" if schema_url is None else schema_url
        self._attributes = MappingProxyType(_clean_attributes(attributes))

    def _key(self):
        return (self._name, self._version, self._schema_url)

    def __repr__(self):
        return (f"{type(self).__name__}({self._name}, {self._version}, {self._schema_url}, "
                f"{dict(self._attributes)})")

    def __hash__(self):
        return hash(self._key())

    def __eq__(self, other):
        if not isinstance(other, InstrumentationScope):
            return NotImplemented
        return self._key() == other._key() and self._attributes == other._attributes

    def __lt__(self, other):
        if not isinstance(other, InstrumentationScope):
            return NotImplemented
        return self._key() < other._key()

    @property
    def name(self):
        return self._name

    @property
    def version(self):
        return self._version

    @property
    def schema_url(self):
        return self._schema_url

    @property
    def attributes(self):
        return self._attributes

    def to_json(self, indent=4):
        return json.dumps({"name": self._name, "version": self._version,
                           "schema_url": self._schema_url,
                           "attributes": dict(self._attributes) or None}, indent=indent)
