"""Python logging into lens' log records, with the current span's ids (NeMo Lens'
``nemo.lens.logging_bridge``; exported when ``NEMO_LENS_LOGS_ENABLED=1`` on an exporting rank)::

    from nemo_lens_cpp.logging_bridge import setup_logging_bridge
    setup_logging_bridge("train", logging.INFO)
"""

from __future__ import annotations

import logging
import sys
from typing import Optional

from .metrics import LoggingHandler


def setup_logging_bridge(logger_name: str = "", level: int = logging.INFO) -> None:
    """Adds a lens LoggingHandler at `level` to the logger `logger_name` (the root logger for
    ""); a second call for the same logger adds none. A program that set an OpenTelemetry SDK
    LoggerProvider as the global one gets OpenTelemetry's LoggingHandler on that provider
    instead, as with NeMo Lens. Never raises into the program."""
    logger = logging.getLogger(logger_name)
    otel_handler = _otel_sdk_handler()
    if otel_handler is not None:
        otel_handler.setLevel(level)
        logger.addHandler(otel_handler)
        return
    for handler in logger.handlers:
        if isinstance(handler, LoggingHandler):
            handler.setLevel(level)
            return
    handler = LoggingHandler()
    handler.setLevel(level)
    logger.addHandler(handler)


def _otel_sdk_handler() -> Optional[logging.Handler]:
    # OpenTelemetry's LoggingHandler when the global LoggerProvider is an SDK one, else None.
    if "opentelemetry._logs" not in sys.modules and "opentelemetry.sdk._logs" not in sys.modules:
        return None  # nobody configured OpenTelemetry logs in this process
    try:
        from opentelemetry._logs import get_logger_provider
        from opentelemetry.sdk._logs import LoggerProvider, LoggingHandler as OtelLoggingHandler

        provider = get_logger_provider()
        if isinstance(provider, LoggerProvider):
            return OtelLoggingHandler(logger_provider=provider)
    except Exception:  # an incomplete OpenTelemetry: lens' handler
        logging.getLogger(__name__).debug("no OpenTelemetry LoggingHandler", exc_info=True)
    return None


__all__ = ["setup_logging_bridge"]
