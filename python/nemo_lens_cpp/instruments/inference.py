"""Inference metrics, OpenTelemetry's GenAI conventions: ``gen_ai.server.request.duration`` (s)
and ``gen_ai.client.token.usage`` ({token}, one record per token type)::

    record_inference_metrics(meter, request_duration_s=0.42, model="llama",
                             input_tokens=128, output_tokens=32)
"""

from __future__ import annotations

from typing import Any, Optional

from ._cache import instruments_for


def _make(meter: Any) -> dict:
    return {
        "server_request_duration": meter.create_histogram(
            name="gen_ai.server.request.duration", unit="s",
            description="GenAI server request duration."),
        "token_usage": meter.create_histogram(
            name="gen_ai.client.token.usage", unit="{token}",
            description="Number of input and output tokens used."),
    }


def record_inference_metrics(meter: Any, request_duration_s: Optional[float] = None,
                             model: Optional[str] = None, input_tokens: Optional[int] = None,
                             output_tokens: Optional[int] = None, provider_name: str = "nemo",
                             operation_name: str = "text_completion") -> None:
    """Records one request: its duration, and its input and output token counts with
    ``gen_ai.token.type`` input / output. Every record carries ``gen_ai.operation.name``,
    ``gen_ai.provider.name`` and, when `model` is given, ``gen_ai.request.model``."""
    instruments = instruments_for("inference", meter, _make)
    if instruments is None:
        return
    attrs = {"gen_ai.operation.name": operation_name, "gen_ai.provider.name": provider_name}
    if model:
        attrs["gen_ai.request.model"] = str(model)
    if request_duration_s is not None:
        instruments["server_request_duration"].record(request_duration_s, attributes=attrs)
    if input_tokens is not None:
        instruments["token_usage"].record(input_tokens,
                                          attributes={**attrs, "gen_ai.token.type": "input"})
    if output_tokens is not None:
        instruments["token_usage"].record(output_tokens,
                                          attributes={**attrs, "gen_ai.token.type": "output"})
