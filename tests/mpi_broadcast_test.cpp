// broadcast_trace_context() in one process (MPI singleton initialisation): the carrier before
// MPI_Init, on MPI_COMM_SELF with and without a current span, with MPI_COMM_NULL, with a bad
// source rank, and after MPI_Finalize.
#include <gtest/gtest.h>

#include <cstdlib>

#include "mpi_session.hpp"
#include "nemo/lens/lens.hpp"
#include "nemo/lens/mpi.hpp"
#include "tracing_fixture.hpp"

namespace {

namespace lens = nemo::lens;

class MpiBroadcast : public lens_test::Tracing {};

TEST_F(MpiBroadcast, CarriesTheSourcesCurrentSpanAndIsEmptyOutsideMpi) {
  EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_WORLD, 0).empty()) << "before MPI_Init";

  // Singleton initialisation (no mpirun); root needs OpenMPI's consent.
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
  const lens_test::PrivateMpiSession session;  // MPI_Init creates a session directory too
  ASSERT_EQ(MPI_Init(nullptr, nullptr), MPI_SUCCESS);

  EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_SELF, 0).empty()) << "no current span";
  {
    auto span = lens::span_cm("step");
    const lens::SpanContext ctx = span.context();
    const lens::Carrier carrier = lens::broadcast_trace_context(MPI_COMM_SELF, 0);
    ASSERT_EQ(carrier.count("traceparent"), 1u);
    EXPECT_EQ(carrier.at("traceparent"),
              "00-" + ctx.trace_id.to_hex() + "-" + ctx.span_id.to_hex() + "-03");
    const lens::ExtractedContext extracted = lens::extract_context(carrier);
    EXPECT_EQ(extracted.context.span_id, ctx.span_id);
    EXPECT_TRUE(extracted.context.is_remote);

    EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_NULL, 0).empty());
    EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_SELF, 1).empty()) << "no rank 1";
    EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_SELF, -1).empty());
  }

  ASSERT_EQ(MPI_Finalize(), MPI_SUCCESS);
  auto span = lens::span_cm("after");
  EXPECT_TRUE(lens::broadcast_trace_context(MPI_COMM_WORLD, 0).empty()) << "after MPI_Finalize";
}

}  // namespace
