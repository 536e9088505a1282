"""The PyTorch job (examples/torch_train) on 4 real ranks over gloo: one trace across ranks
through broadcast_trace_context, the torch C++ extension's spans under the Python spans (forward
and backward), one communication span per DDP bucket, NeMo Lens' inference metrics, a rank that
does not export, and a rank that dies mid-job. On the CPU (--device cpu) whatever the machine
has: autograd runs a CPU backward on the calling thread, which the span tree below relies on;
--device and --cuda-events' errors without a GPU; the --cuda-events file's format."""

import importlib.util
import json
import os
import subprocess
import sys
from collections import defaultdict

import pytest

from conftest import read_spans as read_otlp_spans

torch = pytest.importorskip("torch", reason="PyTorch is not installed (python3-torch)")
pytest.importorskip("lens_torch_ops",
                    reason="the torch extension of examples/torch_train is not built")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "torch_train")
RANKS = 4
LAYERS = 2


def job_env():
    """The environment without lens' variables, PYTHONPATH's entries made absolute."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NEMO_LENS_", "OTEL_"))}
    env["PYTHONPATH"] = os.pathsep.join(  # the ranks run in `tmp`
        os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)
    return env


def run_job(tmp, *args, strategy="all_ranks", check=True, device="cpu", env_extra=None):
    """Runs the job on RANKS ranks; returns (exit status, spans by rank, summaries by rank)."""
    env = job_env()
    env.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="all", NEMO_LENS_EXPORTER="file",
               NEMO_LENS_EXPORT_STRATEGY=strategy,
               NEMO_LENS_EXPORT_PATH=str(tmp / "traces-rank{rank}.jsonl"),
               NEMO_LENS_METRICS_EXPORT_PATH=str(tmp / "metrics-rank{rank}.jsonl"),
               NEMO_LENS_CONTROL_DIR=str(tmp / "ctl"))
    env.update(env_extra or {})
    command = [sys.executable, os.path.join(EXAMPLE, "launch.py"), "--nproc", str(RANKS),
               "--grace", "60", "--", os.path.join(EXAMPLE, "train.py"),
               "--summary", str(tmp / "summary{rank}.json"), "--device", device, *args]
    job = subprocess.run(command, env=env, cwd=tmp, capture_output=True, text=True, timeout=240)
    if check:
        assert job.returncode == 0, job.stdout + job.stderr
    spans, summaries = {}, {}
    for rank in range(RANKS):
        path = tmp / f"traces-rank{rank}.jsonl"
        spans[rank] = read_spans(path) if path.exists() else []
        path = tmp / f"summary{rank}.json"
        if path.exists():
            summaries[rank] = json.loads(path.read_text())
    return job, spans, summaries


def read_spans(path):
    """conftest.read_spans, each span with its attributes as a dict under "attrs"."""
    out = read_otlp_spans(path)
    for s in out:
        s["attrs"] = {a["key"]: _value(a["value"]) for a in s.get("attributes", [])}
    return out


def _value(v):
    (kind, value), = v.items()
    return int(value) if kind == "intValue" else value  # OTLP JSON writes int64 as a string


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("torch_job")
    # torch.profiler runs over steps 2 and 3: every test below holds with it in the middle.
    result = run_job(tmp, "--steps", "4", "--microbatches", "2", "--checkpoint-every", "2",
                     "--eval-every", "2", "--generate-tokens", "4", "--layers", str(LAYERS),
                     "--checkpoint-dir", str(tmp / "ckpt"), "--profile-steps", "2:3")
    return (tmp, *result)


def by_id(spans):
    return {s["spanId"]: s for s in spans}


def test_every_rank_is_in_rank_0s_trace(job):
    _, _, spans, summaries = job
    (root,) = [s for s in spans[0] if s["name"] == "torch_train"]
    assert "parentSpanId" not in root or not root["parentSpanId"]
    for rank in range(RANKS):
        assert spans[rank], f"rank {rank} exported nothing"
        assert {s["traceId"] for s in spans[rank]} == {root["traceId"]}, rank
        (job_span,) = [s for s in spans[rank] if s["name"] == "torch_train"]
        if rank:
            assert job_span["parentSpanId"] == root["spanId"]  # through broadcast_trace_context
        assert summaries[rank]["trace_carrier"]["traceparent"].split("-")[2] == root["spanId"]


def test_the_cpp_ops_spans_are_children_of_the_python_spans_forward_and_backward(job):
    _, _, spans, _ = job
    for rank in range(RANKS):
        ids = by_id(spans[rank])
        children = defaultdict(lambda: defaultdict(int))
        for s in spans[rank]:
            if s["name"].startswith("gelu_residual."):
                parent = ids[s["parentSpanId"]]
                children[parent["name"]][s["name"]] += 1
        microbatches = sum(1 for s in spans[rank] if s["name"] == "microbatch")
        assert microbatches == 4 * 2
        # Forward and backward (autograd runs a CPU backward on the calling thread) both nest
        # under the microbatch span current there: one per layer each.
        assert children["microbatch"] == {"gelu_residual.forward": LAYERS * microbatches,
                                          "gelu_residual.backward": LAYERS * microbatches}
        assert children["evaluate"]["gelu_residual.forward"] == 2 * LAYERS  # no backward
        assert children["generate"]["gelu_residual.forward"] == 4 * LAYERS
        assert "gelu_residual.backward" not in children["evaluate"]


def test_the_ddp_hook_makes_one_span_per_bucket_under_the_last_microbatch(job):
    _, _, spans, summaries = job
    buckets = defaultdict(set)  # iteration -> bucket counts seen on the ranks
    for rank in range(RANKS):
        ids = by_id(spans[rank])
        per_step = defaultdict(list)
        for s in spans[rank]:
            if s["name"] != "allreduce_bucket":
                continue
            microbatch = ids[s["parentSpanId"]]
            assert microbatch["name"] == "microbatch"
            assert microbatch["attrs"]["microbatch"] == 1  # no_sync() on the first one
            step = ids[ids[microbatch["parentSpanId"]]["parentSpanId"]]
            per_step[step["attrs"]["iteration"]].append(s)
        assert sorted(per_step) == [1, 2, 3, 4]
        for iteration, bucket_spans in per_step.items():
            indexes = sorted(s["attrs"]["bucket"] for s in bucket_spans)
            assert indexes == list(range(len(indexes))), (rank, iteration)
            total = sum(s["attrs"]["bytes"] for s in bucket_spans)
            assert total == summaries[rank]["gradient_bytes"]  # every gradient, once
            buckets[iteration].add(len(indexes))
    # The same buckets on every rank; several once DDP rebuilt them after the first iteration.
    assert all(len(counts) == 1 for counts in buckets.values()), buckets
    assert all(count > 1 for i in (2, 3, 4) for count in buckets[i]), buckets


def test_the_report_tells_hidden_from_exposed_all_reduce_time(job):
    """lens report on the job's real DDP spans (issue 40): the bucket all-reduces run beside the
    steps, so they are overlapped time with an exposed part between 0 and the step time; the
    steps' own threads add up to the step time and no share exceeds 100 %."""
    lens_binary = os.environ.get("LENS_BINARY")
    if not lens_binary:
        pytest.skip("LENS_BINARY (the built lens command) is not set")
    tmp = job[0]
    files = sorted(str(p) for p in tmp.glob("traces-rank*.jsonl"))
    report = subprocess.run([lens_binary, "report", "--json", *files], capture_output=True,
                            text=True, timeout=120, check=True)
    r = json.loads(report.stdout)
    step_ns = r["step"]["total_ns"]
    assert r["step"]["count"] == 4 * RANKS
    assert sum(g["in_step_self_ns"] for g in r["groups"]) == step_ns
    for row in r["names"] + r["groups"]:
        assert row["step_share"] <= 1 and row["self_share"] <= 1, row
    (comm,) = [o for o in r["overlap"]["names"] if o["name"] == "allreduce_bucket"]
    assert 0 < comm["overlapped_ns"] <= step_ns
    assert 0 <= comm["exposed_ns"] <= comm["overlapped_ns"]
    assert comm["overlapped_share"] <= 1 and comm["exposed_share"] <= 1


