// Configuration and set-up from Python: lens' errors as Python exceptions, span-group catalogs,
// the process-wide switches, NemoLensConfig as a dict of its fields, export strategies written in
// Python, setup_telemetry() and its TelemetryHandle, the detected resource.
#include <algorithm>
#include <chrono>
#include <map>
#include <memory>

#include "core.hpp"
#include "resources/resource.hpp"

namespace nemo_lens_cpp {
namespace {

// The metric exporter of a set-up whose metrics an OpenTelemetry MetricReader reads: collections
// go nowhere (the reader reads the instruments itself, otel/metric_reader.py).
class NoMetricExporter final : public lens::MetricExporter {
 public:
  bool export_metrics(std::span<const lens::MetricData>, const lens::Resource&,
                      std::chrono::steady_clock::time_point) noexcept override {
    return true;
  }
};

// Python's exceptions for lens' errors: ValueError subclasses, as NeMo Lens raises ValueError.
PyObject* g_span_group_error = nullptr;
PyObject* g_config_error = nullptr;

// The catalog of a SpanGroup class: its groups and presets (`all` is always every group).
lens::SpanGroupCatalog make_catalog(
    const std::vector<std::string>& groups,
    const std::map<std::string, std::vector<std::string>>& presets) {
  lens::PresetMap p;
  for (const auto& [name, members] : presets) {
    if (name == lens::kAllPreset) continue;  // always every group
    p[name] = lens::GroupSet(members.begin(), members.end());
  }
  return lens::SpanGroupCatalog(lens::GroupSet(groups.begin(), groups.end()), std::move(p));
}

// NemoLensConfig's fields as a dict, which the package makes its NemoLensConfig dataclass of.
py::dict config_to_py(const lens::NemoLensConfig& c) {
  py::dict d;
  d["enabled"] = c.enabled;
  d["service_name"] = c.service_name;
  d["export_strategy"] = c.export_strategy;
  d["export_rank"] = c.export_rank;
  d["export_sample_rate"] = c.export_sample_rate;
  d["sampler_enabled"] = c.sampler_enabled;
  d["traces_enabled"] = c.traces_enabled;
  d["metrics_enabled"] = c.metrics_enabled;
  d["logs_enabled"] = c.logs_enabled;
  d["span_groups"] = c.span_groups;
  d["exporter"] = c.exporter;
  d["run_id"] = c.run_id;
  d["user"] = c.user;
  d["wandb_entity"] = c.wandb_entity;
  d["wandb_project"] = c.wandb_project;
  d["env_prefix"] = c.env_prefix;
  d["env_fallback_prefix"] = c.env_fallback_prefix;
  return d;
}

template <class T>
T field(const py::dict& d, const char* key) {
  return d[key].cast<T>();
}

lens::NemoLensConfig config_from_py(const py::dict& d,
                                    std::shared_ptr<const lens::SpanGroupCatalog> catalog) {
  lens::NemoLensConfig c;
  c.enabled = field<bool>(d, "enabled");
  c.service_name = field<std::string>(d, "service_name");
  c.export_strategy = field<std::string>(d, "export_strategy");
  c.export_rank = field<int>(d, "export_rank");
  c.export_sample_rate = field<double>(d, "export_sample_rate");
  c.sampler_enabled = field<bool>(d, "sampler_enabled");
  c.traces_enabled = field<bool>(d, "traces_enabled");
  c.metrics_enabled = field<bool>(d, "metrics_enabled");
  c.logs_enabled = field<bool>(d, "logs_enabled");
  c.span_groups = field<std::string>(d, "span_groups");
  c.exporter = field<std::string>(d, "exporter");
  c.run_id = field<std::string>(d, "run_id");
  c.user = field<std::string>(d, "user");
  c.wandb_entity = field<std::string>(d, "wandb_entity");
  c.wandb_project = field<std::string>(d, "wandb_project");
  c.env_prefix = field<std::string>(d, "env_prefix");
  c.env_fallback_prefix = field<std::string>(d, "env_fallback_prefix");
  c.span_group_catalog = std::move(catalog);
  return c;
}

// A Python object owned from C++ and released with the GIL, or leaked when the interpreter is
// gone (a strategy may be destroyed at C++ exit, after Python finalised).
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    if (Py_IsInitialized() != 0) {
      py::gil_scoped_acquire gil;
      delete p;
    }
  });
}

// A Python export strategy fn(config, rank, world_size) -> bool as a C++ one. `to_config` turns
// the C++ config's fields (a dict) into the package's NemoLensConfig.
// A strategy written in Python; `label` names it in the error when it returns anything but a bool.
lens::ExportStrategy python_strategy(py::object fn, py::object to_config, std::string label) {
  return [fn = hold(std::move(fn)), to_config = hold(std::move(to_config)),
          label = std::move(label)](const lens::NemoLensConfig& c, int rank,
                                    int world_size) -> bool {
    py::gil_scoped_acquire gil;
    const py::object out = (*fn)((*to_config)(config_to_py(c)), rank, world_size);
    if (!PyBool_Check(out.ptr())) {
      throw lens::ConfigError(label + " returned " + py::repr(out).cast<std::string>() + " (" +
                              Py_TYPE(out.ptr())->tp_name + ") for rank " + std::to_string(rank) +
                              ": an export strategy must return True or False");
    }
    return out.ptr() == Py_True;
  };
}

