"""Test stand-in for the ``opentelemetry`` package (opentelemetry-api and opentelemetry-sdk).

Self-written, minimal versions of OpenTelemetry Python's documented public interfaces (context,
trace, W3C trace-context propagation, and the SDK's tracer provider, span processors and
exporters), for test machines without OpenTelemetry (Debian ships no OpenTelemetry packages).
tests/python/test_bridge.py uses the real packages when they can be imported, and this only
otherwise. The real package is a namespace package; this one is a regular package.
"""
