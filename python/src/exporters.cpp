// The exporters set-up takes from Python: lens' InMemorySpanExporter (spans as dicts, for tests)
// and PythonSpanExporter, which hands the pipeline's batches to an OpenTelemetry SpanExporter
// (through the package's adapter) on the exporter thread.
#include <algorithm>
#include <chrono>
#include <memory>
#include <span>

#include "core.hpp"

namespace nemo_lens_cpp {
namespace {

// An ended span as the dict the package's adapters read (hex ids, attributes as Python values).
py::dict span_to_py(const lens::SpanData& s) {
  py::dict d;
  d["name"] = s.name;
  d["group"] = s.group;
  d["trace_id"] = s.context.trace_id.to_hex();
  d["span_id"] = s.context.span_id.to_hex();
  d["trace_flags"] = s.context.trace_flags;
  d["trace_state"] = s.context.trace_state;
  d["parent_span_id"] =
      s.parent_span_id.is_valid() ? py::object(py::str(s.parent_span_id.to_hex())) : py::none();
  d["parent_is_remote"] = s.parent_is_remote;
  d["kind"] = static_cast<int>(s.kind);
  d["start_time_unix_nano"] = s.start_time_unix_nano;
  d["end_time_unix_nano"] = s.end_time_unix_nano;
  d["attributes"] = attributes_to_py(s.attributes);
  py::list events;
  for (const auto& e : s.events) {
    py::dict ev;
    ev["name"] = e.name;
    ev["time_unix_nano"] = e.time_unix_nano;
    ev["attributes"] = attributes_to_py(e.attributes);
    events.append(ev);
  }
  d["events"] = events;
  py::list links;
  for (const auto& l : s.links) {
    py::dict link;
    link["trace_id"] = l.context.trace_id.to_hex();
    link["span_id"] = l.context.span_id.to_hex();
    link["attributes"] = attributes_to_py(l.attributes);
    links.append(link);
  }
  d["links"] = links;
  d["status_code"] = static_cast<int>(s.status_code);
  d["status_message"] = s.status_message;
  d["thread_id"] = s.thread_id;
  d["truncated"] = s.truncated;
  return d;
}

// Hands the pipeline's batches to Python callables (setup_telemetry(span_exporter=) with an
// OpenTelemetry SpanExporter): export(spans as dicts, resource dict) -> bool, flush(timeout ms)
// -> bool, shutdown(). Runs on the exporter thread and takes the GIL there, never on the
// instrumented thread. Nothing is called once the interpreter is finalising (the batch counts as
// failed), and the callables are released under the GIL at shutdown.
class PythonSpanExporter final : public lens::SpanExporter {
 public:
  PythonSpanExporter(py::object export_fn, py::object flush_fn, py::object shutdown_fn)
      : export_(std::move(export_fn)),
        flush_(std::move(flush_fn)),
        shutdown_(std::move(shutdown_fn)) {}

  ~PythonSpanExporter() override {
    if (!alive()) {  // too late to touch Python objects: leak the references
      export_.release();
      flush_.release();
      shutdown_.release();
      return;
    }
    py::gil_scoped_acquire gil;
    export_ = py::object();
    flush_ = py::object();
    shutdown_ = py::object();
  }

  lens::ExportResult export_spans(
      std::span<const lens::SpanData* const> spans, const lens::Resource& resource,
      std::chrono::steady_clock::time_point /*deadline*/) noexcept override {
    if (!alive()) return lens::ExportResult::kFailure;
    py::gil_scoped_acquire gil;
    if (!export_) return lens::ExportResult::kFailure;
    try {
      py::list batch;
      for (const lens::SpanData* s : spans) batch.append(span_to_py(*s));
      return export_(batch, attributes_to_py(resource.attributes)).cast<bool>()
                 ? lens::ExportResult::kSuccess
                 : lens::ExportResult::kFailure;
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("nemo_lens_cpp span_exporter.export");
    } catch (const std::exception&) {
    }
    return lens::ExportResult::kFailure;
  }

  bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept override {
    if (!alive()) return false;
    py::gil_scoped_acquire gil;
    if (!flush_) return true;
    try {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      return flush_(std::max<std::int64_t>(0, left.count())).cast<bool>();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("nemo_lens_cpp span_exporter.force_flush");
    } catch (const std::exception&) {
    }
    return false;
  }

  void shutdown(std::chrono::steady_clock::time_point /*deadline*/) noexcept override {
    if (!alive()) return;
    py::gil_scoped_acquire gil;
    try {
      if (shutdown_) shutdown_();
    } catch (py::error_already_set& e) {
      e.discard_as_unraisable("nemo_lens_cpp span_exporter.shutdown");
    } catch (const std::exception&) {
    }
    export_ = py::object();
    flush_ = py::object();
    shutdown_ = py::object();
  }

 private:
  static bool alive() noexcept { return Py_IsInitialized() != 0 && _Py_IsFinalizing() == 0; }

  py::object export_, flush_, shutdown_;
};

}  // namespace

void bind_exporters(py::module_& m) {
  // Exporters.
  py::class_<lens::SpanExporter, std::shared_ptr<lens::SpanExporter>>(
      m, "SpanExporter", "What receives the pipeline's ended spans.");
  py::class_<PythonSpanExporter, lens::SpanExporter, std::shared_ptr<PythonSpanExporter>>(
      m, "PythonSpanExporter",
      "Hands batches to Python callables on the exporter thread: export(spans, resource) -> "
      "bool, flush(timeout_ms) -> bool, shutdown().")
      .def(py::init<py::object, py::object, py::object>(), py::arg("export"), py::arg("flush"),
           py::arg("shutdown"));
  py::class_<lens::InMemorySpanExporter, lens::SpanExporter,
             std::shared_ptr<lens::InMemorySpanExporter>>(
      m, "InMemorySpanExporter", "Keeps every exported span in memory (for tests).")
      .def(py::init<>())
      .def(
          "spans",
          [](const lens::InMemorySpanExporter& e) {
            py::list out;
            for (const auto& s : e.spans()) out.append(span_to_py(s));
            return out;
          },
          "The exported spans so far, as dicts, in export order.")
      .def("clear", &lens::InMemorySpanExporter::clear, "Forgets the spans exported so far.");
}

}  // namespace nemo_lens_cpp
