"""Test stand-in for ``opentelemetry.sdk.trace.id_generator``: trace and span id generators."""

import abc
import random


class IdGenerator(abc.ABC):
    """Makes trace ids (128-bit ints) and span ids (64-bit ints)."""

    @abc.abstractmethod
    def generate_span_id(self):
        """A new span id."""

    @abc.abstractmethod
    def generate_trace_id(self):
        """A new trace id."""

    def is_trace_id_random(self):
        """Whether trace ids are random (sets the random-trace-id trace flag); False here."""
        return False


class RandomIdGenerator(IdGenerator):
    """Uniformly random, non-zero ids (the SDK's default)."""

    def generate_span_id(self):
        while True:
            span_id = random.getrandbits(64)
            if span_id:
                return span_id

    def generate_trace_id(self):
        while True:
            trace_id = random.getrandbits(128)
            if trace_id:
                return trace_id

    def is_trace_id_random(self):
        return True
