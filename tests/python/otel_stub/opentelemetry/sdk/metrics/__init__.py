"""Test stand-in for ``opentelemetry.sdk.metrics``: the instrument classes a MetricReader's
preferred temporality is keyed by (no MeterProvider: lens' is the one under test)."""

from opentelemetry.sdk.metrics._internal.instrument import (  # noqa: F401
    Counter,
    Gauge,
    Histogram,
    ObservableCounter,
    ObservableGauge,
    ObservableUpDownCounter,
    UpDownCounter,
)
