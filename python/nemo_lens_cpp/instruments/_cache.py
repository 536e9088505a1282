"""The instruments of one record_* family, made once per meter."""

from __future__ import annotations

import logging
import threading
from typing import Any, Callable, Dict, Optional, Tuple

_lock = threading.Lock()
_made: Dict[Tuple[str, int], Tuple[Any, dict]] = {}


def instruments_for(family: str, meter: Any, make: Callable[[Any], dict]) -> Optional[dict]:
    """`make(meter)`'s instruments for (family, meter), made on first use; None (with a warning
    logged) when the meter cannot make them: recording never raises into the program."""
    key = (family, id(meter))
    with _lock:
        entry = _made.get(key)
        if entry is None or entry[0] is not meter:
            try:
                entry = (meter, make(meter))  # holds the meter: its id stays its own
            except Exception:
                logging.getLogger(__name__).warning(
                    "Failed to create %s metric instruments", family, exc_info=True)
                return None
            _made[key] = entry
        return entry[1]
