// Contexts and propagation from Python: SpanContext (OpenTelemetry's shape), W3C inject / extract,
// contexts attached as a thread's current span, and the environment that carries the current
// span to a child process. Uses the hot path's registry of Python spans and its view of the
// current span.
#include <array>
#include <memory>
#include <optional>
#include <string>

#include "core.hpp"

namespace nemo_lens_cpp {
namespace {

// The unsigned big-endian integer of `bytes` (an id's W3C byte order) as a Python int.
template <std::size_t N>
py::object big_endian_int(const std::array<std::uint8_t, N>& bytes) {
  PyObject* v = _PyLong_FromByteArray(bytes.data(), N, /*little_endian=*/0, /*is_signed=*/0);
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

// A context attached from Python (attach_context()): the thread's current span until end() or
// until the object is collected, registered as a Python span meanwhile.
class PySpan {
 public:
  explicit PySpan(lens::Span span) : span_(std::move(span)) {
    const lens::SpanContext c = span_.context();
    if (c.is_valid()) {
      key_ = span_key(c.span_id);
      register_python_span(key_);
    }
  }
  PySpan(const PySpan&) = delete;
  PySpan& operator=(const PySpan&) = delete;
  ~PySpan() { end(); }

  void end() {
    span_.end();
    if (key_ != 0) {
      unregister_python_span(key_);
      key_ = 0;
    }
  }
  lens::Span& span() { return span_; }

 private:
  lens::Span span_;
  std::uint64_t key_ = 0;
};

}  // namespace

void bind_propagation(py::module_& m) {
  // OpenTelemetry's SpanContext shape: int ids (NeMo Lens code formats them with "032x"), plus
  // lens' hex forms.
  py::class_<lens::SpanContext>(m, "SpanContext", "A span's identity: trace and span ids, flags.")
      .def_property_readonly(
          "trace_id", [](const lens::SpanContext& c) { return big_endian_int(c.trace_id.bytes); },
          "The 128-bit trace id as an int.")
      .def_property_readonly(
          "span_id", [](const lens::SpanContext& c) { return big_endian_int(c.span_id.bytes); },
          "The 64-bit span id as an int.")
      .def_property_readonly(
          "trace_id_hex", [](const lens::SpanContext& c) { return c.trace_id.to_hex(); },
          "The trace id as 32 lower-case hex digits.")
      .def_property_readonly(
          "span_id_hex", [](const lens::SpanContext& c) { return c.span_id.to_hex(); },
          "The span id as 16 lower-case hex digits.")
      .def_readonly("trace_flags", &lens::SpanContext::trace_flags)
      .def_readonly("is_remote", &lens::SpanContext::is_remote)
      .def_readonly("trace_state", &lens::SpanContext::trace_state)
      .def_property_readonly("is_valid", &lens::SpanContext::is_valid)
      .def("__eq__", [](const lens::SpanContext& a, const lens::SpanContext& b) { return a == b; })
      .def("__repr__", [](const lens::SpanContext& c) {
        return "SpanContext(trace_id=0x" + c.trace_id.to_hex() + ", span_id=0x" +
               c.span_id.to_hex() + ", trace_flags=" + std::to_string(c.trace_flags) + ")";
      });
  m.def(
      "make_context",
      [](const std::string& trace_id, const std::string& span_id, int trace_flags, bool is_remote,
         const std::string& trace_state) -> std::optional<lens::SpanContext> {
        auto t = lens::TraceId::from_hex(trace_id);
        auto s = lens::SpanId::from_hex(span_id);
        if (!t || !s) return std::nullopt;
        lens::SpanContext c;
        c.trace_id = *t;
        c.span_id = *s;
        c.trace_flags = static_cast<std::uint8_t>(trace_flags);
        c.is_remote = is_remote;
        c.trace_state = trace_state;
        if (!c.is_valid()) return std::nullopt;
        return c;
      },
      py::arg("trace_id"), py::arg("span_id"), py::arg("trace_flags"), py::arg("is_remote"),
      py::arg("trace_state") = "");
  m.def("current_context", []() -> std::optional<lens::SpanContext> {
    const PythonCurrent c = python_current(true);  // recorded-only spans left out
    if (!c.context.is_valid()) return std::nullopt;
    return c.context;
  });
  m.def(
      "inject",
      [](const lens::SpanContext& ctx, py::dict carrier) {
        lens::Carrier c;
        lens::inject_context(ctx, c);
        for (const auto& [k, v] : c) carrier[py::str(k)] = v;
      },
      py::arg("context"), py::arg("carrier"));
  m.def("child_environment", [] { return lens::child_environment(); });
  m.def(
      "extract",
      [](const py::dict& carrier) -> py::tuple {
        lens::Carrier c;
        for (auto [k, v] : carrier) {
          if (!PyUnicode_Check(k.ptr()) || !PyUnicode_Check(v.ptr())) continue;
          Py_ssize_t kn = 0, vn = 0;
          const char* key = PyUnicode_AsUTF8AndSize(k.ptr(), &kn);
          const char* value = key != nullptr ? PyUnicode_AsUTF8AndSize(v.ptr(), &vn) : nullptr;
          if (value == nullptr) {  // not encodable (a lone surrogate): a malformed header
            PyErr_Clear();
            continue;
          }
          c[std::string(key, static_cast<std::size_t>(kn))] =
              std::string(value, static_cast<std::size_t>(vn));
        }
        const lens::ExtractedContext e = lens::extract_context(c);
        py::object ctx = e.context.is_valid() ? py::cast(e.context) : py::none();
        return py::make_tuple(ctx, e.baggage);
      },
      py::arg("carrier"));

  // An attached context: the parent of the spans this thread starts until it ends. Registered as
  // a Python span, so that python_current()'s asyncio rule (core.hpp) applies to it too.
  py::class_<PySpan>(m, "AttachedContext", "A context attached as the thread's current span.")
      .def("end", &PySpan::end, "Detaches it (idempotent; any thread).");
  m.def(
      "attach_context",
      [](const lens::SpanContext& c) { return std::make_unique<PySpan>(lens::attach_context(c)); },
      py::arg("context"));
}

}  // namespace nemo_lens_cpp
