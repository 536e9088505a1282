"""Span groups: the vocabulary every instrumentation site names, and the presets bundling them.

The classes have NeMo Lens' names and layout, so a subclass written for ``nemo.lens`` (class
constants, its own ``ALL_GROUPS`` and ``_PRESETS``) is a catalog here too::

    class MyGroups(SpanGroup):
        ROLLOUT = "rollout"
        ALL_GROUPS = frozenset([*SpanGroup.ALL_GROUPS, ROLLOUT])
        _PRESETS = {**SpanGroup._PRESETS, "all": ALL_GROUPS}

    MyGroups.resolve("default,rollout")

Resolution runs in the compiled library, so Python and C++ parse a spec identically and raise the
same error (:class:`SpanGroupError`, a ``ValueError``) naming the bad part and every valid option.
"""

from __future__ import annotations

from typing import ClassVar, Dict, FrozenSet

from . import _core

SpanGroupError = _core.SpanGroupError


def _catalog_of(cls: type) -> tuple:
    """The groups and presets of a SpanGroup (sub)class, as the compiled library takes them."""
    groups = sorted(cls.ALL_GROUPS)
    presets = {name: sorted(members) for name, members in cls._PRESETS.items()}
    return groups, presets


class SpanGroup:
    """The eight base span groups of NeMo Lens and their presets.

    Presets: ``default`` (job, checkpoint, evaluate), ``per_step`` (all eight), ``all`` (every
    group of the class). Subclasses add groups; ``all`` always means every group of the subclass.
    """

    JOB = "job"
    CHECKPOINT = "checkpoint"
    EVALUATE = "evaluate"
    MODEL_INIT = "model_init"
    LOAD_CHECKPOINT = "load_checkpoint"
    STEP = "step"
    FORWARD_BACKWARD = "forward_backward"
    OPTIMIZER = "optimizer"

    ALL_GROUPS: ClassVar[FrozenSet[str]] = frozenset(
        [JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD, OPTIMIZER]
    )

    _PRESETS: ClassVar[Dict[str, FrozenSet[str]]] = {
        "default": frozenset([JOB, CHECKPOINT, EVALUATE]),
        "per_step": frozenset(
            [JOB, CHECKPOINT, EVALUATE, MODEL_INIT, LOAD_CHECKPOINT, STEP, FORWARD_BACKWARD,
             OPTIMIZER]
        ),
        "all": ALL_GROUPS,
    }

    @classmethod
    def resolve(cls, spec: str) -> FrozenSet[str]:
        """Resolves a comma-separated spec of presets and group names to a frozenset of groups.

        Parts are trimmed and lower-cased; empty parts are skipped; an empty spec is the empty
        set. Raises :class:`SpanGroupError` (a ``ValueError``) for an unknown part, naming it and
        listing every valid option, or when the class's presets name groups it does not have.
        """
        if not isinstance(spec, str):
            raise TypeError(f"resolve() expects a str spec, got {type(spec).__name__}")
        groups, presets = _catalog_of(cls)
        return frozenset(_core.resolve(groups, presets, spec))


class MegatronSpanGroup(SpanGroup):
    """Megatron's extension of the base groups (14 in all), exactly as NeMo Lens defines it."""

    MICROBATCH = "microbatch"
    COMMUNICATION = "communication"
    ACTIVATION_OFFLOAD = "activation_offload"
    DATA_LOADING = "data_loading"
    INFERENCE = "inference"
    LAYER = "layer"

    ALL_GROUPS: ClassVar[FrozenSet[str]] = frozenset(
        [*SpanGroup.ALL_GROUPS, MICROBATCH, COMMUNICATION, ACTIVATION_OFFLOAD, DATA_LOADING,
         INFERENCE, LAYER]
    )

    _PRESETS: ClassVar[Dict[str, FrozenSet[str]]] = {
        "default": frozenset([SpanGroup.JOB, SpanGroup.CHECKPOINT, SpanGroup.EVALUATE, INFERENCE]),
        "per_step": frozenset([*SpanGroup.ALL_GROUPS, COMMUNICATION, DATA_LOADING, INFERENCE]),
        "all": ALL_GROUPS,
    }