// TelemetryStats as a dict: handle.stats().
py::dict stats_to_py(const lens::TelemetryStats& s) {
  py::dict d;
  d["spans_started"] = s.spans_started;
  d["spans_ended"] = s.spans_ended;
  d["spans_exported"] = s.spans_exported;
  d["spans_buffered"] = s.spans_buffered;
  d["spans_rejected"] = s.spans_rejected;
  d["spans_dropped_queue_full"] = s.spans_dropped_queue_full;
  d["spans_dropped_export_failed"] = s.spans_dropped_export_failed;
  d["spans_dropped_shutdown"] = s.spans_dropped_shutdown;
  d["spans_truncated"] = s.spans_truncated;
  d["spans_end_clamped"] = s.spans_end_clamped;
  d["export_requests"] = s.export_requests;
  d["exporter_wakeups"] = s.exporter_wakeups;
  d["metric_points_collected"] = s.metric_points_collected;
  d["metric_points_exported"] = s.metric_points_exported;
  d["metric_points_dropped"] = s.metric_points_dropped;
  d["metric_exports_failed"] = s.metric_exports_failed;
  d["metric_measurements_dropped"] = s.metric_measurements_dropped;
  d["log_records_emitted"] = s.log_records_emitted;
  d["log_records_exported"] = s.log_records_exported;
  d["log_records_dropped"] = s.log_records_dropped;
  d["metric_points_buffered"] = s.metric_points_buffered;
  d["log_records_buffered"] = s.log_records_buffered;
  d["gpu_spans_timed"] = s.gpu_spans_timed;
  d["gpu_spans_incomplete"] = s.gpu_spans_incomplete;
  d["gpu_activities_late"] = s.gpu_activities_late;
  d["gpu_activities_unattributed"] = s.gpu_activities_unattributed;
  d["gpu_launches_dropped"] = s.gpu_launches_dropped;
  d["gpu_activities_dropped"] = s.gpu_activities_dropped;
  d["gpu_activities_invalid"] = s.gpu_activities_invalid;
  d["gpu_kernel_spans"] = s.gpu_kernel_spans;
  d["gpu_kernel_spans_dropped"] = s.gpu_kernel_spans_dropped;
  d["gpu_spans_waiting"] = s.gpu_spans_waiting;
  d["spans_recorded"] = s.spans_recorded;
  d["spans_record_overwritten"] = s.spans_record_overwritten;
  d["spans_captured"] = s.spans_captured;
  d["record_captures"] = s.record_captures;
  d["record_spans_held"] = s.record_spans_held;
  d["record_memory_bytes"] = s.record_memory_bytes;
  return d;
}

// A timeout Python gave in milliseconds (a float); negative or NaN: none.
std::chrono::milliseconds millis(double ms) {
  if (!(ms >= 0)) ms = 0;
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(ms, 1e12)));
}

}  // namespace

