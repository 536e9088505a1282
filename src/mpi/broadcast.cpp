// broadcast_trace_context: one MPI_Bcast of a fixed-size buffer holding the source rank's
// serialize_context() bytes, so the collective's size never depends on the context.
#include <array>
#include <cstdint>
#include <string>

#include "nemo/lens/mpi.hpp"

namespace nemo::lens {

namespace {

// A 2-byte little-endian length, then serialize_context()'s bytes (at most 540).
constexpr std::size_t kMaxContext = 540;
constexpr int kBufferSize = 544;
static_assert(2 + kMaxContext <= static_cast<std::size_t>(kBufferSize));

}  // namespace

Carrier broadcast_trace_context(MPI_Comm comm, int src_rank) noexcept {
  Carrier carrier;
  try {
    int initialized = 0;
    int finalized = 0;
    MPI_Initialized(&initialized);
    MPI_Finalized(&finalized);
    if (!initialized || finalized || comm == MPI_COMM_NULL) return carrier;
    int size = 0;
    int rank = 0;
    MPI_Comm_size(comm, &size);
    MPI_Comm_rank(comm, &rank);
    if (src_rank < 0 || src_rank >= size) return carrier;

    std::array<unsigned char, kBufferSize> buffer{};
    if (rank == src_rank) {
      const std::string bytes = serialize_context();  // empty without a current span
      const std::size_t n = bytes.size() <= kMaxContext ? bytes.size() : 0;
      buffer[0] = static_cast<unsigned char>(n & 0xff);
      buffer[1] = static_cast<unsigned char>(n >> 8);
      for (std::size_t i = 0; i < n; ++i) buffer[2 + i] = static_cast<unsigned char>(bytes[i]);
    }
    if (MPI_Bcast(buffer.data(), kBufferSize, MPI_BYTE, src_rank, comm) != MPI_SUCCESS) {
      return carrier;
    }
    const std::size_t n = buffer[0] | (static_cast<std::size_t>(buffer[1]) << 8);
    if (n == 0 || n > kMaxContext) return carrier;
    const SpanContext context = deserialize_context(
        std::string_view(reinterpret_cast<const char*>(buffer.data() + 2), n));
    if (context.is_valid()) inject_context(context, carrier);
  } catch (...) {
    carrier.clear();
  }
  return carrier;
}

}  // namespace nemo::lens
