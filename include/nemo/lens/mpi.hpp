// MPI helpers, in the optional nemo::lens_mpi library (built when OpenMPI or another MPI is found;
// link nemo::lens_mpi, which brings MPI and nemo::lens). Not included by lens.hpp.
//
//   // Every rank, once per step: rank 0's step span becomes the parent of the others'.
//   nemo::lens::Span step;
//   if (rank == 0) step = nemo::lens::managed_span("step", "train_step");
//   nemo::lens::Carrier carrier = nemo::lens::broadcast_trace_context(MPI_COMM_WORLD, 0);
//   if (rank != 0) {
//     nemo::lens::ExtractedContext remote = nemo::lens::extract_context(carrier);
//     nemo::lens::SpanStartOptions options;
//     options.group = "step";
//     options.parent = &remote.context;  // invalid (no parent) when rank 0 had no span
//     step = nemo::lens::start_span("train_step", options);
//   }
#pragma once

#include <mpi.h>

#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/propagation.hpp"

namespace nemo::lens {

/// Sends the current span context of rank `src_rank` of `comm` to every rank of `comm` and returns
/// it as a W3C carrier (`traceparent`, and `tracestate` when set), ready for extract_context() or
/// create_linked_span().
///
/// A collective: every rank of `comm` must call it, with the same `src_rank`, in the same order
/// relative to other collectives on `comm`, as for MPI_Bcast (it is one MPI_Bcast of a fixed
/// 544-byte buffer). The carrier is empty on every rank when the source rank has no current span
/// (for example because it does not export), and, without any communication, when MPI is not
/// initialised or already finalised, `comm` is MPI_COMM_NULL or `src_rank` is not a rank of
/// `comm`. Never throws; MPI errors follow `comm`'s error handler.
NEMO_LENS_API Carrier broadcast_trace_context(MPI_Comm comm, int src_rank) noexcept;

}  // namespace nemo::lens
