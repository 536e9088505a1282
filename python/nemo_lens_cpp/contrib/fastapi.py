"""OpenTelemetry's FastAPI instrumentation for an app, imported when called::

    from nemo_lens_cpp.contrib.fastapi import instrument_fastapi
    instrument_fastapi(app)
"""

from __future__ import annotations

from typing import Any


def instrument_fastapi(app: Any, service_name: str = "nemo-gym") -> None:
    """Instruments `app` with ``opentelemetry-instrumentation-fastapi``; raises ImportError
    naming that package when it is missing."""
    try:
        from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    except ImportError as exc:
        raise ImportError(
            "FastAPI instrumentation requires opentelemetry-instrumentation-fastapi "
            "(pip install opentelemetry-instrumentation-fastapi; with NeMo Lens: "
            f"pip install 'nemo-lens[fastapi]'): {exc}"
        ) from exc
    FastAPIInstrumentor.instrument_app(app)
