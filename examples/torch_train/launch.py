"""Starts a PyTorch job's ranks on this machine, as torchrun would: each rank a process with
RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR=127.0.0.1 and a free MASTER_PORT.

    python3 examples/torch_train/launch.py --nproc 4 -- examples/torch_train/train.py --steps 20

(Debian's torchrun 1.13 fails on Python 3.11 in its own argument handling; `mpirun -np 4 -x
MASTER_ADDR=127.0.0.1 -x MASTER_PORT=29500 python3 train.py` works too: train.py reads Open
MPI's rank variables.) Exits with the first non-zero exit status of a rank; when one rank fails,
the others get --grace seconds to finish (a gloo collective fails fast when its peer is gone)
before they are killed.
"""

import argparse
import os
import socket
import subprocess
import sys
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--nproc", type=int, default=4)
    p.add_argument("--grace", type=float, default=60.0)
    p.add_argument("script", nargs=argparse.REMAINDER,
                   help="-- SCRIPT [ARGS...]: what each rank runs with this Python")
    args = p.parse_args()
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script or args.nproc < 1:
        p.error("expected --nproc N >= 1 and -- SCRIPT [ARGS...]")
    port = free_port()
    # One run id for the job's ranks, as SLURM_JOB_ID gives one under SLURM (lens reads it).
    run_id = os.environ.get("NEMO_LENS_RUN_ID") or f"torch-{os.getpid()}-{port}"
    ranks = []
    for rank in range(args.nproc):
        env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(args.nproc),
                   LOCAL_WORLD_SIZE=str(args.nproc), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), NEMO_LENS_RUN_ID=run_id)
        ranks.append(subprocess.Popen([sys.executable, *script], env=env))
    status = 0
    deadline = None
    while any(r.poll() is None for r in ranks):
        for r in ranks:
            code = r.poll()
            if code not in (None, 0) and status == 0:
                status = code
                deadline = time.monotonic() + args.grace
        if deadline is not None and time.monotonic() > deadline:
            for r in ranks:
                if r.poll() is None:
                    r.kill()
        try:
            next(r for r in ranks if r.poll() is None).wait(timeout=0.5)
        except (StopIteration, subprocess.TimeoutExpired):
            pass
    for r in ranks:
        if r.returncode != 0 and status == 0:
            status = r.returncode
    return status if status >= 0 else 128 - status


if __name__ == "__main__":
    sys.exit(main())
