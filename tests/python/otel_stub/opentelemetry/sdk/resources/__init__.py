"""Test stand-in for ``opentelemetry.sdk.resources``: Resource.

Resource.create() merges, lowest priority first: the SDK's telemetry.sdk.* attributes, a
per-process service.instance.id, OTEL_RESOURCE_ATTRIBUTES and OTEL_SERVICE_NAME, the given
attributes, and service.name "unknown_service" when none of those named the service. Unlike the
real one, no other resource detectors run (OTEL_EXPERIMENTAL_RESOURCE_DETECTORS is not read),
telemetry.sdk.version is this stand-in's, and attribute values are not validated.
"""

import json
import logging
import os
import threading
import uuid
from types import MappingProxyType
from urllib import parse

from opentelemetry.sdk.util import _clean_attributes

logger = logging.getLogger(__name__)

SERVICE_NAME = "service.name"
SERVICE_NAMESPACE = "service.namespace"
SERVICE_INSTANCE_ID = "service.instance.id"
SERVICE_VERSION = "service.version"
HOST_NAME = "host.name"
PROCESS_PID = "process.pid"
PROCESS_EXECUTABLE_NAME = "process.executable.name"
TELEMETRY_SDK_NAME = "telemetry.sdk.name"
TELEMETRY_SDK_VERSION = "telemetry.sdk.version"
TELEMETRY_SDK_LANGUAGE = "telemetry.sdk.language"

OTEL_RESOURCE_ATTRIBUTES = "OTEL_RESOURCE_ATTRIBUTES"
OTEL_SERVICE_NAME = "OTEL_SERVICE_NAME"

_STUB_SDK_VERSION = "0.0.0+test-stand-in"


class Resource:
    """An immutable set of attributes describing what produces telemetry, and a schema URL
    ("" when none)."""

    def __init__(self, attributes, schema_url=None):
        self._attributes = MappingProxyType(_clean_attributes(attributes))
        self._schema_url = "" if schema_url is None else schema_url

    @staticmethod
    def create(attributes=None, schema_url=None):
        """The SDK's default resource and the environment's, with `attributes` on top."""
        resource = _DEFAULT_RESOURCE.merge(_instance_resource()).merge(_environment_resource())
        resource = resource.merge(Resource(attributes or {}, schema_url))
        if not resource.attributes.get(SERVICE_NAME):
            name = "unknown_service"
            executable = resource.attributes.get(PROCESS_EXECUTABLE_NAME)
            if executable:
                name += ":" + executable
            resource = resource.merge(Resource({SERVICE_NAME: name}, schema_url))
        return resource

    @staticmethod
    def get_empty():
        return _EMPTY_RESOURCE

    @property
    def attributes(self):
        return self._attributes

    @property
    def schema_url(self):
        return self._schema_url

    def merge(self, other):
        """A new Resource: these attributes updated by `other`'s. Two different non-empty
        schema URLs cannot be merged: that logs an error and returns self."""
        if self._schema_url and other.schema_url and self._schema_url != other.schema_url:
            logger.error("Failed to merge resources: The two schemas %s and %s are incompatible",
                         self._schema_url, other.schema_url)
            return self
        merged = dict(self._attributes)
        merged.update(other.attributes)
        return Resource(merged, self._schema_url or other.schema_url)

    def __eq__(self, other):
        if not isinstance(other, Resource):
            return False
        return self._attributes == other._attributes and self._schema_url == other._schema_url

    def __hash__(self):
        return hash(json.dumps(dict(self._attributes), sort_keys=True) + "|" + self._schema_url)

    def to_json(self, indent=4):
        return json.dumps({"attributes": dict(self._attributes), "schema_url": self._schema_url},
                          indent=indent)


_EMPTY_RESOURCE = Resource({})
_DEFAULT_RESOURCE = Resource({TELEMETRY_SDK_LANGUAGE: "python",
                              TELEMETRY_SDK_NAME: "opentelemetry",
                              TELEMETRY_SDK_VERSION: _STUB_SDK_VERSION})

_instance = {"pid": None, "id": None}
_instance_lock = threading.Lock()


def _instance_resource():
    """service.instance.id: a random UUID, new in each process."""
    with _instance_lock:
        if _instance["pid"] != os.getpid():
            _instance["pid"], _instance["id"] = os.getpid(), str(uuid.uuid4())
        return Resource({SERVICE_INSTANCE_ID: _instance["id"]})


def _environment_resource():
    """OTEL_RESOURCE_ATTRIBUTES (comma-separated key=value, values URL-decoded), then
    OTEL_SERVICE_NAME as service.name."""
    attributes = {}
    for item in (os.environ.get(OTEL_RESOURCE_ATTRIBUTES) or "").split(","):
        if not item:
            continue
        key, sep, value = item.partition("=")
        if not sep:
            logger.warning("Invalid key value resource attribute pair %s", item)
            continue
        attributes[key.strip()] = parse.unquote(value.strip())
    service_name = os.environ.get(OTEL_SERVICE_NAME)
    if service_name:
        attributes[SERVICE_NAME] = service_name
    return Resource(attributes)
