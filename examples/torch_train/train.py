"""The PyTorch job: a small causal transformer trained with DistributedDataParallel over gloo,
traced only through nemo_lens_cpp with NeMo Lens' module paths, with a torch C++ extension
(lens_torch_ops) whose op opens LENS_SPANs inside the Python spans. On the CPU, or on CUDA.

    python3 examples/torch_train/launch.py --nproc 4 -- examples/torch_train/train.py --steps 20

(PYTHONPATH: the built package and this example's extension, e.g.
build/python:build/examples/torch_train.) Each rank reads RANK / WORLD_SIZE (or Open MPI's
OMPI_COMM_WORLD_RANK / _SIZE under mpirun) and MASTER_ADDR / MASTER_PORT; the lens variables
(NEMO_LENS_SPAN_GROUPS, NEMO_LENS_EXPORTER, OTEL_*...) as for any lens program.

What each step records (span groups of MegatronSpanGroup): step > data_loading,
forward_backward > microbatch > the C++ op's layer spans and, on the last microbatch, one
communication span per DDP bucket (a communication hook around each all-reduce); optimizer;
every --checkpoint-every steps a checkpoint, every --eval-every steps evaluate (with a span
linked to rank 0's job, as pipeline stages link); after training an inference phase that
generates tokens and records NeMo Lens' gen_ai.* metrics. The dl.* metrics are recorded each
step. Rank 0's job span is every rank's trace: its context goes to the others with
broadcast_trace_context over the process group.

--device auto (the default) is cuda when torch sees a GPU, else cpu; --device cuda without one
exits with status 2. On CUDA each rank uses cuda:{local rank % GPUs} (LOCAL_RANK, else Open MPI's
OMPI_COMM_WORLD_LOCAL_RANK, else the rank), and the process group is NCCL when the node has a GPU
per rank (LOCAL_WORLD_SIZE, else OMPI_COMM_WORLD_LOCAL_SIZE, else the world size; nodes are
assumed alike), else gloo, which all-reduces CUDA tensors too (NCCL refuses two ranks on one GPU).
With NEMO_LENS_GPU_TIME=per_step the step's spans carry gpu.busy, gpu.kernels, gpu.start and
gpu.end (docs/gpu.md).

--cuda-events PATH (CUDA only): a pair of CUDA events (enable_timing) recorded on the current
stream at the start and at the end of each step's forward_backward span and of its optimizer_step
span, read after the last step and written to PATH ({rank} replaced), one JSON object per line
and step:

    {"rank": 0, "step": 1, "forward_backward_ms": 12.5, "optimizer_ms": 0.8}

step is the train_step span's iteration (from 1); each *_ms is the events' elapsed_time on that
stream: from the end of the work queued before the span to the end of the span's last work there,
idle gaps included; scripts/gpu-check compares it with lens' gpu.busy of the same span (the union
of its GPU work on every stream).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

import lens_torch_ops
import nemo_lens_cpp as lens
from nemo_lens_cpp.config import NemoLensConfig
from nemo_lens_cpp.distributed import broadcast_trace_context, create_linked_span
from nemo_lens_cpp.groups import MegatronSpanGroup as G
from nemo_lens_cpp.handle import setup_telemetry
from nemo_lens_cpp.helpers import managed_span
from nemo_lens_cpp.instruments import record_inference_metrics
from nemo_lens_cpp.propagation import extract_context
from nemo_lens_cpp.state import enabled_span_groups, get_pp_trace_carrier, set_pp_trace_carrier

VOCAB = 64


def parse_args(argv):
    p = argparse.ArgumentParser(prog="train.py", description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--microbatches", type=int, default=2)
    p.add_argument("--batch", type=int, default=8, help="sequences per microbatch and rank")
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--lr", type=float, default=3e-3)
    p.add_argument("--checkpoint-every", type=int, default=10, help="0: never")
    p.add_argument("--checkpoint-dir", default="")
    p.add_argument("--eval-every", type=int, default=10, help="0: never")
    p.add_argument("--generate-tokens", type=int, default=8, help="0: no inference phase")
    p.add_argument("--bucket-cap-mb", type=float, default=0.02,
                   help="DDP's bucket size: small, so that a step has several buckets")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--summary", default="", help="write this rank's summary as JSON to PATH "
                   "({rank} is replaced)")
    p.add_argument("--die-at-step", type=int, default=-1,
                   help="with --die-rank: that rank exits abruptly (os._exit) at this step")
    p.add_argument("--die-rank", type=int, default=-1)
    p.add_argument("--slow-rank", type=int, default=-1, metavar="R",
                   help="make rank R a straggler: its forward and backward take --slow-factor "
                        "times as long, so the others wait for it in the all-reduces")
    p.add_argument("--slow-factor", type=float, default=2.0, metavar="F",
                   help="how much longer the slow rank computes, >= 1 (default 2)")
    p.add_argument("--stall-step", type=int, default=-1, metavar="K",
                   help="stall step K once on --stall-rank, inside its second microbatch (the "
                        "host waits, as for a slow copy): a slow step for the flight recorder "
                        "to capture")
    p.add_argument("--stall-ms", type=float, default=200.0, metavar="M",
                   help="how long the stall lasts, in ms (default 200)")
    p.add_argument("--stall-rank", type=int, default=0, metavar="R",
                   help="the rank that stalls (default 0)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                   help="auto: cuda when torch sees a GPU, else cpu")
    p.add_argument("--cuda-events", default="", metavar="PATH",
                   help="CUDA only: write each step's forward_backward and optimizer time by "
                   "CUDA events to PATH as JSON lines ({rank} is replaced)")
    p.add_argument("--profile-steps", default="", metavar="A:B",
                   help="run torch.profiler (CPU, and CUDA on a GPU) from step A to step B, "
                   "both included: another CUPTI client in the middle of a job with GPU time "
                   "(the summary says what it saw)")
    args = p.parse_args(argv)
    args.profile_window = None
    if args.profile_steps:
        first, _, last = args.profile_steps.partition(":")
        try:
            window = (int(first), int(last or first))
        except ValueError:
            window = (0, 0)
        if not 1 <= window[0] <= window[1] <= args.steps:
            p.error(f"argument --profile-steps: '{args.profile_steps}' is not A:B with "
                    f"1 <= A <= B <= --steps ({args.steps})")
        args.profile_window = window
    if args.device == "auto":
        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    elif args.device == "cuda" and not torch.cuda.is_available():
        p.error("argument --device: cuda asked for, but torch sees no GPU "
                "(torch.cuda.is_available() is False: no GPU or driver, or a torch built "
                "without CUDA); use --device cpu or auto")
    if args.cuda_events and args.device != "cuda":
        p.error("argument --cuda-events: needs CUDA (--device cuda, or auto with a GPU); the "
                "device is cpu")
    return args


def rank_and_world():
    for rank_var, size_var in (("RANK", "WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")):
        if rank_var in os.environ and size_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ[size_var])
    return 0, 1


def local_rank_and_size(rank, world):
    """This rank's index on its node and the node's rank count: torchrun's (and launch.py's)
    LOCAL_RANK / LOCAL_WORLD_SIZE, else Open MPI's, else (one node) the rank and world size."""
    for rank_var, size_var in (("LOCAL_RANK", "LOCAL_WORLD_SIZE"),
                               ("OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE")):
        if rank_var in os.environ:
            return int(os.environ[rank_var]), int(os.environ.get(size_var, world))
    return rank, world


