"""Python sites open NVTX ranges like C++ ones, through the test NVTX tool (tests/nvtx)."""

import os
import subprocess
import sys
import textwrap

import pytest

TOOL = os.environ.get("LENS_NVTX_TOOL")


@pytest.mark.skipif(not TOOL, reason="lens was built without NVTX (no LENS_NVTX_TOOL)")
def test_python_and_cpp_sites_open_nested_ranges_named_by_span(tmp_path):
    log = tmp_path / "nvtx.log"
    env = dict(os.environ, NVTX_INJECTION64_PATH=TOOL, LENS_NVTX_TOOL_LOG=str(log),
               NEMO_LENS_ENABLED="1", NEMO_LENS_EXPORTER="console", NEMO_LENS_NVTX="auto",
               NEMO_LENS_METRICS_ENABLED="0", NEMO_LENS_SPAN_GROUPS="step,layer",
               NEMO_LENS_EXPORT_STRATEGY="single_rank", NEMO_LENS_EXPORT_RANK="0")
    code = textwrap.dedent("""
        import nemo_lens_cpp as lens, lens_demo
        # rank 1 of 2 does not export: its sites still open ranges
        h = lens.setup_telemetry(lens.NemoLensConfig.from_env(
            span_group_cls=lens.MegatronSpanGroup), 1, 2)
        assert not h.is_exporting
        with lens.managed_span("step", "py step"):
            with lens.managed_span("microbatch", "off"):
                lens_demo.forward(2)       # forward_backward is off, layer is on
        h.shutdown()
    """)
    subprocess.run([sys.executable, "-c", code], env=env, check=True, timeout=60)
    strings, sequence, depth = {}, [], 0
    for line in log.read_text().splitlines():
        op, *rest = line.split(" ", 3)
        if op == "string":
            _domain, sid, text = line.split(" ", 3)[1:]
            strings[sid] = text
        elif op == "push":
            sequence.append(("push", strings.get(line.rsplit(" s", 1)[-1], "?"), depth))
            depth += 1
        elif op == "pop":
            depth -= 1
            sequence.append(("pop",))
    assert sequence == [("push", "py step", 0), ("push", "layer", 1), ("pop",),
                        ("push", "layer", 1), ("pop",), ("pop",)]
