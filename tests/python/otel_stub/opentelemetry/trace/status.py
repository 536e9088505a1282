"""Test stand-in for ``opentelemetry.trace.status``: a span's status."""

import enum
import logging

logger = logging.getLogger(__name__)


class StatusCode(enum.Enum):
    """How a span ended: not said (UNSET), successfully (OK) or with an error (ERROR)."""

    UNSET = 0
    OK = 1
    ERROR = 2


class Status:
    """A status code and, for ERROR only, a description (a string)."""

    def __init__(self, status_code=StatusCode.UNSET, description=None):
        self._status_code = status_code
        self._description = None
        if description:
            if not isinstance(description, str):
                logger.warning("Invalid status description type, expected str")
                return
            if status_code is not StatusCode.ERROR:
                logger.warning("description should only be set when status_code is set to "
                               "StatusCode.ERROR")
                return
        self._description = description

    @property
    def status_code(self):
        return self._status_code

    @property
    def description(self):
        return self._description

    @property
    def is_ok(self):
        """True unless the status is ERROR."""
        return self._status_code is not StatusCode.ERROR

    @property
    def is_unset(self):
        return self._status_code is StatusCode.UNSET
