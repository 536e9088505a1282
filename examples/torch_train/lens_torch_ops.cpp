// lens_torch_ops: a torch C++ extension whose op is traced with lens, as a framework's fused
// kernels would be. gelu_residual(x, h) = x + gelu(h) is a torch::autograd::Function written in
// C++: its forward and its backward each open a LENS_SPAN (group "layer"), so they are children
// of the Python span current where autograd runs them:
//
//   import nemo_lens_cpp as lens, lens_torch_ops
//   with lens.managed_span("forward_backward", "microbatch"):
//       y = lens_torch_ops.gelu_residual(x, h)     # "gelu_residual.forward": child
//       y.sum().backward()                         # "gelu_residual.backward": child, on CPU
//
// Backward runs where torch's autograd engine runs it. For CPU tensors that is the thread that
// called backward(), so the backward span's parent is the span current there; for CUDA tensors it
// is the engine's device thread, which has no current span: the backward span is then a root of
// the process's trace (or a child of TRACEPARENT's context). docs/python.md#pytorch says more.
//
// The op is ATen ops only (gelu, erf, exp, arithmetic), which torch's dispatcher runs on the
// tensors' device: the same code serves CPU and CUDA tensors (train.py --device cuda), with no
// CUDA code here and no libtorch_cuda to link (`import torch` loads it where torch has CUDA).
//
// Built with CMake against the distribution's libtorch (examples/torch_train/CMakeLists.txt), the
// same as torch.utils.cpp_extension.CppExtension would: torch's headers and libraries, pybind11,
// and libnemo_lens.
#include <torch/extension.h>

#include "nemo/lens/lens.hpp"

namespace {

using nemo::lens::MegatronSpanGroup;

class GeluResidual : public torch::autograd::Function<GeluResidual> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& h) {
    LENS_SPAN(span, MegatronSpanGroup::LAYER, "gelu_residual.forward",
              {"numel", static_cast<std::int64_t>(h.numel())});
    ctx->save_for_backward({h});
    return x + torch::gelu(h);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    LENS_SPAN(span, MegatronSpanGroup::LAYER, "gelu_residual.backward",
              {"numel", static_cast<std::int64_t>(grad[0].numel())});
    const torch::Tensor h = ctx->get_saved_variables()[0];
    // d/dh gelu(h) = Phi(h) + h * phi(h), with the standard normal's CDF and density.
    const torch::Tensor cdf = 0.5 * (1.0 + torch::erf(h * M_SQRT1_2));
    const torch::Tensor pdf = torch::exp(-0.5 * h * h) * (0.5 * M_2_SQRTPI * M_SQRT1_2);
    return {grad[0], grad[0] * (cdf + h * pdf)};
  }
};

torch::Tensor gelu_residual(const torch::Tensor& x, const torch::Tensor& h) {
  return GeluResidual::apply(x, h);
}

// The ids of the thread's current span as lens sees it from C++ ("" when none): what a test reads
// from inside autograd's backward.
std::pair<std::string, std::string> current_ids() {
  const nemo::lens::SpanContext c = nemo::lens::current_span_context();
  if (!c.is_valid()) return {"", ""};
  return {c.trace_id.to_hex(), c.span_id.to_hex()};
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "A torch C++ extension traced with lens (examples/torch_train).";
  m.def("gelu_residual", &gelu_residual, pybind11::arg("x"), pybind11::arg("h"),
        "x + gelu(h), forward and backward in C++, each inside a LENS_SPAN.");
  m.def("current_ids", &current_ids, "(trace_id, span_id) of the current span, seen from C++.");
}
