"""A stand-in for OpenTelemetry Python with the documented interfaces the bridge uses, for test
machines without it (Debian ships no OpenTelemetry packages). tests/python/test_bridge.py uses
the real packages when they can be imported, and this only otherwise."""
