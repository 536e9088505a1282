// One rank of the hung-job test (tests/mpi_ctl_test.cpp runs it under mpirun -np 4): rank
// LENS_HANG_RANK enters an all-reduce span and blocks there until the test releases it (EOF on the
// FIFO LENS_HANG_RELEASE); the other ranks enter their all-reduce spans once the test lets it
// proceed (EOF on LENS_HANG_PROCEED), and wait in MPI_Allreduce. Each rank writes "ready <rank>"
// to the FIFO LENS_HANG_READY once inside its span.
// Exit status: 0, or the check that failed.
#include <fcntl.h>
#include <mpi.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "nemo/lens/lens.hpp"

namespace lens = nemo::lens;

namespace {

void say_ready(int rank) {
  const int fd = ::open(std::getenv("LENS_HANG_READY"), O_WRONLY | O_CLOEXEC);
  if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 3);
  const std::string line = "ready " + std::to_string(rank) + "\n";
  if (::write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) {
    MPI_Abort(MPI_COMM_WORLD, 4);
  }
  ::close(fd);
}

// Blocks until the test opens the FIFO named by `variable` for writing and closes it.
void wait_for(const char* variable) {
  const int fd = ::open(std::getenv(variable), O_RDONLY | O_CLOEXEC);
  if (fd < 0) MPI_Abort(MPI_COMM_WORLD, 5);
  char buf[64];
  while (::read(fd, buf, sizeof buf) > 0) {
  }
  ::close(fd);
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  const int stuck = std::atoi(std::getenv("LENS_HANG_RANK"));
  auto telemetry =
      lens::setup_telemetry(lens::NemoLensConfig::from_env<lens::MegatronSpanGroup>(), rank, size);
  {
    auto job = lens::span_cm("pretrain");
    LENS_SPAN(step, lens::MegatronSpanGroup::STEP, "train_step", {"iteration", 0});
    double grad = 1.0 + rank, sum = 0;
    int token = 0;
    if (rank == stuck) {
      LENS_SPAN(ar, lens::MegatronSpanGroup::COMMUNICATION, "all_reduce", {"bytes", 8});
      say_ready(rank);
      wait_for("LENS_HANG_PROCEED");  // the test looks at this rank alone in its collective first
      for (int r = 0; r < size; ++r) {
        if (r != rank) MPI_Send(&token, 1, MPI_INT, r, 0, MPI_COMM_WORLD);
      }
      wait_for("LENS_HANG_RELEASE");
      MPI_Allreduce(&grad, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    } else {
      MPI_Recv(&token, 1, MPI_INT, stuck, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      LENS_SPAN(ar, lens::MegatronSpanGroup::COMMUNICATION, "all_reduce", {"bytes", 8});
      say_ready(rank);
      MPI_Allreduce(&grad, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    }
    if (sum != size * (size + 1) / 2.0) MPI_Abort(MPI_COMM_WORLD, 6);
  }
  telemetry.shutdown();
  MPI_Finalize();
  return 0;
}
