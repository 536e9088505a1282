"""GPU time of spans from Python (docs/gpu.md): the same variable, the same pipeline. This machine
has no GPU, so set-up says in one line why GPU time is off and the job runs as without it;
scripts/gpu-check covers a GPU."""

import json
import os
import subprocess
import sys

import pytest

PROGRAM = """
import nemo_lens_cpp as lens
from nemo_lens_cpp.config import NemoLensConfig
from nemo_lens_cpp.handle import setup_telemetry
from nemo_lens_cpp.helpers import managed_span

handle = setup_telemetry(NemoLensConfig.from_env(), 0, 1)
with managed_span("step", "train_step", iteration=1):
    with managed_span("forward_backward", "forward_backward"):
        pass
handle.force_flush()
stats = handle.stats()
print("STATS", stats["gpu_spans_timed"], stats["gpu_spans_incomplete"],
      stats["gpu_activities_late"], stats["spans_exported"])
print("GPU LOSSES", stats["gpu_launches_dropped"], stats["gpu_activities_dropped"],
      stats["gpu_activities_unattributed"], stats["gpu_spans_waiting"])
handle.shutdown()
"""


def run(tmp_path, **env):
    out = tmp_path / "traces-{rank}.jsonl"
    full = dict(os.environ, NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="file",
                NEMO_LENS_EXPORT_PATH=str(out), NEMO_LENS_SPAN_GROUPS="per_step",
                NEMO_LENS_METRICS_ENABLED="0", **env)
    return subprocess.run([sys.executable, "-c", PROGRAM], env=full, capture_output=True,
                          text=True, timeout=60)


def spans_of(tmp_path):
    spans = []
    with open(tmp_path / "traces-0.jsonl") as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    spans.extend(ss["spans"])
    return spans


def test_without_a_gpu_one_line_says_why_and_spans_are_unchanged(tmp_path):
    done = run(tmp_path, NEMO_LENS_GPU_TIME="per_step")
    if done.returncode == 0 and "GPU time of spans is off" not in done.stderr:
        pytest.skip("this machine has a GPU: scripts/gpu-check covers it")
    assert done.returncode == 0, done.stderr
    lines = [l for l in done.stderr.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("lens: GPU time of spans is off (per_step): "), \
        done.stderr
    assert "STATS 0 0 0 2" in done.stdout
    assert "GPU LOSSES 0 0 0 0" in done.stdout
    spans = spans_of(tmp_path)
    assert sorted(s["name"] for s in spans) == ["forward_backward", "train_step"]
    for s in spans:
        assert not any(a["key"].startswith("gpu.") for a in s.get("attributes", []))


def test_off_by_default_says_nothing(tmp_path):
    done = run(tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    assert "STATS 0 0 0 2" in done.stdout
    assert "GPU LOSSES 0 0 0 0" in done.stdout


def test_a_bad_spec_is_a_config_error_naming_the_variable(tmp_path):
    done = run(tmp_path, NEMO_LENS_GPU_TIME="per_step,warp")
    assert done.returncode != 0
    assert "NEMO_LENS_GPU_TIME" in done.stderr and "'warp'" in done.stderr
