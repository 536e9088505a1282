"""Spans from Python: gating, attributes, exceptions, nesting, threads, asyncio, propagation."""

import asyncio
import threading

import pytest

import nemo_lens_cpp as lens

from conftest import run_interleaved_tasks


def test_a_disabled_group_runs_the_body_yields_none_and_records_nothing(tracing):
    tracing.start("default")
    ran = []
    with lens.managed_span(lens.SpanGroup.STEP, "train_step", iteration=1) as span:
        ran.append(True)
        assert span is None
    assert ran == [True]
    assert not lens.is_span_group_enabled("step")
    assert tracing.spans() == []


def test_an_enabled_group_yields_a_recording_span_with_safe_attributes(tracing):
    class Opaque:
        pass

    with lens.managed_span("step", "train_step", iteration=3, loss=0.25, tags=("a", "b"),
                           flags=[True, False], sizes=[1, 2], lr=[0.1, 0.2], none=None,
                           obj=Opaque(), mixed=[1, "a"], huge=2**80, nested=[[1]],
                           prompt="the prompt", token=["t"], tracer=None) as span:
        assert isinstance(span, lens.Span) and span.is_recording()
        span.set_attribute("late", "yes")
        span.set_attribute("bad", {"a": 1})  # skipped, never an error
        span.set_attributes({"more": 1.5, "nothing": None})
        span.add_event("checkpoint", {"bytes": 10, "bad": object()})
    (s,) = tracing.spans()
    assert s.name == "train_step" and s.group == "step"
    assert s.attributes == {"iteration": 3, "loss": 0.25, "tags": ["a", "b"],
                            "flags": [True, False], "sizes": [1, 2], "lr": [0.1, 0.2],
                            "prompt": "[REDACTED]", "token": ["[REDACTED]"], "late": "yes",
                            "more": 1.5}
    assert [e["name"] for e in s.events] == ["checkpoint"]
    assert s.events[0]["attributes"] == {"bytes": 10}
    assert s.status_code == lens.StatusCode.UNSET


def test_an_exception_is_recorded_and_reraised(tracing):
    with pytest.raises(ZeroDivisionError):
        with lens.managed_span("step", "bad_step"):
            1 / 0
    with pytest.raises(KeyError):
        with lens.span_cm("bad_job"):
            raise KeyError("missing")
    with pytest.raises(KeyError):
        with lens.span_cm("not_recorded", record_exception=False):
            raise KeyError("missing")
    spans = tracing.by_name()
    step = spans["bad_step"]
    assert step.status_code == lens.StatusCode.ERROR
    assert step.status_message == "division by zero"
    assert step.events[0]["name"] == "exception"
    assert step.events[0]["attributes"] == {"exception.type": "ZeroDivisionError",
                                            "exception.message": "division by zero"}
    assert spans["bad_job"].status_message == "'missing'"
    assert spans["not_recorded"].status_code == lens.StatusCode.UNSET
    assert spans["not_recorded"].events == []


def test_status_and_record_exception_by_hand(tracing):
    with lens.span_cm("by_hand") as span:
        span.record_exception(ValueError("loss is NaN"))
        span.set_status(lens.StatusCode.OK)  # OK is final
        span.set_status(lens.StatusCode.ERROR, "too late")
        span.set_status("not a status")  # ignored
    s = tracing.by_name()["by_hand"]
    assert s.status_code == lens.StatusCode.OK
    assert s.events[0]["attributes"]["exception.type"] == "ValueError"


def test_python_spans_nest_and_span_cm_is_ungated(tracing):
    tracing.start("default")
    with lens.span_cm("job") as job:
        with lens.managed_span("checkpoint", "save"):
            with lens.managed_span("step", "off"):
                with lens.span_cm("inner"):
                    pass
    spans = tracing.by_name()
    assert set(spans) == {"job", "save", "inner"}
    assert spans["job"].parent_span_id is None
    assert spans["save"].parent_span_id == spans["job"].span_id
    assert spans["inner"].parent_span_id == spans["save"].span_id  # the off span is no link
    assert {s.trace_id for s in spans.values()} == {job.get_span_context().trace_id_hex}


