// Uses nemo::lens_mpi from the installed package: without MPI_Init the broadcast returns an empty
// carrier without communicating (exit 0).
#include <nemo/lens/mpi.hpp>

int main() { return nemo::lens::broadcast_trace_context(MPI_COMM_WORLD, 0).empty() ? 0 : 1; }
