// The CUPTI source of GPU time (src/gpu/cupti_source.cpp) through stand-ins of libcupti.so.13 and
// libcuda.so.1 (tests/gpu/stand_in_*.cpp): CUPTI's own types, callback data and record structs
// from the CUDA toolkit's headers, played by the test as CUPTI and the driver would on a GPU. The
// stand-ins are loaded before set-up, so lens takes them as the libraries already in the process.
// Each test is one of the ways a first GPU run could go wrong (docs/gpu.md, "CUPTI in a
// long-running process"): records held back by incomplete buffers, launches that never bring a
// record (failed, captured into a graph), graphs whose nodes share the launch's id, zero times,
// dropped records, another CUPTI client, cuInit.
#include <cupti.h>
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "capture_stderr.hpp"
#include "nemo/lens/lens.hpp"
#include "tracing_fixture.hpp"

namespace {

// The stand-ins' test functions, found with dlsym.
struct StandIn {
  void (*api)(int, unsigned, int, std::uint32_t, const void*, int) = nullptr;
  std::uint64_t (*now)() = nullptr;
  bool (*record)(const void*, std::size_t) = nullptr;
  void (*incomplete)(bool) = nullptr;
  void (*drop)(std::size_t) = nullptr;
  void (*take_over)() = nullptr;
  int (*flushes)() = nullptr;
  bool (*wait_flushes)(int, int) = nullptr;
  bool (*subscribed)() = nullptr;
  bool (*kind_enabled)(int) = nullptr;
  bool (*callback_enabled)(int, unsigned) = nullptr;
  int (*timestamp_registrations)() = nullptr;
  std::size_t (*buffer_size)() = nullptr;
  std::size_t (*buffer_records)() = nullptr;
  void (*reset)() = nullptr;
  int (*cuinit_calls)() = nullptr;
  void (*capture)(CUstream) = nullptr;
  CUgraph (*graph)(const int*, std::size_t, const CUgraph*) = nullptr;
};

StandIn& stand_in() {
  static StandIn loaded = [] {
    StandIn s;
    // RTLD_GLOBAL, by path: lens' dlopen("libcuda.so.1") and its search for a libcupti already in
    // the process find these by their sonames.
    void* cuda = dlopen(LENS_STAND_IN_DIR "/libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    void* cupti = dlopen(LENS_STAND_IN_DIR "/libcupti.so.13", RTLD_NOW | RTLD_GLOBAL);
    if (cuda == nullptr || cupti == nullptr) {
      ADD_FAILURE() << "stand-ins not loaded: " << dlerror();
      return s;
    }
    auto sym = [](void* lib, auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr) ADD_FAILURE() << "stand-in lacks " << name;
    };
    sym(cupti, s.api, "lens_stand_in_api");
    sym(cupti, s.now, "lens_stand_in_now");
    sym(cupti, s.record, "lens_stand_in_record");
    sym(cupti, s.incomplete, "lens_stand_in_incomplete");
    sym(cupti, s.drop, "lens_stand_in_drop");
    sym(cupti, s.take_over, "lens_stand_in_take_over");
    sym(cupti, s.flushes, "lens_stand_in_flushes");
    sym(cupti, s.wait_flushes, "lens_stand_in_wait_flushes");
    sym(cupti, s.subscribed, "lens_stand_in_subscribed");
    sym(cupti, s.kind_enabled, "lens_stand_in_kind_enabled");
    sym(cupti, s.callback_enabled, "lens_stand_in_callback_enabled");
    sym(cupti, s.timestamp_registrations, "lens_stand_in_timestamp_registrations");
    sym(cupti, s.buffer_size, "lens_stand_in_buffer_size");
    sym(cupti, s.buffer_records, "lens_stand_in_buffer_records");
    sym(cupti, s.reset, "lens_stand_in_reset");
    sym(cuda, s.cuinit_calls, "lens_stand_in_cuinit_calls");
    sym(cuda, s.capture, "lens_stand_in_capture");
    sym(cuda, s.graph, "lens_stand_in_graph");
    return s;
  }();
  return loaded;
}

using lens_test::capture_stderr;

// Records, as CUPTI writes them, timed on CUPTI's clock (lens' own, registered at set-up).
CUpti_ActivityKernel10 kernel(std::uint32_t correlation, std::uint64_t start, std::uint64_t end,
                              std::uint32_t stream = 7) {
  CUpti_ActivityKernel10 k{};
  k.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  k.correlationId = correlation;
  k.start = start;
  k.end = end;
  k.deviceId = 0;
  k.streamId = stream;
  return k;
}

const nemo::lens::AttributeValue* attr(const nemo::lens::SpanData& s, const char* key) {
  return s.attribute(key);
}
std::int64_t int_attr(const nemo::lens::SpanData& s, const char* key) {
  const auto* v = attr(s, key);
  EXPECT_NE(v, nullptr) << s.name << " has no " << key;
  return v != nullptr ? std::get<std::int64_t>(*v) : -1;
}

constexpr int kRuntime = CUPTI_CB_DOMAIN_RUNTIME_API;
constexpr int kDriver = CUPTI_CB_DOMAIN_DRIVER_API;

class CuptiSource : public lens_test::Tracing {
 protected:
  void SetUp() override {
    ASSERT_NE(stand_in().api, nullptr);
    stand_in().reset();
  }
  // GPU time for `groups` through the CUPTI source (the stand-ins), spans waiting `wait_ms` for
  // their records.
  void start_gpu(const std::string& groups = "step", int wait_ms = 10000) {
    env_.set("NEMO_LENS_GPU_TIME", groups);
    env_.set("NEMO_LENS_GPU_TIME_WAIT_MS", std::to_string(wait_ms));
    // Ended spans reach the GPU timing when the exporter thread takes them: soon, not in 5 s.
    env_.set("OTEL_BSP_SCHEDULE_DELAY", "20");
    const std::string err = capture_stderr([&] { start("all"); });
    ASSERT_EQ(err, "") << "set-up said: " << err;
    ASSERT_TRUE(stand_in().subscribed());
  }
  static nemo::lens::Span open(const char* group, const char* name) {
    nemo::lens::SpanStartOptions o;
    o.group = group;
    return nemo::lens::start_span(name, o);
  }
  // A runtime kernel launch into `stream` with correlation id `id`, its driver call `id + 1`
  // inside it, returning `result`.
  static void launch(std::uint32_t id, cudaStream_t stream = nullptr, int result = 0) {
    cudaLaunchKernel_v7000_params p{};
    p.stream = stream;
    cuLaunchKernel_params d{};
    d.hStream = stream;
    auto& s = stand_in();
    s.api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_ENTER, id, &p, 0);
    s.api(kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_ENTER, id + 1, &d, 0);
    s.api(kDriver, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_API_EXIT, id + 1, &d, result);
    s.api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000, CUPTI_API_EXIT, id, &p,
          result);
  }
  template <typename R>
  static void record(const R& r) {
    ASSERT_TRUE(stand_in().record(&r, sizeof(r)));
  }
};

