"""Integrations (NeMo Lens' ``nemo.lens.contrib``): ``nccl`` (the trace context as bytes beside a
tensor), ``ray`` (across remote calls), ``fastapi`` and ``aiohttp`` (OpenTelemetry's
instrumentations, imported only when called: a missing package raises ImportError naming it)."""
