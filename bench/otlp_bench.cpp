// OTLP export figures: the protobuf encoder's throughput (and the JSON writer's, for comparison),
// the receiver's transcoding throughput, end-to-end export to `lens collect` over loopback, and
// the hot path while the OTLP exporter is busy sending.
//
//   build/bench/otlp_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

#include "common/otlp_transcode.hpp"
#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "encoding_exporter.hpp"
#include "nemo/lens/lens.hpp"
#include "real_exporters.hpp"

namespace {

using namespace nemo::lens;

// A typical training span: ids, parent, group, four attributes.
std::vector<SpanData> typical_spans(int n) {
  std::vector<SpanData> spans(static_cast<std::size_t>(n));
  for (int i = 0; i < n; ++i) {
    SpanData& s = spans[static_cast<std::size_t>(i)];
    s.name = "forward_backward";
    s.group = "step";
    s.context.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
    s.context.span_id.bytes[0] = static_cast<std::uint8_t>(i);
    s.context.span_id.bytes[7] = 1;
    s.context.trace_flags = 1;
    s.parent_span_id = *SpanId::from_hex("b7ad6b7169203331");
    s.start_time_unix_nano = 1'700'000'000'000'000'000 + i * 1000;
    s.end_time_unix_nano = s.start_time_unix_nano + 900;
    s.attributes = {{"iteration", std::int64_t{i}},
                    {"loss", 0.125 * i},
                    {"microbatch", std::int64_t{3}},
                    {"stage", std::string("pipeline-0")}};
    s.thread_id = 4242;
  }
  return spans;
}

Resource typical_resource() {
  Resource r;
  r.attributes = {{"service.name", std::string("trainer")},
                  {"dl.rank", std::int64_t{3}},
                  {"dl.world_size", std::int64_t{8}},
                  {"host.name", std::string("node-7")}};
  return r;
}

template <class Encode>
void encode_batches(benchmark::State& state, Encode encode) {
  const auto spans = typical_spans(512);
  std::vector<const SpanData*> views;
  for (const auto& s : spans) views.push_back(&s);
  const Resource resource = typical_resource();
  std::string out;
  for (auto _ : state) {
    out.clear();
    encode(out, views, resource);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * 512);
  state.counters["bytes_per_span"] = static_cast<double>(out.size()) / 512;
}

void BM_EncodeProtobuf(benchmark::State& state) {
  encode_batches(state, detail::append_otlp_proto);
}
BENCHMARK(BM_EncodeProtobuf);

void BM_EncodeJson(benchmark::State& state) { encode_batches(state, detail::append_otlp_json); }
BENCHMARK(BM_EncodeJson);

void BM_ReceiverTranscodeProtobufToJson(benchmark::State& state) {
  const auto spans = typical_spans(512);
  std::vector<const SpanData*> views;
  for (const auto& s : spans) views.push_back(&s);
  std::string request;
  detail::append_otlp_proto(request, views, typical_resource());
  std::string out;
  for (auto _ : state) {
    out.clear();
    benchmark::DoNotOptimize(lens_cli::protobuf_to_json(request, out).spans);
  }
  state.SetItemsProcessed(state.iterations() * 512);
}
BENCHMARK(BM_ReceiverTranscodeProtobufToJson);

TelemetryHandle start_otlp(const std::string& url) {
  setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", 1);
  setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", url.c_str(), 1);
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "16384", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512", 1);
  NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = "per_step";
  c.exporter = "otlp";
  SetupOptions o;
  o.allow_reinit = true;
  return setup_telemetry(c, 0, 1, o);
}

// Spans created, exported over HTTP protobuf and written by lens collect, 8192 per iteration
// (half the queue, so none is dropped), each iteration ending with force_flush.
void BM_ExportToLensCollectHttpProtobuf(benchmark::State& state) {
  lens_bench::LensCollect receiver;
  TelemetryHandle handle = start_otlp(receiver.url);
  std::int64_t i = 0;
  for (auto _ : state) {
    for (int k = 0; k < 8192; ++k, ++i) {
      LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    }
    handle.force_flush(std::chrono::seconds(30));
  }
  const auto st = handle.stats();
  state.SetItemsProcessed(static_cast<std::int64_t>(st.spans_exported));
  state.counters["spans_per_request"] =
      st.export_requests ? static_cast<double>(st.spans_exported) / st.export_requests : 0;
  state.counters["dropped"] =
      static_cast<double>(st.spans_dropped_queue_full + st.spans_dropped_export_failed);
  handle.shutdown();
}
BENCHMARK(BM_ExportToLensCollectHttpProtobuf)->Unit(benchmark::kMillisecond)->UseRealTime();

// The caller's cost of an enabled span while the OTLP exporter sends to lens collect on its own
// thread: compare with span_bench's BM_EnabledSpanTwoAttributes (null exporter).
void BM_EnabledSpanWhileOtlpExports(benchmark::State& state) {
  lens_bench::LensCollect receiver;
  TelemetryHandle handle = start_otlp(receiver.url);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5});
    ++i;
  }
  const auto st = handle.stats();
  state.counters["dropped_fraction"] =
      st.spans_ended ? static_cast<double>(st.spans_dropped_queue_full) / st.spans_ended : 0;
  handle.shutdown();
}
BENCHMARK(BM_EnabledSpanWhileOtlpExports);

// Issue 15's exporter figures: the exporter thread's CPU per span (drain, encode OTLP protobuf from
// the spans, hand to a discarding exporter) and how full its requests are, under the steady load
// of one producer making enabled spans with two attributes as fast as it can.
void BM_ExporterThreadCpuPerSpan(benchmark::State& state) {
  setenv("OTEL_BSP_MAX_QUEUE_SIZE", "8192", 1);
  setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "512", 1);
  auto exporter = std::make_shared<lens_bench::EncodingNullExporter>();
  NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = "per_step";
  SetupOptions options;
  options.exporter = exporter;
  options.allow_reinit = true;
  TelemetryHandle handle = setup_telemetry(config, 0, 1, options);
  std::int64_t i = 0;
  for (auto _ : state) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"stage", "fwd"});
    ++i;
  }
  handle.shutdown();
  const auto st = handle.stats();
  state.counters["exporter_cpu_ns_per_span"] =
      st.spans_exported ? static_cast<double>(exporter->thread_cpu_ns()) / st.spans_exported : 0;
  state.counters["spans_per_request"] =
      st.export_requests ? static_cast<double>(st.spans_exported) / st.export_requests : 0;
  state.counters["batch_fill"] = state.counters["spans_per_request"] / 512.0;
  state.counters["dropped_fraction"] =
      st.spans_ended ? static_cast<double>(st.spans_dropped_queue_full) / st.spans_ended : 0;
}
BENCHMARK(BM_ExporterThreadCpuPerSpan);

}  // namespace

BENCHMARK_MAIN();
