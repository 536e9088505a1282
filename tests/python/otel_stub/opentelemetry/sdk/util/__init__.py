"""Test stand-in for ``opentelemetry.sdk.util``: ns_to_iso_str()."""

import datetime


def ns_to_iso_str(nanoseconds):
    """`nanoseconds` since the epoch as a UTC ISO 8601 string with microseconds and a Z."""
    moment = datetime.datetime.fromtimestamp(nanoseconds / 1e9, tz=datetime.timezone.utc)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _tupled(value):
    """A list or tuple attribute value as a tuple (recursively), as the SDK stores them; other
    values unchanged (the SDK's other validation is not reproduced)."""
    if isinstance(value, (list, tuple)):
        return tuple(_tupled(v) for v in value)
    return value


def _clean_attributes(attributes):
    """A new dict of `attributes` (None: empty) with sequence values as tuples."""
    return {key: _tupled(value) for key, value in (attributes or {}).items()}