def choose_device(args, rank, world):
    """(device, process group backend). CUDA: cuda:{local rank % GPUs}, made the current device
    (NCCL's collectives and broadcast_trace_context's tensors go to the current one), and NCCL
    only when the node has a GPU per rank: NCCL refuses two ranks on one GPU, gloo all-reduces
    CUDA tensors too (through the host)."""
    if args.device != "cuda":
        return torch.device("cpu"), "gloo"
    local_rank, local_size = local_rank_and_size(rank, world)
    gpus = torch.cuda.device_count()
    device = torch.device("cuda", local_rank % gpus)
    torch.cuda.set_device(device)
    return device, "nccl" if gpus >= local_size else "gloo"


def describe(device):
    if device.type == "cuda":
        return f"{device} ({torch.cuda.get_device_name(device)})"
    return str(device)


class CudaEvents:
    """--cuda-events: CUDA events (enable_timing) on the current stream around each step's
    forward_backward and optimizer work; their elapsed times are read once, after the last step
    (elapsed_time needs the end event to have completed), and written as JSON lines."""

    PHASES = ("forward_backward", "optimizer")

    def __init__(self, path):
        self.path = path
        self.events = {}  # step -> {phase: (start, end)}

    def timed(self, step, phase):
        return self._timed(step, phase) if self.path else contextlib.nullcontext()

    @contextlib.contextmanager
    def _timed(self, step, phase):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        yield
        end.record()
        self.events.setdefault(step, {})[phase] = (start, end)

    def write(self, rank):
        if not self.path:
            return
        torch.cuda.synchronize()
        with open(self.path.replace("{rank}", str(rank)), "w") as f:
            for step, pairs in sorted(self.events.items()):
                row = {"rank": rank, "step": step}
                for phase in self.PHASES:
                    if phase in pairs:
                        start, end = pairs[phase]
                        row[f"{phase}_ms"] = start.elapsed_time(end)
                f.write(json.dumps(row) + "\n")