@pytest.mark.parametrize("slow_rank", [2, None])
def test_the_report_names_the_slow_rank_and_nobody_in_a_balanced_job(tmp_path, slow_rank):
    """Issue 47: rank 2 computing twice as long (--slow-rank) does not take longer steps, every
    rank waits for it in the DDP all-reduces; lens report names it, slow in forward_backward and
    last into the buckets' all-reduces. Without a slow rank it names none.

    The 4 ranks share 2 cores here, so the scheduler alone makes a rank late at the all-reduces,
    now and then on most of a short job's steps: in CI rank 2 of a balanced job 8.3 ms late per
    step of 130 ms (past the default floor of 5 %), another run rank 0 20.5 ms (16 %, past a floor
    of 15 %). Both cases use a floor of 30 % (--straggler-threshold), twice that noise, and the
    slow rank computes 3 times as long: it is late by twice its compute, about two thirds of the
    others' step, twice the floor."""
    lens_binary = os.environ.get("LENS_BINARY")
    if not lens_binary:
        pytest.skip("LENS_BINARY (the built lens command) is not set")
    args = ["--steps", "12", "--microbatches", "2", "--checkpoint-every", "0", "--eval-every",
            "0", "--generate-tokens", "0"]
    if slow_rank is not None:
        args += ["--slow-rank", str(slow_rank), "--slow-factor", "3"]
    run_job(tmp_path, *args)
    files = sorted(str(p) for p in tmp_path.glob("traces-rank*.jsonl"))
    report = subprocess.run([lens_binary, "report", "--json", "--straggler-threshold", "30",
                             *files], capture_output=True, text=True, timeout=120, check=True)
    r = json.loads(report.stdout)
    assert r["stragglers"]["threshold_pct"] == 30
    ranks = [(x["rank"], x["last_count"], x["late_ns"])
             for c in r["collectives"] for x in c["ranks"]]
    flagged = [s["rank"] for s in r["stragglers"]["ranks"]]
    if slow_rank is None:
        assert flagged == [], ranks
        return
    assert flagged == [slow_rank], ranks
    (s,) = r["stragglers"]["ranks"]
    assert "arrival" in s["flagged_by"]
    assert s["groups"][0]["group"] in ("forward_backward", "microbatch"), s["groups"]
    assert s["last_into"][0]["name"] == "allreduce_bucket", s["last_into"]
    assert s["last_into"][0]["last"] >= 0.8 * s["last_into"][0]["of"], s["last_into"]
    assert 0 < s["wait_caused_share"] <= 1


