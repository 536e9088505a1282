"""Test stand-in for the SDK's instrument classes: the public ones and the concrete ``_X`` ones
a MetricReader keys its temporality by."""


class Counter:
    pass


class UpDownCounter:
    pass


class Histogram:
    pass


class Gauge:
    pass


class ObservableCounter:
    pass


class ObservableUpDownCounter:
    pass


class ObservableGauge:
    pass


class _Counter(Counter):
    pass


class _UpDownCounter(UpDownCounter):
    pass


class _Histogram(Histogram):
    pass


class _Gauge(Gauge):
    pass


class _ObservableCounter(ObservableCounter):
    pass


class _ObservableUpDownCounter(ObservableUpDownCounter):
    pass


class _ObservableGauge(ObservableGauge):
    pass


CONCRETE = {Counter: _Counter, UpDownCounter: _UpDownCounter, Histogram: _Histogram,
            Gauge: _Gauge, ObservableCounter: _ObservableCounter,
            ObservableUpDownCounter: _ObservableUpDownCounter, ObservableGauge: _ObservableGauge}
