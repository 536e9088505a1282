"""Kubernetes attributes (``k8s.*``) from the downward API's variables; empty outside a pod::

    from nemo_lens_cpp.resources.kubernetes import detect_kubernetes
    detect_kubernetes()   # {"k8s.pod.name": ..., "k8s.namespace.name": ...}
"""

from typing import Any, Dict

from ._detect import detected


def detect_kubernetes() -> Dict[str, Any]:
    """The ``k8s.*`` attributes (only under Kubernetes: ``KUBERNETES_SERVICE_HOST`` set or its
    service-account secrets mounted)."""
    return detected(("k8s.",))
