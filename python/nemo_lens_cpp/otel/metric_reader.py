"""Lens' metrics to an OpenTelemetry MetricReader (setup_telemetry(metric_reader=...)).

A reader pulls: ``InMemoryMetricReader.get_metrics_data()`` in a test, a Prometheus scrape, a
``PeriodicExportingMetricReader``'s timer. Each collection reads every lens instrument of the
process (Python's and C++ extensions' alike) as cumulative totals, without disturbing lens' own
reader, and hands them over as the SDK's MetricsData with lens' resource. A reader that prefers
delta temporality for a kind gets the change since its own previous collection. The reader is
registered the way the SDK's MeterProvider registers its readers; as with NeMo Lens, it takes the
place of the exporter config.exporter names for metrics.
"""

from __future__ import annotations

import logging
import time
import types
from typing import Any, Dict, List, Optional, Tuple

from .. import _core

_log = logging.getLogger("nemo_lens_cpp")

# The SDK's concrete instrument classes, which key a reader's preferred temporality, by lens'
# kind of data.
_TEMPORALITY_KEYS = {"counter": "_Counter", "up_down_counter": "_UpDownCounter",
                     "histogram": "_Histogram"}


def _sdk() -> Any:
    # The SDK's metrics data model, resource and scope; ImportError names what is missing.
    from opentelemetry.sdk.metrics import export
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.util.instrumentation import InstrumentationScope

    names = ("MetricReader", "AggregationTemporality", "MetricsData", "ResourceMetrics",
             "ScopeMetrics", "Metric", "Sum", "Gauge", "Histogram", "NumberDataPoint",
             "HistogramDataPoint")
    return types.SimpleNamespace(Resource=Resource, InstrumentationScope=InstrumentationScope,
                                 **{name: getattr(export, name) for name in names})


def check_reader(reader: Any) -> None:
    """Raises TypeError naming what is wrong when `reader` is not an OpenTelemetry MetricReader
    (or an SDK to read into is missing)."""
    try:
        export = _sdk()
    except ImportError as error:
        raise TypeError(
            f"metric_reader: reading lens' metrics into {type(reader).__name__} needs "
            f"OpenTelemetry Python's SDK (the opentelemetry-sdk package), which could not be "
            f"imported: {error}") from None
    if not isinstance(reader, export.MetricReader):
        raise TypeError(f"metric_reader must be an OpenTelemetry MetricReader (e.g. "
                        f"InMemoryMetricReader, PrometheusMetricReader), not "
                        f"{type(reader).__name__}")


