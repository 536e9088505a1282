// The CUPTI source of GPU time (docs/gpu.md): libcupti is loaded with dlopen when a set-up turns
// GPU time on, so that lens links no CUDA library and one build serves CPU and GPU machines.
// Launches come from CUPTI's callback API (the launch and copy functions of the runtime and the
// driver, on the launching thread: the correlation id of the call), the work's times from its
// activity API (kernels, copies, memsets), on lens' clock through the timestamp callback.
#include <cstdlib>
#include <string>

#include "gpu/gpu_timing.hpp"

#if defined(NEMO_LENS_HAVE_CUPTI)
#include <cupti.h>
#include <dlfcn.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <type_traits>
#include <vector>

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

// The functions of libcupti and libcuda lens calls, found with dlsym.
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

constexpr std::size_t kBufferSize = 4u << 20;

// The runtime launch under way on this thread (its correlation id), so that the driver call it
// makes is known as the same launch.
thread_local std::uint32_t t_runtime_launch = 0;

class CuptiSource;
std::atomic<CuptiSource*> g_source{nullptr};  // the one running (CUPTI's buffer callbacks)

std::string cupti_error(const CuptiApi& api, CUptiResult r, const char* call) {
  const char* text = nullptr;
  if (api.result_string != nullptr) api.result_string(r, &text);
  return std::string(call) + " failed: " + (text != nullptr ? text : "error " + std::to_string(r));
}

