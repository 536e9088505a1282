"""The compiled hot path's own mechanics (python/src/hot_path.cpp): attributes given with a span's
start or after it, the `with` protocol's methods, the registry of Python's open spans, the gate
cache and the bridge's parent hook."""

import contextvars
import enum
import random

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp import _core

from conftest import run_interleaved_tasks


class Level(enum.IntEnum):
    HIGH = 3


class Ratio(float):
    pass


class Text(str):
    pass


def test_attributes_go_with_the_start_or_after_it_and_are_kept_alike(tracing):
    # Scalars only (even subclasses): with the start. A list, too many, or a str with a lone
    # surrogate: all of them after it. The same attributes come out either way.
    scalars = dict(i=1, f=0.5, b=True, s="x", e=Level.HIGH, r=Ratio(0.25), t=Text("y"),
                   none=None, huge=2**80, obj=object(), prompt="secret")
    expected = {"i": 1, "f": 0.5, "b": True, "s": "x", "e": 3, "r": 0.25, "t": "y",
                "prompt": "[REDACTED]"}
    with lens.managed_span("step", "kwargs", **scalars):
        pass
    with lens.managed_span("step", "kwargs_list", l=[1, 2], **scalars):
        pass
    with lens.managed_span("step", "kwargs_surrogate", u="a\udcff", **scalars):
        pass
    nine = {f"k{i}": i for i in range(9)}
    with lens.managed_span("step", "kwargs_nine", **nine):
        pass
    with lens.span_cm("dict", **scalars):
        pass
    with lens.start_span("dict_nine", **nine):
        pass
    spans = tracing.by_name()
    assert spans["kwargs"].attributes == expected
    assert spans["kwargs_list"].attributes == {**expected, "l": [1, 2]}
    assert spans["kwargs_surrogate"].attributes == {**expected, "u": "a?"}
    assert spans["kwargs_nine"].attributes == nine
    assert spans["dict"].attributes == expected
    assert spans["dict_nine"].attributes == nine


def test_a_tracer_keyword_that_is_none_is_no_attribute(tracing):
    with lens.managed_span("step", "a", tracer=None, x=1):
        pass
    with lens.managed_span("step", "b", x=1, **{"tracer": None}):
        pass
    spans = tracing.by_name()
    assert spans["a"].attributes == {"x": 1} and spans["b"].attributes == {"x": 1}


def test_the_with_protocol_methods_behave_as_methods(tracing):
    span = lens.managed_span("step", "by_hand")
    enter, exit_ = span.__enter__, span.__exit__
    assert enter.__name__ == "__enter__" and exit_.__self__ is span
    assert "current" in lens.Span.__enter__.__doc__ and "ends the span" in exit_.__doc__
    with pytest.raises(TypeError):
        enter(1)
    with pytest.raises(TypeError):
        exit_(None, None, None, extra=1)
    with pytest.raises(TypeError):
        lens.Span.__enter__(object())
    assert enter() is span
    with pytest.raises(RuntimeError):
        span.__enter__()  # entered only once
    assert lens.Span.__exit__(span, None, None, None) is False
    other = lens.managed_span("step", "by_class")
    assert lens.Span.__enter__(other) is other
    assert other.__exit__(ValueError, ValueError("no"), None) is False
    spans = tracing.by_name()
    assert set(spans) == {"by_hand", "by_class"}
    assert spans["by_class"].status_message == "no"


def test_many_open_python_spans_keep_the_asyncio_rule(tracing):
    # Hundreds of Python spans open at once, ended in random order, while two asyncio tasks
    # interleave on the thread: a task's span is never the parent of the other task's.
    opened = [lens.start_span(f"open{i}") for i in range(500)]
    random.Random(7).shuffle(opened)
    for span in opened[:400]:
        span.end()

    run_interleaved_tasks()
    for span in opened[400:]:
        span.end()
    spans = {s.name: s for s in tracing.spans()}
    assert spans["task0"].parent_span_id is None
    assert spans["task1"].parent_span_id is None  # not task0, the thread's latest then
    assert spans["child0"].parent_span_id == spans["task0"].span_id
    assert spans["child1"].parent_span_id == spans["task1"].span_id
    assert sum(name.startswith("open") for name in spans) == 500


def test_group_switches_reach_sites_whatever_str_object_names_the_group(tracing):
    # Sites find their group's gate through a cache keyed by the str object: many distinct
    # objects (more than the cache holds, some equal, some colliding) must each read the group's
    # current switch, before and after it changes.
    names = [f"group{i}" for i in range(40)]
    rng = random.Random(3)
    for _ in range(4):
        on = {n for n in names if rng.random() < 0.5}
        lens.set_enabled_span_groups(on)
        copies = ["".join(["gro", n[3:]]) for n in names]  # new objects, equal strings
        for n in rng.sample(names + copies, 80):
            assert lens.is_span_group_enabled(n) is (n in on)
            with lens.managed_span(n, "site") as span:
                assert (span is not None) is (n in on)


def test_the_bridge_is_asked_for_a_root_spans_parent_only_when_its_context_holds_a_span(
        tracing, counting_bridge):
    # What bridge_opentelemetry() registers: a callable giving the parent of a root span, and
    # optionally the ContextVar and key where OpenTelemetry keeps its current span.
    calls = counting_bridge.calls
    otel_current = contextvars.ContextVar("current_context", default={})
    _core._set_bridge_parent(counting_bridge.parent, otel_current, "current-span")
    with lens.managed_span("step", "no_span_there"):
        with lens.managed_span("step", "nested"):
            pass
    assert calls == []
    token = otel_current.set({"current-span": object()})
    with lens.managed_span("step", "span_there"):
        with lens.managed_span("step", "nested_too"):
            pass
    otel_current.reset(token)
    assert calls == [1]  # the root only
    _core._set_bridge_parent(counting_bridge.parent)  # no variable given: asked for every root
    with lens.managed_span("step", "asked"):
        pass
    assert calls == [1, 1]
    spans = tracing.by_name()
    assert spans["no_span_there"].parent_span_id is None
    assert spans["span_there"].parent_span_id == "b7ad6b7169203331"
    assert spans["asked"].parent_span_id == "b7ad6b7169203331"
    assert spans["nested_too"].parent_span_id == spans["span_there"].span_id
