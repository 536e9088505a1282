"""The attributes that describe where a process runs (NeMo Lens' ``nemo.lens.resources``),
detected by the compiled library exactly as C++ set-up detects them::

    from nemo_lens_cpp.resources import detect_resource
    detect_resource()   # {"host.name": ..., "process.pid": ..., "slurm.job.id": ..., ...}
"""

from typing import Any, Dict

from ._detect import detected
from .kubernetes import detect_kubernetes
from .local import detect_local
from .slurm import detect_slurm


def detect_resource() -> Dict[str, Any]:
    """The host, process, GPU, SLURM and Kubernetes attributes of this process (what every
    exported span's resource carries besides the service, rank and run attributes)."""
    return detected(("host.", "process.", "slurm.", "k8s."))


__all__ = ["detect_kubernetes", "detect_local", "detect_resource", "detect_slurm"]