// libcupti: one already loaded (by PyTorch, say), else by name on the library path, else from
// the CUDA toolkit.
void* open_cupti(std::string& tried) {
  static const char* const kNames[] = {"libcupti.so.13", "libcupti.so.12", "libcupti.so"};
  for (const char* name : kNames) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD)) return h;
  }
  for (const char* name : kNames) {
    if (void* h = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return h;
  }
  std::vector<std::string> dirs;
  if (const char* home = std::getenv("CUDA_HOME")) dirs.push_back(std::string(home) + "/lib64/");
  if (const char* path = std::getenv("CUDA_PATH")) dirs.push_back(std::string(path) + "/lib64/");
  dirs.push_back("/usr/local/cuda/lib64/");
  dirs.push_back("/usr/local/cuda/extras/CUPTI/lib64/");
  for (const std::string& dir : dirs) {
    for (const char* name : kNames) {
      if (void* h = dlopen((dir + name).c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    }
  }
  tried =
      "libcupti.so.13/.12 not found on the library path, in $CUDA_HOME/lib64 or "
      "/usr/local/cuda/lib64";
  return nullptr;
}

// Why this process has no GPU to time, or "": libcuda loads, cuInit works and a device exists.
std::string no_gpu_reason() {
  void* cuda = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (cuda == nullptr) return "no CUDA driver (libcuda.so.1 not found)";
  using Init = int (*)(unsigned);
  using Count = int (*)(int*);
  auto init = reinterpret_cast<Init>(dlsym(cuda, "cuInit"));
  auto count = reinterpret_cast<Count>(dlsym(cuda, "cuDeviceGetCount"));
  if (init == nullptr || count == nullptr) return "libcuda.so.1 lacks cuInit";
  if (int r = init(0); r != 0) return "cuInit failed (CUDA error " + std::to_string(r) + ")";
  int n = 0;
  if (int r = count(&n); r != 0) {
    return "cuDeviceGetCount failed (CUDA error " + std::to_string(r) + ")";
  }
  if (n == 0) return "no GPU (cuDeviceGetCount: 0)";
  return "";
}

std::uint64_t CUPTIAPI lens_timestamp() { return static_cast<std::uint64_t>(now_unix_nano()); }

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

  void stop() noexcept override {
    if (!running_.exchange(false)) return;
    for (CUpti_ActivityKind k : kKinds) api_.activity_disable(k);
    api_.flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    api_.unsubscribe(subscriber_);
    g_source.store(nullptr, std::memory_order_release);
  }

  static void CUPTIAPI on_callback(void* self, CUpti_CallbackDomain domain, CUpti_CallbackId,
                                   const void* data) {
    auto* source = static_cast<CuptiSource*>(self);
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
      if (cb->callbackSite == CUPTI_API_ENTER) {
        t_runtime_launch = cb->correlationId;
        source->timing_->on_launch(cb->correlationId);
      } else {
        t_runtime_launch = 0;
      }
      return;
    }
    if (cb->callbackSite != CUPTI_API_ENTER) return;
    // A driver call inside a runtime launch is the same launch: its id joins the runtime's.
    if (t_runtime_launch != 0) {
      source->timing_->on_alias(cb->correlationId, t_runtime_launch);
    } else {
      source->timing_->on_launch(cb->correlationId);
    }
  }

  static void CUPTIAPI on_buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
    *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferSize));
    *size = *buffer != nullptr ? kBufferSize : 0;
    *max_records = 0;
  }

  static void CUPTIAPI on_buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t,
                                           size_t valid) {
    CuptiSource* source = g_source.load(std::memory_order_acquire);
    if (source != nullptr && buffer != nullptr) source->deliver(buffer, valid);
    std::free(buffer);
  }

 private:
  static constexpr CUpti_ActivityKind kKinds[] = {CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
                                                  CUPTI_ACTIVITY_KIND_MEMCPY,
                                                  CUPTI_ACTIVITY_KIND_MEMSET};

  std::string start_or_why(GpuTiming& timing) {
    if (std::getenv("NSYS_PROFILING_SESSION_ID") != nullptr ||
        std::getenv("CUDA_INJECTION64_PATH") != nullptr) {
      return "another CUDA tool is attached (Nsight Systems, or CUDA_INJECTION64_PATH): lens "
             "leaves CUPTI to it";
    }
    if (std::string why = no_gpu_reason(); !why.empty()) return why;
    std::string tried;
    void* lib = open_cupti(tried);
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
    } catch (const std::string& why) {
      return why;
    }
    timing_ = &timing;
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
    for (CUpti_CallbackId id : kRuntimeLaunches) {
      if (CUptiResult r = api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_RUNTIME_API, id);
          r != CUPTI_SUCCESS) {
        return fail(r, "cuptiEnableCallback");
      }
    }
    for (CUpti_CallbackId id : kDriverLaunches) {
      if (CUptiResult r = api_.enable_callback(1, subscriber_, CUPTI_CB_DOMAIN_DRIVER_API, id);
          r != CUPTI_SUCCESS) {
        return fail(r, "cuptiEnableCallback");
      }
    }
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
        switch (record->kind) {
          case CUPTI_ACTIVITY_KIND_KERNEL:
          case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
            a = {k->correlationId,
                 GpuActivityKind::kKernel,
                 k->deviceId,
                 k->streamId,
                 static_cast<std::int64_t>(k->start),
                 static_cast<std::int64_t>(k->end)};
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
            a = {m->correlationId,
                 GpuActivityKind::kMemcpy,
                 m->deviceId,
                 m->streamId,
                 static_cast<std::int64_t>(m->start),
                 static_cast<std::int64_t>(m->end)};
            break;
          }
          case CUPTI_ACTIVITY_KIND_MEMSET: {
            const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(record);
            a = {m->correlationId,
                 GpuActivityKind::kMemset,
                 m->deviceId,
                 m->streamId,
                 static_cast<std::int64_t>(m->start),
                 static_cast<std::int64_t>(m->end)};
            break;
          }
          default:
            continue;
        }
        out.push_back(a);
      }
    } catch (...) {
      // Out of memory: what was read goes on.
    }
    timing_->on_activities(out);
  }

  CuptiApi api_;
  CUpti_SubscriberHandle subscriber_ = nullptr;
  GpuTiming* timing_ = nullptr;
  std::atomic<bool> running_{false};
  std::mutex deliver_mu_;
  std::vector<GpuActivity> scratch_;
};

}  // namespace

std::unique_ptr<GpuSource> make_cupti_source() { return std::make_unique<CuptiSource>(); }

#endif

}  // namespace nemo::lens::detail