def _step_of(span, spans_by_id):
    """The iteration of the train_step a span lies under (its ancestors on its rank), or None."""
    while span is not None:
        if span["name"] == "train_step":
            return span["attrs"].get("iteration")
        span = spans_by_id.get(span.get("parentSpanId"))
    return None


def test_a_stalled_step_is_captured_on_every_rank_with_its_cpp_spans(tmp_path):
    """Issue 48: per_step exported, every group recorded, rank 1 stalling 800 ms in step 8: every
    rank captures step 8 on its own (the others wait for rank 1 in the DDP all-reduces), Python
    and C++ spans alike, under the exported step span; no other step. Steps of 100 to 150 ms on
    the CPU: a factor of 3 leaves the noise below it, the stalled step (~8x) above."""
    lens_binary = os.environ.get("LENS_BINARY")
    if not lens_binary:
        pytest.skip("LENS_BINARY (the built lens command) is not set")
    run_job(tmp_path, "--steps", "12", "--microbatches", "2", "--checkpoint-every", "0",
            "--eval-every", "0", "--generate-tokens", "0", "--layers", str(LAYERS),
            "--stall-step", "8", "--stall-ms", "800", "--stall-rank", "1",
            env_extra={"NEMO_LENS_SPAN_GROUPS": "per_step", "NEMO_LENS_RECORD_GROUPS": "all",
                       "NEMO_LENS_RECORD_SLOW_FACTOR": "3",
                       "NEMO_LENS_METRICS_ENABLED": "0"})
    files = sorted(tmp_path.glob("traces-rank*.jsonl"))
    assert len(files) == RANKS
    for path in files:
        spans = read_spans(path)
        ids = {s["spanId"]: s for s in spans}
        captured = [s for s in spans if "lens.capture.reason" in s["attrs"]]
        assert {_step_of(s, ids) for s in captured} == {8}, path
        assert {s["attrs"]["lens.capture.reason"] for s in captured} == {"slow_step"}
        names = sorted(s["name"] for s in captured)
        # 2 microbatches, each through LAYERS blocks whose C++ op opens a span forward and back.
        assert names.count("microbatch") == 2, names
        assert names.count("gelu_residual.forward") == 2 * LAYERS, names
        assert names.count("gelu_residual.backward") == 2 * LAYERS, names
        exported = {s["attrs"].get("nemo.span.group") for s in spans
                    if "lens.capture.reason" not in s["attrs"]}
        assert not exported & {"microbatch", "layer"}, exported
    report = subprocess.run([lens_binary, "report", "--json", *map(str, files)],
                            capture_output=True, text=True, timeout=120, check=True)
    rows = json.loads(report.stdout)["captured"]["steps"]
    assert sorted(r["rank"] for r in rows) == list(range(RANKS))
    assert {r["iteration"] for r in rows} == {8}
    assert rows[0]["rank"] == 1, [(r["rank"], r["communication_ns"]) for r in rows]
    microbatch = [n for n in rows[0]["names"] if n["name"] == "microbatch"][0]
    assert microbatch["longest_ns"] >= 800e6, rows[0]["names"]


