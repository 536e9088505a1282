// Metrics and logs from Python: meters and their double-valued instruments, and log records with
// the current span's ids. Attributes are converted as span attributes are (attributes.cpp), at
// most kMaxListAttributes per record.
#include <initializer_list>
#include <string>
#include <vector>

#include "core.hpp"
#include "metrics/instruments.hpp"

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

const char* kind_name(lens::MetricKind kind) {
  switch (kind) {
    case lens::MetricKind::kSum:
      return "sum";
    case lens::MetricKind::kGauge:
      return "gauge";
    case lens::MetricKind::kHistogram:
      return "histogram";
  }
  return "sum";
}

py::object number_to_py(const std::variant<std::int64_t, double>& v) {
  return std::visit([](auto x) -> py::object { return py::cast(x); }, v);
}

// One metric of a snapshot as the OpenTelemetry adapter converts it (otel/metric_reader.py).
py::dict metric_to_py(const lens::MetricData& m) {
  py::list points;
  for (const lens::NumberPoint& p : m.number_points) {
    py::dict d;
    d["attributes"] = attributes_to_py(p.attributes);
    d["start_time_unix_nano"] = p.start_time_unix_nano;
    d["time_unix_nano"] = p.time_unix_nano;
    d["value"] = number_to_py(p.value);
    points.append(std::move(d));
  }
  for (const lens::HistogramPoint& p : m.histogram_points) {
    py::dict d;
    d["attributes"] = attributes_to_py(p.attributes);
    d["start_time_unix_nano"] = p.start_time_unix_nano;
    d["time_unix_nano"] = p.time_unix_nano;
    d["count"] = p.count;
    d["sum"] = p.sum;
    d["bucket_counts"] = p.bucket_counts;
    d["explicit_bounds"] = p.explicit_bounds;
    d["min"] = p.min ? py::cast(*p.min) : py::none();
    d["max"] = p.max ? py::cast(*p.max) : py::none();
    points.append(std::move(d));
  }
  py::dict d;
  d["scope"] = m.scope_name;
  d["name"] = m.name;
  d["description"] = m.description;
  d["unit"] = m.unit;
  d["kind"] = kind_name(m.kind);
  d["monotonic"] = m.monotonic;
  d["points"] = std::move(points);
  return d;
}

}  // namespace

void bind_metrics(py::module_& m) {
  m.def(
      "collect_metrics",
      [](std::int64_t start_unix_nano, std::int64_t now_unix_nano) {
        std::vector<lens::MetricData> snapshot;
        {
          // Observable callbacks written in Python take the GIL themselves, perhaps on lens'
          // reader thread at the same moment: it must not be held here.
          py::gil_scoped_release nogil;
          snapshot = lens::detail::snapshot_metrics(start_unix_nano, now_unix_nano);
        }
        py::list out;
        for (const lens::MetricData& metric : snapshot) out.append(metric_to_py(metric));
        return out;
      },
      py::arg("start_unix_nano"), py::arg("now_unix_nano"),
      "Every instrument of the process as cumulative points (gauges: the last value), cumulative "
      "ones starting at start_unix_nano: what an OpenTelemetry MetricReader reads (a list of "
      "dicts). Leaves the set-up's own reader as it was.");
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
