"""handle.tracer / get_tracer(): OpenTelemetry's Tracer interface on lens spans, without
OpenTelemetry installed; handle.meter."""

import time

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp.distributed import create_linked_span


class OtelSpanContext:
    """OpenTelemetry's SpanContext shape: int ids."""

    def __init__(self, trace_id, span_id, trace_flags=1, is_remote=True):
        self.trace_id, self.span_id = trace_id, span_id
        self.trace_flags, self.is_remote = trace_flags, is_remote


class OtelLink:
    def __init__(self, context, attributes=None):
        self.context, self.attributes = context, attributes


class Kind:
    """An enum member with OpenTelemetry's SpanKind names (its values differ from OTLP's)."""

    def __init__(self, name, value):
        self.name, self.value = name, value


def test_handle_tracer_and_meter_are_the_nemo_lens_ones(tracing):
    assert tracing.handle.tracer is lens.get_tracer() is lens.get_tracer("nemo.lens")
    assert lens.get_tracer("mine", "1.0", schema_url=None) is lens.get_tracer("mine")
    assert isinstance(tracing.handle.tracer, lens.Tracer)
    assert tracing.handle.meter is lens.get_meter("nemo.lens")


def test_start_as_current_span_nests_python_spans_and_records_attributes(tracing):
    tracer = lens.get_tracer(__name__)
    with tracer.start_as_current_span("outer", attributes={"shard": 3},
                                      kind=Kind("SERVER", 1)) as outer:
        assert outer.is_recording()
        with lens.managed_span("step", "inner"):
            pass
    spans = tracing.by_name()
    assert spans["outer"].attributes["shard"] == 3
    assert spans["outer"].kind == lens.SpanKind.SERVER
    assert spans["inner"].parent_span_id == outer.get_span_context().span_id_hex


def test_start_span_takes_a_context_and_links(tracing):
    tracer = lens.get_tracer()
    remote = lens.extract_context(
        {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"})
    span = tracer.start_span("request", context=remote, kind=lens.SpanKind.CLIENT,
                             links=[OtelLink(OtelSpanContext(0x1234, 0x5678), {"why": "batch"}),
                                    OtelLink(OtelSpanContext(0, 0))])
    with lens.span_cm("not a child"):
        pass
    span.end()
    spans = tracing.by_name()
    s = spans["request"]
    assert s.trace_id == "0af7651916cd43dd8448eb211c80319c"
    assert s.parent_span_id == "b7ad6b7169203331" and s.parent_is_remote
    assert s.kind == lens.SpanKind.CLIENT
    assert [(lk["trace_id"], lk["span_id"], lk["attributes"]) for lk in s.links] == [
        (format(0x1234, "032x"), format(0x5678, "016x"), {"why": "batch"})]
    assert spans["not a child"].parent_span_id is None


def test_an_exception_in_start_as_current_span_is_recorded_unless_asked_not_to(tracing):
    tracer = lens.get_tracer()
    with pytest.raises(KeyError):
        with tracer.start_as_current_span("fails"):
            raise KeyError("k")
    with pytest.raises(KeyError):
        with tracer.start_as_current_span("quiet", record_exception=False):
            raise KeyError("k")
    spans = tracing.by_name()
    assert spans["fails"].status_code == lens.StatusCode.ERROR
    assert [e["name"] for e in spans["fails"].events] == ["exception"]
    assert spans["quiet"].events == []


def test_end_on_exit_false_leaves_the_span_open(tracing):
    tracer = lens.get_tracer()
    with tracer.start_as_current_span("kept open", end_on_exit=False) as span:
        with lens.span_cm("child"):
            pass
    assert "kept open" not in {s.name for s in tracing.spans()}
    span.end()
    spans = tracing.by_name()
    assert spans["child"].parent_span_id == span.get_span_context().span_id_hex


def test_create_linked_span_takes_an_otel_style_span_context(tracing):
    s = create_linked_span(lens.get_tracer(), "stage", remote_context=OtelSpanContext(7, 9))
    s.end()
    (link,) = tracing.by_name()["stage"].links
    assert (link["trace_id"], link["span_id"]) == (format(7, "032x"), format(9, "016x"))


def test_a_disabled_setup_gives_a_tracer_whose_spans_do_not_record():
    h = lens.setup_telemetry(lens.NemoLensConfig(enabled=False), _allow_reinit=True)
    with h.tracer.start_as_current_span("test") as span:
        assert span is not None and not span.is_recording()
    h.shutdown(100)


def test_a_span_context_has_opentelemetrys_shape(tracing):
    with lens.span_cm("shaped") as span:
        ctx = span.get_span_context()
        carrier = lens.inject_context({})
    assert isinstance(ctx.trace_id, int) and isinstance(ctx.span_id, int)
    assert 0 < ctx.trace_id < 2**128 and 0 < ctx.span_id < 2**64
    assert format(ctx.trace_id, "032x") == ctx.trace_id_hex
    assert format(ctx.span_id, "016x") == ctx.span_id_hex
    # sampled, random trace id
    assert carrier["traceparent"] == f"00-{ctx.trace_id:032x}-{ctx.span_id:016x}-03"
    assert ctx.is_valid and not ctx.is_remote and ctx.trace_flags & 1
    (s,) = tracing.spans()
    assert (s.trace_id, s.span_id) == (ctx.trace_id_hex, ctx.span_id_hex)
    remote = lens.extract_context({"traceparent": carrier["traceparent"]}).span_context
    assert remote.is_remote and remote.trace_id == ctx.trace_id


def test_start_time_and_end_time_are_the_spans_own(tracing):
    """OpenTelemetry's start_time and end(end_time), Unix nanoseconds: a span a program backdates
    (from a CUDA event, a queue's timestamps, a log) keeps them exactly."""
    tracer = lens.get_tracer(__name__)
    start = time.time_ns() - 5_000_000_000  # 5 s ago
    span = tracer.start_span("backdated", start_time=start)
    span.end(end_time=start + 1_234_567)
    with tracer.start_as_current_span("current backdated", start_time=start + 10) as current:
        with lens.managed_span("step", "inside"):
            pass
    lens_span = lens.start_span("lens own", start_time=start + 20)
    lens_span.end(start + 30)
    spans = tracing.by_name()
    assert spans["backdated"].start_time_unix_nano == start
    assert spans["backdated"].end_time_unix_nano == start + 1_234_567
    assert spans["current backdated"].start_time_unix_nano == start + 10
    assert spans["current backdated"].end_time_unix_nano >= spans["inside"].end_time_unix_nano
    assert spans["inside"].parent_span_id == current.get_span_context().span_id_hex
    assert (spans["lens own"].start_time_unix_nano, spans["lens own"].end_time_unix_nano) == \
        (start + 20, start + 30)
    assert tracing.handle.stats()["spans_end_clamped"] == 0


def test_an_end_time_before_the_start_is_clamped_and_counted(tracing):
    tracer = lens.get_tracer(__name__)
    start = time.time_ns() - 1_000_000_000
    span = tracer.start_span("reversed", start_time=start)
    span.end(end_time=start - 1)
    s = tracing.by_name()["reversed"]
    assert s.end_time_unix_nano == s.start_time_unix_nano == start
    assert tracing.handle.stats()["spans_end_clamped"] == 1
    with pytest.raises(TypeError, match="end_time"):
        tracer.start_span("bad").end(end_time="yesterday")
