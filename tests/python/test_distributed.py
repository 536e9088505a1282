"""nemo_lens_cpp.distributed: broadcast_trace_context over a real torch.distributed process group
(gloo, two ranks) and create_linked_span; and start_span's OpenTelemetry-style lifecycle."""

import json
import os
import socket
import subprocess
import sys

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp.distributed import broadcast_trace_context, create_linked_span


def test_start_span_without_with_records_and_is_not_current(tracing):
    sp = lens.start_span("explicit end", group="step", iteration=3)
    with lens.span_cm("sibling"):
        pass
    sp.end()
    sp.end()  # idempotent
    with lens.start_span("entered later") as entered:
        with lens.span_cm("child"):
            pass
    spans = tracing.by_name()
    assert spans["explicit end"].attributes["iteration"] == 3
    assert spans["sibling"].parent_span_id is None  # start_span did not make it current
    assert spans["child"].parent_span_id == entered.get_span_context().span_id_hex
    with pytest.raises(RuntimeError, match="entered only once"):
        with entered:
            pass


def test_a_span_of_a_group_that_is_off_records_nothing(tracing):
    lens.set_enabled_span_groups({"job"})
    sp = lens.start_span("off", group="step")
    assert not sp.is_recording()
    sp.end()
    assert "off" not in {s.name for s in tracing.spans()}


def test_create_linked_span_links_to_the_carrier_span(tracing):
    with lens.span_cm("stage0") as stage0:
        carrier = lens.inject_context({})
    with lens.span_cm("stage1 parent") as parent:
        linked = create_linked_span(None, "stage1", remote_carrier=carrier, microbatch=2,
                                    prompt="hidden")
        linked.end()
    by_ctx = create_linked_span(None, "by context",
                                remote_context=lens.extract_context(carrier))
    by_ctx.end()
    unlinked = create_linked_span(None, "no remote", remote_carrier={"traceparent": "junk"})
    unlinked.end()
    spans = tracing.by_name()
    s = spans["stage1"]
    ctx = stage0.get_span_context()
    links = [(lk["trace_id"], lk["span_id"]) for lk in s.links]
    assert links == [(ctx.trace_id_hex, ctx.span_id_hex)]
    assert s.parent_span_id == parent.get_span_context().span_id_hex
    assert s.attributes["microbatch"] == 2 and s.attributes["prompt"] == "[REDACTED]"
    assert [lk["span_id"] for lk in spans["by context"].links] == [ctx.span_id_hex]
    assert spans["no remote"].links == []


def test_broadcast_without_a_process_group_is_none():
    assert broadcast_trace_context(0) is None


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_broadcast_gives_every_rank_rank0s_trace(tmp_path):
    try:
        import torch.distributed  # noqa: F401
    except ImportError as e:
        pytest.skip(f"torch cannot be imported: {e}")
    script = os.path.join(os.path.dirname(__file__), "torch_broadcast_rank.py")
    env = dict(os.environ, WORLD_SIZE="2", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()),
               NEMO_LENS_EXPORT_PATH=str(tmp_path / "rank{rank}.jsonl"), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, script], env=dict(env, RANK=str(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(2)]
    outs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=120)
            assert p.returncode == 0, err
            outs.append(out.strip())
    finally:
        for p in procs:
            p.kill()
    assert outs[0] == outs[1]  # the same carrier on both ranks
    spans = {}
    for r in range(2):
        for line in open(tmp_path / f"rank{r}.jsonl"):
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    for s in ss["spans"]:
                        spans[s["name"]] = s
    job = spans["job"]
    assert outs[0].split("-")[1:3] == [job["traceId"], job["spanId"]]
    for r in range(2):
        assert spans[f"work{r}"]["traceId"] == job["traceId"]
        assert spans[f"work{r}"]["parentSpanId"] == job["spanId"]


def test_a_span_ended_before_it_was_entered_records_nothing(tracing):
    sp = lens.managed_span("step", "never entered")
    sp.end()
    with pytest.raises(RuntimeError, match="entered only once"):
        with sp:
            pass
    assert "never entered" not in {s.name for s in tracing.spans()}