TEST_F(CuptiSource, SetUpNeverInitialisesTheDriverAndTakesTheLoadedCupti) {
  start_gpu();
  EXPECT_EQ(stand_in().cuinit_calls(), 0) << "set-up called cuInit";
  for (int kind : {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
                   CUPTI_ACTIVITY_KIND_MEMCPY2, CUPTI_ACTIVITY_KIND_MEMSET}) {
    EXPECT_TRUE(stand_in().kind_enabled(kind)) << "activity kind " << kind;
  }
  EXPECT_EQ(stand_in().timestamp_registrations(), 1);
  EXPECT_TRUE(stand_in().callback_enabled(kDriver, CUPTI_DRIVER_TRACE_CBID_cuInit));
  EXPECT_TRUE(
      stand_in().callback_enabled(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020));
  EXPECT_TRUE(
      stand_in().callback_enabled(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000));
  handle_.shutdown();
  EXPECT_FALSE(stand_in().subscribed());
  EXPECT_EQ(stand_in().cuinit_calls(), 0);
}

// Small buffers with a record cap: a buffer comes back after 512 records, not after the ~19,000
// kernel records of 4 MiB that a busy GPU may take seconds to fill.
TEST_F(CuptiSource, BuffersAreSmallAndCappedSoThatRecordsComeBackPromptly) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(10);
  }
  const std::uint64_t t = stand_in().now();
  record(kernel(11, t, t + 1000));
  EXPECT_LE(stand_in().buffer_size(), std::size_t{256} << 10);
  EXPECT_EQ(stand_in().buffer_records(), 512u);
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 1000);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
}

TEST_F(CuptiSource, RecordsOfEveryKindAreParsedFromCuptisOwnStructs) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(20);
    launch(30);
    launch(40);
    launch(50);
  }
  const std::uint64_t t = stand_in().now();
  record(kernel(21, t, t + 100));
  CUpti_ActivityMemcpy6 copy{};
  copy.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  copy.correlationId = 30;  // the runtime call's id
  copy.start = t + 200;
  copy.end = t + 300;
  record(copy);
  CUpti_ActivityMemcpyPtoP4 peer{};
  peer.kind = CUPTI_ACTIVITY_KIND_MEMCPY2;
  peer.correlationId = 41;
  peer.start = t + 400;
  peer.end = t + 500;
  record(peer);
  CUpti_ActivityMemset4 set{};
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.correlationId = 51;
  set.start = t + 600;
  set.end = t + 700;
  record(set);
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(int_attr(s, "gpu.busy"), 400);
  EXPECT_EQ(int_attr(s, "gpu.start"), static_cast<std::int64_t>(t));
  EXPECT_EQ(int_attr(s, "gpu.end"), static_cast<std::int64_t>(t + 700));
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
}

