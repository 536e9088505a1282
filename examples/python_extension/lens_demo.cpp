// lens_demo: a small C++ extension for Python that is traced with lens, the way a framework's
// CUDA/C++ extension would be. It links the same libnemo_lens as the nemo_lens_cpp package, so its
// spans share the Python program's switches, pipeline and current span:
//
//   import nemo_lens_cpp as lens, lens_demo
//   with lens.managed_span("step", "train_step"):
//       lens_demo.forward(4)          # its "forward" and "layer" spans are children of train_step
//       lens_demo.all_reduce(lambda: print("inside"))   # a Python span in the callback nests
//                                                        # under the C++ "all_reduce" span
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>

#include <chrono>
#include <cmath>

#include "nemo/lens/lens.hpp"

namespace py = pybind11;
using nemo::lens::MegatronSpanGroup;

namespace {

// A forward pass over `layers` layers: one forward_backward span, one layer span per layer.
double forward(int layers) {
  LENS_SPAN(pass, MegatronSpanGroup::FORWARD_BACKWARD, "forward", {"layers", layers});
  double x = 1.0;
  for (int i = 0; i < layers; ++i) {
    LENS_SPAN(layer, MegatronSpanGroup::LAYER, "layer", {"index", i});
    x = std::sqrt(x + i);
  }
  return x;
}

// A collective that calls back into Python while its communication span is open.
void all_reduce(const std::function<void()>& callback) {
  LENS_SPAN(span, MegatronSpanGroup::COMMUNICATION, "all_reduce", {"bytes", 4096});
  callback();
}

// `n` LENS_SPANs with two attributes in a loop, timed in C++: nanoseconds per span. What a span
// costs a C++ extension, whether or not a Python span is open around the call.
double time_spans(int n) {
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    LENS_SPAN(s, MegatronSpanGroup::LAYER, "layer", {"index", i}, {"loss", 0.5});
  }
  const auto t1 = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::nano>(t1 - t0).count() / n;
}

// The trace and span ids of the thread's current span, as lens sees it from C++ ("" when none).
py::tuple current_ids() {
  const nemo::lens::SpanContext c = nemo::lens::current_span_context();
  if (!c.is_valid()) return py::make_tuple("", "");
  return py::make_tuple(c.trace_id.to_hex(), c.span_id.to_hex());
}

}  // namespace

PYBIND11_MODULE(lens_demo, m) {
  m.doc() = "A C++ extension traced with lens (examples/python_extension).";
  m.def("forward", &forward, py::arg("layers"), "A forward pass with a span per layer.");
  m.def("all_reduce", &all_reduce, py::arg("callback"),
        "A communication span that calls `callback` while open.");
  m.def("time_spans", &time_spans, py::arg("n"), "Nanoseconds per C++ LENS_SPAN over n spans.");
  m.def("current_ids", &current_ids, "The (trace_id, span_id) of the current span, seen from C++.");
}
