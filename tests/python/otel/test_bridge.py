"""bridge_opentelemetry(): lens spans, Python and C++, under OpenTelemetry Python spans of a
program's own TracerProvider (conftest.py says which OpenTelemetry is used)."""

import subprocess
import sys

import pytest

import nemo_lens_cpp as lens
from opentelemetry.sdk.trace import TracerProvider

lens_demo = pytest.importorskip("lens_demo", reason="the examples' C++ extension is not built")


def hex_ids(otel_span):
    c = otel_span.get_span_context()
    return format(c.trace_id, "032x"), format(c.span_id, "016x")


@pytest.fixture
def tracer():
    provider = TracerProvider()
    lens.bridge_opentelemetry(provider)
    yield provider.get_tracer("test")


def test_python_and_cpp_lens_spans_under_an_otel_span_are_its_children(tracing, tracer):
    with tracer.start_as_current_span("otel request") as request:
        with lens.managed_span("step", "lens python"):
            lens_demo.forward(1)
        lens_demo.all_reduce(lambda: None)  # a C++ span right under the OpenTelemetry span
    trace_id, span_id = hex_ids(request)
    spans = {s.name: s for s in tracing.spans()}
    assert {s.trace_id for s in spans.values()} == {trace_id}
    assert spans["lens python"].parent_span_id == span_id
    assert spans["forward"].parent_span_id == spans["lens python"].span_id
    assert spans["all_reduce"].parent_span_id == span_id
    assert not spans["all_reduce"].parent_is_remote


def test_nesting_through_lens_otel_and_lens_again(tracing, tracer):
    with lens.span_cm("lens outer"):
        with tracer.start_as_current_span("otel middle") as middle:
            with lens.managed_span("step", "lens inner"):
                pass
        with lens.managed_span("step", "after otel"):
            pass
    spans = {s.name: s for s in tracing.spans()}
    assert spans["lens inner"].parent_span_id == hex_ids(middle)[1]
    assert spans["after otel"].parent_span_id == spans["lens outer"].span_id


def test_an_otel_span_started_before_the_bridge_still_parents_python_spans(tracing):
    provider = TracerProvider()
    tracer = provider.get_tracer("early")
    with tracer.start_as_current_span("early") as early:
        lens.bridge_opentelemetry(provider)
        with lens.managed_span("step", "late"):
            pass
    (late,) = tracing.spans()
    assert (late.trace_id, late.parent_span_id) == hex_ids(early)


def test_the_provider_argument_is_accepted_and_not_needed(tracing):
    lens.bridge_opentelemetry(object())  # code written for earlier versions passes one
    tracer = TracerProvider().get_tracer("any")
    with tracer.start_as_current_span("outer") as outer:
        with lens.managed_span("step", "inner"):
            pass
    (inner,) = tracing.spans()
    assert inner.parent_span_id == hex_ids(outer)[1]


def test_missing_opentelemetry_is_named_and_the_rest_works():
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import nemo_lens_cpp as lens\n"
        "with lens.managed_span('step', 'x'): pass\n"
        "try:\n"
        "    lens.bridge_opentelemetry()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout
    assert "opentelemetry-api and opentelemetry-sdk" in out
    assert "could not be imported" in out


def test_a_root_span_asks_python_for_opentelemetrys_span_only_when_there_is_one(tracing, tracer):
    # The join hands OpenTelemetry's context variable to the compiled side: a root lens span with
    # no OpenTelemetry span current costs no Python call (without the variable, each root span
    # called _current_otel_parent); under one, the span still finds its parent.
    calls = []

    def count(frame, event, arg):
        if event == "call" and frame.f_code.co_name == "_current_otel_parent":
            calls.append(frame)

    sys.setprofile(count)
    try:
        with lens.managed_span("step", "alone"):
            pass
        alone = len(calls)
        with tracer.start_as_current_span("otel request") as request:
            with lens.managed_span("step", "under otel"):
                pass
    finally:
        sys.setprofile(None)
    assert alone == 0
    spans = tracing.by_name()
    assert spans["under otel"].parent_span_id == hex_ids(request)[1]
    assert spans["alone"].parent_span_id is None
