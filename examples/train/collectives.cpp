#include "collectives.hpp"

#include <mpi.h>

#include <algorithm>
#include <utility>

#include "checkpoint.hpp"
#include "nemo/lens/lens.hpp"
#include "nemo/lens/mpi.hpp"

namespace lens_train {

namespace lens = nemo::lens;
using lens::MegatronSpanGroup;

World World::from_mpi() noexcept {
  World world;
  MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world.size);
  return world;
}

lens::Span open_step_span(const World& world, std::int64_t step) {
  lens::Span span;
  if (world.is_root()) {
    LENS_SPAN(root_step, MegatronSpanGroup::STEP, "train_step", {"iteration", step});
    span = std::move(root_step);
  }
  // A collective: every rank, every step, in the same place relative to the other collectives.
  const lens::Carrier carrier = lens::broadcast_trace_context(MPI_COMM_WORLD, 0);
  if (!world.is_root() && LENS_GROUP_ENABLED(MegatronSpanGroup::STEP)) {
    const lens::ExtractedContext remote = lens::extract_context(carrier);
    lens::SpanStartOptions options;
    options.group = MegatronSpanGroup::STEP;
    options.parent = &remote.context;  // invalid for an empty carrier: nests under this rank's job
    span = lens::start_span("train_step", options, {{"iteration", step}});
  }
  return span;
}

float allreduce_mean(std::span<float> gradients, float local_loss, std::vector<float>& buffer,
                     const World& world, std::int64_t step) {
  buffer.resize(gradients.size() + 1);
  std::copy(gradients.begin(), gradients.end(), buffer.begin());
  buffer.back() = local_loss;
  const auto bytes = static_cast<std::int64_t>(buffer.size() * sizeof(float));
  LENS_SPAN(span, MegatronSpanGroup::COMMUNICATION, "allreduce_gradients", {"iteration", step},
            {"bytes", bytes}, {"world_size", world.size}, {"op", "sum"});
  MPI_Allreduce(MPI_IN_PLACE, buffer.data(), static_cast<int>(buffer.size()), MPI_FLOAT, MPI_SUM,
                MPI_COMM_WORLD);
  const auto ranks = static_cast<float>(world.size);
  for (std::size_t k = 0; k < gradients.size(); ++k) gradients[k] = buffer[k] / ranks;
  return buffer.back() / ranks;
}

void allreduce_sum(std::span<double> values) {
  MPI_Allreduce(MPI_IN_PLACE, values.data(), static_cast<int>(values.size()), MPI_DOUBLE, MPI_SUM,
                MPI_COMM_WORLD);
}

int count_ranks(bool flag) {
  int count = flag ? 1 : 0;
  MPI_Allreduce(MPI_IN_PLACE, &count, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  return count;
}

void broadcast_bytes(std::vector<std::byte>& bytes) {
  std::uint64_t size = bytes.size();
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  bytes.resize(size);
  // MPI counts are ints: send at most 1 GiB at a time.
  constexpr std::uint64_t kChunk = 1ULL << 30;
  for (std::uint64_t done = 0; done < size; done += kChunk) {
    const auto count = static_cast<int>(std::min(kChunk, size - done));
    MPI_Bcast(bytes.data() + done, count, MPI_BYTE, 0, MPI_COMM_WORLD);
  }
}

void broadcast_string(std::string& text) {
  std::vector<std::byte> bytes(text.size());
  std::transform(text.begin(), text.end(), bytes.begin(),
                 [](char c) { return static_cast<std::byte>(c); });
  broadcast_bytes(bytes);
  text.resize(bytes.size());
  std::transform(bytes.begin(), bytes.end(), text.begin(),
                 [](std::byte b) { return static_cast<char>(b); });
}

bool parameters_in_sync(std::span<const float> parameters, std::uint64_t* checksum) {
  LENS_SPAN(span, MegatronSpanGroup::COMMUNICATION, "verify_parameters",
            {"bytes", static_cast<std::int64_t>(2 * sizeof(std::uint64_t))});
  const std::uint64_t mine = fnv1a(std::as_bytes(parameters));
  std::uint64_t extremes[2] = {mine, ~mine};  // max of ~x is ~(min of x)
  MPI_Allreduce(MPI_IN_PLACE, extremes, 2, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
  if (checksum != nullptr) *checksum = mine;
  const bool in_sync = extremes[0] == ~extremes[1];
  span.set_attribute("in_sync", in_sync);
  return in_sync;
}

}  // namespace lens_train
