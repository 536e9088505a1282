"""The flight recorder from Python (NEMO_LENS_RECORD_GROUPS, docs/flight-recorder.md): Python spans
go to the same rings as C++ ones, a C++ span inside a recorded Python span is captured with it,
and each trigger (capture(), an exception in a step, a slow step) exports exactly its spans."""

import contextvars
import threading
import time

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp import _core


@pytest.fixture
def recording(monkeypatch, tracing):
    """`step` exported, every group recorded (Megatron catalog)."""
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    tracing.start("step")
    return tracing


def capture_marks(span):
    return span.attributes.get("lens.capture.reason"), span.attributes.get("lens.capture.id")


def test_recorded_spans_leave_only_with_capture_with_their_parents_and_marks(recording):
    with lens.managed_span("step", "train_step") as step:
        with lens.managed_span("microbatch", "microbatch", index=0):
            with lens.managed_span("layer", "layer_forward"):
                pass
    assert [s.name for s in recording.spans()] == ["train_step"]
    stats = recording.handle.stats()
    assert stats["spans_recorded"] == 2 and stats["record_spans_held"] == 2

    assert lens.capture("looked at it") == 2
    spans = {s.name: s for s in recording.spans()}
    assert set(spans) == {"train_step", "microbatch", "layer_forward"}
    assert capture_marks(spans["train_step"]) == (None, None)
    reason, capture_id = capture_marks(spans["microbatch"])
    assert reason == "looked at it" and capture_id > 0
    assert capture_marks(spans["layer_forward"]) == (reason, capture_id)
    assert spans["microbatch"].parent_span_id == step.get_span_context().span_id_hex
    assert spans["layer_forward"].parent_span_id == spans["microbatch"].span_id
    assert spans["microbatch"].attributes["index"] == 0
    assert lens.capture() == 0, "nothing is left"
    assert recording.handle.stats()["spans_captured"] == 2


def test_a_cpp_span_inside_a_recorded_python_span_is_captured_with_it(recording):
    lens_demo = pytest.importorskip("lens_demo", reason="the examples' C++ extension is not built")
    with lens.managed_span("step", "train_step"):
        with lens.managed_span("microbatch", "microbatch"):
            lens_demo.forward(2)  # forward_backward > 2 layers, in C++
    assert [s.name for s in recording.spans()] == ["train_step"]
    assert lens.capture() == 4
    spans = recording.spans()
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    microbatch, forward = by_name["microbatch"][0], by_name["forward"][0]
    assert forward.parent_span_id == microbatch.span_id
    assert {s.parent_span_id for s in by_name["layer"]} == {forward.span_id}
    assert {capture_marks(s)[0] for s in spans if s.name != "train_step"} == {"manual"}
    assert len({s.trace_id for s in spans}) == 1


def test_an_exported_span_inside_a_recorded_one_takes_the_nearest_exported_parent(
        monkeypatch, tracing):
    """The demo's PyTorch job (2026-12-07): its DDP all-reduces (communication, exported) ran
    inside microbatch spans (recorded only) and named them as parents, which outside the captured
    steps never left, so `lens report` could not place them in their steps. An exported span now
    takes its nearest exported ancestor, as without the recorder, on the span's thread and on
    another thread the context was copied to (as a DDP hook runs); recorded spans keep theirs."""
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    tracing.start("step,communication")
    with lens.managed_span("step", "train_step") as step:
        with lens.managed_span("microbatch", "microbatch"):
            with lens.managed_span("communication", "allreduce") as allreduce:
                with lens.managed_span("layer", "inside_allreduce"):
                    pass
            def in_hook():
                with lens.managed_span("communication", "in_hook"):
                    pass

            hook = threading.Thread(target=contextvars.copy_context().run, args=(in_hook,))
            hook.start()
            hook.join()
    step_id = step.get_span_context().span_id_hex
    exported = {s.name: s for s in tracing.spans()}
    assert set(exported) == {"train_step", "allreduce", "in_hook"}
    assert exported["allreduce"].parent_span_id == step_id
    assert exported["in_hook"].parent_span_id == step_id
    assert lens.capture() == 2
    spans = {s.name: s for s in tracing.spans()}
    assert spans["microbatch"].parent_span_id == step_id
    assert spans["inside_allreduce"].parent_span_id == allreduce.get_span_context().span_id_hex


