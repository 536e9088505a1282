"""Python logging into lens' log records, with the current span's ids (NeMo Lens'
``nemo.lens.logging_bridge``; exported when ``NEMO_LENS_LOGS_ENABLED=1`` on an exporting rank)::

    from nemo_lens_cpp.logging_bridge import setup_logging_bridge
    setup_logging_bridge("train", logging.INFO)
"""

from __future__ import annotations

import logging

from .metrics import LoggingHandler


def setup_logging_bridge(logger_name: str = "", level: int = logging.INFO) -> None:
    """Adds a lens LoggingHandler at `level` to the logger `logger_name` (the root logger for
    ""); a second call for the same logger adds none."""
    logger = logging.getLogger(logger_name)
    for handler in logger.handlers:
        if isinstance(handler, LoggingHandler):
            handler.setLevel(level)
            return
    handler = LoggingHandler()
    handler.setLevel(level)
    logger.addHandler(handler)


__all__ = ["setup_logging_bridge"]
