"""Test stand-in for opentelemetry.metrics._internal: the global MeterProvider (set once, as the
real API does; test suites reset _METER_PROVIDER and _METER_PROVIDER_SET_ONCE)."""

import logging

from opentelemetry.util._once import Once

_logger = logging.getLogger(__name__)


class MeterProvider:
    """The interface: get_meter(name, version=None, schema_url=None, attributes=None)."""

    def get_meter(self, name, version=None, schema_url=None, attributes=None):
        raise NotImplementedError


class NoOpMeter:
    """A meter whose instruments record nothing."""

    def __init__(self, name):
        self.name = name


class NoOpMeterProvider(MeterProvider):
    """Hands out meters that record nothing."""

    def get_meter(self, name, version=None, schema_url=None, attributes=None):
        return NoOpMeter(name)


class _ProxyMeterProvider(MeterProvider):
    """The default global: no-op meters until a provider is set."""

    def get_meter(self, name, version=None, schema_url=None, attributes=None):
        if _METER_PROVIDER is not None:
            return _METER_PROVIDER.get_meter(name, version, schema_url, attributes)
        return NoOpMeter(name)


_METER_PROVIDER = None
_METER_PROVIDER_SET_ONCE = Once()
_PROXY_METER_PROVIDER = _ProxyMeterProvider()


def set_meter_provider(meter_provider):
    """Sets the global MeterProvider; a second call warns and changes nothing."""
    def set_provider():
        global _METER_PROVIDER
        _METER_PROVIDER = meter_provider

    if not _METER_PROVIDER_SET_ONCE.do_once(set_provider):
        _logger.warning("Overriding of current MeterProvider is not allowed")


def get_meter_provider():
    """The global MeterProvider, or the proxy while none was set."""
    if _METER_PROVIDER is None:
        return _PROXY_METER_PROVIDER
    return _METER_PROVIDER


def get_meter(name, version="", meter_provider=None, schema_url=None, attributes=None):
    """The meter `name` of `meter_provider` (default: the global one)."""
    provider = meter_provider if meter_provider is not None else get_meter_provider()
    return provider.get_meter(name, version, schema_url, attributes)