def test_phases_metrics_and_linked_stages(job):
    tmp, _, spans, summaries = job
    root = next(s for s in spans[0] if s["name"] == "torch_train")
    for rank in range(RANKS):
        names = defaultdict(int)
        for s in spans[rank]:
            names[s["name"]] += 1
        assert names["train_step"] == 4 and names["load_batches"] == 4
        assert names["optimizer_step"] == 4 and names["forward_backward"] == 4
        assert names["save_checkpoint"] == 2 and names["evaluate"] == 2
        assert names["generate"] == 1
        stages = [s for s in spans[rank] if s["name"] == "pipeline_stage"]
        assert len(stages) == 2
        for stage in stages:
            (link,) = stage["links"]
            assert (link["traceId"], link["spanId"]) == (root["traceId"], root["spanId"])
    assert sorted(os.listdir(tmp / "ckpt")) == ["step2.pt", "step4.pt"]


def _metrics(path):
    out = {}
    with open(path) as f:
        for line in f:
            for rm in json.loads(line)["resourceMetrics"]:
                for sm in rm["scopeMetrics"]:
                    for m in sm["metrics"]:
                        kind = next(k for k in ("sum", "gauge", "histogram") if k in m)
                        out[m["name"]] = (m.get("unit", ""), kind, m[kind]["dataPoints"])
    return out


def test_inference_and_training_metrics_as_nemo_lens_writes_them(job):
    tmp, _, _, _ = job
    for rank in range(RANKS):
        metrics = _metrics(tmp / f"metrics-rank{rank}.jsonl")
        unit, kind, (duration,) = metrics["gen_ai.server.request.duration"]
        assert (unit, kind, duration["count"]) == ("s", "histogram", "1")
        attrs = {a["key"]: a["value"]["stringValue"] for a in duration["attributes"]}
        assert attrs == {"gen_ai.operation.name": "text_completion",
                         "gen_ai.provider.name": "nemo", "gen_ai.request.model": "tiny-lm"}
        unit, kind, usage = metrics["gen_ai.client.token.usage"]
        assert (unit, kind) == ("{token}", "histogram")
        by_type = {next(a["value"]["stringValue"] for a in p["attributes"]
                        if a["key"] == "gen_ai.token.type"): p["sum"] for p in usage}
        assert by_type == {"input": 8, "output": 4}
        (steps,) = metrics["dl.steps"][2]
        assert float(steps.get("asInt", steps.get("asDouble"))) == 4
        assert metrics["dl.step.duration"][:2] == ("s", "histogram")
        assert metrics["dl.loss"][1] == "gauge"


