"""bridge_opentelemetry(): joins lens and OpenTelemetry Python now.

setup_telemetry() joins them by itself whenever OpenTelemetry Python is importable (see
docs/python.md); this call is for a process that wants the join before, or without, lens'
set-up, e.g. one whose OpenTelemetry spans should parent C++ extensions' spans. OpenTelemetry is
imported only when it is called.
"""

from __future__ import annotations

from typing import Any

from . import otel

_MISSING = (
    "nemo_lens_cpp.bridge_opentelemetry() needs OpenTelemetry Python (the opentelemetry-api and "
    "opentelemetry-sdk packages), which could not be imported: {error}. Install them (e.g. pip "
    "install opentelemetry-sdk) or leave the bridge out: the rest of nemo_lens_cpp works "
    "without them."
)


def bridge_opentelemetry(tracer_provider: Any = None) -> None:
    """Joins lens and OpenTelemetry Python in this process: while an OpenTelemetry span is
    current (any tracer provider's), a C++ LENS_SPAN or a Python lens span started meanwhile is
    its child; inside a lens span, ``trace.get_current_span()`` is that span. `tracer_provider`
    is accepted for code written for earlier versions and not needed. Raises ImportError naming
    the missing packages."""
    try:
        import opentelemetry.context  # noqa: F401
        import opentelemetry.trace  # noqa: F401
    except ImportError as error:
        raise ImportError(_MISSING.format(error=error)) from error
    otel.install()
