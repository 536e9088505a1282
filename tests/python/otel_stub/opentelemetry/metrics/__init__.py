"""Test stand-in for opentelemetry.metrics: the provider interface and the global provider."""

from opentelemetry.metrics._internal import (  # noqa: F401
    MeterProvider,
    NoOpMeter,
    NoOpMeterProvider,
    get_meter,
    get_meter_provider,
    set_meter_provider,
)
