"""Host and process attributes: ``host.name``, ``process.pid`` and ``host.gpu.count``::

    from nemo_lens_cpp.resources.local import detect_local
    detect_local()   # {"host.name": "node7", "process.pid": 4242, "host.gpu.count": 8}
"""

from typing import Any, Dict

from ._detect import detected


def detect_local() -> Dict[str, Any]:
    """The host and process attributes; ``host.gpu.count`` from ``CUDA_VISIBLE_DEVICES``, else
    nvidia-smi, else left out."""
    return detected(("host.", "process."))
