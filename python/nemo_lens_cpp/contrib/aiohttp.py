"""OpenTelemetry's aiohttp client instrumentation: every outgoing request carries the trace
context. Imported when called::

    from nemo_lens_cpp.contrib.aiohttp import instrument_aiohttp_client
    instrument_aiohttp_client()
"""

from __future__ import annotations


def instrument_aiohttp_client() -> None:
    """Instruments aiohttp's client with ``opentelemetry-instrumentation-aiohttp-client``;
    raises ImportError naming that package when it is missing."""
    try:
        from opentelemetry.instrumentation.aiohttp_client import AioHttpClientInstrumentor
    except ImportError as exc:
        raise ImportError(
            "aiohttp client instrumentation requires "
            "opentelemetry-instrumentation-aiohttp-client "
            "(pip install opentelemetry-instrumentation-aiohttp-client; with NeMo Lens: "
            f"pip install 'nemo-lens[aiohttp]'): {exc}"
        ) from exc
    AioHttpClientInstrumentor().instrument()
