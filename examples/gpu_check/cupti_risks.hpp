// scripts/gpu-check's second part: the ways CUPTI goes wrong in a long-running process
// (docs/gpu.md, "CUPTI in a long-running process"), on a real GPU. Included by gpu_check.cpp only.
//
//  1. Delivery under sustained load with no synchronisation: two threads launch 100 us kernels
//     in step spans for GPU_CHECK_LOAD_S seconds (default 60); every span must leave complete, and
//     the time from a span's end to its export (its settle latency) is printed (p50, p99, max).
//  2. A launch into a stream being captured, a host copy and a failing launch, each in a span of
//     its own: none may hold its span (incomplete), the copy has GPU time and no kernel.
//  3. Graphs: the captured graph replayed (3 kernels), and a 1,000-kernel graph replayed 200 times
//     while another thread keeps the GPU busy: gpu.kernels exact in every replay.
//  4. Kernel spans (<PREFIX>_GPU_KERNEL_SPANS=communication): a span of 3 kernels has 3 children
//     named "(anon)::spin", each within the span's gpu.start and gpu.end.
//  5. Which libcupti the process loaded (/proc/self/maps).
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"

extern "C" cudaError_t lens_check_spin(cudaStream_t stream, unsigned long long ns);
extern "C" cudaError_t lens_check_empty(cudaStream_t stream);
extern "C" cudaError_t lens_check_invalid(cudaStream_t stream);

namespace gpu_check {

namespace lens = nemo::lens;

inline std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The in-memory exporter, which also notes when each span named "load" arrived after its end
// (its settle latency) and keeps no copy of those.
class TimingExporter : public lens::SpanExporter {
 public:
  explicit TimingExporter(std::shared_ptr<lens::InMemorySpanExporter> inner)
      : inner_(std::move(inner)) {}
  lens::ExportResult export_spans(
      std::span<const lens::SpanData* const> spans, const lens::Resource& resource,
      std::chrono::steady_clock::time_point deadline) noexcept override {
    std::vector<const lens::SpanData*> kept;
    const std::int64_t now = unix_now();
    {
      std::lock_guard lock(mu_);
      for (const lens::SpanData* s : spans) {
        if (s->name == "load") {
          latencies_ms_.push_back(static_cast<double>(now - s->end_time_unix_nano) / 1e6);
          const auto* k = s->attribute("gpu.kernels");
          if (k == nullptr || std::get<std::int64_t>(*k) != 10) ++load_short_;
        } else {
          kept.push_back(s);
        }
      }
    }
    return inner_->export_spans(kept, resource, deadline);
  }
  bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept override {
    return inner_->force_flush(deadline);
  }
  // p50, p99 and max settle latency (ms) of the load spans, and how many there were.
  std::vector<double> latencies() {
    std::lock_guard lock(mu_);
    return latencies_ms_;
  }
  std::size_t load_short() {
    std::lock_guard lock(mu_);
    return load_short_;
  }

