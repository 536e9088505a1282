#!/usr/bin/env python3
"""Writes the hand-made inputs of the report's golden tests (tests/report/CMakeLists.txt) into this
folder. Run it again after changing it, and commit its output with it; the tests never run it.

  order_children_first.jsonl, order_parent_first.jsonl
      3 ranks x 10 steps, each step with forward_backward, allreduce and optimizer_step children,
      one line per step: the same spans, children before their step, or the step first (and the
      lines in reverse order). Both must give the same report.
  ddp.jsonl
      2 steps of a DDP-like rank: the step's thread runs forward_backward [0,70) ms and
      optimizer [80,95) ms; two all-reduces run on a communication thread, [30,60) and [60,85):
      55 ms overlapped per step, of which 10 ms exposed ([70,80), when the step's thread waited in
      no span).
  nested_rank0.jsonl, nested_rank1.jsonl
      steps with a zero_grad span of group step inside (not a top-level step) and microbatches
      inside forward_backward; read in either file order.
  gpu.jsonl
      3 ranks x 3 steps of 100 ms with the same CPU spans (get_batch [0,5), forward_backward
      [5,60), optimizer [70,90) on the step's thread, an all_reduce [40,75) on a communication
      thread) and GPU times (gpu.* attributes) on the step, forward_backward, all_reduce and
      optimizer; get_batch is not GPU-timed. GPU intervals, ms from the step's start:
        rank 0: forward_backward [5,40] busy 30, all_reduce [35,60] busy 20, optimizer [72,80]
                busy 6, the step busy 55: idle 100 - 55 = 45, exposed communication
                [35,60] - ([5,40] + [72,80]) = [40,60] = 20 ms.
        rank 1: forward_backward [5,75] busy 68, all_reduce [60,95] busy 30, optimizer [76,102]
                busy 20, the step busy 95: its window runs to 102, idle 102 - 95 = 7, exposed
                communication [60,95] - ([5,75] + [76,102]) = [75,76] = 1 ms.
        rank 2: as rank 0.
      Median GPU busy across ranks 55, MAD 0; rank 1's 95 is 40 ms above it, past the floor (5 %
      of the 100 ms step): a straggler on GPU busy only (every rank's steps take 100 ms), its
      GPU slower in forward_backward (68 against 30 ms a step).
"""
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
T0 = 1_718_000_000_000_000_000
MS = 1_000_000
TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def attr(key, value):
    if isinstance(value, int):
        return {"key": key, "value": {"intValue": str(value)}}
    return {"key": key, "value": {"stringValue": value}}


def span(span_id, parent, name, group, start_ms, end_ms, thread, trace=TRACE, gpu=None):
    s = {"traceId": trace, "spanId": "%016x" % span_id, "name": name, "kind": 1,
         "startTimeUnixNano": str(T0 + int(start_ms * MS)),
         "endTimeUnixNano": str(T0 + int(end_ms * MS)),
         "attributes": [attr("nemo.span.group", group), attr("thread.id", thread)]}
    if gpu:  # (start_ms, end_ms, busy_ms, kernels)
        start, end, busy, kernels = gpu
        s["attributes"] += [attr("gpu.busy", int(busy * MS)), attr("gpu.kernels", kernels),
                            attr("gpu.start", T0 + int(start * MS)),
                            attr("gpu.end", T0 + int(end * MS))]
    if parent:
        s["parentSpanId"] = "%016x" % parent
    return s


def line(rank, spans):
    resource = {"attributes": [attr("service.name", "golden"), attr("dl.rank", rank),
                               attr("nemo.run.id", "golden-run")]}
    return json.dumps({"resourceSpans": [{"resource": resource, "scopeSpans": [
        {"scope": {"name": "nemo.lens"}, "spans": spans}]}]}, separators=(",", ":"))


def write(name, lines):
    with open(os.path.join(HERE, name), "w") as f:
        f.write("\n".join(lines) + "\n")


