// The MPI side of the training demo: the job's shape, the collectives a step makes, and the
// per-step broadcast of rank 0's trace context that puts every rank's step under rank 0's.
// Every function here is a collective: all ranks call it, in the same order.
//
//   lens_train::World world = lens_train::World::from_mpi();
//   nemo::lens::Span step = lens_train::open_step_span(world, iteration);
//   const float loss = lens_train::allreduce_mean(model.gradients(), local_loss, buffer, world);
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "nemo/lens/span.hpp"

namespace lens_train {

/// This process's place in MPI_COMM_WORLD.
struct World {
  int rank = 0;
  int size = 1;

  /// Reads rank and size from MPI_COMM_WORLD (MPI must be initialised).
  static World from_mpi() noexcept;
  bool is_root() const noexcept { return rank == 0; }
};

/// Opens this rank's span of training step `step` (group `step`, name "train_step"). Rank 0's span
/// is the parent of every other rank's: its context reaches all ranks in one broadcast
/// (nemo::lens::broadcast_trace_context), made on every rank whether tracing is on or not. When
/// rank 0 has no span (its group is off or it does not export) the others' step spans nest under
/// their own current span.
nemo::lens::Span open_step_span(const World& world, std::int64_t step);

/// Averages gradients and the loss over all ranks with one MPI_Allreduce (sum) of one flat buffer,
/// this rank's gradients followed by its loss, then a division by the world size. `buffer` is
/// scratch space reused across steps. Returns the mean loss; the gradients are replaced by their
/// mean. Traced as a `communication` span with the bytes reduced.
float allreduce_mean(std::span<float> gradients, float local_loss, std::vector<float>& buffer,
                     const World& world, std::int64_t step);

/// Sums `values` over all ranks in place (one MPI_Allreduce of doubles).
void allreduce_sum(std::span<double> values);

/// Counts the ranks for which `flag` is true.
int count_ranks(bool flag);

/// Sends rank 0's `bytes` to every rank (the other ranks' contents are replaced).
void broadcast_bytes(std::vector<std::byte>& bytes);

/// Sends rank 0's `text` to every rank.
void broadcast_string(std::string& text);

/// Whether every rank holds bit-identical `parameters`: one all-reduce (max) of each rank's
/// checksum and of its complement, which gives the largest and the smallest checksum at once.
/// `checksum` receives this rank's. Traced as a `communication` span.
bool parameters_in_sync(std::span<const float> parameters, std::uint64_t* checksum);

}  // namespace lens_train
