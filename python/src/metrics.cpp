// Metrics and logs from Python: meters and their double-valued instruments, and log records with
// the current span's ids. Attributes are converted as span attributes are (attributes.cpp), at
// most kMaxListAttributes per record.
#include <initializer_list>
#include <string>

#include "core.hpp"

namespace nemo_lens_cpp {
namespace {

// Binds a double-valued instrument type whose record method is `method` (add, record or set).
template <class Instrument, class Record>
void bind_instrument(py::module_& m, const char* name, const char* method, const char* doc,
                     Record record) {
  py::class_<Instrument>(m, name, doc)
      .def(
          method,
          [record](const Instrument& i, double value, py::object attributes) {
            CallAttributes a(attributes, kMaxListAttributes);
            with_attribute_list(
                a, [&](std::initializer_list<lens::Attribute> list) { record(i, value, list); });
          },
          py::arg("amount"), py::arg("attributes") = py::none());
}

}  // namespace

void bind_metrics(py::module_& m) {
  bind_instrument<lens::Counter<double>>(
      m, "Counter", "add", "A monotonic sum; add() takes amounts >= 0.",
      [](const lens::Counter<double>& c, double v, std::initializer_list<lens::Attribute> a) {
        c.add(v, a);
      });
  bind_instrument<lens::UpDownCounter<double>>(
      m, "UpDownCounter", "add", "A sum that goes up and down.",
      [](const lens::UpDownCounter<double>& c, double v, std::initializer_list<lens::Attribute> a) {
        c.add(v, a);
      });
  bind_instrument<lens::Histogram<double>>(
      m, "Histogram", "record", "A distribution over explicit buckets.",
      [](const lens::Histogram<double>& h, double v, std::initializer_list<lens::Attribute> a) {
        h.record(v, a);
      });
  bind_instrument<lens::Gauge<double>>(
      m, "Gauge", "set", "The last value set per attribute set.",
      [](const lens::Gauge<double>& g, double v, std::initializer_list<lens::Attribute> a) {
        g.set(v, a);
      });
  py::class_<lens::Meter> meter(m, "Meter",
                                "Creates instruments (names and units as OpenTelemetry's).");
  // Each create_* method: (name, unit="", description="") -> a double-valued instrument.
  auto create = [&meter](const char* method, auto make) {
    meter.def(
        method,
        [make](lens::Meter& mt, const std::string& name, const std::string& unit,
               const std::string& description) { return make(mt, name, unit, description); },
        py::arg("name"), py::arg("unit") = "", py::arg("description") = "");
  };
  create("create_counter",
         [](lens::Meter& mt, const auto&... a) { return mt.create_counter<double>(a...); });
  create("create_up_down_counter",
         [](lens::Meter& mt, const auto&... a) { return mt.create_up_down_counter<double>(a...); });
  create("create_histogram",
         [](lens::Meter& mt, const auto&... a) { return mt.create_histogram<double>(a...); });
  create("create_gauge",
         [](lens::Meter& mt, const auto&... a) { return mt.create_gauge<double>(a...); });
  m.def(
      "get_meter", [](const std::string& name) { return &lens::get_meter(name); },
      py::return_value_policy::reference, py::arg("name"));
  m.def(
      "log",
      [](int severity, const std::string& message, py::object attributes,
         const std::string& scope) {
        if (!lens::detail::g_logs_recording.load(std::memory_order_relaxed)) return;
        CallAttributes a(attributes, kMaxListAttributes);
        with_attribute_list(a, [&](std::initializer_list<lens::Attribute> list) {
          lens::detail::emit_log(static_cast<lens::Severity>(severity), message, list, scope);
        });
      },
      py::arg("severity"), py::arg("message"), py::arg("attributes"), py::arg("scope"));
}

}  // namespace nemo_lens_cpp
