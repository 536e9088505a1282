"""bridge_opentelemetry(): lens spans, Python and C++, under OpenTelemetry Python spans.

Uses the real opentelemetry-api/-sdk when they can be imported; otherwise the stand-in in
otel_stub/ with the same documented interfaces (the distribution ships no OpenTelemetry)."""

import os
import subprocess
import sys

import pytest

import nemo_lens_cpp as lens

try:
    import opentelemetry.sdk.trace  # noqa: F401
    REAL_SDK = True
except ImportError:
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "otel_stub"))
    for name in [m for m in sys.modules if m.startswith("opentelemetry")]:
        del sys.modules[name]
    REAL_SDK = False

from opentelemetry import trace as otel_trace  # noqa: E402
from opentelemetry.sdk.trace import TracerProvider  # noqa: E402

lens_demo = pytest.importorskip("lens_demo", reason="the examples' C++ extension is not built")


def hex_ids(otel_span):
    c = otel_span.get_span_context()
    return format(c.trace_id, "032x"), format(c.span_id, "016x")


@pytest.fixture
def tracer():
    provider = TracerProvider()
    lens.bridge_opentelemetry(provider)
    yield provider.get_tracer("test")


def test_which_opentelemetry_is_used():
    print("real OpenTelemetry SDK" if REAL_SDK else "the documented-interface stand-in")


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


def test_a_provider_without_span_processors_is_refused():
    with pytest.raises(TypeError, match="add_span_processor"):
        lens.bridge_opentelemetry(object())


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
