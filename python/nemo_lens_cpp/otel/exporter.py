"""Lens' spans to an OpenTelemetry SpanExporter (setup_telemetry(span_exporter=...)): on lens'
exporter thread, each batch becomes the SDK's ReadableSpans (lens' FinishedSpan records when the
SDK is not importable) and goes to the exporter's export()."""

from __future__ import annotations

import logging
from typing import Any, Dict, List

from .. import _core
from ..exporters import FinishedSpan
from ..package_info import __version__
from .join import _KIND_NAMES, _trace_state

_log = logging.getLogger("nemo_lens_cpp")


class ExporterAdapter:
    """Feeds an OpenTelemetry SpanExporter from lens' exporter thread."""

    def __init__(self, exporter: Any) -> None:
        self.exporter = exporter
        self._resource_key: Any = None
        self._resource: Any = None
        self._convert = _readable_span_factory()

    def export(self, batch: List[dict], resource: Dict[str, Any]) -> bool:
        key = tuple(sorted((k, repr(v)) for k, v in resource.items()))
        if key != self._resource_key:
            self._resource_key, self._resource = key, self._convert.resource(resource)
        readable = [self._convert(d, self._resource) for d in batch]
        try:
            result = self.exporter.export(readable)
        except Exception:  # as OpenTelemetry's batch processor: logged, the batch dropped
            _log.exception("nemo_lens_cpp: span_exporter.export() raised; %d spans dropped "
                           "(counted in stats()['spans_dropped_export_failed'])", len(readable))
            return False
        if result is None or result is True:
            return True
        if result is False:
            return False
        return getattr(result, "name", None) != "FAILURE"

    def flush(self, timeout_millis: int) -> bool:
        flush = getattr(self.exporter, "force_flush", None)
        if not callable(flush):
            return True
        result = flush(timeout_millis)
        return result is None or bool(result)

    def shutdown(self) -> None:
        stop = getattr(self.exporter, "shutdown", None)
        if callable(stop):
            stop()

    def core(self) -> Any:
        return _core.PythonSpanExporter(self.export, self.flush, self.shutdown)


def _readable_span_factory() -> Any:
    try:
        from opentelemetry import trace as otel_trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import Event, ReadableSpan
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope
        from opentelemetry.trace import Link, Status, StatusCode
    except ImportError:
        return _PlainSpans()
    scope = InstrumentationScope("nemo.lens", __version__)
    kinds = [getattr(otel_trace.SpanKind, n) for n in _KIND_NAMES]

    def context(trace_id: str, span_id: str, flags: int, state: str, remote: bool) -> Any:
        return otel_trace.SpanContext(int(trace_id, 16), int(span_id, 16), remote,
                                      otel_trace.TraceFlags(flags), _trace_state(otel_trace, state))

    def convert(d: dict, resource: Any) -> Any:
        ctx = context(d["trace_id"], d["span_id"], d["trace_flags"], d["trace_state"], False)
        parent = None
        if d["parent_span_id"]:
            parent = context(d["trace_id"], d["parent_span_id"], d["trace_flags"],
                             d["trace_state"], d["parent_is_remote"])
        code = StatusCode(d["status_code"])
        status = Status(code, d["status_message"] or None) if code is StatusCode.ERROR \
            else Status(code)
        return ReadableSpan(
            name=d["name"], context=ctx, parent=parent, resource=resource,
            attributes=_tuples(d["attributes"]),
            events=[Event(e["name"], _tuples(e["attributes"]), e["time_unix_nano"])
                    for e in d["events"]],
            links=[Link(context(link["trace_id"], link["span_id"], 0, "", False),
                        _tuples(link["attributes"])) for link in d["links"]],
            kind=kinds[d["kind"] - 1] if 1 <= d["kind"] <= 5 else kinds[0],
            status=status, start_time=d["start_time_unix_nano"],
            end_time=d["end_time_unix_nano"], instrumentation_scope=scope)

    convert.resource = lambda attributes: Resource(_tuples(attributes))  # type: ignore
    return convert


def _tuples(attributes: Dict[str, Any]) -> Dict[str, Any]:
    # OpenTelemetry keeps sequence attributes as tuples.
    return {k: tuple(v) if isinstance(v, list) else v for k, v in attributes.items()}


class _PlainSpans:
    """Without OpenTelemetry's SDK: the FinishedSpan records lens' own exporter gives."""

    def __call__(self, d: dict, resource: Any) -> Any:
        return FinishedSpan(**d)

    @staticmethod
    def resource(attributes: Dict[str, Any]) -> Any:
        return dict(attributes)