// CUPTI documents records with start = end = 0 (work it could not time), and others have seen
// an end before the start: they settle their launch, add no time, and are counted.
TEST_F(CuptiSource, ZeroAndReversedTimesAreCountedAndAddNothing) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(60);
    launch(70);
    launch(80);
  }
  const std::uint64_t t = stand_in().now();
  record(kernel(61, 0, 0));
  record(kernel(71, t + 500, t + 100));
  record(kernel(81, t + 1000, t + 1200));
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.busy"), 200);
  EXPECT_EQ(int_attr(s, "gpu.start"), static_cast<std::int64_t>(t + 1000)) << "not 0";
  const auto stats = handle_.stats();
  EXPECT_EQ(stats.gpu_activities_invalid, 2u);
  EXPECT_EQ(stats.gpu_spans_incomplete, 0u) << "the invalid records settled their launches";
}

// A launch that fails brings no record: its span must not wait for one (a flush would otherwise
// wait the whole 10 s and count the span incomplete).
TEST_F(CuptiSource, AFailedLaunchDoesNotHoldItsSpan) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(90, nullptr, /*cudaErrorInvalidValue*/ 1);
  }
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 0);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
}

// A launch into a stream being captured into a graph runs nothing now and never brings a record.
TEST_F(CuptiSource, ALaunchIntoACapturingStreamIsNotWaitedFor) {
  start_gpu();
  auto* captured = reinterpret_cast<cudaStream_t>(0x1234);
  stand_in().capture(reinterpret_cast<CUstream>(captured));
  {
    auto step = open("step", "step");
    launch(100, captured);
  }
  stand_in().capture(nullptr);
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 0);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
}

// Every node of a replayed graph brings a record with the launch's id: the span waits for all
// its kernel, copy and memset nodes (a child graph's too; host and empty nodes bring none).
TEST_F(CuptiSource, AGraphLaunchWaitsForEachOfItsNodesRecords) {
  const int child_types[] = {CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_KERNEL};
  CUgraph child = stand_in().graph(child_types, 2, nullptr);
  const int types[] = {CU_GRAPH_NODE_TYPE_KERNEL, CU_GRAPH_NODE_TYPE_MEMCPY,
                       CU_GRAPH_NODE_TYPE_HOST,   CU_GRAPH_NODE_TYPE_EMPTY,
                       CU_GRAPH_NODE_TYPE_MEMSET, CU_GRAPH_NODE_TYPE_GRAPH};
  CUgraph graph = stand_in().graph(types, 6, &child);
  cudaGraphExec_t exec = reinterpret_cast<cudaGraphExec_t>(0x5678);
  cudaGraphInstantiateWithFlags_v11040_params inst{&exec, reinterpret_cast<cudaGraph_t>(graph), 0};

  // Five records expected: with four of them the span leaves incomplete after its wait.
  for (int nodes : {4, 5}) {
    start_gpu("step", nodes == 4 ? 300 : 10000);
    stand_in().api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040,
                   CUPTI_API_EXIT, 1, &inst, 0);
    const std::uint32_t id = 200 + static_cast<std::uint32_t>(nodes) * 10;
    {
      auto step = open("step", "graph_step");
      cudaGraphLaunch_v10000_params p{exec, nullptr};
      stand_in().api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_ENTER, id,
                     &p, 0);
      stand_in().api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000, CUPTI_API_EXIT, id,
                     &p, 0);
    }
    const std::uint64_t t = stand_in().now();
    for (int i = 0; i < nodes; ++i) {
      record(kernel(id, t + 100 * static_cast<std::uint64_t>(i),
                    t + 100 * static_cast<std::uint64_t>(i) + 50));
    }
    const auto s = only(spans(), "graph_step");
    EXPECT_EQ(int_attr(s, "gpu.kernels"), nodes);
    EXPECT_EQ(handle_.stats().gpu_spans_incomplete, nodes == 4 ? 1u : 0u) << nodes << " nodes";
    memory_->clear();
  }
  cudaGraphExecDestroy_v10000_params destroy{exec};
  stand_in().api(kRuntime, CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000, CUPTI_API_ENTER, 2,
                 &destroy, 0);
}

