"""Test stand-in for ``opentelemetry.trace.span``: the Span interface, SpanContext, TraceFlags,
TraceState (W3C tracestate) and the non-recording span."""

import abc
import logging
import re
import warnings
from collections.abc import Mapping

from opentelemetry.trace.status import Status, StatusCode  # noqa: F401

_logger = logging.getLogger(__name__)

# W3C Trace Context tracestate grammar: a key is lowercase/digits/_-*/ (optionally tenant@system),
# a value is up to 256 printable ASCII characters other than "," and "=", not ending in a space.
_KEY_CHARS = r"[a-z0-9_\-*/]"
_KEY_RE = (rf"(?:[a-z]{_KEY_CHARS}{{0,255}}"
           rf"|[a-z0-9]{_KEY_CHARS}{{0,240}}@[a-z]{_KEY_CHARS}{{0,13}})")
_VALUE_RE = r"[\x20-\x2b\x2d-\x3c\x3e-\x7e]{0,255}[\x21-\x2b\x2d-\x3c\x3e-\x7e]"
_KEY = re.compile(_KEY_RE)
_VALUE = re.compile(_VALUE_RE)
_MEMBER = re.compile(rf"({_KEY_RE})=({_VALUE_RE})[ \t]*")
_MEMBER_SEPARATOR = re.compile(r"[ \t]*,[ \t]*")
_MAX_TRACESTATE_MEMBERS = 32


def _valid_member(key, value):
    return (isinstance(key, str) and isinstance(value, str)
            and _KEY.fullmatch(key) is not None and _VALUE.fullmatch(value) is not None)


class Span(abc.ABC):
    """One operation in a trace. Used in a with-statement, it is ended on leaving it."""

    @abc.abstractmethod
    def end(self, end_time=None):
        """Ends the span, now or at `end_time` (ns since the epoch)."""

    @abc.abstractmethod
    def get_span_context(self):
        """The span's SpanContext."""

    @abc.abstractmethod
    def set_attributes(self, attributes):
        """Sets several attributes."""

    @abc.abstractmethod
    def set_attribute(self, key, value):
        """Sets one attribute."""

    @abc.abstractmethod
    def add_event(self, name, attributes=None, timestamp=None):
        """Adds an event, timed now unless `timestamp` is given."""

    def add_link(self, context, attributes=None):
        """Adds a link; this default does nothing but warn that it does nothing."""
        warnings.warn("Span.add_link() is not implemented by this span type and does nothing")

    @abc.abstractmethod
    def update_name(self, name):
        """Renames the span."""

    @abc.abstractmethod
    def is_recording(self):
        """Whether the span records what is set on it."""

    @abc.abstractmethod
    def set_status(self, status, description=None):
        """Sets the status, from a Status or a StatusCode and description."""

    @abc.abstractmethod
    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False):
        """Records `exception` as an event."""

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.end()


class TraceFlags(int):
    """The trace-flags byte of a traceparent: bit 0 sampled, bit 1 random trace id."""

    DEFAULT = 0x00
    SAMPLED = 0x01
    RANDOM_TRACE_ID = 0x02

    @classmethod
    def get_default(cls):
        return cls(cls.DEFAULT)

    @property
    def sampled(self):
        return bool(self & TraceFlags.SAMPLED)

    @property
    def random_trace_id(self):
        return bool(self & TraceFlags.RANDOM_TRACE_ID)


DEFAULT_TRACE_OPTIONS = TraceFlags.get_default()


