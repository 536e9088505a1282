// One rank of the multi-rank tests (tests/mpi_ranks_test.cpp runs it under mpirun -np 4): reads
// its configuration from the NEMO_LENS_* and OTEL_* variables the test sets, checks rank discovery
// against MPI, then runs three "steps", each a collective broadcast of rank 0's step span. Its
// spans go to `lens collect` through the OTLP exporter. Exit status: 0, or the check that failed.
#include <mpi.h>

#include <cstdio>

#include "nemo/lens/lens.hpp"
#include "nemo/lens/mpi.hpp"

namespace lens = nemo::lens;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0;
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);

  // Rank discovery from the launcher's variables agrees with MPI itself.
  const lens::RankInfo discovered = lens::discover_ranks();
  if (discovered.rank != rank || discovered.world_size != size || discovered.source != "openmpi") {
    std::fprintf(stderr, "rank %d: discover_ranks gave %d of %d from %s\n", rank, discovered.rank,
                 discovered.world_size, discovered.source.c_str());
    MPI_Abort(MPI_COMM_WORLD, 3);
  }

  auto telemetry = lens::setup_telemetry(lens::NemoLensConfig::from_env(), rank, size);

  // Before any span, the source has no context: every rank gets an empty carrier.
  if (!lens::broadcast_trace_context(MPI_COMM_WORLD, 0).empty()) {
    std::fprintf(stderr, "rank %d: a carrier without a source span\n", rank);
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  // An out-of-range source is refused on every rank alike, without communicating.
  if (!lens::broadcast_trace_context(MPI_COMM_WORLD, size).empty()) MPI_Abort(MPI_COMM_WORLD, 5);

  for (int step = 0; step < 3; ++step) {
    lens::Span step_span;
    if (rank == 0) step_span = lens::managed_span("step", "train_step", {{"iteration", step}});
    const lens::Carrier carrier = lens::broadcast_trace_context(MPI_COMM_WORLD, 0);
    if (rank != 0) {
      const lens::ExtractedContext remote = lens::extract_context(carrier);
      lens::SpanStartOptions options;
      options.group = "step";
      options.parent = &remote.context;  // invalid, so a root, when rank 0 does not export
      step_span = lens::start_span("train_step", options, {{"iteration", step}});
    }
    {
      auto work = lens::managed_span("step", "all_reduce", {{"iteration", step}});
      MPI_Barrier(MPI_COMM_WORLD);
    }
    step_span.end();
  }

  telemetry.shutdown();
  MPI_Finalize();
  return 0;
}
