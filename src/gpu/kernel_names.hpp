// Kernel names for kernel spans (<PREFIX>_GPU_KERNEL_SPANS, docs/gpu.md): CUPTI gives a kernel's
// mangled name; a span is named by its qualified function name, without its template arguments,
// parameters or return type. Internal.
#pragma once

#include <string>
#include <string_view>

namespace nemo::lens::detail {

/// `mangled` (an Itanium C++ ABI name, or a plain C name) demangled and shortened:
/// "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_...EEEviT0_T1_" gives
/// "at::native::vectorized_elementwise_kernel"; "(anonymous namespace)" becomes "(anon)"; at most
/// 160 characters. A name that does not demangle is kept as it is (shortened the same way).
std::string short_kernel_name(std::string_view mangled);

}  // namespace nemo::lens::detail