 private:
  std::shared_ptr<lens::InMemorySpanExporter> inner_;
  std::mutex mu_;
  std::vector<double> latencies_ms_;
  std::size_t load_short_ = 0;
};

inline void must(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  std::fprintf(stderr, "gpu_check: %s: %s\n", what, cudaGetErrorString(e));
  std::exit(2);
}

inline lens::Span open_span(const char* group, const char* name) {
  lens::SpanStartOptions o;
  o.group = group;
  return lens::start_span(name, o);
}

inline std::int64_t attr(const lens::SpanData& s, const char* key) {
  const auto* v = s.attribute(key);
  return v != nullptr && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -1;
}

// A graph of `kernels` launches captured from `stream` (100 us spins, or empty kernels).
inline cudaGraphExec_t capture_graph(cudaStream_t stream, int kernels, bool spin) {
  cudaGraph_t graph;
  must(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "BeginCapture");
  for (int i = 0; i < kernels; ++i) {
    must(spin ? lens_check_spin(stream, 100'000) : lens_check_empty(stream), "captured launch");
  }
  must(cudaStreamEndCapture(stream, &graph), "EndCapture");
  cudaGraphExec_t exec;
  must(cudaGraphInstantiate(&exec, graph, 0), "GraphInstantiate");
  must(cudaGraphDestroy(graph), "GraphDestroy");
  return exec;
}

// Runs checks 1-5 through `handle` (GPU time of step and communication spans, kernel spans of
// communication); `memory` holds every span but the load ones. Returns the failed checks.
inline int cupti_risks(lens::TelemetryHandle& handle, TimingExporter& timing,
                       lens::InMemorySpanExporter& memory, cudaStream_t s1, cudaStream_t s2,
                       cudaStream_t s3) {
  int failed = 0;
  auto report = [&](bool ok, const std::string& what) {
    std::printf("%-64s %s\n", what.c_str(), ok ? "ok" : "FAIL");
    failed += !ok;
  };
  const auto before = handle.stats();

  // 2. Launches that bring no record, and a copy.
  cudaGraphExec_t captured;
  {
    auto span = open_span("step", "capturing");
    captured = capture_graph(s2, 3, true);  // the launches go into the graph, not to the GPU
  }
  void* device = nullptr;
  void* host = nullptr;
  const std::size_t bytes = 64u << 20;
  must(cudaMalloc(&device, bytes), "cudaMalloc");
  must(cudaMallocHost(&host, bytes), "cudaMallocHost");
  {
    auto span = open_span("step", "host_copy");
    must(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, s1), "cudaMemcpyAsync");
  }
  {
    auto span = open_span("step", "failed_launch");
    const cudaError_t e = lens_check_invalid(s1);
    std::printf("an invalid launch returned: %s\n", cudaGetErrorString(e));
  }

  // 3. The captured graph replayed, then a 1,000-kernel graph replayed 200 times under load.
  {
    auto span = open_span("step", "graph_3");
    must(cudaGraphLaunch(captured, s1), "cudaGraphLaunch");
  }
  cudaGraphExec_t big = capture_graph(s2, 1000, false);
  std::atomic<bool> busy{true};
  std::thread load([&] {
    while (busy.load()) must(lens_check_spin(s3, 100'000), "spin");
  });
  for (int i = 0; i < 200; ++i) {
    auto span = open_span("step", "graph_1000");
    must(cudaGraphLaunch(big, s1), "cudaGraphLaunch");
  }
  busy = false;
  load.join();

  // 4. Kernel spans.
  {
    auto span = open_span("communication", "kernel_spans");
    for (int i = 0; i < 3; ++i) must(lens_check_spin(s1, 50'000), "spin");
  }
  must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");

  // 1. Sustained load, no synchronisation, two threads.
  const char* seconds_text = std::getenv("GPU_CHECK_LOAD_S");
  const int seconds = seconds_text != nullptr ? std::atoi(seconds_text) : 60;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  std::vector<std::thread> launchers;
  for (cudaStream_t s : {s1, s2}) {
    launchers.emplace_back([&, s] {
      while (std::chrono::steady_clock::now() < until) {
        auto span = open_span("step", "load");
        for (int i = 0; i < 10; ++i) must(lens_check_spin(s, 100'000), "spin");
      }
    });
  }
  for (auto& t : launchers) t.join();
  must(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  handle.force_flush(std::chrono::seconds(60));
  const auto after = handle.stats();

  std::vector<double> lat = timing.latencies();
  std::sort(lat.begin(), lat.end());
  auto at = [&](double q) {
    return lat.empty() ? 0.0 : lat[static_cast<std::size_t>(q * (lat.size() - 1))];
  };
  std::printf(
      "sustained load: %zu spans in %d s, settle latency p50 %.1f ms, p99 %.1f ms, max %.1f ms\n",
      lat.size(), seconds, at(0.5), at(0.99), lat.empty() ? 0.0 : lat.back());
  report(!lat.empty() && timing.load_short() == 0, "load spans: every one with its 10 kernels");
  report(after.gpu_spans_incomplete == before.gpu_spans_incomplete,
         "no span left incomplete (" +
             std::to_string(after.gpu_spans_incomplete - before.gpu_spans_incomplete) + ")");
  std::printf("records: dropped %llu, invalid %llu, late %llu, unattributed %llu\n",
              static_cast<unsigned long long>(after.gpu_activities_dropped),
              static_cast<unsigned long long>(after.gpu_activities_invalid),
              static_cast<unsigned long long>(after.gpu_activities_late),
              static_cast<unsigned long long>(after.gpu_activities_unattributed));

  int graph_1000 = 0, graph_1000_exact = 0, kernel_children = 0, children_inside = 0;
  const lens::SpanData* kernel_parent = nullptr;
  const auto spans = memory.spans();
  for (const auto& s : spans) {
    if (s.name == "kernel_spans") kernel_parent = &s;
  }
  for (const auto& s : spans) {
    if (s.name == "capturing")
      report(attr(s, "gpu.kernels") == 0, "capturing: no kernel, not held");
    if (s.name == "host_copy") {
      report(attr(s, "gpu.kernels") == 0 && attr(s, "gpu.busy") > 0,
             "host copy: GPU time, no kernel");
    }
    if (s.name == "failed_launch") report(attr(s, "gpu.kernels") == 0, "failed launch: not held");
    if (s.name == "graph_3")
      report(attr(s, "gpu.kernels") == 3, "captured graph replayed: 3 kernels");
    if (s.name == "graph_1000") {
      ++graph_1000;
      graph_1000_exact += attr(s, "gpu.kernels") == 1000;
    }
    if (kernel_parent != nullptr && s.parent_span_id == kernel_parent->context.span_id) {
      ++kernel_children;
      children_inside += s.name == "(anon)::spin" &&
                         s.start_time_unix_nano >= attr(*kernel_parent, "gpu.start") &&
                         s.end_time_unix_nano <= attr(*kernel_parent, "gpu.end");
    }
  }
  report(graph_1000 == 200 && graph_1000_exact == 200,
         "1,000-kernel graph: " + std::to_string(graph_1000_exact) + " of " +
             std::to_string(graph_1000) + " replays with gpu.kernels 1000");
  report(kernel_children == 3 && children_inside == 3,
         "kernel spans: " + std::to_string(children_inside) + " of " +
             std::to_string(kernel_children) + " named (anon)::spin within the span's GPU time");

  // 5. Which libcupti.
  std::ifstream maps("/proc/self/maps");
  std::string line, seen;
  while (std::getline(maps, line)) {
    const auto at_lib = line.find("libcupti");
    if (at_lib != std::string::npos &&
        seen.find(line.substr(line.find('/'))) == std::string::npos) {
      seen += line.substr(line.find('/')) + "\n";
    }
  }
  std::printf("libcupti loaded:\n%s", seen.empty() ? "  none\n" : seen.c_str());
  cudaFree(device);
  cudaFreeHost(host);
  cudaGraphExecDestroy(captured);
  cudaGraphExecDestroy(big);
  return failed;
}

}  // namespace gpu_check