def test_trace_fn_checks_the_group_at_call_time_for_plain_and_async_functions(tracing):
    tracing.start("default")

    @lens.trace_fn("step", "decorated")
    def work(x):
        """Doubles."""
        return 2 * x

    @lens.trace_fn("step", "decorated_async")
    async def async_work(x):
        await asyncio.sleep(0)
        return x + 1

    assert work(2) == 4 and work.__doc__ == "Doubles." and work.__name__ == "work"
    assert asyncio.run(async_work(1)) == 2
    assert tracing.spans() == []
    lens.set_enabled_span_groups({"step"})
    assert work(3) == 6
    assert asyncio.run(async_work(2)) == 3
    assert sorted(s.name for s in tracing.spans()) == ["decorated", "decorated_async"]


def test_set_enabled_span_groups_switches_sites_and_rejects_a_string(tracing):
    tracing.start("default")
    lens.set_enabled_span_groups(frozenset(["layer"]))
    assert lens.enabled_span_groups() == {"layer"}
    assert lens.is_span_group_enabled("layer") and not lens.is_span_group_enabled("job")
    with lens.managed_span("layer", "on"):
        pass
    with lens.managed_span("job", "off"):
        pass
    assert [s.name for s in tracing.spans()] == ["on"]
    with pytest.raises(TypeError):
        lens.set_enabled_span_groups("layer")
    with pytest.raises(TypeError):
        lens.is_span_group_enabled(3)


def test_bad_arguments_raise_type_errors_naming_them(tracing):
    with pytest.raises(TypeError, match="two str"):
        lens.managed_span("step", 5)
    with pytest.raises(TypeError):
        lens.managed_span("step")


def test_each_thread_has_its_own_current_span(tracing):
    barrier = threading.Barrier(3)

    def worker(i):
        with lens.managed_span("step", f"outer{i}"):
            barrier.wait()  # all three outer spans open at once
            with lens.managed_span("layer", f"inner{i}"):
                barrier.wait()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = tracing.by_name()
    for i in range(3):
        assert spans[f"inner{i}"].parent_span_id == spans[f"outer{i}"].span_id
        assert spans[f"outer{i}"].parent_span_id is None
        assert spans[f"inner{i}"].thread_id == spans[f"outer{i}"].thread_id


def test_asyncio_tasks_get_their_own_tasks_parent(tracing):
    with lens.span_cm("loop"):
        run_interleaved_tasks()
    spans = tracing.by_name()
    assert spans["task0"].parent_span_id == spans["loop"].span_id
    assert spans["task1"].parent_span_id == spans["loop"].span_id  # not task0, open then
    assert spans["child0"].parent_span_id == spans["task0"].span_id
    assert spans["child1"].parent_span_id == spans["task1"].span_id


def test_inject_and_extract_round_trip_and_an_extracted_context_is_a_parent(tracing):
    carrier = {}
    with lens.span_cm("client") as client:
        lens.inject_context(carrier)
    ctx = client.get_span_context()
    assert carrier["traceparent"] == f"00-{ctx.trace_id_hex}-{ctx.span_id_hex}-03"
    remote = lens.extract_context({"TraceParent": carrier["traceparent"],
                                   "tracestate": "vendor=1", "baggage": "user=ann,bad=%zz"})
    assert remote and remote.span_context.is_remote
    assert remote.baggage == [("user", "ann")]
    with remote:
        with lens.span_cm("server"):
            pass
    with lens.start_span("explicit", parent=remote.span_context, kind=lens.SpanKind.SERVER):
        pass
    with lens.start_span("from the Context", parent=remote):
        pass
    spans = tracing.by_name()
    for name in ("server", "explicit", "from the Context"):
        assert spans[name].trace_id == ctx.trace_id_hex
        assert spans[name].parent_span_id == ctx.span_id_hex
        assert spans[name].parent_is_remote
    assert spans["explicit"].kind == lens.SpanKind.SERVER
    assert not lens.extract_context({"traceparent": "00-zz-bad"})
    assert not lens.extract_context("not a dict")
    assert lens.inject_context({}) == {}  # nothing current


