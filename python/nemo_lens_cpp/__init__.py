"""nemo_lens_cpp: lens for Python programs, one pipeline with their C++ extensions.

The names and behaviour of NeMo Lens' Python API (v0.2.0), so that code written for ``nemo.lens``
runs after ``import nemo_lens_cpp as lens``::

    import nemo_lens_cpp as lens

    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(), rank, world_size)
    with lens.managed_span(lens.SpanGroup.STEP, "train_step", iteration=it) as span:
        train_step()            # C++ LENS_SPANs inside are children of this span
    handle.shutdown()

Every NeMo Lens module has its counterpart at the same path: ``nemo_lens_cpp.helpers``,
``.handle``, ``.state``, ``.strategies``, ``.propagation``, ``.sampling``, ``.resources``,
``.semconv``, ``.instruments``, ``.logging_bridge``, ``.fallbacks``, ``.contrib.nccl`` ...
Importing never fails because an optional piece (OpenTelemetry Python) is missing; only
bridge_opentelemetry() and the contrib instrumentations need it.
"""

from . import _core, otel
from ._tracer import Tracer, get_tracer
from .attributes import DEFAULT_REDACT_KEYS, redact_value, safe_set_span_attributes
from .bridge import bridge_opentelemetry
from .config import ConfigError, NemoLensConfig
from .distributed import broadcast_trace_context, create_linked_span
from .groups import MegatronSpanGroup, SpanGroup, SpanGroupError
from .metrics import (
    Counter,
    Gauge,
    Histogram,
    LoggingHandler,
    Meter,
    Severity,
    UpDownCounter,
    get_meter,
    log,
)
from .spans import (
    Context,
    child_environment,
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
from .exporters import FinishedSpan, InMemorySpanExporter
from .telemetry import (
    AlreadySetUpError,
    ExportStrategy,
    TelemetryHandle,
    capture,
    enabled_span_groups,
    get_export_strategy,
    register_export_strategy,
    registered_strategies,
    set_enabled_span_groups,
    setup_telemetry,
    unregister_export_strategy,
)
from .package_info import (
    __contact_emails__,
    __contact_names__,
    __download_url__,
    __homepage__,
    __package_name__,
    __repository_url__,
    __version__,
)

__all__ = [
    "__contact_emails__", "__contact_names__", "__download_url__", "__homepage__",
    "__package_name__", "__repository_url__", "__version__", "redact_value",
    "safe_set_span_attributes", "broadcast_trace_context", "create_linked_span", "get_tracer",
    "Tracer",
    "AlreadySetUpError", "bridge_opentelemetry", "capture", "child_environment", "ConfigError",
    "Context",
    "Counter", "DEFAULT_REDACT_KEYS", "enabled_span_groups", "ExportStrategy", "extract_context",
    "FinishedSpan", "Gauge", "get_current_span_context", "get_export_strategy", "get_meter",
    "Histogram", "inject_context", "InMemorySpanExporter", "is_span_group_enabled", "log",
    "LoggingHandler", "managed_span", "MegatronSpanGroup", "Meter", "NemoLensConfig",
    "register_export_strategy", "registered_strategies", "set_enabled_span_groups",
    "setup_telemetry", "Severity", "Span", "span_cm", "SpanContext", "SpanGroup", "SpanGroupError",
    "SpanKind", "start_span", "StatusCode", "TelemetryHandle", "trace_fn",
    "unregister_export_strategy", "UpDownCounter",
]

otel.ensure()  # OpenTelemetry Python imported first: join it now (else at its first use)
