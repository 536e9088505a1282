"""What nemo_lens_cpp costs a Python program, next to its baselines, measured in one run.

    PYTHONPATH=build/python:build/examples/python_extension python3 bench/python_bench.py

Prints the median of --repeat timeit runs per case, in ns per operation, and the ratios the
targets are stated in (docs/python.md). With OpenTelemetry Python importable, a span through its
API (routed into lens) and the SDK's own span are measured too; with NeMo Lens (nemo.lens)
importable, its disabled managed_span.
"""

import argparse
import contextlib
import os
import statistics
import sys
import timeit


def median_ns(stmt, setup="pass", number=200000, repeat=7, env=None):
    runs = timeit.repeat(stmt, setup=setup, number=number, repeat=repeat, globals=env)
    return statistics.median(runs) / number * 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--number", type=int, default=200000)
    args = parser.parse_args()

    # Spans go to memory, emptied before every timing run: the exporter thread copies them and
    # keeps up (the drop fraction is printed), so only the caller's cost is measured.
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="per_step",
                      NEMO_LENS_METRICS_ENABLED="0", OTEL_BSP_MAX_QUEUE_SIZE="65536",
                      NEMO_LENS_EXPORT_STRATEGY="all_ranks", NEMO_LENS_EXPORTER="console")
    import nemo_lens_cpp as lens

    memory = lens.InMemorySpanExporter()
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(
        span_group_cls=lens.MegatronSpanGroup), span_exporter=memory)
    env = {"lens": lens, "nullcontext": contextlib.nullcontext, "memory": memory,
           "groups": frozenset(["step", "job"]), "ms": lens.managed_span,
           "enabled": lens.is_span_group_enabled}
    n, r = args.number, args.repeat
    rows = []

    def row(what, ns, baseline=None, target=None):
        ratio = f"{ns / baseline:.2f}x" if baseline else ""
        rows.append((what, ns, ratio, target or ""))

    null = median_ns("with nullcontext(): pass", number=n, repeat=r, env=env)
    row("with contextlib.nullcontext() (baseline)", null)
    off = median_ns('with ms("layer", "layer_forward"): pass', number=n, repeat=r, env=env)
    row("disabled `with managed_span(...)`", off, null, "<= 1.5x")
    member = median_ns('"step" in groups', number=n, repeat=r, env=env)
    row("`name in frozenset` (baseline)", member)
    gate = median_ns('enabled("step")', number=n, repeat=r, env=env)
    row("is_span_group_enabled(name)", gate, member, "<= 2x")
    on = median_ns('with ms("step", "train_step", iteration=1, loss=0.5): pass',
                   setup="memory.clear()", number=n // 4, repeat=r, env=env)
    row("enabled span, two attributes, recorded and queued", on, None, "<= 2000 ns")

    try:  # OpenTelemetry Python, when importable: set-up made lens' provider the global one
        from opentelemetry import trace as otel_trace
    except ImportError:
        otel_trace = None
    if otel_trace is not None:
        env["tracer"] = otel_trace.get_tracer("bench")
        otel_on = median_ns('with tracer.start_as_current_span("train_step", attributes='
                            '{"iteration": 1, "loss": 0.5}): pass',
                            setup="memory.clear()", number=n // 4, repeat=r, env=env)
        row("OpenTelemetry API span into lens, two attributes", otel_on, on, "<= 3000 ns")
        joined = median_ns('with ms("step", "train_step", iteration=1, loss=0.5): pass',
                           setup="memory.clear()", number=n // 4, repeat=r, env=env)
        row("enabled managed_span, OpenTelemetry joined", joined, on, "~1.0x")
        try:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
        except ImportError:
            TracerProvider = None
        if TracerProvider is not None:
            class Discard(SpanExporter):
                def export(self, spans):
                    return 0  # SpanExportResult.SUCCESS

            sdk = TracerProvider()
            sdk.add_span_processor(BatchSpanProcessor(Discard()))
            env["sdk"] = sdk.get_tracer("bench")
            sdk_on = median_ns('with sdk.start_as_current_span("train_step", attributes='
                               '{"iteration": 1, "loss": 0.5}): pass',
                               number=n // 20, repeat=r, env=env)
            row("OpenTelemetry SDK's own span, batch processor (comparison)", sdk_on, on)
            sdk.shutdown()

    try:
        import lens_demo
    except ImportError:
        lens_demo = None
    if lens_demo is not None:
        lens.set_enabled_span_groups({"layer", "step"})

        def cpp_ns():
            handle.force_flush()
            memory.clear()
            return lens_demo.time_spans(20000)

        cpp_alone = statistics.median(cpp_ns() for _ in range(r))
        with lens.managed_span("step", "outer"):
            cpp_inside = statistics.median(cpp_ns() for _ in range(r))
        row("C++ LENS_SPAN (lens_demo), no Python span open", cpp_alone)
        row("the same inside a Python managed_span", cpp_inside, cpp_alone, "~1.0x")

    stats = handle.stats()
    handle.shutdown()
    dropped = stats["spans_dropped_queue_full"] / max(stats["spans_ended"], 1)

    try:
        os.environ["NEMO_LENS_SPAN_GROUPS"] = "default"
        from nemo.lens import NemoLensConfig as NLConfig, managed_span as nl_span
        from nemo.lens import setup_telemetry as nl_setup
        nl_setup(NLConfig(enabled=False))
        nl_off = median_ns('with nl("layer", "layer_forward"): pass', number=n // 4, repeat=r,
                           env={"nl": nl_span})
        row("NeMo Lens: disabled `with managed_span(...)`", nl_off, null)
    except ImportError:
        pass

    print(f"python {sys.version.split()[0]}, median of {r} runs; spans dropped {dropped:.1%}")
    width = max(len(w) for w, *_ in rows)
    for what, ns, ratio, target in rows:
        print(f"{what:<{width}}  {ns:9.1f} ns  {ratio:>7}  {target}")


if __name__ == "__main__":
    main()
