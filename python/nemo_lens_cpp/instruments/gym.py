"""NeMo Gym metrics (``gym.*``): request, rollout and verification durations (histograms, ms),
the verification success rate and the number of active servers (gauges)::

    record_gym_metrics(meter, server_request_duration_ms=12.5, active_servers=4)
"""

from __future__ import annotations

from typing import Any, Optional

from ._cache import instruments_for


def _make(meter: Any) -> dict:
    return {
        "server_request_duration_ms": meter.create_histogram(
            name="gym.server.request_duration_ms", unit="ms",
            description="Gym server request duration in milliseconds."),
        "rollout_duration_ms": meter.create_histogram(
            name="gym.rollout.duration_ms", unit="ms",
            description="Rollout collection duration in milliseconds."),
        "verify_duration_ms": meter.create_histogram(
            name="gym.verify.duration_ms", unit="ms",
            description="Verification endpoint duration in milliseconds."),
        "verify_success_rate": meter.create_gauge(
            name="gym.verify.success_rate", description="Fraction of successful verifications."),
        "active_servers": meter.create_gauge(
            name="gym.servers.active", description="Number of active Gym servers."),
    }


def record_gym_metrics(meter: Any, server_request_duration_ms: Optional[float] = None,
                       rollout_duration_ms: Optional[float] = None,
                       verify_duration_ms: Optional[float] = None,
                       verify_success_rate: Optional[float] = None,
                       active_servers: Optional[int] = None) -> None:
    """Records the values given (None skipped)."""
    instruments = instruments_for("gym", meter, _make)
    if instruments is None:
        return
    for key in ("server_request_duration_ms", "rollout_duration_ms", "verify_duration_ms"):
        value = locals()[key]
        if value is not None:
            instruments[key].record(value)
    if verify_success_rate is not None:
        instruments["verify_success_rate"].set(verify_success_rate)
    if active_servers is not None:
        instruments["active_servers"].set(active_servers)
