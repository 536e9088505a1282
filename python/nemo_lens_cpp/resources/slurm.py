"""SLURM attributes (``slurm.*``) from the ``SLURM_*`` variables; empty outside a SLURM job::

    from nemo_lens_cpp.resources.slurm import detect_slurm
    detect_slurm()   # {"slurm.job.id": "4242", "slurm.nnodes": 8, ...}
"""

from typing import Any, Dict


def detect_slurm() -> Dict[str, Any]:
    """The ``slurm.*`` attributes (only when ``SLURM_JOB_ID`` is set)."""
    from . import _detected

    return _detected(("slurm.",))
