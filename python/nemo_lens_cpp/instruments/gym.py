"""NeMo Gym metrics (``gym.*``): request, rollout and verification durations (histograms, ms),
the verification success rate and the number of active servers (gauges)::

    record_gym_metrics(meter, server_request_duration_ms=12.5, active_servers=4)
"""

from __future__ import annotations

from typing import Any, Optional

from ._cache import Table, instruments_for, make_from_tables, record_from_tables


_GAUGES: Table = {
    "verify_success_rate": ("gym.verify.success_rate", "",
                            "Fraction of successful verifications."),
    "active_servers": ("gym.servers.active", "", "Number of active Gym servers."),
}
_HISTOGRAMS: Table = {
    "server_request_duration_ms": ("gym.server.request_duration_ms", "ms",
                                   "Gym server request duration in milliseconds."),
    "rollout_duration_ms": ("gym.rollout.duration_ms", "ms",
                            "Rollout collection duration in milliseconds."),
    "verify_duration_ms": ("gym.verify.duration_ms", "ms",
                           "Verification endpoint duration in milliseconds."),
}


def _make(meter: Any) -> dict:
    return make_from_tables(meter, _GAUGES, _HISTOGRAMS)


def record_gym_metrics(meter: Any, server_request_duration_ms: Optional[float] = None,
                       rollout_duration_ms: Optional[float] = None,
                       verify_duration_ms: Optional[float] = None,
                       verify_success_rate: Optional[float] = None,
                       active_servers: Optional[int] = None) -> None:
    """Records the values given (None skipped)."""
    instruments = instruments_for("gym", meter, _make)
    if instruments is None:
        return
    record_from_tables(instruments, _GAUGES, _HISTOGRAMS, locals())
