// The CUPTI source of GPU time (docs/gpu.md): libcupti is loaded with dlopen when a set-up turns
// GPU time on, so that lens links no CUDA library and one build serves CPU and GPU machines.
// Launches come from CUPTI's callback API (the launch and copy functions of the runtime and the
// driver, on the launching thread: the correlation id of the call), the work's times from its
// activity API (kernels, copies, memsets), on lens' clock through the timestamp callback.
#include <cstdlib>
#include <string>

#include "gpu/gpu_timing.hpp"

#if defined(NEMO_LENS_HAVE_CUPTI)
// cupti.h brings cuda.h and the launch functions' parameter structures (generated_*_meta.h).
#include <cupti.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <mutex>
#include <span>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "gpu/kernel_names.hpp"
#include "tracing/clock.hpp"
#endif

namespace nemo::lens::detail {

#if !defined(NEMO_LENS_HAVE_CUPTI)

std::unique_ptr<GpuSource> make_cupti_source() {
  class Unavailable : public GpuSource {
   public:
    std::string start(GpuTiming&) noexcept override {
      return "this lens was built without CUPTI's headers (CUDA toolkit not found at build time)";
    }
    void flush() noexcept override {}
    void stop() noexcept override {}
  };
  return std::make_unique<Unavailable>();
}

#else

namespace {

// The functions of libcupti lens calls, found with dlsym.
struct CuptiApi {
  CUptiResult (*subscribe)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*) = nullptr;
  CUptiResult (*unsubscribe)(CUpti_SubscriberHandle) = nullptr;
  CUptiResult (*enable_callback)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain,
                                 CUpti_CallbackId) = nullptr;
  CUptiResult (*activity_enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*activity_disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
  CUptiResult (*register_timestamp)(CUpti_TimestampCallbackFunc) = nullptr;
  CUptiResult (*result_string)(CUptiResult, const char**) = nullptr;
  CUptiResult (*dropped_records)(CUcontext, uint32_t, size_t*) = nullptr;
};

// The functions of the driver lens calls, none of which initialises it (lens never calls
// cuInit: that is the program's, with its CUDA_VISIBLE_DEVICES, and before or after its forks).
struct CudaApi {
  CUresult (*driver_version)(int*) = nullptr;
  CUresult (*stream_is_capturing)(CUstream, CUstreamCaptureStatus*) = nullptr;
  CUresult (*graph_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
  CUresult (*node_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
  CUresult (*child_graph)(CUgraphNode, CUgraph*) = nullptr;
};

// The launch and copy functions whose calls are launches (their correlation ids).
constexpr CUpti_CallbackId kRuntimeLaunches[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3D_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpy3DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeer_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyPeerAsync_v4000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyToSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbol_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyFromSymbolAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset_ptds_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset2DAsync_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaMemset3DAsync_v3020,
};
constexpr CUpti_CallbackId kDriverLaunches[] = {
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel,
    CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch,
    CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpy,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoH_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoD_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyHtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoHAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemcpyPeerAsync,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32_v2,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD16Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD8Async_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async_ptsz,
};
// Calls after which work is complete: its records can be flushed at once.
constexpr CUpti_CallbackId kRuntimeSyncs[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaDeviceSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_v3020,
    CUPTI_RUNTIME_TRACE_CBID_cudaStreamSynchronize_ptsz_v7000,
    CUPTI_RUNTIME_TRACE_CBID_cudaEventSynchronize_v3020,
};
constexpr CUpti_CallbackId kDriverSyncs[] = {
    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize,    CUPTI_DRIVER_TRACE_CBID_cuCtxSynchronize_v2,
    CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize, CUPTI_DRIVER_TRACE_CBID_cuStreamSynchronize_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuEventSynchronize,
};
// A graph's instantiation (its nodes are counted then) and destruction.
constexpr CUpti_CallbackId kRuntimeGraphs[] = {
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v10000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiate_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithFlags_v11040,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphInstantiateWithParams_ptsz_v12000,
    CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000,
};
constexpr CUpti_CallbackId kDriverGraphs[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz,
    CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy,
};

template <std::size_t N>
bool listed(const CUpti_CallbackId (&ids)[N], CUpti_CallbackId id) noexcept {
  return std::find(std::begin(ids), std::end(ids), id) != std::end(ids);
}

// Buffers of 256 KiB, returned after 512 records at most (about 110 KiB of kernel records): a
// buffer comes back as soon as its records are complete, and with a busy GPU that is after 512
// kernels, not the ~19,000 a 4 MiB buffer holds (cuptiActivityFlushAll(0) returns no buffer that
// holds an incomplete record).
constexpr std::size_t kBufferSize = 256u << 10;
constexpr std::size_t kBufferRecords = 512;

// The launch under way on this thread: its correlation id, so that the driver call a runtime
// launch makes is known as the same launch (0: none), whether it is skipped (it went into a
// stream being captured: it will bring no record), and whether it was reported.
struct LaunchState {
  std::uint32_t runtime = 0;
  std::uint32_t driver = 0;
  bool skipped = false;
};
thread_local LaunchState t_launch;

class CuptiSource;
std::atomic<CuptiSource*> g_source{nullptr};  // the one running (CUPTI's buffer callbacks)

std::string cupti_error(const CuptiApi& api, CUptiResult r, const char* call) {
  const char* text = nullptr;
  if (api.result_string != nullptr) api.result_string(r, &text);
  return std::string(call) + " failed: " + (text != nullptr ? text : "error " + std::to_string(r));
}

// The major CUDA version of the CUDA runtime already in the process (PyTorch's, say), else of
// the driver; 0 when neither is known.
int cuda_major(const CudaApi& cuda) {
  for (int major : {13, 12}) {
    const std::string name = "libcudart.so." + std::to_string(major);
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) {
      dlclose(h);
      return major;
    }
  }
  int version = 0;  // 13000 for CUDA 13.0
  if (cuda.driver_version != nullptr && cuda.driver_version(&version) == CUDA_SUCCESS) {
    return version / 1000;
  }
  return 0;
}

// libcupti: one already in the process (PyTorch's, say: two CUPTIs in one process break it),
// else the one of the CUDA version in use (`major`), by name on the library path, then in the
// CUDA toolkit.
void* open_cupti(int major, std::string& tried) {
  std::vector<std::string> names = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const std::string& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return h;
  }
  if (major == 12) std::swap(names[0], names[1]);
  for (const std::string& name : names) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
  }
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME")) dirs.push_back(std::string(home) + "/lib64/");
  if (const char* path = std::getenv("CUDA_PATH")) dirs.push_back(std::string(path) + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  dirs.push_back("/usr/local/cuda/extras/CUPTI/lib64/");
  for (const std::string& dir : dirs) {
    for (const std::string& name : names) {
      if (void* h = dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  tried =
      "libcupti.so.13/.12 not found on the library path, in $CUDA_HOME/lib64 or "
      "/usr/local/cuda/lib64";
  return nullptr;
}

// The driver's functions lens uses, or why there is no driver. Loading libcuda does not
// initialise it.
std::string open_cuda(CudaApi& cuda) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return "no CUDA driver (libcuda.so.1 not found)";
  auto sym = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)> >(dlsym(lib, name));
  };
  sym(cuda.driver_version, "cuDriverGetVersion");
  sym(cuda.stream_is_capturing, "cuStreamIsCapturing");
  sym(cuda.graph_nodes, "cuGraphGetNodes");
  sym(cuda.node_type, "cuGraphNodeGetType");
  sym(cuda.child_graph, "cuGraphChildGraphNodeGetGraph");
  if (cuda.driver_version == nullptr) return "libcuda.so.1 lacks cuDriverGetVersion";
  return "";
}

// The GPU activity of a CUPTI record of the kinds lens enables; false for another kind. Times
// are CUPTI's as they are (on lens' clock: the timestamp callback), a zero or reversed interval
// included: the attribution counts those invalid. A kernel's mangled name goes to `kernel_name`
// (valid while the buffer is); the other kinds are named here.
bool parse_activity(const CUpti_Activity* record, GpuActivity& a,
                    const char*& kernel_name) noexcept {
  kernel_name = nullptr;
  auto fill = [&](const auto* r, GpuActivityKind kind, const char* name) {
    a = {r->correlationId,
         kind,
         r->deviceId,
         r->streamId,
         static_cast<std::int64_t>(r->start),
         static_cast<std::int64_t>(r->end),
         name};
    return true;
  };
  switch (record->kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
      kernel_name = k->name;
      return fill(k, GpuActivityKind::kKernel, nullptr);
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return fill(reinterpret_cast<const CUpti_ActivityMemcpy6*>(record), GpuActivityKind::kMemcpy,
                  "memcpy");
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      return fill(reinterpret_cast<const CUpti_ActivityMemcpyPtoP4*>(record),
                  GpuActivityKind::kMemcpy, "memcpy peer");
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return fill(reinterpret_cast<const CUpti_ActivityMemset4*>(record), GpuActivityKind::kMemset,
                  "memset");
    default:
      return false;
  }
}

std::uint64_t CUPTIAPI lens_timestamp() { return static_cast<std::uint64_t>(now_unix_nano()); }

// The stream a launch goes into, for the launch functions whose parameters name one; `ptsz`
// variants' null stream is the per-thread default stream. False for the others.
bool launch_stream(CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* params,
                   CUstream& stream) noexcept {
  if (params == nullptr) return false;
  bool per_thread = false;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    switch (id) {
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_ptsz_v7000:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000:
        stream = static_cast<const cudaLaunchKernel_v7000_params*>(params)->stream;
        break;
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_ptsz_v9000:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchCooperativeKernel_v9000:
        stream = static_cast<const cudaLaunchCooperativeKernel_v9000_params*>(params)->stream;
        break;
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_ptsz_v11060:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060: {
        const auto* config = static_cast<const cudaLaunchKernelExC_v11060_params*>(params)->config;
        if (config == nullptr) return false;
        stream = config->stream;
        break;
      }
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000:
        stream = static_cast<const cudaGraphLaunch_v10000_params*>(params)->stream;
        break;
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_ptsz_v7000:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemcpyAsync_v3020:
        stream = static_cast<const cudaMemcpyAsync_v3020_params*>(params)->stream;
        break;
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_ptsz_v7000:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_RUNTIME_TRACE_CBID_cudaMemsetAsync_v3020:
        stream = static_cast<const cudaMemsetAsync_v3020_params*>(params)->stream;
        break;
      default:
        return false;
    }
  } else {
    switch (id) {
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel:
        stream = static_cast<const cuLaunchKernel_params*>(params)->hStream;
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel:
        stream = static_cast<const cuLaunchCooperativeKernel_params*>(params)->hStream;
        break;
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx: {
        const auto* config = static_cast<const cuLaunchKernelEx_params*>(params)->config;
        if (config == nullptr) return false;
        stream = config->hStream;
        break;
      }
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz:
        per_thread = true;
        [[fallthrough]];
      case CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch:
        stream = static_cast<const cuGraphLaunch_params*>(params)->hStream;
        break;
      default:
        return false;
    }
  }
  if (stream == nullptr && per_thread) stream = CU_STREAM_PER_THREAD;
  return true;
}

