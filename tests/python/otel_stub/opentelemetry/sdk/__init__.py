"""Test stand-in for ``opentelemetry.sdk`` (opentelemetry-sdk)."""
