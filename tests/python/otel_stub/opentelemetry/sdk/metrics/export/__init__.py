"""Test stand-in for ``opentelemetry.sdk.metrics.export``: the metrics data model (frozen
dataclasses with the real field names), AggregationTemporality, and MetricReader with its
InMemoryMetricReader. A reader is registered by whoever feeds it calling
``_set_collect_callback(func)``; collect() calls ``func(reader, timeout_millis=...)`` and hands
the MetricsData it returns to ``_receive_metrics``, as the real one does."""

import logging
from dataclasses import dataclass, field
from enum import IntEnum
from threading import RLock
from typing import Any, Optional, Sequence

from opentelemetry.sdk.metrics._internal.instrument import CONCRETE

_logger = logging.getLogger(__name__)


class AggregationTemporality(IntEnum):
    UNSPECIFIED = 0
    DELTA = 1
    CUMULATIVE = 2


@dataclass(frozen=True)
class NumberDataPoint:
    attributes: Any
    start_time_unix_nano: int
    time_unix_nano: int
    value: Any
    exemplars: Sequence[Any] = field(default_factory=list)


@dataclass(frozen=True)
class HistogramDataPoint:
    attributes: Any
    start_time_unix_nano: int
    time_unix_nano: int
    count: int
    sum: Any
    bucket_counts: Sequence[int]
    explicit_bounds: Sequence[float]
    min: float
    max: float
    exemplars: Sequence[Any] = field(default_factory=list)


@dataclass(frozen=True)
class Sum:
    data_points: Sequence[NumberDataPoint]
    aggregation_temporality: AggregationTemporality
    is_monotonic: bool


@dataclass(frozen=True)
class Gauge:
    data_points: Sequence[NumberDataPoint]


@dataclass(frozen=True)
class Histogram:
    data_points: Sequence[HistogramDataPoint]
    aggregation_temporality: AggregationTemporality


@dataclass(frozen=True)
class Metric:
    name: str
    description: Optional[str]
    unit: Optional[str]
    data: Any


@dataclass(frozen=True)
class ScopeMetrics:
    scope: Any
    metrics: Sequence[Metric]
    schema_url: str


@dataclass(frozen=True)
class ResourceMetrics:
    resource: Any
    scope_metrics: Sequence[ScopeMetrics]
    schema_url: str


@dataclass(frozen=True)
class MetricsData:
    resource_metrics: Sequence[ResourceMetrics]


class MetricReader:
    """Pulls metrics from what registered it: collect() runs the registered callback."""

    def __init__(self, preferred_temporality=None, preferred_aggregation=None):
        self._collect = None
        self._instrument_class_temporality = {
            concrete: AggregationTemporality.CUMULATIVE for concrete in CONCRETE.values()}
        for cls, temporality in (preferred_temporality or {}).items():
            self._instrument_class_temporality[CONCRETE[cls]] = temporality

    def collect(self, timeout_millis=10_000):
        if self._collect is None:
            _logger.warning("Cannot call collect on a MetricReader until it is registered on a "
                            "MeterProvider")
            return
        metrics = self._collect(self, timeout_millis=timeout_millis)
        if metrics is not None:
            self._receive_metrics(metrics, timeout_millis=timeout_millis)

    def _set_collect_callback(self, func):
        self._collect = func

    def _receive_metrics(self, metrics_data, timeout_millis=10_000, **kwargs):
        raise NotImplementedError

    def force_flush(self, timeout_millis=10_000):
        self.collect(timeout_millis=timeout_millis)
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):
        raise NotImplementedError


class InMemoryMetricReader(MetricReader):
    """Keeps the last collection; get_metrics_data() collects and hands it over."""

    def __init__(self, preferred_temporality=None, preferred_aggregation=None):
        super().__init__(preferred_temporality, preferred_aggregation)
        self._lock = RLock()
        self._metrics_data = None

    def get_metrics_data(self):
        with self._lock:
            self.collect()
            data, self._metrics_data = self._metrics_data, None
        return data

    def _receive_metrics(self, metrics_data, timeout_millis=10_000, **kwargs):
        with self._lock:
            self._metrics_data = metrics_data

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass
