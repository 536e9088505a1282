// scripts/gpu-check's CUDA program: kernels of known length on two streams and from a helper
// thread with no span, inside lens spans with GPU time on (NEMO_LENS_GPU_TIME), and CUDA events
// around the same work. Checks each span's gpu.busy against the events (within 5 % or 5 us) and
// its gpu.kernels exactly, then times a kernel launch without lens and with GPU time on, then runs
// the checks of CUPTI's pitfalls (cupti_risks.hpp). Prints a table; exit status 0 when every
// check held, 1 when one failed, 2 when there is no GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cupti_risks.hpp"
#include "nemo/lens/lens.hpp"

extern "C" cudaError_t lens_check_spin(cudaStream_t stream, unsigned long long ns);
extern "C" cudaError_t lens_check_empty(cudaStream_t stream);

namespace {

namespace lens = nemo::lens;

void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(2);
}

// An event recorded now on `stream`.
cudaEvent_t mark(cudaStream_t stream) {
  cudaEvent_t e;
  check_cuda(cudaEventCreate(&e), "cudaEventCreate");
  check_cuda(cudaEventRecord(e, stream), "cudaEventRecord");
  return e;
}

// Microseconds from `ref` to `e` (both complete).
double us_since(cudaEvent_t ref, cudaEvent_t e) {
  float ms = 0;
  check_cuda(cudaEventElapsedTime(&ms, ref, e), "cudaEventElapsedTime");
  return ms * 1000.0;
}

// The length of the union of [lo, hi) intervals.
double union_us(std::vector<std::pair<double, double>> v) {
  std::sort(v.begin(), v.end());
  double total = 0, lo = 0, hi = -1;
  for (auto [a, b] : v) {
    if (a > hi) {
      if (hi > lo) total += hi - lo;
      lo = a;
      hi = b;
    } else {
      hi = std::max(hi, b);
    }
  }
  if (hi > lo) total += hi - lo;
  return total;
}

struct Expected {
  std::int64_t kernels;
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> intervals;  // the events around its work
};

lens::Span open(const char* group, const char* name) {
  lens::SpanStartOptions o;
  o.group = group;
  return lens::start_span(name, o);
}

std::int64_t int_attr(const lens::SpanData& s, const char* key) {
  const auto* v = s.attribute(key);
  return v != nullptr && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -1;
}

