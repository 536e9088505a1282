"""pytest fixtures for nemo_lens_cpp: a clean environment per test and an in-memory set-up.

Run through ctest (tests/CMakeLists.txt puts the built package and the lens_demo extension on
PYTHONPATH), or by hand:
    PYTHONPATH=build/python:build/examples/python_extension python3 -m pytest tests/python
"""

import asyncio
import json
import os
import sys

import pytest

import nemo_lens_cpp as lens
from nemo_lens_cpp import _core

_PREFIXES = ("NEMO_LENS_", "OTEL_", "MEGATRON_OTEL_", "RL_OTEL_", "SLURM_", "WANDB_",
             "TRACEPARENT", "TRACESTATE", "BAGGAGE")


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    """Every variable lens reads is unset; the control endpoint lives in the test's directory."""
    for key in list(os.environ):
        if key.startswith(_PREFIXES):
            monkeypatch.delenv(key)
    monkeypatch.setenv("NEMO_LENS_CONTROL_DIR", str(tmp_path / "ctl"))
    yield
    lens.set_enabled_span_groups(frozenset())


def read_spans(path):
    """Every span of a file of OTLP JSON lines (what the file exporter writes), as dicts."""
    spans = []
    with open(path) as f:
        for line in f:
            for rs in json.loads(line)["resourceSpans"]:
                for ss in rs["scopeSpans"]:
                    spans.extend(ss["spans"])
    return spans


def run_interleaved_tasks():
    """Two asyncio tasks on this thread whose spans interleave: task 0 opens "task0" and waits,
    task 1 opens "task1" meanwhile (the thread's latest span), then each opens "child<i>". Each
    task's spans must have its own task's parents, never the sibling's."""

    async def task(i, started, go):
        with lens.managed_span("step", f"task{i}"):
            started.set()
            await go.wait()  # the other task opens its span meanwhile, on the same thread
            with lens.managed_span("layer", f"child{i}"):
                await asyncio.sleep(0)

    async def main():
        go = asyncio.Event()
        s0, s1 = asyncio.Event(), asyncio.Event()
        t0 = asyncio.create_task(task(0, s0, go))
        await s0.wait()
        t1 = asyncio.create_task(task(1, s1, go))
        await s1.wait()
        go.set()
        await asyncio.gather(t0, t1)

    asyncio.run(main())


class Tracing:
    """An enabled, exporting set-up into an InMemorySpanExporter."""

    def __init__(self):
        self.exporter = lens.InMemorySpanExporter()
        self.handle = None

    def start(self, spec="all", group_cls=lens.MegatronSpanGroup, rank=0, world_size=1,
              **fields):
        config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", span_groups=spec,
                                     exporter="console", metrics_enabled=False,
                                     _span_group_cls=group_cls)
        for k, v in fields.items():
            setattr(config, k, v)
        self.exporter.clear()
        self.handle = lens.setup_telemetry(config, rank, world_size, span_exporter=self.exporter,
                                           _allow_reinit=True)
        return self.handle

    def spans(self):
        assert self.handle.force_flush(10000)
        return self.exporter.get_finished_spans()

    def by_name(self):
        """The exported spans by name; each name must be unique."""
        out = {}
        for s in self.spans():
            assert s.name not in out, f"two spans named {s.name}"
            out[s.name] = s
        return out


@pytest.fixture
def tracing():
    t = Tracing()
    t.start()
    yield t
    t.handle.shutdown(10000)


class CountingBridge:
    """A stand-in for what bridge_opentelemetry() registers: `parent` gives `remote` (the span
    id b7ad6b7169203331 of trace 0af7651916cd43dd8448eb211c80319c) as OpenTelemetry's current span
    and counts its calls in `calls`."""

    def __init__(self):
        self.remote = lens.extract_context(
            {"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}).span_context
        self.calls = []

    def parent(self):
        self.calls.append(1)
        return self.remote


@pytest.fixture
def counting_bridge():
    """A CountingBridge, unregistered at the end (the test registers it, with
    _core._set_bridge_parent); skips where OpenTelemetry's own bridge is installed."""
    if "opentelemetry" in sys.modules:  # set-up joined it: its bridge must stay
        pytest.skip("OpenTelemetry's bridge is installed")
    yield CountingBridge()
    _core._set_bridge_parent(None)