class ReaderAdapter:
    """Answers `reader`'s collections with lens' metrics and `resource`, cumulative points
    starting at the set-up."""

    def __init__(self, reader: Any, resource: Dict[str, Any]) -> None:
        self.reader = reader
        self._export = _sdk()
        self._start = time.time_ns()
        self._resource = self._export.Resource(
            {k: tuple(v) if isinstance(v, list) else v for k, v in resource.items()})
        self._previous: Dict[Tuple[Any, ...], Any] = {}  # delta kinds: the last totals read
        self._delta = self._delta_kinds(reader)

    def attach(self) -> None:
        """Registers the adapter as the reader's source (as the SDK's MeterProvider does)."""
        self.reader._set_collect_callback(self.collect)

    def detach(self) -> None:
        """Shuts the reader down (shutdown()), then leaves it with no source."""
        try:
            self.reader.shutdown()
        except Exception:  # a reader's failure never reaches the program
            _log.debug("metric_reader.shutdown() failed", exc_info=True)
        self.reader._set_collect_callback(None)

    def force_flush(self, timeout_millis: float) -> bool:
        """The reader's force_flush() (a collection, for most readers)."""
        try:
            return self.reader.force_flush(timeout_millis=timeout_millis) is not False
        except Exception:
            _log.debug("metric_reader.force_flush() failed", exc_info=True)
            return False

    def _delta_kinds(self, reader: Any) -> frozenset:
        preferred = getattr(reader, "_instrument_class_temporality", None) or {}
        by_name = {getattr(cls, "__name__", ""): t for cls, t in preferred.items()}
        delta = self._export.AggregationTemporality.DELTA
        return frozenset(kind for kind, cls in _TEMPORALITY_KEYS.items()
                         if by_name.get(cls) == delta)

    def collect(self, reader: Any = None, timeout_millis: float = 10_000) -> Any:
        """One collection: lens' metrics now, as the SDK's MetricsData."""
        e = self._export
        now = time.time_ns()
        scopes: Dict[str, List[Any]] = {}
        for m in _core.collect_metrics(self._start, now):
            metric = self._metric(m, now)
            if metric is not None:
                scopes.setdefault(m["scope"], []).append(metric)
        scope_metrics = [e.ScopeMetrics(scope=e.InstrumentationScope(name), metrics=metrics,
                                        schema_url="")
                         for name, metrics in scopes.items()]
        return e.MetricsData(resource_metrics=[e.ResourceMetrics(
            resource=self._resource, scope_metrics=scope_metrics, schema_url="")])

    def _metric(self, m: dict, now: int) -> Optional[Any]:
        e = self._export
        kind = m["kind"]
        data_kind = ("histogram" if kind == "histogram" else
                     "counter" if m["monotonic"] else "up_down_counter")
        delta = kind != "gauge" and data_kind in self._delta
        temporality = (e.AggregationTemporality.DELTA if delta
                       else e.AggregationTemporality.CUMULATIVE)
        points = []
        for p in m["points"]:
            key = (m["scope"], m["name"], tuple(sorted(p["attributes"].items())))
            if delta:
                p = self._since_previous(key, p)
                if p is None:
                    continue
            points.append(self._point(kind, p))
        if not points:
            return None
        if kind == "gauge":
            data = e.Gauge(data_points=points)
        elif kind == "histogram":
            data = e.Histogram(data_points=points, aggregation_temporality=temporality)
        else:
            data = e.Sum(data_points=points, aggregation_temporality=temporality,
                         is_monotonic=m["monotonic"])
        return e.Metric(name=m["name"], description=m["description"] or None,
                        unit=m["unit"] or None, data=data)

    def _since_previous(self, key: Tuple[Any, ...], p: dict) -> Optional[dict]:
        # The change of a cumulative point since this reader's previous collection; None when
        # nothing changed (as the SDK leaves such delta points out).
        previous = self._previous.get(key)
        self._previous[key] = p
        out = dict(p)
        if previous is not None:
            out["start_time_unix_nano"] = previous["time_unix_nano"]
        if "value" in p:
            out["value"] = p["value"] - (previous["value"] if previous else 0)
            return out if out["value"] != 0 or previous is None else None
        out["delta"] = previous is not None
        out["count"] = p["count"] - (previous["count"] if previous else 0)
        if out["count"] == 0:
            return None
        out["sum"] = p["sum"] - (previous["sum"] if previous else 0)
        out["bucket_counts"] = [a - b for a, b in zip(
            p["bucket_counts"], previous["bucket_counts"] if previous else [0] * len(
                p["bucket_counts"]))]
        return out

    def _point(self, kind: str, p: dict) -> Any:
        e = self._export
        attributes = {k: tuple(v) if isinstance(v, list) else v
                      for k, v in p["attributes"].items()}
        if kind != "histogram":
            return e.NumberDataPoint(attributes=attributes,
                                     start_time_unix_nano=p["start_time_unix_nano"],
                                     time_unix_nano=p["time_unix_nano"], value=p["value"])
        return e.HistogramDataPoint(
            attributes=attributes, start_time_unix_nano=p["start_time_unix_nano"],
            time_unix_nano=p["time_unix_nano"], count=p["count"], sum=p["sum"],
            bucket_counts=list(p["bucket_counts"]), explicit_bounds=list(p["explicit_bounds"]),
            # A delta point after the first has no known extremes of its own interval: lens keeps
            # them since the set-up; the SDK's type needs floats, so +-inf says "none".
            min=p["min"] if p["min"] is not None and not p.get("delta") else float("inf"),
            max=p["max"] if p["max"] is not None and not p.get("delta") else float("-inf"))