// A buffer holding a record whose work still runs does not come back on a flush with flag 0; it
// does once that work finished, at the next flush (the poller's, every 10 ms while spans wait).
TEST_F(CuptiSource, ABufferWithAnIncompleteRecordComesBackOnceItIsComplete) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(300);
  }
  const std::uint64_t t = stand_in().now();
  stand_in().incomplete(true);
  record(kernel(301, t, t + 10));
  const int before = stand_in().flushes();
  ASSERT_TRUE(stand_in().wait_flushes(before + 2, 30000));  // flushed, and nothing came
  EXPECT_EQ(handle_.stats().gpu_spans_waiting, 1u);
  stand_in().incomplete(false);
  const auto s = only(spans(), "step");
  EXPECT_EQ(int_attr(s, "gpu.kernels"), 1);
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 0u);
}

TEST_F(CuptiSource, RecordsCuptiDroppedAreCounted) {
  start_gpu();
  {
    auto step = open("step", "step");
    launch(400);
  }
  stand_in().drop(7);
  const std::uint64_t t = stand_in().now();
  record(kernel(401, t, t + 10));
  (void)only(spans(), "step");
  EXPECT_EQ(handle_.stats().gpu_activities_dropped, 7u);
}

// torch.profiler registers its own buffer callbacks: lens' records stop coming. The first span
// that waited its whole wait in that silence says so, once, and later launches are not waited for.
TEST_F(CuptiSource, LosingTheActivityRecordsToAnotherClientIsSaidOnce) {
  start_gpu("step", 300);
  stand_in().take_over();
  std::string err = capture_stderr([&] {
    {
      auto step = open("step", "first");
      launch(500);
    }
    (void)only(spans(), "first");
  });
  EXPECT_NE(err.find("lens: GPU time of spans: CUPTI has delivered no activity record"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("another CUPTI client"), std::string::npos) << err;
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 1u);
  err = capture_stderr([&] {
    {
      auto step = open("step", "second");
      launch(510);
    }
    const auto s = only(spans(), "second");
    EXPECT_EQ(int_attr(s, "gpu.kernels"), 0);
  });
  EXPECT_EQ(err, "") << "said twice";
  EXPECT_EQ(handle_.stats().gpu_spans_incomplete, 1u) << "the second span waited";
}

// <PREFIX>_GPU_KERNEL_SPANS: the record's mangled kernel name becomes the kernel span's name.
TEST_F(CuptiSource, KernelSpansAreNamedByTheirDemangledKernel) {
  env_.set("NEMO_LENS_GPU_KERNEL_SPANS", "step");
  start_gpu();
  {
    auto step = open("step", "step");
    launch(700);
    launch(710);
  }
  const std::uint64_t t = stand_in().now();
  CUpti_ActivityKernel10 k = kernel(701, t, t + 500, /*stream=*/13);
  k.name =
      "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_11FillFunctorIfEENS_"
      "6detail5ArrayIPcLi1EEEEEviT0_T1_";
  record(k);
  CUpti_ActivityMemset4 set{};
  set.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  set.correlationId = 711;
  set.start = t + 600;
  set.end = t + 650;
  record(set);
  const auto all = spans();
  const auto step = only(all, "step");
  const auto kspan = only(all, "at::native::vectorized_elementwise_kernel");
  const auto mspan = only(all, "memset");
  EXPECT_EQ(kspan.parent_span_id, step.context.span_id);
  EXPECT_EQ(kspan.start_time_unix_nano, static_cast<std::int64_t>(t));
  EXPECT_EQ(kspan.end_time_unix_nano, static_cast<std::int64_t>(t + 500));
  EXPECT_EQ(int_attr(kspan, "gpu.stream"), 13);
  EXPECT_EQ(int_attr(kspan, "gpu.correlation_id"), 701);
  EXPECT_EQ(mspan.parent_span_id, step.context.span_id);
  EXPECT_EQ(handle_.stats().gpu_kernel_spans, 2u);
}

// Without a GPU the program's own cuInit fails: lens says so then, once (it never calls cuInit).
TEST_F(CuptiSource, TheProgramsFailedCuInitIsSaidOnce) {
  start_gpu();
  cuInit_params p{0};
  const std::string err = capture_stderr([&] {
    stand_in().api(kDriver, CUPTI_DRIVER_TRACE_CBID_cuInit, CUPTI_API_ENTER, 1, &p, 0);
    stand_in().api(kDriver, CUPTI_DRIVER_TRACE_CBID_cuInit, CUPTI_API_EXIT, 1, &p,
                   CUDA_ERROR_NO_DEVICE);
    stand_in().api(kDriver, CUPTI_DRIVER_TRACE_CBID_cuInit, CUPTI_API_EXIT, 2, &p,
                   CUDA_ERROR_NO_DEVICE);
  });
  EXPECT_NE(err.find("lens: GPU time of spans: the program's cuInit failed (CUDA error 100)"),
            std::string::npos)
      << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
}

}  // namespace
