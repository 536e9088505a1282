"""What the compiled library detects, filtered by attribute prefix: the one source of the
``detect_*`` functions, so that Python sees exactly the resource C++ set-up puts on every span::

    from nemo_lens_cpp.resources._detect import detected
    detected(("slurm.",))   # {"slurm.job.id": "4242", "slurm.nnodes": "8", ...}
"""

from typing import Any, Dict, Tuple

from .. import _core


def detected(prefixes: Tuple[str, ...]) -> Dict[str, Any]:
    """The attributes ``_core.detect_resource()`` finds now (it reads the environment on every
    call, and may run nvidia-smi) whose key starts with one of ``prefixes``."""
    return {k: v for k, v in _core.detect_resource().items() if k.startswith(prefixes)}