def device_lines(stdout):
    return [line for line in stdout.splitlines() if line.startswith("device:")]


def test_rank_0_says_which_device_it_runs_on(job):
    _, run, _, summaries = job
    assert device_lines(run.stdout) == ["device: cpu, process group gloo"], run.stdout
    assert {(s["device"], s["backend"]) for s in summaries.values()} == {("cpu", "gloo")}


def test_device_cuda_without_a_gpu_is_a_usage_error(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("torch sees a GPU here")
    for args, option in ((["--device", "cuda"], "--device"),
                         (["--cuda-events", "events.jsonl"], "--cuda-events"),
                         (["--device", "cpu", "--cuda-events", "events.jsonl"], "--cuda-events")):
        run = subprocess.run([sys.executable, os.path.join(EXAMPLE, "train.py"), *args],
                             env=job_env(), cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        assert run.returncode == 2, (args, run.stdout, run.stderr)
        assert "Traceback" not in run.stderr, run.stderr
        (error,) = [line for line in run.stderr.splitlines() if "error:" in line]
        assert error.startswith(f"train.py: error: argument {option}: "), error
        assert "CUDA" in error or "GPU" in error, error
    assert not (tmp_path / "events.jsonl").exists()


def test_torch_profiler_in_the_middle_of_the_job_sees_its_steps_and_lens_every_span(job):
    """scripts/gpu-check runs the same window on a GPU, where Kineto and lens share CUPTI."""
    _, _, spans, summaries = job
    for rank in range(RANKS):
        profiler = summaries[rank]["profiler"]
        assert profiler["steps"] == [2, 3]
        assert profiler["train_steps_seen"] == 2, profiler  # its own ranges: it ran there
        assert profiler["events"] > 0 and profiler["gpu_events"] == 0, profiler  # on the CPU
        steps = sorted(s["attrs"]["iteration"] for s in spans[rank] if s["name"] == "train_step")
        assert steps == [1, 2, 3, 4], (rank, steps)


def load_train_module():
    spec = importlib.util.spec_from_file_location("torch_train_job",
                                                  os.path.join(EXAMPLE, "train.py"))
    train = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(train)
    return train


def test_a_profile_window_outside_the_steps_is_a_usage_error(capsys):
    train = load_train_module()
    assert train.parse_args(["--steps", "4", "--profile-steps", "2:3"]).profile_window == (2, 3)
    assert train.parse_args(["--steps", "4", "--profile-steps", "4"]).profile_window == (4, 4)
    assert train.parse_args(["--steps", "4"]).profile_window is None
    for window in ("0:2", "3:9", "3:2", "x", "2:y"):
        with pytest.raises(SystemExit) as exit_info:
            train.parse_args(["--steps", "4", "--profile-steps", window])
        assert exit_info.value.code == 2
        error = capsys.readouterr().err.splitlines()[-1]
        assert error.startswith(f"train.py: error: argument --profile-steps: '{window}'"), error
        assert "--steps (4)" in error, error


def test_the_cuda_events_file_has_a_line_per_step(tmp_path, monkeypatch):
    """train.CudaEvents with torch.cuda's events and synchronize stood in for: the format
    scripts/gpu-check reads, one JSON object per line and step."""
    train = load_train_module()
    clock = iter(range(1000))

    class Event:
        def __init__(self, enable_timing=False):
            assert enable_timing
            self.t = None

        def record(self):
            self.t = next(clock)

        def elapsed_time(self, end):
            return (end.t - self.t) * 0.5

    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    events = train.CudaEvents(str(tmp_path / "events-rank{rank}.jsonl"))
    for step in (1, 2):
        with events.timed(step, "forward_backward"):
            next(clock)  # work between the events: 2 ticks, 1 ms
        with events.timed(step, "optimizer"):
            pass
    with pytest.raises(RuntimeError), events.timed(3, "forward_backward"):
        raise RuntimeError("a step that fails records no pair")
    events.write(3)
    rows = [json.loads(line) for line in (tmp_path / "events-rank3.jsonl").read_text().splitlines()]
    assert rows == [{"rank": 3, "step": 1, "forward_backward_ms": 1.0, "optimizer_ms": 0.5},
                    {"rank": 3, "step": 2, "forward_backward_ms": 1.0, "optimizer_ms": 0.5}]
    off = train.CudaEvents("")
    with off.timed(1, "optimizer"):
        pass
    off.write(0)  # no path: nothing recorded, nothing written
    assert off.events == {}


def test_a_rank_that_does_not_export_runs_with_its_gates_shut(tmp_path):
    # As NeMo Lens: a rank that does not export has no enabled groups; its sites cost the gate.
    # --device auto: cpu here, cuda where torch sees a GPU (these assertions hold on both).
    job, spans, summaries = run_job(tmp_path, "--steps", "2", "--eval-every", "0",
                                    "--checkpoint-every", "0", strategy="single_rank",
                                    device="auto")
    auto = "cuda" if torch.cuda.is_available() else "cpu"
    (line,) = device_lines(job.stdout)
    assert line.startswith(f"device: {auto}"), line
    exporter = RANKS - 1  # single_rank: the last rank, unless NEMO_LENS_EXPORT_RANK says
    for rank in range(RANKS):
        s = summaries[rank]
        assert s["steps"] == 2
        assert s["exporting"] == (rank == exporter)
        if rank == exporter:
            assert "step" in s["enabled_groups"] and "communication" in s["enabled_groups"]
        else:
            assert s["enabled_groups"] == []
            assert spans[rank] == [] and s["stats"]["spans_started"] == 0
    names = {s["name"] for s in spans[exporter]}
    assert {"torch_train", "train_step", "allreduce_bucket", "gelu_residual.backward"} <= names
    # Rank 0 recorded nothing, so it had no context to broadcast: the exporting rank's trace is
    # its own, one trace.
    assert len({s["traceId"] for s in spans[exporter]}) == 1


def test_a_rank_that_dies_mid_job_leaves_the_others_spans_intact(tmp_path):
    job, spans, summaries = run_job(tmp_path, "--steps", "5", "--die-rank", "2",
                                    "--die-at-step", "3", "--eval-every", "0",
                                    "--checkpoint-every", "0", "--generate-tokens", "0",
                                    check=False)
    assert job.returncode != 0
    assert 2 not in summaries  # it died without a word
    for rank in (0, 1, 3):
        steps = {s["attrs"]["iteration"]: s for s in spans[rank] if s["name"] == "train_step"}
        assert sorted(steps) == [1, 2, 3], rank
        assert all(steps[i].get("status", {}).get("code") in (None, 0, 1) for i in (1, 2))
        assert steps[3]["status"]["code"] == 2  # ERROR: the collective lost its peer
        (job_span,) = [s for s in spans[rank] if s["name"] == "torch_train"]
        assert job_span["status"]["code"] == 2
        assert summaries[rank]["steps"] == 2


def test_backward_on_another_thread_gets_that_threads_parent(tracing):
    # Autograd runs a CPU backward on the thread that calls backward(); CUDA's runs on its device
    # threads. Either way the C++ op's backward span takes the current span of the thread it runs
    # on: here a thread with none, so it starts its own trace, as on a CUDA device thread.
    import threading

    import lens_torch_ops
    import nemo_lens_cpp as lens

    x = torch.randn(4, requires_grad=True)
    h = torch.randn(4, requires_grad=True)
    with lens.managed_span("step", "forward here"):
        y = lens_torch_ops.gelu_residual(x, h).sum()
    worker = threading.Thread(target=y.backward)
    worker.start()
    worker.join()
    with lens.managed_span("step", "backward here"):
        lens_torch_ops.gelu_residual(x, h).sum().backward()
    spans = tracing.spans()
    forward = {s.name: s for s in spans if s.name != "gelu_residual.backward"}
    backwards = [s for s in spans if s.name == "gelu_residual.backward"]
    assert len(backwards) == 2
    on_worker, on_caller = sorted(backwards, key=lambda s: s.parent_span_id is not None)
    assert on_worker.parent_span_id is None
    assert on_worker.trace_id != forward["forward here"].trace_id
    assert on_caller.parent_span_id == forward["backward here"].span_id
    assert x.grad is not None
