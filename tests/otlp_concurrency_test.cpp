// The OTLP exporter's one cross-thread path: interrupt_by() from a shutting-down thread while the
// exporter thread waits on a receiver that never answers (HTTP and gRPC), and while it backs off
// between retries. Run under TSan in CI.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <thread>

#include "export/otlp.hpp"
#include "http_test_server.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using nemo::lens::ExportResult;
using nemo::lens::SpanData;

ExportResult export_one(nemo::lens::SpanExporter& exporter) {
  SpanData span;
  span.name = "stuck";
  span.context.trace_id.bytes[0] = 1;
  span.context.span_id.bytes[0] = 1;
  const SpanData* view = &span;
  return exporter.export_spans({&view, 1}, nemo::lens::Resource{}, Clock::now() + 60s);
}

// Exports on a second thread, interrupts from this one once the request is under way (`started`
// says when), and checks the export gives up promptly and fails.
void interrupt_while_exporting(const std::function<bool()>& started) {
  auto exporter = nemo::lens::detail::make_otlp_exporter();
  auto* interruptible = dynamic_cast<nemo::lens::detail::InterruptibleExporter*>(exporter.get());
  ASSERT_NE(interruptible, nullptr);
  auto result = std::async(std::launch::async, [&] { return export_one(*exporter); });
  const auto deadline = Clock::now() + 10s;
  while (!started() && Clock::now() < deadline) std::this_thread::yield();
  const auto t0 = Clock::now();
  interruptible->interrupt_by(Clock::now() + 100ms);
  ASSERT_EQ(result.wait_for(5s), std::future_status::ready);
  EXPECT_LT(Clock::now() - t0, 2s);
  EXPECT_EQ(result.get(), ExportResult::kFailure);
}

TEST(OtlpInterrupt, EndsAnHttpRequestThatNeverGetsAnAnswer) {
  lens_test::ScopedEnv env;
  lens_test::BlackHole hole;
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
          "http://127.0.0.1:" + std::to_string(hole.port()) + "/v1/traces");
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60000");
  // The connection completes in the backlog at once; the request then waits for an answer.
  interrupt_while_exporting([] { return true; });
}

TEST(OtlpInterrupt, EndsTheBackOffBetweenRetries) {
  lens_test::ScopedEnv env;
  lens_test::TestHttpServer server([](const lens_test::RecordedRequest&, std::size_t) {
    return lens_test::Reply{503, "", {{"Retry-After", "30"}}};
  });
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", server.url());
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60000");
  interrupt_while_exporting([&] { return !server.requests().empty(); });
}

TEST(OtlpInterrupt, EndsAGrpcCallThatNeverGetsAnAnswer) {
  if (!nemo::lens::detail::grpc_built_in()) GTEST_SKIP() << "built without gRPC";
#if defined(__SANITIZE_THREAD__)
  // The distribution's gRPC and Abseil are not built with TSan: their own threads' accesses look
  // like races to it. The HTTP tests above cover the interrupt under TSan.
  GTEST_SKIP() << "gRPC is not instrumented for TSan";
#endif
  lens_test::ScopedEnv env;
  lens_test::BlackHole hole;
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://127.0.0.1:" + std::to_string(hole.port()));
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "60000");
  interrupt_while_exporting([] { return true; });
}

}  // namespace
