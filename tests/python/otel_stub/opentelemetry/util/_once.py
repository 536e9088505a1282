"""Test stand-in for ``opentelemetry.util._once``: run a function at most once."""

import threading


class Once:
    """Runs one function at most once across threads; other callers wait until it has run."""

    def __init__(self):
        self._lock = threading.Lock()
        self._done = False

    def do_once(self, func):
        """Calls `func` unless a function already ran here; True when this call ran it."""
        if self._done:
            return False
        with self._lock:
            if self._done:
                return False
            func()
            self._done = True
            return True
