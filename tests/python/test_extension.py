"""One process, one pipeline: Python spans and the spans of a C++ extension (examples'
lens_demo, which links the same libnemo_lens) share the thread's current span, the switches and
the exporter."""

import json
import os
import subprocess
import sys
import threading

import pytest

import nemo_lens_cpp as lens

lens_demo = pytest.importorskip("lens_demo", reason="the examples' C++ extension is not built")


def test_cpp_spans_inside_a_python_span_are_its_children(tracing):
    with lens.managed_span("step", "train_step") as step:
        assert lens_demo.current_ids() == (step.get_span_context().trace_id_hex,
                                           step.get_span_context().span_id_hex)
        lens_demo.forward(3)
    spans = tracing.spans()
    by_name = {}
    for s in spans:
        by_name.setdefault(s.name, []).append(s)
    step = by_name["train_step"][0]
    forward = by_name["forward"][0]
    assert forward.parent_span_id == step.span_id and forward.group == "forward_backward"
    assert len(by_name["layer"]) == 3
    assert {s.parent_span_id for s in by_name["layer"]} == {forward.span_id}
    assert {s.trace_id for s in spans} == {step.trace_id}
    assert forward.attributes == {"layers": 3}


def test_a_python_span_in_a_callback_from_cpp_is_the_cpp_spans_child(tracing):
    seen = []

    def callback():
        with lens.managed_span("data_loading", "next_batch") as span:
            seen.append(span.get_span_context())
            lens_demo.forward(1)  # and C++ again, under the Python span

    with lens.span_cm("job"):
        lens_demo.all_reduce(callback)
    spans = tracing.spans()
    names = {s.name: s for s in spans if s.name != "layer"}
    assert names["all_reduce"].parent_span_id == names["job"].span_id
    assert names["next_batch"].parent_span_id == names["all_reduce"].span_id
    assert names["forward"].parent_span_id == names["next_batch"].span_id
    assert len({s.trace_id for s in spans}) == 1


def test_a_span_only_started_is_not_the_parent_of_cpp_spans_until_entered(tracing):
    # start_span (OpenTelemetry's tracer.start_span) does not make its span current, for C++
    # either; entering it does.
    with lens.managed_span("step", "step") as step:
        started = lens.start_span("started", group="step")
        assert lens_demo.current_ids()[1] == step.get_span_context().span_id_hex
        lens_demo.forward(1)
        with started:
            assert lens_demo.current_ids()[1] == started.get_span_context().span_id_hex
            lens_demo.all_reduce(lambda: None)
        assert lens_demo.current_ids()[1] == step.get_span_context().span_id_hex
    spans = tracing.by_name()
    assert spans["forward"].parent_span_id == spans["step"].span_id
    assert spans["started"].parent_span_id == spans["step"].span_id
    assert spans["all_reduce"].parent_span_id == spans["started"].span_id


def test_python_switches_govern_cpp_sites(tracing):
    tracing.start("step")
    with lens.managed_span("step", "s1"):
        lens_demo.forward(2)  # forward_backward and layer are off
    lens.set_enabled_span_groups({"layer"})
    lens_demo.forward(2)
    names = sorted(s.name for s in tracing.spans())
    assert names == ["layer", "layer", "s1"]


def test_threads_nest_across_the_boundary_on_their_own(tracing):
    barrier = threading.Barrier(4)

    def worker(i):
        with lens.managed_span("step", f"step{i}"):
            barrier.wait()
            lens_demo.forward(2)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    spans = tracing.spans()
    steps = {s.span_id: s for s in spans if s.name.startswith("step")}
    forwards = [s for s in spans if s.name == "forward"]
    assert len(steps) == 4 and len(forwards) == 4
    for f in forwards:
        assert f.parent_span_id in steps
        assert steps[f.parent_span_id].thread_id == f.thread_id
    assert len({f.parent_span_id for f in forwards}) == 4


def test_one_trace_in_the_file_exporter(tmp_path):
    """The example's shape run as a program, checked in what the file exporter wrote."""
    out = tmp_path / "traces-{rank}.jsonl"
    env = dict(os.environ, NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file",
               NEMO_LENS_EXPORT_PATH=str(out), NEMO_LENS_SPAN_GROUPS="all",
               NEMO_LENS_METRICS_ENABLED="0")
    script = os.path.join(os.path.dirname(__file__), "..", "..", "examples", "python_extension",
                          "train.py")
    subprocess.run([sys.executable, script], env=env, check=True, timeout=60)
    spans = []
    with open(tmp_path / "traces-0.jsonl") as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    spans.extend(ss["spans"])
    by_id = {s["spanId"]: s for s in spans}
    names = [s["name"] for s in spans]
    assert names.count("train_step") == 3 and names.count("layer") == 12
    assert len({s["traceId"] for s in spans}) == 1  # one trace: pretrain is the root
    for s in spans:
        parent = by_id.get(s.get("parentSpanId", ""))
        expected = {"pretrain": None, "train_step": "pretrain", "forward": "train_step",
                    "layer": "forward", "all_reduce": "train_step",
                    "next_batch": "all_reduce"}[s["name"]]
        assert (parent["name"] if parent else None) == expected, s["name"]


def test_lens_ctl_groups_switches_python_and_cpp_sites(tracing, tmp_path):
    import glob
    import socket

    tracing.start("step")
    (path,) = glob.glob(str(tmp_path / "ctl" / "*.sock"))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(10)
        s.connect(path)
        s.sendall(b"lens-ctl/1 groups layer,data_loading\n")
        reply = b""
        while chunk := s.recv(4096):
            reply += chunk
    assert json.loads(reply)["ok"] is True, reply
    assert lens.is_span_group_enabled("layer") and not lens.is_span_group_enabled("step")
    with lens.managed_span("data_loading", "python site"):
        lens_demo.forward(1)
    with lens.managed_span("step", "off now"):
        pass
    assert sorted(s.name for s in tracing.spans()) == ["layer", "python site"]


def test_inject_inside_a_callback_from_cpp_writes_the_cpp_span(tracing):
    carriers = []

    def callback():
        carriers.append(lens.inject_context({}))

    with lens.span_cm("python outer"):
        lens_demo.all_reduce(callback)
    (all_reduce,) = [s for s in tracing.spans() if s.name == "all_reduce"]
    assert carriers[0]["traceparent"] == f"00-{all_reduce.trace_id}-{all_reduce.span_id}-03"
    assert lens.get_current_span_context() is None