class ProfilerWindow:
    """--profile-steps: torch.profiler from the start of step A to the end of step B. Under
    NEMO_LENS_GPU_TIME both lens and Kineto use CUPTI: what each saw goes into the summary."""

    def __init__(self, window, device):
        self.window = window
        self.device = device
        self.profiler = None

    def before_step(self, step):
        if self.window is None or step != self.window[0]:
            return
        activities = [torch.profiler.ProfilerActivity.CPU]
        if self.device.type == "cuda":
            activities.append(torch.profiler.ProfilerActivity.CUDA)
        self.profiler = torch.profiler.profile(activities=activities)
        self.profiler.start()

    def marked(self):
        """The step as a range of the profiler's own, while it runs."""
        if self.profiler is None:
            return contextlib.nullcontext()
        return torch.profiler.record_function("train_step")

    def after_step(self, step, summary):
        if self.profiler is None or step != self.window[1]:
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize()
        self.profiler.stop()
        events = self.profiler.events()
        summary["profiler"] = {
            "steps": list(self.window),
            "events": len(events),
            "gpu_events": sum(1 for e in events
                              if e.device_type == torch.autograd.DeviceType.CUDA),
            "train_steps_seen": sum(1 for e in events if e.name == "train_step"),
        }
        self.profiler = None


class Block(nn.Module):
    """Pre-norm attention and an MLP whose residual is the C++ op: x + gelu(fc(norm(x)))."""

    def __init__(self, dim, heads):
        super().__init__()
        self.norm1, self.norm2 = nn.LayerNorm(dim), nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x, mask):
        h = self.norm1(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return lens_torch_ops.gelu_residual(x, self.fc(self.norm2(x)))


class TinyLM(nn.Module):
    def __init__(self, dim, layers, seq):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.zeros(seq, dim))
        self.blocks = nn.ModuleList(Block(dim, 4) for _ in range(layers))
        self.head = nn.Linear(dim, VOCAB)

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf"), device=tokens.device), diagonal=1)
        x = self.embed(tokens) + self.pos[:n]
        for block in self.blocks:
            x = block(x, mask)
        return self.head(x)


def batches(generator, batch, seq, device):
    """Synthetic sequences with a learnable rule: next = (3 * token + 1) mod VOCAB; made on the
    CPU (the generator's device, the same sequences whatever the device), then moved to
    `device`."""
    while True:
        start = torch.randint(0, VOCAB, (batch, 1), generator=generator)
        steps = [start]
        for _ in range(seq):
            steps.append((steps[-1] * 3 + 1) % VOCAB)
        tokens = torch.cat(steps, dim=1).to(device)
        yield tokens[:, :-1], tokens[:, 1:]


def traced_allreduce(world):
    """A DDP communication hook: each bucket's all-reduce inside a communication span, from the
    hook's call to the future's completion (ended on whichever thread completes it): lens'
    start_span, which a block does not bound, behind the group's gate as managed_span is."""

    def hook(state, bucket):
        tensor = bucket.buffer()
        span = lens.start_span("allreduce_bucket", group=G.COMMUNICATION, bucket=bucket.index(),
                               bytes=tensor.numel() * tensor.element_size())
        future = dist.all_reduce(tensor, async_op=True).get_future()

        def done(fut):
            span.end()
            return fut.value()[0].div_(world)

        return future.then(done)

    return hook


class Metrics:
    """The dl.* instruments, recorded once per step."""

    def __init__(self, meter):
        self.steps = meter.create_counter("dl.steps", unit="{step}")
        self.duration = meter.create_histogram("dl.step.duration", unit="s")
        self.loss = meter.create_gauge("dl.loss", unit="1")
        self.tokens = meter.create_gauge("dl.throughput.tokens", unit="{token}/s")
        self.lr = meter.create_gauge("dl.learning_rate", unit="1")

    def record(self, seconds, loss, tokens, lr):
        self.steps.add(1)
        self.duration.record(seconds)
        self.loss.set(loss)
        self.tokens.set(tokens / seconds)
        self.lr.set(lr)


