"""Reinforcement-learning metrics (``rl.*``): gauges of the last update's values and histograms
of generation and rollout durations::

    record_rl_metrics(meter, reward_mean=0.7, kl_divergence=0.01, generation_duration_ms=850)
"""

from __future__ import annotations

from typing import Any, Optional

from ._cache import Table, instruments_for, make_from_tables, record_from_tables

_GAUGES: Table = {
    "reward_mean": ("rl.reward.mean", "", "Mean reward across rollout batch."),
    "kl_divergence": ("rl.kl_divergence", "", "KL divergence between policy and reference."),
    "policy_loss": ("rl.policy_loss", "", "Policy gradient loss."),
    "value_loss": ("rl.value_loss", "", "Value function loss."),
    "entropy": ("rl.entropy", "", "Policy entropy."),
    "response_length_mean": ("rl.response_length.mean", "",
                             "Mean generated response length (tokens)."),
    "grad_norm": ("rl.grad_norm", "", "Gradient norm of the policy update."),
    "learning_rate": ("rl.learning_rate", "", "Current optimizer learning rate."),
    "throughput_tokens_per_sec": ("rl.throughput.tokens_per_sec", "{token}/s",
                                  "Training throughput in tokens per second."),
}
_HISTOGRAMS: Table = {
    "generation_duration_ms": ("rl.generation.duration_ms", "ms",
                               "Duration of text generation in milliseconds."),
    "rollout_duration_ms": ("rl.rollout.duration_ms", "ms",
                            "Duration of rollout collection in milliseconds."),
}


def _make(meter: Any) -> dict:
    return make_from_tables(meter, _GAUGES, _HISTOGRAMS)


def record_rl_metrics(meter: Any, reward_mean: Optional[float] = None,
                      kl_divergence: Optional[float] = None,
                      policy_loss: Optional[float] = None, value_loss: Optional[float] = None,
                      entropy: Optional[float] = None,
                      response_length_mean: Optional[float] = None,
                      grad_norm: Optional[float] = None, learning_rate: Optional[float] = None,
                      throughput_tokens_per_sec: Optional[float] = None,
                      generation_duration_ms: Optional[float] = None,
                      rollout_duration_ms: Optional[float] = None) -> None:
    """Records the values given (None skipped): gauges set, histograms recorded."""
    instruments = instruments_for("rl", meter, _make)
    if instruments is None:
        return
    record_from_tables(instruments, _GAUGES, _HISTOGRAMS, locals())
