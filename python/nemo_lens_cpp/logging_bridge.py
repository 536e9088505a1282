"""Python logging into lens' log records, with the current span's ids (NeMo Lens'
``nemo.lens.logging_bridge``; exported when ``NEMO_LENS_LOGS_ENABLED=1`` on an exporting rank)::

    from nemo_lens_cpp.logging_bridge import setup_logging_bridge
    setup_logging_bridge("train", logging.INFO)
"""

from __future__ import annotations

import logging
import sys
from typing import Optional, Tuple

from .metrics import LoggingHandler


def setup_logging_bridge(logger_name: str = "", level: int = logging.INFO) -> None:
    """Bridges the logger `logger_name` (the root logger for "") at `level`, as NeMo Lens does:
    when OpenTelemetry's global LoggerProvider is an SDK one, an OpenTelemetry LoggingHandler on
    it; when a program set another LoggerProvider (a no-op one, its own), nothing: the logger is
    left as it is. When none was set, lens' pipeline plays the provider NeMo Lens' set-up would
    have installed: a lens LoggingHandler (records exported when ``NEMO_LENS_LOGS_ENABLED=1`` on an
    exporting rank); a second call for the same logger adds none. Never raises into the
    program."""
    logger = logging.getLogger(logger_name)
    kind, otel_handler = _otel_logger_provider()
    if kind == "sdk":
        otel_handler.setLevel(level)
        logger.addHandler(otel_handler)
        return
    if kind == "other":
        return
    for handler in logger.handlers:
        if isinstance(handler, LoggingHandler):
            handler.setLevel(level)
            return
    handler = LoggingHandler()
    handler.setLevel(level)
    logger.addHandler(handler)


def _otel_logger_provider() -> Tuple[str, Optional[logging.Handler]]:
    # What OpenTelemetry's global LoggerProvider is: "sdk" (with OpenTelemetry's LoggingHandler on
    # it), "other" (a provider a program set that is not the SDK's), or "none" (OpenTelemetry's
    # logs not in use, or its default proxy with nothing behind it).
    if "opentelemetry._logs" not in sys.modules and "opentelemetry.sdk._logs" not in sys.modules:
        return "none", None  # nobody configured OpenTelemetry logs in this process
    try:
        from opentelemetry._logs import get_logger_provider

        provider = get_logger_provider()
    except Exception:  # an incomplete OpenTelemetry: lens' handler
        logging.getLogger(__name__).debug("no OpenTelemetry LoggerProvider", exc_info=True)
        return "none", None
    if "Proxy" in type(provider).__name__:
        return "none", None
    try:
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler as OtelLoggingHandler

        if isinstance(provider, LoggerProvider):
            return "sdk", OtelLoggingHandler(logger_provider=provider)
    except Exception:  # no SDK (or an incomplete one): the provider is not the SDK's
        logging.getLogger(__name__).debug("no OpenTelemetry logs SDK", exc_info=True)
    return "other", None


__all__ = ["setup_logging_bridge"]