def generate(model, prompt, n):
    """Greedy decoding of `n` tokens after `prompt` (1 x L)."""
    tokens = prompt
    with torch.no_grad():
        for _ in range(n):
            logits = model(tokens[:, -model.pos.shape[0]:])
            tokens = torch.cat([tokens, logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens[:, prompt.shape[1]:]


def straggle(args, rank, compute_seconds):
    """On the --slow-rank, waits (F - 1) times `compute_seconds`: as if its device were slower.
    Called before the last microbatch, whose backward starts the all-reduces, so that its
    gradients are late and the other ranks wait for them."""
    if rank == args.slow_rank and args.slow_factor > 1 and compute_seconds > 0:
        time.sleep((args.slow_factor - 1) * compute_seconds)


def train(args, rank, world, handle, summary, device):
    torch.manual_seed(args.seed)  # the same initial weights on every rank
    model = TinyLM(args.dim, args.layers, args.seq).to(device)
    # DDP caps its first bucket at 1 MB whatever bucket_cap_mb says, which would put this small
    # model in one bucket: give the first bucket the same cap, for a span per bucket to show.
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_cap_mb * 1024 * 1024)
    if device.type == "cuda":
        ddp = DistributedDataParallel(model, device_ids=[device.index],
                                      bucket_cap_mb=args.bucket_cap_mb)
    else:
        ddp = DistributedDataParallel(model, bucket_cap_mb=args.bucket_cap_mb)
    ddp.register_comm_hook(None, traced_allreduce(world))
    optimizer = torch.optim.AdamW(ddp.parameters(), lr=args.lr)
    data = batches(torch.Generator().manual_seed(args.seed + 1 + rank), args.batch, args.seq,
                   device)
    events = CudaEvents(args.cuda_events)
    profiler = ProfilerWindow(args.profile_window, device)
    summary["gradient_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    metrics = Metrics(handle.meter)
    tracer = handle.tracer
    durations = []
    loss_value = float("nan")
    compute_seconds = 0.0  # the previous step's forward and backward, for --slow-rank
    for it in range(1, args.steps + 1):
        if it == args.die_at_step and rank == args.die_rank:
            os._exit(3)  # a crash: nothing flushed, no goodbye to the process group
        profiler.before_step(it)
        t0 = time.perf_counter()
        with managed_span(G.STEP, "train_step", iteration=it) as step, profiler.marked():
            with managed_span(G.DATA_LOADING, "load_batches", microbatches=args.microbatches):
                micro = [next(data) for _ in range(args.microbatches)]
            with managed_span(G.FORWARD_BACKWARD, "forward_backward"), \
                    events.timed(it, "forward_backward"):
                total = 0.0
                fb_start = time.perf_counter()
                for i, (x, y) in enumerate(micro):
                    last = i == len(micro) - 1
                    if last:
                        straggle(args, rank, compute_seconds)
                    sync = contextlib.nullcontext() if last else ddp.no_sync()
                    with sync, managed_span(G.MICROBATCH, "microbatch", microbatch=i):
                        if (it == args.stall_step and rank == args.stall_rank
                                and i == min(1, len(micro) - 1)):
                            time.sleep(args.stall_ms / 1000)  # --stall-step
                        loss = F.cross_entropy(ddp(x).reshape(-1, VOCAB), y.reshape(-1))
                        (loss / len(micro)).backward()  # the last one all-reduces the buckets
                    total += loss.item() / len(micro)
                compute_seconds = time.perf_counter() - fb_start - (
                    (args.slow_factor - 1) * compute_seconds if rank == args.slow_rank else 0)
            with managed_span(G.OPTIMIZER, "optimizer_step"), events.timed(it, "optimizer"):
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            loss_value = total
            if step is not None:
                step.set_attribute("dl.loss", loss_value)
        seconds = time.perf_counter() - t0
        profiler.after_step(it, summary)
        durations.append(seconds)
        metrics.record(seconds, loss_value, args.batch * args.seq * args.microbatches,
                       args.lr)
        if args.checkpoint_every and it % args.checkpoint_every == 0:
            with managed_span(G.CHECKPOINT, "save_checkpoint", iteration=it):
                if rank == 0 and args.checkpoint_dir:
                    os.makedirs(args.checkpoint_dir, exist_ok=True)
                    torch.save(model.state_dict(),
                               os.path.join(args.checkpoint_dir, f"step{it}.pt"))
                dist.barrier()
        if args.eval_every and it % args.eval_every == 0:
            with managed_span(G.EVALUATE, "evaluate", iteration=it):
                # A stage that follows rank 0's job without being its child: linked to it.
                stage = create_linked_span(tracer, "pipeline_stage",
                                           remote_carrier=get_pp_trace_carrier(), stage=rank)
                with torch.no_grad():
                    x, y = next(data)
                    eval_loss = F.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
                stage.end()
                summary["eval_loss"] = eval_loss.item()
        summary["steps"] = it
    events.write(rank)
    summary["loss"] = loss_value
    if args.generate_tokens:
        with managed_span(G.INFERENCE, "generate", tokens=args.generate_tokens):
            prompt = next(data)[0][:1, :8]
            t0 = time.perf_counter()
            out = generate(model, prompt, args.generate_tokens)
            record_inference_metrics(handle.meter, request_duration_s=time.perf_counter() - t0,
                                     model="tiny-lm", input_tokens=prompt.shape[1],
                                     output_tokens=out.shape[1])
            expected = (prompt[0, -1].item() * 3 + 1) % VOCAB
            summary["first_generated_token_correct"] = out[0, 0].item() == expected
    return durations


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rank, world = rank_and_world()
    if args.slow_rank >= world or args.slow_factor < 1:
        if rank == 0:
            print(f"train.py: --slow-rank {args.slow_rank} --slow-factor {args.slow_factor}: "
                  f"the rank must be below the {world} ranks and the factor >= 1", file=sys.stderr)
        return 2
    if not 0 <= args.stall_rank < world or args.stall_ms <= 0:
        if rank == 0:
            print(f"train.py: --stall-rank {args.stall_rank} --stall-ms {args.stall_ms}: the rank "
                  f"must be below the {world} ranks and the stall > 0 ms", file=sys.stderr)
        return 2
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // world))  # ranks share the cores
    config = NemoLensConfig.from_env(span_group_cls=G)
    handle = setup_telemetry(config, rank, world)  # before CUDA starts: GPU time sees it all
    device, backend = choose_device(args, rank, world)
    dist.init_process_group(backend, rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))
    if rank == 0:
        groups = config.span_groups if config.enabled else "off"
        print(f"tracing: span groups '{groups}' on {world} ranks", flush=True)
        print(f"device: {describe(device)}, process group {backend}", flush=True)
    summary = {"rank": rank, "world_size": world, "exporting": handle.is_exporting,
               "enabled_groups": sorted(enabled_span_groups()), "steps": 0,
               "device": str(device), "backend": backend}
    t0 = time.perf_counter()
    try:
        # Rank 0's job span is the trace of every rank: its context goes to the others over the
        # process group, and is the carrier pipeline-style stages link to.
        if rank == 0:
            with managed_span(G.JOB, "torch_train", world_size=world):
                set_pp_trace_carrier(broadcast_trace_context(rank, 0))
                durations = train(args, rank, world, handle, summary, device)
        else:
            carrier = broadcast_trace_context(rank, 0) or {}
            set_pp_trace_carrier(carrier)
            with extract_context(carrier):
                with managed_span(G.JOB, "torch_train", world_size=world):
                    durations = train(args, rank, world, handle, summary, device)
        dist.barrier()
    finally:
        summary["trace_carrier"] = get_pp_trace_carrier()
        summary["stats"] = handle.stats()
        if args.summary:
            with open(args.summary.replace("{rank}", str(rank)), "w") as f:
                json.dump(summary, f)
    if rank == 0:
        elapsed = time.perf_counter() - t0
        mean = statistics.mean(durations) * 1e3
        median = statistics.median(durations) * 1e3
        print(f"done: {len(durations)} steps in {elapsed:.2f} s (mean {mean:.2f} ms, median "
              f"{median:.2f} ms per step), loss {summary['loss']:.3f}", flush=True)
    dist.destroy_process_group()
    handle.shutdown()
    return 0 if not math.isnan(summary["loss"]) else 1


if __name__ == "__main__":
    sys.exit(main())
