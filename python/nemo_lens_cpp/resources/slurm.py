"""SLURM attributes (``slurm.*``) from the ``SLURM_*`` variables; empty outside a SLURM job::

    from nemo_lens_cpp.resources.slurm import detect_slurm
    detect_slurm()   # {"slurm.job.id": "4242", "slurm.nnodes": "8", ...}

NeMo Lens v0.2.0's keys are its strings (``slurm.nnodes`` is ``"8"``); docs/resources.md lists
every key with its variable and type.
"""

from typing import Any, Dict

from ._detect import detected


def detect_slurm() -> Dict[str, Any]:
    """The ``slurm.*`` attributes (only when ``SLURM_JOB_ID`` is set and not empty)."""
    return detected(("slurm.",))
