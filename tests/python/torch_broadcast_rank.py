"""One rank of test_distributed's torch.distributed job: rank 0 broadcasts its span's context,
every rank records a span under it into its own file. Run with RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT and NEMO_LENS_EXPORT_PATH set."""

import os
import sys

import torch.distributed as dist

import nemo_lens_cpp as lens
from nemo_lens_cpp.distributed import broadcast_trace_context

rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
dist.init_process_group("gloo", rank=rank, world_size=world)
config = lens.NemoLensConfig(enabled=True, export_strategy="all_ranks", exporter="file",
                             metrics_enabled=False, span_groups="all")
handle = lens.setup_telemetry(config, rank, world)
if rank == 0:
    with lens.managed_span("job", "job"):
        carrier = broadcast_trace_context(rank, src_rank=0)
else:
    carrier = broadcast_trace_context(rank, src_rank=0)
with lens.extract_context(carrier), lens.managed_span("step", f"work{rank}"):
    pass
print(carrier["traceparent"])
dist.destroy_process_group()
sys.exit(0 if handle.shutdown(10000) else 1)
