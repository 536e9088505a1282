"""What nemo_lens_cpp costs a Python program, next to its baselines, measured in one run.

    PYTHONPATH=build/python:build/examples/python_extension python3 bench/python_bench.py

Runs are interleaved: each of --repeat rounds times every case once (one timeit run of --number
operations, fewer for the slower cases), so that a host that slows down or speeds up meanwhile
moves the cases and their baselines together. Prints, per case, the median over the rounds in ns
per operation, and the ratio the targets are stated in (docs/python.md): the median of the
per-round ratios of the case to its baseline, each measured in the same round. With OpenTelemetry
Python importable, a span through its API (routed into lens) and the SDK's own span are measured
too; with NeMo Lens (nemo.lens) importable, its disabled managed_span.
"""

import argparse
import contextlib
import os
import statistics
import sys
import timeit


class Case:
    """One timed statement: `ns` holds its ns per operation of each round."""

    def __init__(self, what, stmt, number, baseline=None, target="", setup="pass"):
        self.what, self.stmt, self.number = what, stmt, number
        self.baseline, self.target, self.setup = baseline, target, setup
        self.ns = []

    def run(self, env):
        t = timeit.timeit(self.stmt, setup=self.setup, number=self.number, globals=env)
        self.ns.append(t / self.number * 1e9)


class Measured:
    """A case measured by a function returning ns per operation (the C++ extension's loop)."""

    def __init__(self, what, fn, baseline=None, target=""):
        self.what, self.fn, self.baseline, self.target = what, fn, baseline, target
        self.ns = []

    def run(self, env):
        self.ns.append(self.fn())


def interleave(cases, rounds, env):
    for _ in range(rounds):
        for case in cases:
            case.run(env)


def rows_of(cases):
    rows = []
    for case in cases:
        ratio = ""
        if case.baseline is not None:
            per_round = [a / b for a, b in zip(case.ns, case.baseline.ns)]
            ratio = f"{statistics.median(per_round):.2f}x"
        rows.append((case.what, statistics.median(case.ns), ratio, case.target))
    return rows


def set_up_lens():
    """lens as this benchmark runs it (bench/python_instructions.py too): groups `per_step`, every
    rank exporting, spans into an InMemorySpanExporter. Returns (nemo_lens_cpp, exporter, handle).

    Spans go to memory, emptied before every timing run. The exporter thread copies them; on a
    small host it does not always keep up and the queue drops some (the fraction is printed): a
    dropped span costs its caller as much as an exported one.
    """
    os.environ.update(NEMO_LENS_ENABLED="1", NEMO_LENS_SPAN_GROUPS="per_step",
                      NEMO_LENS_METRICS_ENABLED="0", OTEL_BSP_MAX_QUEUE_SIZE="65536",
                      NEMO_LENS_EXPORT_STRATEGY="all_ranks", NEMO_LENS_EXPORTER="console")
    import nemo_lens_cpp as lens

    memory = lens.InMemorySpanExporter()
    handle = lens.setup_telemetry(lens.NemoLensConfig.from_env(
        span_group_cls=lens.MegatronSpanGroup), span_exporter=memory)
    return lens, memory, handle


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="rounds (default 9)")
    parser.add_argument("--number", type=int, default=200000)
    args = parser.parse_args()

    lens, memory, handle = set_up_lens()
    env = {"lens": lens, "nullcontext": contextlib.nullcontext, "memory": memory,
           "groups": frozenset(["step", "job"]), "ms": lens.managed_span,
           "enabled": lens.is_span_group_enabled}
    n = args.number

    null = Case("with contextlib.nullcontext() (baseline)", "with nullcontext(): pass", n)
    member = Case("`name in frozenset` (baseline)", '"step" in groups', n)
    cases = [
        null,
        Case("disabled `with managed_span(...)`", 'with ms("layer", "layer_forward"): pass', n,
             null, "<= 0.6x"),
        member,
        Case("is_span_group_enabled(name)", 'enabled("step")', n, member, "<= 2x"),
    ]
    on = Case("enabled span, two attributes, recorded and queued",
              'with ms("step", "train_step", iteration=1, loss=0.5): pass', n // 4, null,
              "<= 2x", setup="memory.clear()")
    cases.append(on)
    interleave(cases, args.repeat, env)
    rows = rows_of(cases)

    try:  # OpenTelemetry Python, when importable: set-up made lens' provider the global one
        from opentelemetry import trace as otel_trace
    except ImportError:
        otel_trace = None
    if otel_trace is not None:  # now joined: lens' spans again, then OpenTelemetry's
        null2 = Case("with contextlib.nullcontext() (baseline, OpenTelemetry imported)",
                     "with nullcontext(): pass", n)
        joined = Case("enabled managed_span, OpenTelemetry joined",
                      'with ms("step", "train_step", iteration=1, loss=0.5): pass', n // 4,
                      null2, "<= 2x", setup="memory.clear()")
        env["tracer"] = otel_trace.get_tracer("bench")
        cases = [null2, joined,
                 Case("OpenTelemetry API span into lens, two attributes",
                      'with tracer.start_as_current_span("train_step", attributes='
                      '{"iteration": 1, "loss": 0.5}): pass', n // 4, joined, "<= 3000 ns",
                      setup="memory.clear()")]
        try:
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter
        except ImportError:
            TracerProvider = None
        sdk = None
        if TracerProvider is not None:
            class Discard(SpanExporter):
                def export(self, spans):
                    return 0  # SpanExportResult.SUCCESS

            sdk = TracerProvider()
            sdk.add_span_processor(BatchSpanProcessor(Discard()))
            env["sdk"] = sdk.get_tracer("bench")
            cases.append(Case("OpenTelemetry SDK's own span, batch processor (comparison)",
                              'with sdk.start_as_current_span("train_step", attributes='
                              '{"iteration": 1, "loss": 0.5}): pass', n // 20, joined))
        interleave(cases, args.repeat, env)
        rows += rows_of(cases)
        if sdk is not None:
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

        def cpp_inside_ns():
            with lens.managed_span("step", "outer"):
                return cpp_ns()

        alone = Measured("C++ LENS_SPAN (lens_demo), no Python span open", cpp_ns)
        inside = Measured("the same inside a Python managed_span", cpp_inside_ns, alone, "~1.0x")
        interleave([alone, inside], args.repeat, env)
        rows += rows_of([alone, inside])

    stats = handle.stats()
    handle.shutdown()
    dropped = stats["spans_dropped_queue_full"] / max(stats["spans_ended"], 1)

    try:
        os.environ["NEMO_LENS_SPAN_GROUPS"] = "default"
        from nemo.lens import NemoLensConfig as NLConfig, managed_span as nl_span
        from nemo.lens import setup_telemetry as nl_setup
        nl_setup(NLConfig(enabled=False))
        env["nl"] = nl_span
        nl_null = Case("with contextlib.nullcontext() (NeMo Lens' baseline)",
                       "with nullcontext(): pass", n // 4)
        nl_off = Case("NeMo Lens: disabled `with managed_span(...)`",
                      'with nl("layer", "layer_forward"): pass', n // 4, nl_null)
        interleave([nl_null, nl_off], args.repeat, env)
        rows += rows_of([nl_null, nl_off])
    except ImportError:
        pass

    print(f"python {sys.version.split()[0]}, medians of {args.repeat} interleaved rounds; "
          f"spans dropped {dropped:.1%}")
    width = max(len(w) for w, *_ in rows)
    for what, ns, ratio, target in rows:
        print(f"{what:<{width}}  {ns:9.1f} ns  {ratio:>7}  {target}")


if __name__ == "__main__":
    main()
