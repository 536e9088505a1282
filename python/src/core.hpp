// What the sources of nemo_lens_cpp._core share: internal to the extension module, never
// installed. _core is the compiled part of the Python package, on top of libnemo_lens (the same
// library C++ extensions link, so one process has one set of switches and one pipeline).
//
// One file per concern, and the arrows go one way (docs/layout.md):
//   attributes.cpp   Python values <-> lens attributes; uses nothing else here
//   hot_path.cpp     the CPython-API hot path: the per-group gates, managed_span() and
//                    is_span_group_enabled(), the SpanBase type, new_span(), the registry of
//                    Python's open spans, the current span as Python sees it; uses attributes
//   setup.cpp        errors, catalogs, switches, configuration, export strategies, set-up and the
//                    TelemetryHandle, the resource; uses attributes
//   exporters.cpp    the exporters set-up takes (InMemorySpanExporter, PythonSpanExporter); uses
//                    attributes
//   metrics.cpp      meters, instruments, log records; uses attributes
//   propagation.cpp  SpanContext, inject / extract, attached contexts, child_environment; uses the
//                    hot path
//   module.cpp       PYBIND11_MODULE: one bind_*() per file, in a fixed order
// The hot path is written against the CPython API (no Python frame, no pybind11 dispatch); the
// rest is pybind11. The GIL is released whenever lens may wait (set-up, flush, shutdown). Lens
// threads call into Python in two places only: an export strategy, which set-up calls on the
// calling thread, and a PythonSpanExporter, which the exporter thread calls with the GIL taken.
#pragma once

#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>  // in every file: one set of type casters for the whole module

#include <cstddef>
#include <cstdint>
#include <new>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "nemo/lens/lens.hpp"

namespace nemo_lens_cpp {

namespace py = pybind11;
namespace lens = nemo::lens;

// ------------------------------------------------------------------------------------------------
// attributes.cpp

/// Whether `s` is a compact ASCII str, whose characters are its UTF-8 (nearly every name, key
/// and short value): `out` then views them in place.
inline bool ascii_in_place(PyObject* s, std::string_view& out) {
  if (!PyUnicode_Check(s) || !PyUnicode_IS_COMPACT_ASCII(s)) return false;
  out = {static_cast<const char*>(PyUnicode_DATA(s)),
         static_cast<std::size_t>(PyUnicode_GET_LENGTH(s))};
  return true;
}

/// PyUnicode_AsUTF8AndSize(s, n) (null, with a Python error set, for a str Python cannot
/// encode), with no call for a compact ASCII str.
inline const char* utf8_and_size(PyObject* s, Py_ssize_t* n) {
  std::string_view v;
  if (!ascii_in_place(s, v)) return PyUnicode_AsUTF8AndSize(s, n);
  *n = static_cast<Py_ssize_t>(v.size());
  return v.data();
}

/// utf8_of() for every str but a compact ASCII one.
std::string_view utf8_of_encoded(PyObject* s);

/// The UTF-8 of the str `s`. One Python cannot encode (a lone surrogate, e.g. from a file name
/// decoded with surrogateescape) has each such code point replaced by '?', as attribute values
/// do; the view then lives until 16 more such strings were converted, long enough for the call it
/// is made for. Requires the GIL, which also guards that ring. Inline: names and keys are nearly
/// always ASCII, read in place with no call.
inline std::string_view utf8_of(PyObject* s) {
  std::string_view v;
  return ascii_in_place(s, v) ? v : utf8_of_encoded(s);
}

/// The storage an AttributeArg made by to_attribute() points into (a converted string or list).
struct ValueHolder {
  std::string s;
  std::vector<bool> bools;
  std::vector<std::int64_t> ints;
  std::vector<double> doubles;
  std::vector<std::string> strings;
};

/// One attribute value as NeMo Lens' safe_set_span_attributes keeps it: a bool, int, float or
/// str, or a list/tuple of one of those types; nullopt for anything else (None, a dict, a mixed
/// list, an int beyond 64 bits), never an error. Lists and unencodable strings live in `h`.
std::optional<lens::AttributeArg> to_attribute(const py::handle& v, ValueHolder& h);

/// Sets every attribute of `attributes` (a dict) that NeMo Lens would keep on `span`.
void set_attributes(lens::Span& span, const py::dict& attributes);

/// The same for attributes given as a tuple of names (str) and a tuple of as many values (a
/// call's kwnames and keyword values). Requires the GIL.
void set_attributes(lens::Span& span, PyObject* names, PyObject* values);

/// `value` as an owned attribute under `key` (a str), as to_attribute() keeps it; nullopt when
/// it is skipped. Throws (a Python error) when `key` cannot be encoded.
std::optional<lens::KeyValue> to_key_value(const py::handle& key, const py::handle& value);

/// Attributes as a dict of Python values (lists for arrays).
py::dict attributes_to_py(const std::vector<lens::KeyValue>& kvs);

/// The attributes of one call (a dict), converted as to_attribute() keeps them (at most `max`),
/// and the storage they point into.
struct CallAttributes {
  std::vector<ValueHolder> holders;
  std::vector<std::string> keys;
  std::vector<lens::Attribute> list;

