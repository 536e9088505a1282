"""The instruments of one record_* family: made once per meter, from tables of their names."""

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


# argument -> (metric name, unit, description): one instrument per record_* argument.
Table = Dict[str, Tuple[str, str, str]]


def make_from_tables(meter: Any, gauges: Table, histograms: Table) -> dict:
    """A gauge per entry of `gauges` and a histogram per entry of `histograms`, by argument."""
    made = {k: meter.create_gauge(name=n, unit=u, description=d)
            for k, (n, u, d) in gauges.items()}
    made.update({k: meter.create_histogram(name=n, unit=u, description=d)
                 for k, (n, u, d) in histograms.items()})
    return made


def record_from_tables(instruments: dict, gauges: Table, histograms: Table,
                       values: Dict[str, Any]) -> None:
    """Sets the gauges and records the histograms whose argument in `values` is not None."""
    for key in gauges:
        if values[key] is not None:
            instruments[key].set(values[key])
    for key in histograms:
        if values[key] is not None:
            instruments[key].record(values[key])
