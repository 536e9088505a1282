"""Test stand-in for ``opentelemetry.propagators`` (a namespace package in the real library)."""