void bind_setup(py::module_& m) {
  // Errors.
  g_span_group_error = PyErr_NewExceptionWithDoc(
      "nemo_lens_cpp.SpanGroupError",
      "An unknown span group or preset, or an invalid catalog (a ValueError).", PyExc_ValueError,
      nullptr);
  g_config_error = PyErr_NewExceptionWithDoc(
      "nemo_lens_cpp.ConfigError", "An invalid configuration value or set-up call (a ValueError).",
      PyExc_ValueError, nullptr);
  m.attr("SpanGroupError") = py::handle(g_span_group_error);
  m.attr("ConfigError") = py::handle(g_config_error);
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const lens::SpanGroupError& e) {
      PyErr_SetString(g_span_group_error, e.what());
    } catch (const lens::ConfigError& e) {
      PyErr_SetString(g_config_error, e.what());
    }
  });

  // The flight recorder.
  m.def(
      "capture",
      [](const std::string& reason) {
        py::gil_scoped_release release;  // takes every thread's lock in turn
        return lens::capture(reason);
      },
      py::arg("reason") = "manual",
      "Exports what the flight recorder holds now (NEMO_LENS_RECORD_GROUPS): every recorded span "
      "and the recorded spans open now, marked lens.capture.reason; returns how many (0 when it "
      "is off).");

  // Catalogs.
  m.def(
      "resolve",
      [](const std::vector<std::string>& groups,
         const std::map<std::string, std::vector<std::string>>& presets,
         const std::string& spec) { return make_catalog(groups, presets).resolve(spec); },
      py::arg("groups"), py::arg("presets"), py::arg("spec"));

  // State.
  m.def(
      "set_enabled_span_groups",
      [](const std::vector<std::string>& groups) {
        lens::set_enabled_span_groups(lens::GroupSet(groups.begin(), groups.end()));
      },
      py::arg("groups"));
  m.def("enabled_span_groups", [] { return lens::enabled_span_groups(); });

  // Configuration.
  m.def(
      "config_from_env",
      [](const std::string& prefix, std::optional<std::string> fallback) {
        std::optional<std::string_view> fb;
        if (fallback) fb = *fallback;
        return config_to_py(lens::NemoLensConfig::from_env(prefix, fb));
      },
      py::arg("prefix"), py::arg("fallback_prefix"));

  // Strategies.
  m.def(
      "register_export_strategy",
      [](const std::string& name, py::object fn, py::object to_config, bool allow_override) {
        lens::register_export_strategy(
            name,
            python_strategy(std::move(fn), std::move(to_config), "export strategy '" + name + "'"),
            allow_override);
      },
      py::arg("name"), py::arg("fn"), py::arg("to_config"), py::arg("allow_override"));
  m.def("unregister_export_strategy", &lens::unregister_export_strategy, py::arg("name"));
  m.def("registered_strategies", &lens::registered_strategies);
  m.def(
      "should_export",
      [](const std::string& name, const py::dict& config, int rank, int world_size) {
        lens::ExportStrategy s = lens::get_export_strategy(name);
        return s(config_from_py(config, nullptr), rank, world_size);
      },
      py::arg("name"), py::arg("config"), py::arg("rank"), py::arg("world_size"));

  // Set-up.
  py::class_<lens::TelemetryHandle>(m, "TelemetryHandle")
      .def_property_readonly("is_exporting", &lens::TelemetryHandle::is_exporting)
      .def_property_readonly("enabled", &lens::TelemetryHandle::enabled)
      .def_property_readonly("rank", &lens::TelemetryHandle::rank)
      .def_property_readonly("world_size", &lens::TelemetryHandle::world_size)
      .def_property_readonly("is_shut_down", &lens::TelemetryHandle::is_shut_down)
      .def_property_readonly("run_id",
                             [](const lens::TelemetryHandle& h) { return h.config().run_id; })
      .def(
          "force_flush",
          [](lens::TelemetryHandle& h, double timeout_millis) {
            py::gil_scoped_release nogil;
            return h.force_flush(millis(timeout_millis));
          },
          py::arg("timeout_millis"))
      .def(
          "shutdown",
          [](lens::TelemetryHandle& h, double timeout_millis) {
            py::gil_scoped_release nogil;
            return h.shutdown(millis(timeout_millis));
          },
          py::arg("timeout_millis"))
      .def("stats", [](const lens::TelemetryHandle& h) { return stats_to_py(h.stats()); })
      .def("resource", [](const lens::TelemetryHandle& h) {
        return attributes_to_py(h.resource().attributes);
      });
  m.def(
      "detect_resource",
      [](int rank, int world_size) {
        lens::Resource r;
        {
          py::gil_scoped_release nogil;  // may run nvidia-smi
          r = lens::detail::detect_resource(lens::NemoLensConfig{}, rank, world_size, {});
        }
        return attributes_to_py(r.attributes);
      },
      py::arg("rank") = 0, py::arg("world_size") = 1,
      "The resource C++ set-up detects for a default configuration (the same SLURM, Kubernetes, "
      "host and process attributes).");
  m.def(
      "setup_telemetry",
      [](const py::dict& config, const std::vector<std::string>& groups,
         const std::map<std::string, std::vector<std::string>>& presets, int rank, int world_size,
         const py::dict& resource_attributes, std::shared_ptr<lens::SpanExporter> exporter,
         py::object strategy, py::object to_config, bool allow_reinit, bool reader_takes_metrics) {
        auto catalog =
            std::make_shared<const lens::SpanGroupCatalog>(make_catalog(groups, presets));
        const lens::NemoLensConfig c = config_from_py(config, std::move(catalog));
        lens::SetupOptions options;
        for (auto [k, v] : resource_attributes) {
          if (auto kv = to_key_value(k, v)) options.resource_attributes.push_back(std::move(*kv));
        }
        options.exporter = std::move(exporter);
        if (!strategy.is_none()) {
          options.strategy =
              python_strategy(strategy, to_config, "setup_telemetry's export_strategy");
        }
        options.allow_reinit = allow_reinit;
        // An OpenTelemetry MetricReader given to setup_telemetry() takes the place of the metric
        // exporter config.exporter names (as in NeMo Lens): lens' reader then exports nowhere.
        if (reader_takes_metrics) options.metric_exporter = std::make_shared<NoMetricExporter>();
        py::gil_scoped_release nogil;  // a previous set-up may be flushed; a strategy takes it
        return lens::setup_telemetry(c, rank, world_size, std::move(options));
      },
      py::arg("config"), py::arg("groups"), py::arg("presets"), py::arg("rank"),
      py::arg("world_size"), py::arg("resource_attributes"), py::arg("exporter"),
      py::arg("strategy"), py::arg("to_config"), py::arg("allow_reinit"),
      py::arg("reader_takes_metrics") = false);
}

}  // namespace nemo_lens_cpp