def test_extract_context_never_raises_on_strings_python_cannot_encode():
    for carrier in ({"traceparent": "\udcff"}, {"\udcff": "x"}, {"baggage": "k=\udcff"},
                    {1: "x", "traceparent": None}):
        ctx = lens.extract_context(carrier)
        assert not ctx and ctx.span_context is None
    good = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    ctx = lens.extract_context({"traceparent": good, "tracestate": "\udcff", "baggage": "\ud800"})
    assert ctx.span_context.span_id_hex == "b7ad6b7169203331"  # the other headers still read


def test_strings_with_a_lone_surrogate_keep_everything_but_that_code_point(tracing):
    # e.g. a name made from a file name decoded with surrogateescape: '?' replaces the one code
    # point Python cannot encode, as in attribute values, instead of losing the whole string.
    with lens.managed_span("step", "bad\udcffname", **{"k\udcff": "v\udcff"}) as span:
        span.add_event("ev\udcff", {"a\udcff": 1})
        span.set_attribute("plain", "x\ud800y")
    (s,) = tracing.spans()
    assert s.name == "bad?name"
    assert s.attributes["k?"] == "v?" and s.attributes["plain"] == "x?y"
    assert [e["name"] for e in s.events] == ["ev?"] and s.events[0]["attributes"] == {"a?": 1}


def test_names_and_keys_in_any_script_arrive_as_given(tracing):
    # ASCII strings are read in place; Latin-1 ones (one byte per character, not UTF-8), other
    # scripts and a str subclass are encoded first. Each arrives as given.
    class Name(str):
        pass

    tracing.start("all")
    for group, name, key, value in [("step", "train_step", "iteration", "forward"),
                                    ("step", "größe", "schlüssel", "wert_ä"),
                                    ("step", "步骤", "键", "值"),
                                    (Name("step"), Name("sub"), Name("k"), Name("v"))]:
        with lens.managed_span(group, name, **{key: value}) as span:
            span.set_attribute(key + "_2", value)
            span.set_attributes({key + "_3": [value, value]})
            span.add_event(name, {key: value})
    spans = tracing.spans()
    assert [s.name for s in spans] == ["train_step", "größe", "步骤", "sub"]
    assert [s.attributes for s in spans] == [
        {k: v for k, v in [(key, value), (key + "_2", value), (key + "_3", [value, value])]}
        for key, value in [("iteration", "forward"), ("schlüssel", "wert_ä"), ("键", "值"),
                           ("k", "v")]]
    assert [(e["name"], e["attributes"]) for s in spans for e in s.events] == [
        ("train_step", {"iteration": "forward"}), ("größe", {"schlüssel": "wert_ä"}),
        ("步骤", {"键": "值"}), ("sub", {"k": "v"})]


def test_a_rank_that_does_not_export_records_nothing(tracing):
    tracing.start("all", rank=1, world_size=2, export_strategy="single_rank", export_rank=0)
    assert not tracing.handle.is_exporting
    with lens.managed_span("step", "x") as span:
        assert span is None
    with lens.span_cm("y") as span:
        assert not span.is_recording() and span.get_span_context() is None
    assert tracing.spans() == []


def test_stats_resource_and_shutdown_truncate_open_spans(tracing):
    tracing.start("all", service_name="trainer")
    open_span = lens.span_cm("still_open").__enter__()
    for _ in range(5):
        with lens.managed_span("step", "s"):
            pass
    assert tracing.handle.force_flush(10000)
    stats = tracing.handle.stats()
    assert stats["spans_started"] == 6 and stats["spans_ended"] == 5
    assert stats["spans_exported"] == 5
    # Every counter of TelemetryStats, the outage buffers' of metrics and logs included.
    assert stats["metric_points_buffered"] == 0 and stats["log_records_buffered"] == 0
    assert tracing.handle.resource()["service.name"] == "trainer"
    assert tracing.handle.resource()["dl.world_size"] == 1
    assert tracing.handle.shutdown(10000)
    truncated = [s for s in tracing.exporter.get_finished_spans() if s.name == "still_open"]
    assert len(truncated) == 1 and truncated[0].truncated
    assert truncated[0].attributes["nemo.span.truncated"] is True
    open_span.__exit__(None, None, None)