def order_inputs():
    children_first, parent_first = [], []
    for rank in range(3):
        for step in range(10):
            base = step * 100 + rank * 2
            sid = (rank + 1) * 1000 + step * 10 + 1
            step_span = span(sid, 0, "train_step", "step", base, base + 50 + rank * 5, 100 + rank)
            kids = [span(sid + 1, sid, "forward_backward", "forward_backward", base + 1, base + 6, 100 + rank),
                    span(sid + 2, sid, "allreduce", "communication", base + 6, base + 9, 100 + rank),
                    span(sid + 3, sid, "optimizer_step", "optimizer", base + 9, base + 11, 100 + rank)]
            children_first.append(line(rank, kids + [step_span]))
            parent_first.append(line(rank, [step_span] + kids[::-1]))
    write("order_children_first.jsonl", children_first)
    write("order_parent_first.jsonl", parent_first[::-1])


def ddp_input():
    lines = []
    for step in range(2):
        base, sid = step * 100, 10 * (step + 1)
        lines.append(line(0, [
            span(sid + 4, sid + 1, "all_reduce", "communication", base + 30, base + 60, 200),
            span(sid + 5, sid + 1, "all_reduce", "communication", base + 60, base + 85, 200),
            span(sid + 1, 0, "train_step", "step", base, base + 100, 100),
            span(sid + 2, sid + 1, "forward_backward", "forward_backward", base, base + 70, 100),
            span(sid + 3, sid + 1, "optimizer", "optimizer", base + 80, base + 95, 100),
        ]))
    write("ddp.jsonl", lines)


def nested_inputs():
    for rank in range(2):
        lines = []
        for step in range(3):
            base, sid = step * 200, (rank + 1) * 100 + step * 10
            lines.append(line(rank, [
                span(sid + 1, 0, "train_step", "step", base, base + 100 + 20 * rank, 7),
                span(sid + 2, sid + 1, "zero_grad", "step", base, base + 5, 7),
                span(sid + 3, sid + 1, "forward_backward", "forward_backward", base + 5, base + 80, 7),
                span(sid + 4, sid + 3, "microbatch", "microbatch", base + 5, base + 40, 7),
                span(sid + 5, sid + 3, "microbatch", "microbatch", base + 40, base + 80, 7),
                span(sid + 6, sid + 1, "optimizer", "optimizer", base + 80, base + 95, 7),
            ]))
        write("nested_rank%d.jsonl" % rank, lines[::-1] if rank else lines)


def gpu_input():
    # ms from the step's start: (forward_backward, all_reduce, optimizer, step) GPU intervals and
    # busy times, per rank.
    gpu = {0: ((5, 40, 30), (35, 60, 20), (72, 80, 6), (5, 80, 55)),
           1: ((5, 75, 68), (60, 95, 30), (76, 102, 20), (5, 102, 95))}
    gpu[2] = gpu[0]
    lines = []
    for rank in range(3):
        fb, ar, opt, st = gpu[rank]
        for step in range(3):
            base, sid = step * 100, (rank + 1) * 100 + step * 10

            def g(t, kernels):
                return (base + t[0], base + t[1], t[2], kernels)
            lines.append(line(rank, [
                span(sid + 1, 0, "train_step", "step", base, base + 100, 100, gpu=g(st, 154)),
                span(sid + 2, sid + 1, "get_batch", "data_loading", base, base + 5, 100),
                span(sid + 3, sid + 1, "forward_backward", "forward_backward", base + 5, base + 60,
                     100, gpu=g(fb, 120)),
                span(sid + 4, sid + 1, "all_reduce", "communication", base + 40, base + 75, 200,
                     gpu=g(ar, 4)),
                span(sid + 5, sid + 1, "optimizer", "optimizer", base + 70, base + 90, 100,
                     gpu=g(opt, 30)),
            ]))
    write("gpu.jsonl", lines)


order_inputs()
ddp_input()
nested_inputs()
gpu_input()
