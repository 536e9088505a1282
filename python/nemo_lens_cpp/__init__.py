"""nemo_lens_cpp: lens for Python programs, one pipeline with their C++ extensions.

The names and behaviour of NeMo Lens' Python API (v0.2.0), so that code written for ``nemo.lens``
runs after ``import nemo_lens_cpp as lens``::

    import nemo_lens_cpp as lens

    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank, world_size)
    with lens.managed_span(lens.SpanGroup.STEP, "train_step", iteration=it) as span:
        train_step()            # C++ LENS_SPANs inside are children of this span
    handle.shutdown()

Importing never fails because an optional piece (OpenTelemetry Python) is missing; only
bridge_opentelemetry() needs it.
"""

from . import _core
from .bridge import bridge_opentelemetry
from .config import ConfigError, NemoLensConfig
from .groups import MegatronSpanGroup, SpanGroup, SpanGroupError
from .spans import (
    Context,
    Span,
    SpanContext,
    SpanKind,
    StatusCode,
    extract_context,
    get_current_span_context,
    inject_context,
    is_span_group_enabled,
    managed_span,
    span_cm,
    start_span,
    trace_fn,
)
from .telemetry import (
    AlreadySetUpError,
    ExportStrategy,
    FinishedSpan,
    InMemorySpanExporter,
    TelemetryHandle,
    enabled_span_groups,
    get_export_strategy,
    register_export_strategy,
    registered_strategies,
    set_enabled_span_groups,
    setup_telemetry,
    unregister_export_strategy,
)

DEFAULT_REDACT_KEYS = frozenset(
    {"prompt", "input_text", "output_text", "text", "password", "token", "secret", "key"}
)

__all__ = [
    "AlreadySetUpError", "ConfigError", "Context", "DEFAULT_REDACT_KEYS", "ExportStrategy",
    "FinishedSpan", "InMemorySpanExporter", "MegatronSpanGroup", "NemoLensConfig", "Span",
    "SpanContext", "SpanGroup", "SpanGroupError", "SpanKind", "StatusCode", "TelemetryHandle",
    "bridge_opentelemetry", "enabled_span_groups", "extract_context", "get_current_span_context",
    "get_export_strategy", "inject_context", "is_span_group_enabled", "managed_span",
    "register_export_strategy", "registered_strategies", "set_enabled_span_groups",
    "setup_telemetry", "span_cm", "start_span", "trace_fn", "unregister_export_strategy",
]