// The graph exec a graph launch replays, or null for another launch.
void* launched_graph(CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* params) {
  if (params == nullptr) return nullptr;
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    if (id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000 ||
        id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_ptsz_v10000) {
      return static_cast<const cudaGraphLaunch_v10000_params*>(params)->graphExec;
    }
  } else if (id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch ||
             id == CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz) {
    return static_cast<const cuGraphLaunch_params*>(params)->hGraph;
  }
  return nullptr;
}

// Every instantiation's parameters begin with the exec made and the graph it is made from.
struct InstantiateParams {
  void** exec;
  void* graph;
};

class CuptiSource : public GpuSource {
 public:
  std::string start(GpuTiming& timing) noexcept override {
    try {
      return start_or_why(timing);
    } catch (...) {
      return "out of memory";
    }
  }

  void flush() noexcept override {
    if (running_.load(std::memory_order_acquire)) api_.flush_all(0);
  }

  void incomplete() noexcept override {
    if (running_.load(std::memory_order_acquire)) check_delivery();
  }

  void stop() noexcept override {
    if (!running_.exchange(false)) return;
    // Forced first, while the kinds are still on: what is in flight is handed back as it is.
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    for (CUpti_ActivityKind k : kKinds) api_.activity_disable(k);
    api_.unsubscribe(subscriber_);
    g_source.store(nullptr, std::memory_order_release);
  }