  explicit CallAttributes(const py::handle& attributes, std::size_t max = SIZE_MAX);
};

/// Metrics, logs and span links: their C++ record calls take an initializer_list of attributes;
/// a Python attribute dict becomes one with at most this many attributes.
constexpr std::size_t kMaxListAttributes = 8;

template <class F, std::size_t... I>
void call_with_list(std::span<const lens::Attribute> a, F& f, std::index_sequence<I...>) {
  f({a[I]...});
}

/// Calls f(std::initializer_list<Attribute>) with the attributes of `a` (at most
/// kMaxListAttributes of them: the first ones).
template <class F>
void with_attribute_list(std::span<const lens::Attribute> a, F f) {
  switch (a.size()) {
    case 0:
      f({});
      break;
    case 1:
      call_with_list(a, f, std::make_index_sequence<1>{});
      break;
    case 2:
      call_with_list(a, f, std::make_index_sequence<2>{});
      break;
    case 3:
      call_with_list(a, f, std::make_index_sequence<3>{});
      break;
    case 4:
      call_with_list(a, f, std::make_index_sequence<4>{});
      break;
    case 5:
      call_with_list(a, f, std::make_index_sequence<5>{});
      break;
    case 6:
      call_with_list(a, f, std::make_index_sequence<6>{});
      break;
    case 7:
      call_with_list(a, f, std::make_index_sequence<7>{});
      break;
    default:
      call_with_list(a, f, std::make_index_sequence<kMaxListAttributes>{});
      break;
  }
}

/// with_attribute_list() of the converted attributes of one call.
template <class F>
void with_attribute_list(const CallAttributes& attributes, F f) {
  with_attribute_list(std::span<const lens::Attribute>(attributes.list), std::move(f));
}

/// A span's first attributes converted for lens::start_span(), which stores them with the span's
/// start at less cost than Span::set_attribute() after it: at most kMaxListAttributes, each a
/// view into the Python objects it came from (which must outlive the start). Requires the GIL.
class StartAttributes {
 public:
  StartAttributes() = default;
  StartAttributes(const StartAttributes&) = delete;
  StartAttributes& operator=(const StartAttributes&) = delete;

  /// Converts `values` under `names` (tuples of the same size) as set_attributes() keeps them.
  /// False when one needs more than a view (a list, a str with lone surrogates) or there are too
  /// many: the caller then sets them all after the start.
  bool convert(PyObject* names, PyObject* values);
  /// The same for a dict.
  bool convert(PyObject* dict);

  /// The converted attributes.
  std::span<const lens::Attribute> view() const {
    return {std::launder(reinterpret_cast<const lens::Attribute*>(storage_)), count_};
  }

 private:
  // Adds `value` under `key` when it is kept; false when it needs more than a view.
  bool add(PyObject* key, PyObject* value);

  std::size_t count_ = 0;
  alignas(lens::Attribute) unsigned char storage_[kMaxListAttributes * sizeof(lens::Attribute)];
};

// ------------------------------------------------------------------------------------------------
// hot_path.cpp

/// The key of a span in the registry of Python's open spans (its id's first 8 bytes).
std::uint64_t span_key(const lens::SpanId& id);

/// Registers a span Python started and that is open now. A thread's current span that is
/// registered was started by Python code, perhaps by another asyncio task of the same thread.
/// Requires the GIL, which guards the registry (no lock, no allocation but to grow it).
void register_python_span(std::uint64_t key) noexcept;

/// Removes a span from that registry (when it ends). Requires the GIL.
void unregister_python_span(std::uint64_t key) noexcept;

/// The current span as Python code on this thread / asyncio task sees it:
/// - the thread's current span when C++ started it (Python code called back from a C++ span);
/// - else the span current in this task (the contextvar), or the current OpenTelemetry span when
///   the bridge is installed and no lens span is current;
/// - else none, even when another task's Python span is the thread's current span (`other_task`).
struct PythonCurrent {
  lens::SpanContext context;  // invalid: none
  bool from_cpp = false;      // the thread's current C++ span: the default parent
  bool other_task = false;    // the thread's current span is another task's
};

/// python_current() for the calling thread and task. `for_exported`: the parent a span of an
/// exported group takes, and what get_current_span_context() returns, which under a span
/// recorded only (flight recorder), Python's or C++'s, is that span's nearest exported ancestor
/// (none if it has none), as without the recorder. `exported`, when given, receives in the same
/// pass what python_current(true).context would be (a recorded-only span's start needs both).
/// Requires the GIL.
PythonCurrent python_current(bool for_exported = false, lens::SpanContext* exported = nullptr);

// ------------------------------------------------------------------------------------------------
// What each file adds to the module (module.cpp calls them in this order).

/// managed_span, is_span_group_enabled, SpanBase, current, new_span and the package's hooks.
void bind_hot_path(py::module_& m);
/// SpanExporter, PythonSpanExporter, InMemorySpanExporter.
void bind_exporters(py::module_& m);
/// The errors, catalogs, switches, configuration, strategies, set-up and TelemetryHandle.
void bind_setup(py::module_& m);
/// Meters, the instrument types and log().
void bind_metrics(py::module_& m);
/// SpanContext, contexts, inject / extract, attached contexts, child_environment.
void bind_propagation(py::module_& m);

}  // namespace nemo_lens_cpp
