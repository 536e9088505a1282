"""The OpenTelemetry Python tests: the real opentelemetry-api/-sdk when they can be imported (a
check by hand, docs/python.md), else the stand-in in ../otel_stub with the same documented
interfaces (the distribution ships no OpenTelemetry, so CI uses the stand-in). Run apart from
the other Python tests (ctest python.otel), as a program that uses OpenTelemetry Python."""

import os
import sys

import pytest

try:
    import opentelemetry.sdk.trace  # noqa: F401

    REAL_OPENTELEMETRY = True
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "otel_stub"))
    for _name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        del sys.modules[_name]
    REAL_OPENTELEMETRY = False

import opentelemetry.metrics._internal as otel_metrics  # noqa: E402
import opentelemetry.trace as otel_trace  # noqa: E402
from opentelemetry.util._once import Once  # noqa: E402


def pytest_report_header(config):
    return ("OpenTelemetry: the real opentelemetry-sdk" if REAL_OPENTELEMETRY
            else "OpenTelemetry: the documented-interface stand-in (tests/python/otel_stub)")


def reset_global_providers():
    """Unsets OpenTelemetry's global providers (each can be set only once per process
    otherwise), as OpenTelemetry's and NeMo Lens' own test suites reset them."""
    otel_trace._TRACER_PROVIDER = None
    otel_trace._TRACER_PROVIDER_SET_ONCE = Once()
    otel_metrics._METER_PROVIDER = None
    otel_metrics._METER_PROVIDER_SET_ONCE = Once()


@pytest.fixture(autouse=True)
def unset_global_providers():
    """Every test starts and ends with OpenTelemetry's global providers unset."""
    reset_global_providers()
    yield
    reset_global_providers()
