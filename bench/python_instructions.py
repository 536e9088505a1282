"""The loop bench/count_python_instructions.sh runs under callgrind: N times one `with` statement.

    python3 bench/python_instructions.py null|span|strings|recorded|disabled N

null: `with contextlib.nullcontext(): pass` (the baseline of docs/performance.md's Python
targets); span: an enabled `managed_span` with two attributes, an int and a float, recorded and
queued to an in-memory exporter (as bench/python_bench.py); strings: the same with two string
attributes; recorded: the span of `span` in group `microbatch`, kept by the flight recorder (not
exported), its thread's ring of 1,024 spans full, each overwriting the oldest; disabled: a
`managed_span` of a group that is off.
Every mode sets lens up the same way and, before its loop, runs WARM_UP enabled spans and flushes
them, so that the loop finds the records it needs in the pool: under callgrind the exporter thread
lags the loop, and a record allocated per span would be counted as the span's cost. The script
counts the difference between two values of N, so that start-up and this warm-up cancel out.
"""
import contextlib
import gc
import os
import sys

from python_bench import set_up_lens  # beside this file

WARM_UP = 5000  # enabled spans before the loop; N may not exceed it


def main():
    mode, n = sys.argv[1], int(sys.argv[2])
    if mode not in ("null", "span", "strings", "recorded", "disabled"):
        sys.exit(f"python_instructions.py: unknown mode {mode!r} "
                 "(valid: null, span, strings, recorded, disabled)")
    if not 0 < n <= WARM_UP:
        sys.exit(f"python_instructions.py: N must be in 1..{WARM_UP}, not {n}")
    if mode == "recorded":
        os.environ.update(NEMO_LENS_RECORD_GROUPS="microbatch", NEMO_LENS_RECORD_SPANS="1024")
    lens, memory, handle = set_up_lens()
    ms, nullcontext = lens.managed_span, contextlib.nullcontext
    warm_group = "microbatch" if mode == "recorded" else "step"  # a recorded warm-up fills the ring
    for _ in range(WARM_UP):
        with ms(warm_group, "train_step", iteration=1, loss=0.5):
            pass
    handle.force_flush()
    memory.clear()
    # What varies between runs under callgrind: a collection started by the allocation count a
    # run reaches, and the GIL handed to another thread every interval of (slow) wall time.
    gc.collect()
    gc.disable()
    sys.setswitchinterval(1000.0)
    if mode == "null":
        for _ in range(n):
            with nullcontext():
                pass
    elif mode == "span":
        for _ in range(n):
            with ms("step", "train_step", iteration=1, loss=0.5):
                pass
    elif mode == "recorded":
        for _ in range(n):
            with ms("microbatch", "microbatch", iteration=1, loss=0.5):
                pass
        stats = handle.stats()
        if stats["spans_exported"] != 0 or stats["spans_record_overwritten"] < n:
            sys.exit(f"python_instructions.py: recorded spans were not recorded as meant: {stats}")
    elif mode == "strings":
        for _ in range(n):
            with ms("step", "train_step", stage="forward", phase="backward"):
                pass
    else:
        for _ in range(n):
            with ms("layer", "layer_forward"):
                pass


if __name__ == "__main__":
    main()
