"""Metrics with NeMo Lens' names and attributes (``nemo.lens.instruments``): ``inference``
(OpenTelemetry's GenAI conventions), ``rl`` and ``gym``. Each ``record_*`` takes a meter
(``get_meter()`` or ``handle.meter``) and skips the arguments left None::

    from nemo_lens_cpp.instruments import record_inference_metrics
    record_inference_metrics(handle.meter, request_duration_s=0.42, model="llama",
                             input_tokens=128, output_tokens=32)
"""

from .gym import record_gym_metrics
from .inference import record_inference_metrics
from .rl import record_rl_metrics

__all__ = ["record_gym_metrics", "record_inference_metrics", "record_rl_metrics"]
