"""Metrics and logs from Python, on the same pipeline as C++ (docs/metrics.md).

    meter = lens.get_meter()
    tokens = meter.create_counter("train.tokens", unit="{token}")
    tokens.add(4096, {"dataset": "web"})
    lens.log(lens.Severity.WARN, "loss spike", {"iteration": it})   # carries the span's ids
    logging.getLogger("train").addHandler(lens.LoggingHandler())

Instruments take int or float amounts and record them as doubles; at most 8 attributes per
record are kept (as spans keep them). Off, or on a rank that does not export, a record costs one
check. Instrument names and units follow OpenTelemetry's rules; a bad one raises ConfigError.
"""

from __future__ import annotations

import logging
from typing import Any, Dict, Optional

from . import _core

Counter = _core.Counter
UpDownCounter = _core.UpDownCounter
Histogram = _core.Histogram
Gauge = _core.Gauge
Meter = _core.Meter


class Severity:
    """OpenTelemetry's severity numbers of the six levels."""

    TRACE = 1
    DEBUG = 5
    INFO = 9
    WARN = 13
    ERROR = 17
    FATAL = 21


def get_meter(name: str = "nemo.lens") -> Meter:
    """The meter named `name` (its instrumentation scope); the same object for the same name."""
    return _core.get_meter(str(name))


def log(severity: int, message: str, attributes: Optional[Dict[str, Any]] = None) -> None:
    """Emits a log record with the current span's trace and span ids, when logs are exported
    (<PREFIX>_LOGS_ENABLED=1 on an exporting rank)."""
    _core.log(int(severity), str(message), attributes, "nemo.lens")


def _severity_of(levelno: int) -> int:
    if levelno >= logging.CRITICAL:
        return Severity.FATAL
    if levelno >= logging.ERROR:
        return Severity.ERROR
    if levelno >= logging.WARNING:
        return Severity.WARN
    if levelno >= logging.INFO:
        return Severity.INFO
    if levelno >= logging.DEBUG:
        return Severity.DEBUG
    return Severity.TRACE


class LoggingHandler(logging.Handler):
    """A logging.Handler that emits every record it handles as a lens log record: the formatted
    message, the level as severity, the logger's name as the instrumentation scope, and
    code.filepath / code.lineno / code.function attributes."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = self.format(record)
            _core.log(_severity_of(record.levelno), message,
                      {"code.filepath": record.pathname, "code.lineno": record.lineno,
                       "code.function": record.funcName}, record.name)
        except Exception:  # a handler never raises into the program
            self.handleError(record)
