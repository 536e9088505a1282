"""The rank-aware sampler (NeMo Lens' ``nemo.lens.sampling``): all of a rank's spans or none,
by the same MD5 rule as the ``sampled`` export strategy::

    from nemo_lens_cpp.sampling import RankAwareSampler
    RankAwareSampler(rank=3, world_size=8, sample_rate=0.25).should_sample()
    # lens' own set-up installs it with NEMO_LENS_SAMPLER_ENABLED=1
"""

from __future__ import annotations

import hashlib
from typing import Any, Optional, Sequence


def _rank_kept(rank: int, sample_rate: float) -> bool:
    if sample_rate >= 1.0:
        return True
    if sample_rate <= 0.0:
        return False
    return (int(hashlib.md5(str(rank).encode()).hexdigest(), 16) % 10000) / 10000.0 < sample_rate


class RankAwareSampler:
    """An OpenTelemetry ``Sampler`` whose decision depends on the rank only: a rank is kept when
    ``(MD5(str(rank)) mod 10000) / 10000 < sample_rate``. ``should_sample()`` returns an
    OpenTelemetry SDK ``SamplingResult`` when the SDK is importable, else a bool."""

    def __init__(self, rank: int, world_size: int, sample_rate: float = 1.0) -> None:
        self._rank = rank
        self._world_size = world_size
        self._sample_rate = sample_rate
        self._should_sample = _rank_kept(rank, sample_rate)

    def should_sample(self, parent_context: Any = None, trace_id: int = 0, name: str = "",
                      kind: Any = None, attributes: Optional[dict] = None,
                      links: Optional[Sequence[Any]] = None, trace_state: Any = None) -> Any:
        """This rank's decision, the same for every span."""
        try:
            from opentelemetry.sdk.trace.sampling import Decision, SamplingResult
        except ImportError:
            return self._should_sample
        if self._should_sample:
            return SamplingResult(decision=Decision.RECORD_AND_SAMPLE,
                                  attributes=dict(attributes) if attributes else None)
        return SamplingResult(decision=Decision.DROP)

    def get_description(self) -> str:
        """``RankAwareSampler(rank=R, rate=X)``, for OpenTelemetry's diagnostics."""
        return f"RankAwareSampler(rank={self._rank}, rate={self._sample_rate})"


__all__ = ["RankAwareSampler"]
