"""Test stand-in for ``opentelemetry.util``."""