def test_inside_a_recorded_span_the_current_span_is_its_nearest_exported_ancestor(
        monkeypatch, tracing):
    """What the program sees, and sends to other processes, inside recorded-only spans is their
    nearest exported ancestor, as without the recorder (before, the recorded span, which outside
    the captured steps never left): get_current_span_context(), inject_context() and the NCCL
    carrier, on the span's thread, on a thread its context was copied to, and from C++."""
    from nemo_lens_cpp.contrib.nccl import deserialize_context, serialize_context
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    tracing.start("step,communication")

    def current_ids():
        ctx = lens.get_current_span_context()
        return {
            "context": ctx.span_id_hex if ctx is not None else None,
            "inject": lens.extract_context(lens.inject_context({})).span_context.span_id_hex,
            "nccl": lens.extract_context(deserialize_context(serialize_context()))
                        .span_context.span_id_hex,
        }

    def expect(span_id, where):
        assert current_ids() == {"context": span_id, "inject": span_id, "nccl": span_id}, where

    with lens.managed_span("step", "train_step") as step:
        step_id = step.get_span_context().span_id_hex
        with lens.managed_span("microbatch", "microbatch") as mb:
            assert mb is not None, "recorded"
            expect(step_id, "in a recorded span")
            seen = {}
            hook = threading.Thread(target=contextvars.copy_context().run,
                                    args=(lambda: seen.update(current_ids()),))
            hook.start()
            hook.join()
            assert seen == {"context": step_id, "inject": step_id, "nccl": step_id}
            with lens.managed_span("communication", "allreduce") as allreduce:
                allreduce_id = allreduce.get_span_context().span_id_hex
                expect(allreduce_id, "in an exported span inside it")
                with lens.managed_span("layer", "inside_allreduce"):
                    expect(allreduce_id, "in a recorded span inside that")
            lens_demo = pytest.importorskip("lens_demo",
                                            reason="the examples' C++ extension is not built")
            assert lens_demo.current_ids()[1] == step_id, "C++ sees it too"
    assert lens.get_current_span_context() is None


def test_a_recorded_root_asks_the_bridge_once_for_its_parent_and_its_exported_ancestor(
        monkeypatch, tracing, counting_bridge):
    """Under OpenTelemetry's current span (bridge_opentelemetry()), a recorded-only root span's
    parent and the nearest exported ancestor that exported spans inside it take are both that
    span: one question to the bridge gives both (before, one each)."""
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    tracing.start("step,communication")
    calls = counting_bridge.calls
    _core._set_bridge_parent(counting_bridge.parent)  # no variable given: asked for every root
    with lens.managed_span("microbatch", "microbatch"):
        assert calls == [1]
        with lens.managed_span("communication", "allreduce"):
            assert lens.get_current_span_context().span_id_hex != "b7ad6b7169203331"
        assert lens.get_current_span_context().span_id_hex == "b7ad6b7169203331"
    assert calls == [1], "the exported span inside had a parent: no question"
    assert tracing.by_name()["allreduce"].parent_span_id == "b7ad6b7169203331"
    assert lens.capture() == 1
    microbatch = tracing.by_name()["microbatch"]
    assert microbatch.parent_span_id == "b7ad6b7169203331"
    assert microbatch.trace_id == "0af7651916cd43dd8448eb211c80319c"


def test_an_exception_in_a_step_captures_that_steps_recorded_spans(recording):
    for i in range(3):
        try:
            with lens.managed_span("step", "train_step", iteration=i):
                with lens.managed_span("forward_backward", "forward_backward", iteration=i):
                    if i == 1:
                        raise RuntimeError("nan loss")
        except RuntimeError:
            pass
    captured = [s for s in recording.spans() if s.name == "forward_backward"]
    assert [(s.attributes["iteration"], capture_marks(s)[0]) for s in captured] == [(1, "error")]
    assert recording.handle.stats()["record_spans_held"] == 2, "steps 0 and 2 stay recorded"


def test_a_slow_step_captures_its_spans_and_no_other_steps(monkeypatch, tracing):
    # Steps of ~2 ms and one of 200 ms, against a factor of 10: margins a loaded machine keeps.
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    monkeypatch.setenv("NEMO_LENS_RECORD_SLOW_FACTOR", "10")
    tracing.start("step")
    for i in range(12):
        with lens.managed_span("step", "train_step", iteration=i):
            with lens.managed_span("forward_backward", "forward_backward", iteration=i):
                until = time.monotonic() + (0.2 if i == 8 else 0.002)
                while time.monotonic() < until:
                    pass
    captured = [s for s in tracing.spans() if s.name == "forward_backward"]
    assert [(s.attributes["iteration"], capture_marks(s)[0]) for s in captured] == [
        (8, "slow_step")]


def test_without_the_variable_capture_exports_nothing(tracing):
    tracing.start("step")
    with lens.managed_span("step", "train_step"):
        with lens.managed_span("microbatch", "microbatch") as mb:
            assert mb is None, "a group neither exported nor recorded opens no span"
    assert lens.capture() == 0
    assert [s.name for s in tracing.spans()] == ["train_step"]
    assert tracing.handle.stats()["spans_recorded"] == 0


def test_a_bad_record_variable_is_a_config_error_naming_it(monkeypatch, tracing):
    monkeypatch.setenv("NEMO_LENS_RECORD_SPANS", "lots")
    monkeypatch.setenv("NEMO_LENS_RECORD_GROUPS", "all")
    with pytest.raises(lens.ConfigError, match="NEMO_LENS_RECORD_SPANS.*lots"):
        tracing.start("step")

