"""Set-up and the telemetry handle (NeMo Lens' ``nemo.lens.handle``)::

    from nemo_lens_cpp.handle import setup_telemetry
    handle = setup_telemetry(NemoLensConfig.from_env(), rank, world_size)
    ...
    handle.shutdown()
"""

from .telemetry import AlreadySetUpError, TelemetryHandle, setup_telemetry

__all__ = ["AlreadySetUpError", "TelemetryHandle", "setup_telemetry"]
