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


def span(span_id, parent, name, group, start_ms, end_ms, thread, trace=TRACE):
    s = {"traceId": trace, "spanId": "%016x" % span_id, "name": name, "kind": 1,
         "startTimeUnixNano": str(T0 + int(start_ms * MS)),
         "endTimeUnixNano": str(T0 + int(end_ms * MS)),
         "attributes": [attr("nemo.span.group", group), attr("thread.id", thread)]}
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


order_inputs()
ddp_input()
nested_inputs()
