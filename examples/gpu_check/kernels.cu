// The kernels of scripts/gpu-check: one that runs for a given time (on the GPU's global timer) and
// an empty one, behind a C interface so that the lens-instrumented program is plain C++.
#include <cuda_runtime.h>

namespace {

__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void spin(unsigned long long ns) {
  const unsigned long long start = global_ns();
  while (global_ns() - start < ns) {
  }
}

__global__ void empty() {}

}  // namespace

extern "C" cudaError_t lens_check_spin(cudaStream_t stream, unsigned long long ns) {
  spin<<<1, 1, 0, stream>>>(ns);
  return cudaGetLastError();
}

extern "C" cudaError_t lens_check_empty(cudaStream_t stream) {
  empty<<<1, 1, 0, stream>>>();
  return cudaGetLastError();
}

// A launch that fails (a grid of zero blocks): CUDA returns an error and runs nothing.
extern "C" cudaError_t lens_check_invalid(cudaStream_t stream) {
  spin<<<0, 1, 0, stream>>>(0);
  return cudaGetLastError();
}
