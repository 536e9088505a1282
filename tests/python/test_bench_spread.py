"""bench/spread.py: the spread of span_bench's run medians and the runs that held the targets,
run against a stand-in benchmark binary whose medians the test chooses."""
import json
import pathlib
import stat
import subprocess
import sys
import textwrap

import pytest

SPREAD = pathlib.Path(__file__).resolve().parents[2] / "bench" / "spread.py"

# Per run: two clock reads, LENS_SPAN to the file exporter, managed_span to it, a recorded span.
RUNS = [
    (50.0, 40.0, 60.0, 30.0),  # 0.80x, 1.20x, recorded below exported
    (50.0, 55.0, 70.0, 60.0),  # 1.10x (missed), 1.40x (missed), recorded above exported (missed)
    (40.0, 36.0, 44.0, 20.0),  # 0.90x, 1.10x
]


def stand_in(tmp_path):
    """A span_bench stand-in: each call prints the next run's medians as Google Benchmark JSON
    (with a mean beside each, which the script must ignore) and records its arguments."""
    script = tmp_path / "span_bench"
    script.write_text(textwrap.dedent(f"""\
        #!{sys.executable}
        import json, pathlib, sys
        here = pathlib.Path(__file__).parent
        count = here / "count"
        n = int(count.read_text()) if count.exists() else 0
        count.write_text(str(n + 1))
        (here / f"args{{n}}").write_text("\\n".join(sys.argv[1:]))
        runs = {RUNS!r}
        # The span rows as span_bench names them: it times their bursts itself.
        names = ["BM_TwoClockReads", "BM_EnabledSpanTwoAttributes/exporter:0/manual_time",
                 "BM_ManagedSpanTwoSetAttributes/exporter:0/manual_time",
                 "BM_RecordedSpanTwoAttributes"]
        out = []
        for name, v in zip(names, runs[n]):
            out.append({{"run_name": name, "aggregate_name": "mean", "real_time": 999.0,
                         "time_unit": "ns"}})
            # The recorded span in microseconds: the script converts.
            unit, t = ("us", v / 1000) if name == names[3] else ("ns", v)
            out.append({{"run_name": name, "aggregate_name": "median", "real_time": t,
                         "time_unit": unit}})
        print(json.dumps({{"benchmarks": out}}))
        """))
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def run_spread(tmp_path, *args):
    return subprocess.run([sys.executable, str(SPREAD), "--binary", str(stand_in(tmp_path)),
                           "--runs", str(len(RUNS)), *args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_reports_min_median_max_of_run_medians_and_the_runs_that_held(tmp_path):
    # The rows keep the benchmarks' names without Google Benchmark's /manual_time mark, which is
    # what the targets are stated for.
    out_json = tmp_path / "runs.json"
    r = run_spread(tmp_path, "--json", str(out_json))
    assert r.returncode == 0, r.stderr
    rows = {row["name"]: row for row in json.loads(out_json.read_text())["summary"]}
    span = rows["BM_EnabledSpanTwoAttributes/exporter:0"]
    assert span["ns"] == [36.0, 40.0, 55.0]
    assert span["ratio"] == pytest.approx([0.8, 0.9, 1.1])
    assert (span["held"], span["runs"]) == (2, 3)
    managed = rows["BM_ManagedSpanTwoSetAttributes/exporter:0"]
    assert managed["ratio"] == pytest.approx([1.1, 1.2, 1.4])
    assert managed["held"] == 2
    recorded = rows["BM_RecordedSpanTwoAttributes"]
    assert recorded["ns"] == pytest.approx([20.0, 30.0, 60.0])  # from microseconds
    assert recorded["held"] == 2  # run 2: 60 ns recorded against 55 ns exported
    assert rows["BM_TwoClockReads"]["held"] is None
    assert "| EnabledSpanTwoAttributes/exporter:0 | 36.0 / 40.0 / 55.0 | 0.80 / 0.90 / 1.10 | <= 1.0x | 2 of 3 |" in r.stdout
    assert "run 2" in r.stdout and "1.10x" in r.stdout


def test_check_fails_when_a_run_missed_a_target(tmp_path):
    r = run_spread(tmp_path, "--check")
    assert r.returncode == 1
    assert "EnabledSpanTwoAttributes/exporter:0" in r.stderr


def test_the_baseline_is_always_run(tmp_path):
    r = run_spread(tmp_path, "--filter", "RecordedSpan")
    assert r.returncode == 0, r.stderr
    args = (tmp_path / "args0").read_text().splitlines()
    assert "--benchmark_filter=TwoClockReads|RecordedSpan" in args
    assert "--benchmark_repetitions=5" in args


def test_bad_counts_are_refused_with_their_values(tmp_path):
    r = subprocess.run([sys.executable, str(SPREAD), "--runs", "0"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    assert r.returncode == 2
    assert "--runs (0)" in r.stderr


def test_one_repetition_is_refused_for_it_has_no_median(tmp_path):
    # Google Benchmark prints no median aggregate for a single repetition: every figure would
    # be missing.
    r = run_spread(tmp_path, "--repetitions", "1")
    assert r.returncode == 2
    assert "--repetitions (1) must be >= 2" in r.stderr
    assert not (tmp_path / "count").exists()  # refused before any run


def test_the_default_runs_measure_the_floor_of_a_span(tmp_path):
    r = run_spread(tmp_path)
    assert r.returncode == 0, r.stderr
    flt = next(a for a in (tmp_path / "args0").read_text().splitlines()
               if a.startswith("--benchmark_filter="))
    assert flt.split("=", 1)[1].split("|")[:2] == ["TwoClockReads", "TwoTscReads"]