class TraceState(Mapping):
    """An immutable, ordered mapping of W3C tracestate members (at most 32). Invalid or duplicate
    members are left out with a warning; more than 32 leave it empty."""

    def __init__(self, entries=None):
        self._dict = {}
        if entries is None:
            return
        if len(entries) > _MAX_TRACESTATE_MEMBERS:
            _logger.warning("There can't be more than %s key/value pairs.",
                            _MAX_TRACESTATE_MEMBERS)
            return
        for key, value in entries:
            if not _valid_member(key, value):
                _logger.warning("Invalid key/value pair (%s, %s) found.", key, value)
            elif key in self._dict:
                _logger.warning("Duplicate key: %s found.", key)
            else:
                self._dict[key] = value

    def __contains__(self, item):
        return item in self._dict

    def __getitem__(self, key):
        return self._dict[key]

    def __iter__(self):
        return iter(self._dict)

    def __len__(self):
        return len(self._dict)

    def __repr__(self):
        return str([f"{{key={k}, value={v}}}" for k, v in self._dict.items()])

    def keys(self):
        return self._dict.keys()

    def items(self):
        return self._dict.items()

    def values(self):
        return self._dict.values()

    def add(self, key, value):
        """A TraceState with `key` prepended; self when it is invalid, present or there are 32."""
        if not _valid_member(key, value):
            _logger.warning("Invalid key/value pair (%s, %s) found.", key, value)
            return self
        if len(self._dict) >= _MAX_TRACESTATE_MEMBERS:
            _logger.warning("There can't be more 32 key/value pairs.")
            return self
        if key in self._dict:
            _logger.warning("The provided key %s already exists.", key)
            return self
        return TraceState([(key, value), *self._dict.items()])

    def update(self, key, value):
        """A TraceState with `key` set to `value` and moved to the front; self when invalid."""
        if not _valid_member(key, value):
            _logger.warning("Invalid key/value pair (%s, %s) found.", key, value)
            return self
        rest = [(k, v) for k, v in self._dict.items() if k != key]
        return TraceState([(key, value), *rest])

    def delete(self, key):
        """A TraceState without `key`; self when it is absent."""
        if key not in self._dict:
            _logger.warning("The provided key %s doesn't exist.", key)
            return self
        return TraceState([(k, v) for k, v in self._dict.items() if k != key])

    def to_header(self):
        """The tracestate header value: key=value members joined by commas."""
        return ",".join(f"{k}={v}" for k, v in self._dict.items())

    @classmethod
    def from_header(cls, header_list):
        """Parses a list of tracestate header values; any malformed member or repeated key
        gives an empty TraceState."""
        members = {}
        for header in header_list:
            for member in _MEMBER_SEPARATOR.split(header):
                if not member:
                    continue
                match = _MEMBER.fullmatch(member)
                if match is None:
                    _logger.warning("Member doesn't match the w3c identifiers format %s", member)
                    return cls()
                key, value = match.group(1), match.group(2)
                if key in members:
                    return cls()
                members[key] = value
        return cls(list(members.items()))

    @classmethod
    def get_default(cls):
        return cls()


DEFAULT_TRACE_STATE = TraceState.get_default()
_TRACE_ID_MAX_VALUE = 2**128 - 1
_SPAN_ID_MAX_VALUE = 2**64 - 1

INVALID_SPAN_ID = 0
INVALID_TRACE_ID = 0


class SpanContext(tuple):
    """What identifies a span across processes, as an immutable tuple
    (trace_id, span_id, is_remote, trace_flags, trace_state, is_valid)."""

    def __new__(cls, trace_id, span_id, is_remote, trace_flags=DEFAULT_TRACE_OPTIONS,
                trace_state=DEFAULT_TRACE_STATE):
        flags = DEFAULT_TRACE_OPTIONS if trace_flags is None else trace_flags
        state = DEFAULT_TRACE_STATE if trace_state is None else trace_state
        valid = (0 < trace_id <= _TRACE_ID_MAX_VALUE) and (0 < span_id <= _SPAN_ID_MAX_VALUE)
        return tuple.__new__(cls, (trace_id, span_id, is_remote, flags, state, valid))

    def __getnewargs__(self):
        return tuple(self[:5])

    trace_id = property(lambda self: self[0])
    span_id = property(lambda self: self[1])
    is_remote = property(lambda self: self[2])
    trace_flags = property(lambda self: self[3])
    trace_state = property(lambda self: self[4])
    is_valid = property(lambda self: self[5])

    def __setattr__(self, *args):
        _logger.debug("Immutable type, ignoring call to set attribute", stack_info=True)

    def __delattr__(self, *args):
        _logger.debug("Immutable type, ignoring call to delete attribute", stack_info=True)

    def __repr__(self):
        return (f"{type(self).__name__}(trace_id=0x{format_trace_id(self.trace_id)}, "
                f"span_id=0x{format_span_id(self.span_id)}, trace_flags=0x{self.trace_flags:02x}, "
                f"trace_state={self.trace_state!r}, is_remote={self.is_remote})")


class NonRecordingSpan(Span):
    """A span that only carries a SpanContext; everything else is a no-op."""

    def __init__(self, context):
        self._context = context

    def get_span_context(self):
        return self._context

    def is_recording(self):
        return False

    def end(self, end_time=None):
        pass

    def set_attributes(self, attributes):
        pass

    def set_attribute(self, key, value):
        pass

    def add_event(self, name, attributes=None, timestamp=None):
        pass

    def add_link(self, context, attributes=None):
        pass

    def update_name(self, name):
        pass

    def set_status(self, status, description=None):
        pass

    def record_exception(self, exception, attributes=None, timestamp=None, escaped=False):
        pass

    def __repr__(self):
        return f"NonRecordingSpan({self._context!r})"


INVALID_SPAN_CONTEXT = SpanContext(INVALID_TRACE_ID, INVALID_SPAN_ID, False,
                                   DEFAULT_TRACE_OPTIONS, DEFAULT_TRACE_STATE)
INVALID_SPAN = NonRecordingSpan(INVALID_SPAN_CONTEXT)


def format_trace_id(trace_id):
    """`trace_id` as 32 lowercase hex digits."""
    return format(trace_id, "032x")


def format_span_id(span_id):
    """`span_id` as 16 lowercase hex digits."""
    return format(span_id, "016x")
