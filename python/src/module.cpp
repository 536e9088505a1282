// nemo_lens_cpp._core: the module. Each file of python/src binds its own concern (core.hpp lists
// them); this one only calls them. The order matters for pybind11's signatures only: a type bound
// before a function that takes it is named by its Python name in that function's docstring (the
// exporters before setup_telemetry).
#include "core.hpp"

PYBIND11_MODULE(_core, m) {
  m.doc() = "The compiled part of nemo_lens_cpp; use the package, not this module.";
  m.attr("__version__") = NEMO_LENS_VERSION_STRING;
  nemo_lens_cpp::bind_hot_path(m);
  nemo_lens_cpp::bind_exporters(m);
  nemo_lens_cpp::bind_setup(m);
  nemo_lens_cpp::bind_metrics(m);
  nemo_lens_cpp::bind_propagation(m);
}