// Mean cost of launching an empty kernel on the calling thread, over `n` launches.
double launch_us(cudaStream_t s, int n) {
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) check_cuda(lens_check_empty(s), "launch");
  const auto t1 = std::chrono::steady_clock::now();
  check_cuda(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::fprintf(stderr, "gpu_check: no GPU\n");
    return 2;
  }
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, 0), "cudaGetDeviceProperties");
  std::printf("device: %s\n", prop.name);
  cudaStream_t s1, s2, s3;
  check_cuda(cudaStreamCreateWithFlags(&s1, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking), "cudaStreamCreate");
  check_cuda(cudaStreamCreateWithFlags(&s3, cudaStreamNonBlocking), "cudaStreamCreate");
  // Launch cost without lens (warmed up first).
  launch_us(s1, 2000);
  const double base_launch = launch_us(s1, 20000);

  setenv("NEMO_LENS_GPU_TIME", "step,forward_backward,optimizer,communication", 1);
  setenv("NEMO_LENS_GPU_KERNEL_SPANS", "communication", 1);
  lens::NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = "all";
  auto memory = std::make_shared<lens::InMemorySpanExporter>();
  lens::SetupOptions options;
  auto timing = std::make_shared<gpu_check::TimingExporter>(memory);
  options.exporter = timing;
  auto handle = lens::setup_telemetry(config, 0, 1, options);

  std::map<std::string, Expected> expected;
  cudaEvent_t ref = mark(s1);
  check_cuda(cudaStreamSynchronize(s1), "cudaStreamSynchronize");
  {
    auto step = open("step", "step");
    {
      // Four kernels of 200 us, one stream.
      auto fb = open("forward_backward", "forward_backward");
      cudaEvent_t a = mark(s1);
      for (int i = 0; i < 4; ++i) check_cuda(lens_check_spin(s1, 200'000), "spin");
      cudaEvent_t b = mark(s1);
      expected["forward_backward"] = {4, {{a, b}}};
    }
    {
      // Two streams at once: 300 us on one, 200 us on the other (the union counts).
      auto ar = open("communication", "all_reduce_overlapped");
      cudaEvent_t a0 = mark(s1);
      cudaEvent_t b0 = mark(s2);
      check_cuda(lens_check_spin(s1, 300'000), "spin");
      check_cuda(lens_check_spin(s2, 200'000), "spin");
      cudaEvent_t a1 = mark(s1);
      cudaEvent_t b1 = mark(s2);
      expected["all_reduce_overlapped"] = {2, {{a0, a1}, {b0, b1}}};
    }
    {
      // A helper thread with no span of its own launches (as autograd's threads do): the
      // process's innermost GPU-timed span, this one, gets its kernels.
      auto opt = open("optimizer", "optimizer");
      cudaEvent_t a, b;
      std::thread helper([&] {
        a = mark(s3);
        for (int i = 0; i < 2; ++i) check_cuda(lens_check_spin(s3, 100'000), "spin");
        b = mark(s3);
      });
      helper.join();
      expected["optimizer"] = {2, {{a, b}}};
    }
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  // The step: everything above.
  Expected all{0, {}};
  for (const auto& [name, e] : expected) {
    all.kernels += e.kernels;
    all.intervals.insert(all.intervals.end(), e.intervals.begin(), e.intervals.end());
  }
  expected["step"] = all;

  // Launch cost with GPU time on, inside a GPU-timed span (CUPTI's records and lens' callback).
  double timed_launch = 0;
  {
    auto launches = open("step", "launch_cost");
    launch_us(s1, 2000);
    timed_launch = launch_us(s1, 20000);
  }
  check_cuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  if (!handle.force_flush(std::chrono::seconds(30)))
    std::fprintf(stderr, "gpu_check: flush timed out\n");

  int failed = 0;
  std::printf("%-24s %8s %8s %12s %12s %8s\n", "span", "kernels", "expect", "gpu.busy us",
              "events us", "diff");
  for (const auto& span : memory->spans()) {
    auto it = expected.find(span.name);
    if (it == expected.end()) continue;
    std::vector<std::pair<double, double>> iv;
    for (auto [a, b] : it->second.intervals) iv.push_back({us_since(ref, a), us_since(ref, b)});
    const double events = union_us(iv);
    const double busy = static_cast<double>(int_attr(span, "gpu.busy")) / 1000.0;
    const std::int64_t kernels = int_attr(span, "gpu.kernels");
    const double diff = busy - events;
    const bool ok = kernels == it->second.kernels && std::abs(diff) <= std::max(5.0, 0.05 * events);
    // gpu.start sits on the span's axis: no earlier than the span's start (the same clock).
    const std::int64_t gpu_start = int_attr(span, "gpu.start");
    const bool clock_ok = gpu_start >= span.start_time_unix_nano - 20'000;
    std::printf("%-24s %8lld %8lld %12.1f %12.1f %7.2f%% %s%s\n", span.name.c_str(),
                static_cast<long long>(kernels), static_cast<long long>(it->second.kernels), busy,
                events, events > 0 ? 100.0 * diff / events : 0.0, ok ? "ok" : "FAIL",
                clock_ok ? "" : " (gpu.start before the span's start)");
    failed += !(ok && clock_ok);
    expected.erase(it);
  }
  for (const auto& [name, e] : expected) {
    std::printf("%-24s missing\n", name.c_str());
    ++failed;
  }
  const auto stats = handle.stats();
  std::printf(
      "spans timed %llu, incomplete %llu, late records %llu, unattributed records %llu, "
      "launches dropped %llu, records dropped %llu\n",
      static_cast<unsigned long long>(stats.gpu_spans_timed),
      static_cast<unsigned long long>(stats.gpu_spans_incomplete),
      static_cast<unsigned long long>(stats.gpu_activities_late),
      static_cast<unsigned long long>(stats.gpu_activities_unattributed),
      static_cast<unsigned long long>(stats.gpu_launches_dropped),
      static_cast<unsigned long long>(stats.gpu_activities_dropped));
  std::printf("kernel launch: %.2f us without lens, %.2f us with GPU time on (+%.2f us)\n",
              base_launch, timed_launch, timed_launch - base_launch);
  std::printf("=== CUPTI in a long-running process\n");
  failed += gpu_check::cupti_risks(handle, *timing, *memory, s1, s2, s3);
  handle.shutdown();
  std::printf("%s\n", failed == 0 ? "gpu_check: all checks held" : "gpu_check: FAILED");
  return failed == 0 ? 0 : 1;
}
