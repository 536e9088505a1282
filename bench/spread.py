#!/usr/bin/env python3
"""The spread of span_bench between runs, beside its median, and the runs that hold the targets.

One run of a benchmark says little on a shared 2-core machine: the same binary gives a span
0.6x two clock reads in one process and 1.2x in the next. This runs span_bench RUNS times in a
row (each run its own process, REPETITIONS repetitions, their median kept), divides each run's
medians by that run's own two clock reads, and prints for every benchmark the min, median and max
of the run medians, in ns and as ratios, and in how many runs it held its target (issue 50):

  LENS_SPAN with two attributes (file and OTLP exporter)   <= 1.0x two clock reads
  managed_span + two set_attribute (file and OTLP)          <= 1.3x
  a flight-recorded LENS_SPAN                               <= the exported one of the same run

and, beside them, the floor under every span row: two reads of the time stamp counter, which a
span's start and end make (BM_TwoTscReads).

  bench/spread.py                        # 10 runs of the targets' benchmarks, build/bench/span_bench
  bench/spread.py --runs 5 --filter 'TwoClockReads|Gpu' --binary build/bench/span_bench
  bench/spread.py --check                # exit 1 unless every run held every target
  bench/spread.py --json runs.json       # every run's medians too, for docs/performance.md

Python 3 standard library only.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time

BASELINE = "BM_TwoClockReads"
# The default filter: the baseline, a span's floor (its two TSC reads) and every benchmark with a
# target.
DEFAULT_FILTER = ("TwoClockReads|TwoTscReads|"
                  "EnabledSpanTwoAttributes/exporter:[01]/manual_time$|"
                  "ManagedSpanTwoSetAttributes/exporter:[01]/manual_time$|RecordedSpanTwoAttributes")
# span_bench times its bursts itself (UseManualTime), which Google Benchmark marks in the name;
# the rows keep the benchmarks' own names.
MANUAL_TIME = "/manual_time"
# Ratio targets against the same run's two clock reads.
RATIO_TARGETS = {
    "BM_EnabledSpanTwoAttributes/exporter:0": 1.0,
    "BM_EnabledSpanTwoAttributes/exporter:1": 1.0,
    "BM_ManagedSpanTwoSetAttributes/exporter:0": 1.3,
    "BM_ManagedSpanTwoSetAttributes/exporter:1": 1.3,
}
# Benchmarks that must cost no more than another of the same run.
RELATIVE_TARGETS = {
    "BM_RecordedSpanTwoAttributes": "BM_EnabledSpanTwoAttributes/exporter:0",
}


def run_once(binary, bench_filter, repetitions):
    """One process of span_bench: {benchmark name: median real time in ns}."""
    cmd = [binary, f"--benchmark_filter={bench_filter}",
           f"--benchmark_repetitions={repetitions}", "--benchmark_report_aggregates_only=true",
           "--benchmark_format=json"]
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         text=True).stdout
    scale = {"ns": 1.0, "us": 1e3, "ms": 1e6, "s": 1e9}
    medians = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("aggregate_name") == "median":
            name = b["run_name"].replace(MANUAL_TIME, "")
            medians[name] = b["real_time"] * scale[b.get("time_unit", "ns")]
    return medians


def summarize(runs):
    """Per benchmark: the min, median and max of its run medians and of its ratios to the same
    run's baseline, and how many runs held its target (None: it has none)."""
    names = []
    for r in runs:
        names += [n for n in r if n not in names]
    rows = []
    for name in names:
        values = [r[name] for r in runs if name in r]
        ratios = [r[name] / r[BASELINE] for r in runs if name in r and BASELINE in r]
        held, target = None, None
        if name in RATIO_TARGETS:
            target = f"<= {RATIO_TARGETS[name]:.1f}x"
            held = sum(1 for x in ratios if x <= RATIO_TARGETS[name])
        elif name in RELATIVE_TARGETS:
            other = RELATIVE_TARGETS[name]
            pairs = [(r[name], r[other]) for r in runs if name in r and other in r]
            if pairs:
                target = f"<= {other.removeprefix('BM_')}"
                held = sum(1 for mine, theirs in pairs if mine <= theirs)
        rows.append({
            "name": name,
            "ns": (min(values), statistics.median(values), max(values)),
            "ratio": (min(ratios), statistics.median(ratios), max(ratios)) if ratios else None,
            "target": target,
            "held": held,
            "runs": len(values),
        })
    return rows


def format_rows(rows):
    lines = ["| benchmark | ns: min / median / max of run medians | x two clock reads | target | runs held |",
             "|---|---|---|---|---|"]
    for row in rows:
        ns = " / ".join(f"{v:.1f}" for v in row["ns"])
        ratio = " / ".join(f"{v:.2f}" for v in row["ratio"]) if row["ratio"] else ""
        held = f"{row['held']} of {row['runs']}" if row["held"] is not None else ""
        lines.append(f"| {row['name'].removeprefix('BM_')} | {ns} | {ratio} | {row['target'] or ''} | {held} |")
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--binary", default="build/bench/span_bench")
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--repetitions", type=int, default=5)
    parser.add_argument("--filter", default=DEFAULT_FILTER)
    parser.add_argument("--check", action="store_true",
                        help="exit 1 unless every run held every target")
    parser.add_argument("--json", metavar="FILE", help="write every run's medians to FILE")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error(f"--runs ({args.runs}) must be >= 1")
    if args.repetitions < 2:  # Google Benchmark reports no median of a single repetition
        parser.error(f"--repetitions ({args.repetitions}) must be >= 2: a run's figure is the "
                     "median of its repetitions")
    if "TwoClockReads" not in args.filter:
        args.filter = "TwoClockReads|" + args.filter  # every ratio needs the run's baseline
    runs = []
    for i in range(args.runs):
        started = time.strftime("%H:%M:%S")
        medians = run_once(args.binary, args.filter, args.repetitions)
        runs.append(medians)
        base = medians.get(BASELINE, float("nan"))
        print(f"run {i + 1} ({started}): " + ", ".join(
            f"{n.removeprefix('BM_')} {v:.1f} ns = {v / base:.2f}x" for n, v in medians.items()
            if n != BASELINE) + f"; two clock reads {base:.1f} ns", flush=True)
    rows = summarize(runs)
    print()
    print(format_rows(rows))
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"runs": runs, "summary": rows}, f, indent=1)
    missed = [r for r in rows if r["held"] is not None and r["held"] < r["runs"]]
    if args.check and missed:
        print("\nmissed in some runs: " + ", ".join(r["name"] for r in missed), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