  static void CUPTIAPI on_callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId id,
                                   const void* data) {
    auto* source = static_cast<CuptiSource*>(self);
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    const bool enter = cb->callbackSite == CUPTI_API_ENTER;
    // The activity records went to another client: launches would only hold their spans.
    if (source->said_lost_.load(std::memory_order_relaxed)) return;
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
      if (listed(kRuntimeLaunches, id)) {
        source->runtime_launch(id, cb, enter);
      } else if (listed(kRuntimeSyncs, id)) {
        if (!enter) source->timing_->on_synchronized();
      } else if (listed(kRuntimeGraphs, id)) {
        source->graph_call(id == CUPTI_RUNTIME_TRACE_CBID_cudaGraphExecDestroy_v10000, cb);
      }
      return;
    }
    if (domain != CUPTI_CB_DOMAIN_DRIVER_API) return;
    if (listed(kDriverLaunches, id)) {
      source->driver_launch(id, cb, enter);
    } else if (listed(kDriverSyncs, id)) {
      if (!enter) source->timing_->on_synchronized();
    } else if (listed(kDriverGraphs, id)) {
      source->graph_call(id == CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy, cb);
    } else if (id == CUPTI_DRIVER_TRACE_CBID_cuInit && !enter) {
      source->init_returned(cb);
    }
  }

  static void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
    *size = *buffer != nullptr ? kBufferSize : 0;
    *max_records = kBufferRecords;
    if (CuptiSource* source = g_source.load(std::memory_order_acquire)) source->heard_from_cupti();
  }

  static void CUPTIAPI on_buffer_completed(CUcontext context, uint32_t stream, uint8_t* buffer,
                                           size_t, size_t valid) {
    CuptiSource* source = g_source.load(std::memory_order_acquire);
    if (source != nullptr) {
      source->heard_from_cupti();
      if (buffer != nullptr) source->deliver(buffer, valid);
      std::size_t dropped = 0;
      if (source->api_.dropped_records != nullptr &&
          source->api_.dropped_records(context, stream, &dropped) == CUPTI_SUCCESS) {
        source->timing_->on_source_dropped(dropped);
      }
    }
    std::free(buffer);
  }

 private:
  static constexpr CUpti_ActivityKind kKinds[] = {
      CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, CUPTI_ACTIVITY_KIND_MEMCPY,
      CUPTI_ACTIVITY_KIND_MEMCPY2,  // peer-to-peer copies
      CUPTI_ACTIVITY_KIND_MEMSET};

  // Whether `stream` is being captured into a graph: a launch into it runs nothing now.
  bool capturing(CUstream stream) const noexcept {
    if (cuda_.stream_is_capturing == nullptr) return false;
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    return cuda_.stream_is_capturing(stream, &status) == CUDA_SUCCESS &&
           status != CU_STREAM_CAPTURE_STATUS_NONE;
  }

  // The records a launch brings: a graph's kernel, copy and memset nodes, else 1.
  std::uint32_t records_of(CUpti_CallbackDomain domain, CUpti_CallbackId id, const void* params) {
    void* exec = launched_graph(domain, id, params);
    if (exec == nullptr) return 1;
    std::lock_guard lock(graphs_mu_);
    for (const auto& [e, n] : graphs_) {
      if (e == exec) return n;
    }
    return 1;  // instantiated before set-up: settled at its first record
  }

  // A launch entered (`enter`) or returned, through the runtime. Its driver calls are the same
  // launch. One that goes into a capturing stream is not reported; one that failed is cancelled.
  void runtime_launch(CUpti_CallbackId id, const CUpti_CallbackData* cb, bool enter) noexcept {
    LaunchState& t = t_launch;
    if (enter) {
      note_launch();
      t.runtime = cb->correlationId;
      CUstream stream = nullptr;
      t.skipped = launch_stream(CUPTI_CB_DOMAIN_RUNTIME_API, id, cb->functionParams, stream) &&
                  capturing(stream);
      if (!t.skipped) {
        std::uint32_t records = 1;
        try {
          records = records_of(CUPTI_CB_DOMAIN_RUNTIME_API, id, cb->functionParams);
        } catch (...) {
        }
        timing_->on_launch(cb->correlationId, records);
      }
      return;
    }
    const auto* result = static_cast<const cudaError_t*>(cb->functionReturnValue);
    if (!t.skipped && result != nullptr && *result != cudaSuccess) {
      timing_->on_cancel(cb->correlationId);
    }
    t = {};
  }

  // A driver launch entered or returned. Inside a runtime launch it is the same launch (an
  // alias of its id, unless the runtime launch was skipped); alone, a launch of its own.
  void driver_launch(CUpti_CallbackId id, const CUpti_CallbackData* cb, bool enter) noexcept {
    LaunchState& t = t_launch;
    if (t.runtime != 0) {
      // The same launch: an id of its own needs an alias (taken under the timing's lock); the
      // runtime's id needs nothing.
      if (enter && !t.skipped && cb->correlationId != t.runtime) {
        timing_->on_alias(cb->correlationId, t.runtime);
      }
      return;
    }
    if (enter) {
      note_launch();
      CUstream stream = nullptr;
      t.skipped = launch_stream(CUPTI_CB_DOMAIN_DRIVER_API, id, cb->functionParams, stream) &&
                  capturing(stream);
      t.driver = cb->correlationId;
      if (!t.skipped) {
        std::uint32_t records = 1;
        try {
          records = records_of(CUPTI_CB_DOMAIN_DRIVER_API, id, cb->functionParams);
        } catch (...) {
        }
        timing_->on_launch(cb->correlationId, records);
      }
      return;
    }
    const auto* result = static_cast<const CUresult*>(cb->functionReturnValue);
    if (!t.skipped && t.driver == cb->correlationId && result != nullptr &&
        *result != CUDA_SUCCESS) {
      timing_->on_cancel(cb->correlationId);
    }
    t = {};
  }

  // The kernel, copy and memset nodes of `graph`, child graphs' included; 0 when a node's count
  // varies (a conditional node) or the driver cannot say.
  std::uint32_t count_nodes(CUgraph graph, int depth = 0) {
    if (cuda_.graph_nodes == nullptr || cuda_.node_type == nullptr || depth > 16) return 0;
    std::size_t n = 0;
    if (cuda_.graph_nodes(graph, nullptr, &n) != CUDA_SUCCESS) return 0;
    std::vector<CUgraphNode> nodes(n);
    if (n > 0 && cuda_.graph_nodes(graph, nodes.data(), &n) != CUDA_SUCCESS) return 0;
    std::uint32_t count = 0;
    for (CUgraphNode node : nodes) {
      CUgraphNodeType type;
      if (cuda_.node_type(node, &type) != CUDA_SUCCESS) return 0;
      switch (type) {
        case CU_GRAPH_NODE_TYPE_KERNEL:
        case CU_GRAPH_NODE_TYPE_MEMCPY:
        case CU_GRAPH_NODE_TYPE_MEMSET:
          ++count;
          break;
        case CU_GRAPH_NODE_TYPE_GRAPH: {
          CUgraph child = nullptr;
          if (cuda_.child_graph == nullptr || cuda_.child_graph(node, &child) != CUDA_SUCCESS) {
            return 0;
          }
          const std::uint32_t c = count_nodes(child, depth + 1);
          if (c == 0) return 0;
          count += c;
          break;
        }
        case CU_GRAPH_NODE_TYPE_CONDITIONAL:
          return 0;
        default:
          break;  // host, empty, event, memory nodes: no record
      }
    }
    return count;
  }

  // A graph instantiated (its nodes counted, remembered by its exec) or destroyed (forgotten).
  void graph_call(bool destroy, const CUpti_CallbackData* cb) noexcept {
    const bool enter = cb->callbackSite == CUPTI_API_ENTER;
    try {
      if (destroy) {
        if (!enter) return;
        void* exec = cb->functionParams != nullptr
                         ? *static_cast<void* const*>(cb->functionParams)  // its first parameter
                         : nullptr;
        std::lock_guard lock(graphs_mu_);
        std::erase_if(graphs_, [&](const auto& g) { return g.first == exec; });
        return;
      }
      if (enter || cb->functionParams == nullptr) return;
      const auto* p = static_cast<const InstantiateParams*>(cb->functionParams);
      if (p->exec == nullptr || *p->exec == nullptr) return;  // it failed
      const std::uint32_t n = count_nodes(static_cast<CUgraph>(p->graph));
      std::lock_guard lock(graphs_mu_);
      for (auto& g : graphs_) {
        if (g.first == *p->exec) {
          g.second = n > 0 ? n : 1;
          return;
        }
      }
      graphs_.emplace_back(*p->exec, n > 0 ? n : 1);
    } catch (...) {
      // Out of memory: the graph's launches settle at their first record.
    }
  }

  // The program's cuInit returned: when it failed, the process has no GPU to time; said once.
  void init_returned(const CUpti_CallbackData* cb) noexcept {
    const auto* result = static_cast<const CUresult*>(cb->functionReturnValue);
    if (result == nullptr || *result == CUDA_SUCCESS) return;
    if (said_no_gpu_.exchange(true)) return;
    std::fprintf(stderr,
                 "lens: GPU time of spans: the program's cuInit failed (CUDA error %d): no GPU "
                 "in this process, spans carry no GPU time\n",
                 static_cast<int>(*result));
  }

  // A launch was reported: delivery is expected from now on (check_delivery()).
  void note_launch() noexcept {
    if (!launched_.load(std::memory_order_relaxed))
      launched_.store(true, std::memory_order_relaxed);
  }
  // CUPTI asked for a buffer or handed one back.
  void heard_from_cupti() noexcept {
    last_heard_ns_.store(now_unix_nano(), std::memory_order_relaxed);
    launched_.store(false, std::memory_order_relaxed);
  }
  // A span left without its records although it waited: when launches were made and CUPTI has
  // neither asked for a buffer nor handed one back for all that wait, another CUPTI client took
  // the activity API (torch.profiler re-registers the buffer callbacks and disables kernel
  // records when it stops). Said once; the spans leave without GPU time, counted incomplete.
  void check_delivery() noexcept {
    if (said_lost_.load(std::memory_order_relaxed) || !launched_.load(std::memory_order_relaxed)) {
      return;
    }
    const std::int64_t quiet_ns = std::chrono::nanoseconds(timing_->wait()).count();
    const std::int64_t silent_ns = now_unix_nano() - last_heard_ns_.load(std::memory_order_relaxed);
    if (silent_ns < quiet_ns || said_lost_.exchange(true)) return;
    std::fprintf(stderr,
                 "lens: GPU time of spans: CUPTI has delivered no activity record for %.1f s "
                 "although kernels were launched: another CUPTI client (torch.profiler, a "
                 "profiler library) has most likely taken CUPTI's activity records; from now on "
                 "spans leave without GPU time\n",
                 static_cast<double>(silent_ns) / 1e9);
  }

  std::string start_or_why(GpuTiming& timing) {
    if (std::getenv("NSYS_PROFILING_SESSION_ID") != nullptr ||
        std::getenv("CUDA_INJECTION64_PATH") != nullptr) {
      return "another CUDA tool is attached (Nsight Systems, or CUDA_INJECTION64_PATH): lens "
             "leaves CUPTI to it";
    }
    if (std::string why = open_cuda(cuda_); !why.empty()) return why;
    std::string tried;
    void* lib = open_cupti(cuda_major(cuda_), tried);
    if (lib == nullptr) return tried;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)> >(dlsym(lib, name));
      if (fn == nullptr) throw std::string("libcupti lacks ") + name;
    };
    try {
      sym(api_.subscribe, "cuptiSubscribe");
      sym(api_.unsubscribe, "cuptiUnsubscribe");
      sym(api_.enable_callback, "cuptiEnableCallback");
      sym(api_.activity_enable, "cuptiActivityEnable");
      sym(api_.activity_disable, "cuptiActivityDisable");
      sym(api_.register_callbacks, "cuptiActivityRegisterCallbacks");
      sym(api_.flush_all, "cuptiActivityFlushAll");
      sym(api_.next_record, "cuptiActivityGetNextRecord");
      sym(api_.register_timestamp, "cuptiActivityRegisterTimestampCallback");
      sym(api_.result_string, "cuptiGetResultString");
      sym(api_.dropped_records, "cuptiActivityGetNumDroppedRecords");
    } catch (const std::string& why) {
      return why;
    }
    timing_ = &timing;
    last_heard_ns_.store(now_unix_nano(), std::memory_order_relaxed);
    if (CUptiResult r = api_.subscribe(&subscriber_, &CuptiSource::on_callback, this);
        r != CUPTI_SUCCESS) {
      if (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) {
        return "another CUPTI client (torch.profiler, Nsight, a profiler library) holds CUPTI: "
               "lens leaves it alone";
      }
      return cupti_error(api_, r, "cuptiSubscribe");
    }
    auto fail = [&](CUptiResult r, const char* call) {
      for (CUpti_ActivityKind k : kKinds) api_.activity_disable(k);
      api_.unsubscribe(subscriber_);
      return cupti_error(api_, r, call);
    };
    // Activity first, then the callbacks: no launch is reported before its records can come.
    // The timestamp callback once: registering it again has corrupted records.
    if (CUptiResult r = api_.register_timestamp(&lens_timestamp); r != CUPTI_SUCCESS) {
      return fail(r, "cuptiActivityRegisterTimestampCallback");
    }
    g_source.store(this, std::memory_order_release);
    if (CUptiResult r = api_.register_callbacks(&CuptiSource::on_buffer_requested,
                                                &CuptiSource::on_buffer_completed);
        r != CUPTI_SUCCESS) {
      g_source.store(nullptr, std::memory_order_release);
      return fail(r, "cuptiActivityRegisterCallbacks");
    }
    for (CUpti_ActivityKind k : kKinds) {
      if (CUptiResult r = api_.activity_enable(k); r != CUPTI_SUCCESS) {
        g_source.store(nullptr, std::memory_order_release);
        return fail(r, "cuptiActivityEnable");
      }
    }
    auto enable = [&](CUpti_CallbackDomain domain, CUpti_CallbackId id) {
      return api_.enable_callback(1, subscriber_, domain, id);
    };
    for (const auto& [domain, ids] :
         {std::pair{CUPTI_CB_DOMAIN_RUNTIME_API,
                    std::span<const CUpti_CallbackId>(kRuntimeLaunches)},
          std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, std::span<const CUpti_CallbackId>(kRuntimeSyncs)},
          std::pair{CUPTI_CB_DOMAIN_RUNTIME_API, std::span<const CUpti_CallbackId>(kRuntimeGraphs)},
          std::pair{CUPTI_CB_DOMAIN_DRIVER_API, std::span<const CUpti_CallbackId>(kDriverLaunches)},
          std::pair{CUPTI_CB_DOMAIN_DRIVER_API, std::span<const CUpti_CallbackId>(kDriverSyncs)},
          std::pair{CUPTI_CB_DOMAIN_DRIVER_API,
                    std::span<const CUpti_CallbackId>(kDriverGraphs)}}) {
      for (CUpti_CallbackId id : ids) {
        if (CUptiResult r = enable(domain, id); r != CUPTI_SUCCESS) {
          g_source.store(nullptr, std::memory_order_release);
          return fail(r, "cuptiEnableCallback");
        }
      }
    }
    if (CUptiResult r = enable(CUPTI_CB_DOMAIN_DRIVER_API, CUPTI_DRIVER_TRACE_CBID_cuInit);
        r != CUPTI_SUCCESS) {
      g_source.store(nullptr, std::memory_order_release);
      return fail(r, "cuptiEnableCallback");
    }
    running_.store(true, std::memory_order_release);
    return "";
  }

  // The records of a completed buffer, to the timing.
  void deliver(uint8_t* buffer, size_t valid) noexcept {
    std::vector<GpuActivity>& out = scratch_;
    std::lock_guard lock(deliver_mu_);
    out.clear();
    CUpti_Activity* record = nullptr;
    try {
      while (api_.next_record(buffer, valid, &record) == CUPTI_SUCCESS) {
        GpuActivity a;
        const char* kernel_name = nullptr;
        if (!parse_activity(record, a, kernel_name)) continue;
        if (kernel_name != nullptr) a.name = intern_kernel_name(kernel_name);
        out.push_back(a);
      }
    } catch (...) {
      // Out of memory: what was read goes on.
    }
    timing_->on_activities(out);
  }

  // `mangled`'s short name (kernel_names.hpp), kept for the source's lifetime: a kernel is named
  // once, whatever the number of its launches. Requires deliver_mu_. May throw std::bad_alloc.
  const char* intern_kernel_name(const char* mangled) {
    auto [it, inserted] = kernel_names_.try_emplace(mangled);
    if (inserted) it->second = short_kernel_name(mangled);
    return it->second.c_str();
  }

  CuptiApi api_;
  CudaApi cuda_;
  std::unordered_map<std::string, std::string> kernel_names_;  // mangled -> short; deliver_mu_
  CUpti_SubscriberHandle subscriber_ = nullptr;
  GpuTiming* timing_ = nullptr;
  std::atomic<bool> running_{false};
  std::mutex deliver_mu_;
  std::vector<GpuActivity> scratch_;
  std::mutex graphs_mu_;
  std::vector<std::pair<void*, std::uint32_t> > graphs_;  // exec, its records per launch
  std::atomic<bool> launched_{false};  // a launch since CUPTI was last heard from
  std::atomic<std::int64_t> last_heard_ns_{0};
  std::atomic<bool> said_lost_{false};
  std::atomic<bool> said_no_gpu_{false};
};

}  // namespace

std::unique_ptr<GpuSource> make_cupti_source() { return std::make_unique<CuptiSource>(); }

#endif

}  // namespace nemo::lens::detail
