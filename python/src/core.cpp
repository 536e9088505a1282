// nemo_lens_cpp._core: the compiled part of the Python package, on top of libnemo_lens (the same
// library C++ extensions link, so one process has one set of switches and one pipeline).
//
// Two layers. The hot paths are written against the CPython API: managed_span() and
// is_span_group_enabled() find a per-group gate in a dict keyed by the group string, a disabled
// site gets a static no-op context manager (so a disabled `with managed_span(...)` costs less than
// a `with nullcontext()`), and an enabled span is SpanBase, a compiled type that starts and ends a
// C++ span with no Python frame. Everything else is pybind11. The GIL is released whenever lens
// may wait (set-up, flush, shutdown); no lens thread ever calls into Python except an export
// strategy, which set-up calls on the calling thread.
#include <Python.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "nemo/lens/detail/gate.hpp"
#include "nemo/lens/lens.hpp"
#include "resources/resource.hpp"

namespace py = pybind11;
namespace lens = nemo::lens;

namespace {

// ------------------------------------------------------------------------------------------------
// The hot paths (CPython API).

// A gate per group string, as LENS_SPAN has one per site. Immortal: sites hold pointers to them.
struct PyGate {
  std::string group;
  lens::detail::SiteGate gate{{}, &lens::detail::g_unresolved_flag};
};

constexpr Py_ssize_t kMaxGates = 4096;  // distinct group strings; beyond: looked up by name
PyObject* g_span_gates = nullptr;       // dict: group str -> capsule of PyGate (span site flag)
PyObject* g_enabled_gates = nullptr;    // dict: group str -> capsule of PyGate (enabled flag)
PyObject* g_enabled_impl = nullptr;     // spans._enabled_managed_span, set by the package
PyObject* g_noop = nullptr;             // the no-op context manager
PyObject* g_unset_route = nullptr;      // spans._unset_managed_span while lens is not set up

// The gate for `group` (a str) in `gates`; null when the table is full or memory ran out (the
// caller then asks by name). Requires the GIL.
lens::detail::SiteGate* gate_for(PyObject* gates, PyObject* group) {
  if (PyObject* cap = PyDict_GetItemWithError(gates, group)) {
    return &static_cast<PyGate*>(PyCapsule_GetPointer(cap, nullptr))->gate;
  }
  if (PyErr_Occurred() || PyDict_Size(gates) >= kMaxGates) {
    PyErr_Clear();
    return nullptr;
  }
  Py_ssize_t n = 0;
  const char* utf8 = PyUnicode_AsUTF8AndSize(group, &n);
  if (utf8 == nullptr) {
    PyErr_Clear();
    return nullptr;
  }
  auto* g = new (std::nothrow) PyGate{std::string(utf8, static_cast<std::size_t>(n))};
  if (g == nullptr) return nullptr;
  g->gate.group = g->group;
  PyObject* cap = PyCapsule_New(g, nullptr, nullptr);  // never freed: the gate is immortal
  if (cap == nullptr || PyDict_SetItem(gates, group, cap) != 0) {
    PyErr_Clear();
    Py_XDECREF(cap);
    return nullptr;  // g leaks; memory is short anyway
  }
  Py_DECREF(cap);
  return &g->gate;
}

// The UTF-8 of the str `s`. One Python cannot encode (a lone surrogate, e.g. from a file name
// decoded with surrogateescape) has each such code point replaced by '?', as attribute values do;
// the view then lives until 16 more such strings were converted, long enough for the call it is
// made for. Requires the GIL, which also guards the ring.
std::string_view utf8_of(PyObject* s) {
  Py_ssize_t n = 0;
  const char* p = PyUnicode_AsUTF8AndSize(s, &n);
  if (p != nullptr) return {p, static_cast<std::size_t>(n)};
  PyErr_Clear();
  PyObject* bytes = PyUnicode_AsEncodedString(s, "utf-8", "replace");
  if (bytes == nullptr) {
    PyErr_Clear();
    return {};
  }
  static PyObject* ring[16] = {};
  static std::size_t next = 0;
  PyObject*& slot = ring[next++ % std::size(ring)];
  Py_XSETREF(slot, bytes);
  return {PyBytes_AS_STRING(bytes), static_cast<std::size_t>(PyBytes_GET_SIZE(bytes))};
}

PyObject* new_span(PyObject* group, PyObject* name, PyObject* attributes, bool record_exception,
                   const nemo::lens::SpanContext* parent, int kind);

// managed_span(group, name, **attributes): the no-op context manager when the group's sites are
// closed, else spans._enabled_managed_span(...) with the same arguments.
PyObject* fast_managed_span(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t positional = PyVectorcall_NARGS(nargs);
  if (positional >= 1 && PyUnicode_CheckExact(args[0])) {
    lens::detail::SiteGate* gate = gate_for(g_span_gates, args[0]);
    const bool open = gate != nullptr ? lens::detail::span_site_enabled(*gate)
                                      : lens::is_span_group_enabled(utf8_of(args[0]));
    if (!open && positional == 2 && PyUnicode_Check(args[1])) {
      Py_INCREF(g_noop);
      return g_noop;
    }
  }
  if (g_enabled_impl == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "nemo_lens_cpp is not initialised");
    return nullptr;
  }
  // Not set up: a program that configured OpenTelemetry itself gets its spans there.
  if (g_unset_route != nullptr) return PyObject_Vectorcall(g_unset_route, args, nargs, kwnames);
  // Enabled: the span, unstarted, with its keyword arguments as attributes (but `tracer`, which
  // the Python implementation honours when it is not None).
  if (positional == 2 && PyUnicode_CheckExact(args[0]) && PyUnicode_Check(args[1])) {
    PyObject* attributes = nullptr;
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    if (nkw > 0) {
      attributes = PyDict_New();
      if (attributes == nullptr) return nullptr;
      for (Py_ssize_t i = 0; i < nkw; ++i) {
        PyObject* key = PyTuple_GET_ITEM(kwnames, i);
        if (PyUnicode_CompareWithASCIIString(key, "tracer") == 0) {
          if (args[positional + i] == Py_None) continue;
          Py_DECREF(attributes);
          return PyObject_Vectorcall(g_enabled_impl, args, nargs, kwnames);
        }
        if (PyDict_SetItem(attributes, key, args[positional + i]) != 0) {
          Py_DECREF(attributes);
          return nullptr;
        }
      }
    }
    PyObject* span = new_span(args[0], args[1], attributes, true, nullptr, 1);
    Py_XDECREF(attributes);
    return span;
  }
  // Arguments the Python implementation checks and reports.
  return PyObject_Vectorcall(g_enabled_impl, args, nargs, kwnames);
}

// is_span_group_enabled(group) -> bool: the group's enabled flag.
PyObject* fast_is_span_group_enabled(PyObject*, PyObject* group) {
  if (!PyUnicode_Check(group)) {
    PyErr_Format(PyExc_TypeError, "is_span_group_enabled() expects a str, got %.100s",
                 Py_TYPE(group)->tp_name);
    return nullptr;
  }
  bool on = false;
  if (lens::detail::SiteGate* gate =
          PyUnicode_CheckExact(group) ? gate_for(g_enabled_gates, group) : nullptr) {
    on = lens::detail::site_enabled(*gate);
  } else {
    on = lens::is_span_group_enabled(utf8_of(group));
  }
  return PyBool_FromLong(on);
}

PyObject* noop_enter(PyObject*, PyObject*) { Py_RETURN_NONE; }
PyObject* noop_exit(PyObject*, PyObject* const*, Py_ssize_t) { Py_RETURN_FALSE; }

PyMethodDef kNoopMethods[] = {
    {"__enter__", noop_enter, METH_NOARGS, "Returns None: the span group is off."},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(noop_exit)),
     METH_FASTCALL, "Does nothing; exceptions propagate."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kNoopSlots[] = {
    {Py_tp_doc,
     const_cast<char*>("What managed_span() returns when its group is off: `with` yields None.")},
    {Py_tp_methods, kNoopMethods},
    {0, nullptr}};

PyType_Spec kNoopSpec = {"nemo_lens_cpp._core.NoopSpan", sizeof(PyObject), 0, Py_TPFLAGS_DEFAULT,
                         kNoopSlots};

PyMethodDef kFastFunctions[] = {
    {"managed_span", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(fast_managed_span)),
     METH_FASTCALL | METH_KEYWORDS,
     "managed_span(group, name, tracer=None, **attributes)\n"
     "\n"
     "A context manager for a span of span group `group`. When the group is off, the body runs, "
     "`with`\n"
     "yields None and nothing is recorded (about the cost of `with contextlib.nullcontext()`). "
     "When it\n"
     "is on, yields a Span, current for the block; an exception leaving the block is recorded "
     "(type,\n"
     "message, status ERROR) and re-raised. Attributes follow NeMo Lens' "
     "safe_set_span_attributes:\n"
     "None skipped, bool/int/float/str and lists of them kept, redacted keys masked. `tracer` is\n"
     "accepted for NeMo Lens compatibility and ignored.\n"},
    {"is_span_group_enabled", fast_is_span_group_enabled, METH_O,
     "is_span_group_enabled(group) -> bool: whether spans of `group` are enabled."},
    {nullptr, nullptr, 0, nullptr}};

// ------------------------------------------------------------------------------------------------
// Spans (pybind11).

std::uint64_t span_key(const lens::SpanId& id) {
  std::uint64_t v = 0;
  std::memcpy(&v, id.bytes.data(), sizeof v);
  return v;
}

// The spans Python started that are open now, by span id: a thread's current span that is one of
// them was started by Python code, perhaps by another asyncio task of the same thread.
std::mutex g_python_spans_mu;
std::unordered_set<std::uint64_t>& python_spans() {
  static auto* s = new std::unordered_set<std::uint64_t>();  // immortal: spans may end at exit
  return *s;
}

bool is_python_span(const lens::SpanContext& c) {
  std::lock_guard lock(g_python_spans_mu);
  return python_spans().count(span_key(c.span_id)) != 0;
}

// One attribute value as NeMo Lens' safe_set_span_attributes keeps it: a bool, int, float or str,
// or a list/tuple of one of those types. Anything else is skipped (false), never an error.
struct ValueHolder {
  std::string s;
  std::vector<bool> bools;
  std::vector<std::int64_t> ints;
  std::vector<double> doubles;
  std::vector<std::string> strings;
};

std::optional<lens::AttributeArg> to_attribute(const py::handle& v, ValueHolder& h) {
  PyObject* o = v.ptr();
  if (o == Py_None) return std::nullopt;
  if (PyBool_Check(o)) return lens::AttributeArg(o == Py_True);
  if (PyLong_Check(o)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return std::nullopt;  // beyond 64 bits: OpenTelemetry drops it too
    }
    return lens::AttributeArg(static_cast<std::int64_t>(x));
  }
  if (PyFloat_Check(o)) return lens::AttributeArg(PyFloat_AS_DOUBLE(o));
  if (PyUnicode_Check(o)) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(o, &n);
    if (p == nullptr) {  // lone surrogates: keep what can be kept
      PyErr_Clear();
      py::object b =
          py::reinterpret_steal<py::object>(PyUnicode_AsEncodedString(o, "utf-8", "replace"));
      if (!b) {
        PyErr_Clear();
        return std::nullopt;
      }
      h.s.assign(PyBytes_AS_STRING(b.ptr()), static_cast<std::size_t>(PyBytes_GET_SIZE(b.ptr())));
      return lens::AttributeArg(std::string_view(h.s));
    }
    return lens::AttributeArg(std::string_view(p, static_cast<std::size_t>(n)));
  }
  if (PyList_Check(o) || PyTuple_Check(o)) {
    py::sequence seq = py::reinterpret_borrow<py::sequence>(v);
    const std::size_t n = seq.size();
    if (n == 0) return lens::AttributeArg(h.strings);
    PyObject* first = seq[0].ptr();
    auto all = [&](auto&& pred) {
      for (std::size_t i = 0; i < n; ++i) {
        if (!pred(seq[i].ptr())) return false;
      }
      return true;
    };
    if (PyBool_Check(first) && all([](PyObject* e) { return PyBool_Check(e); })) {
      for (std::size_t i = 0; i < n; ++i) h.bools.push_back(seq[i].ptr() == Py_True);
      return lens::AttributeArg(h.bools);
    }
    if (PyLong_Check(first) &&
        all([](PyObject* e) { return PyLong_Check(e) && !PyBool_Check(e); })) {
      for (std::size_t i = 0; i < n; ++i) {
        int overflow = 0;
        const long long x = PyLong_AsLongLongAndOverflow(seq[i].ptr(), &overflow);
        if (overflow != 0) return std::nullopt;
        h.ints.push_back(x);
      }
      return lens::AttributeArg(h.ints);
    }
    if (PyFloat_Check(first) && all([](PyObject* e) { return PyFloat_Check(e); })) {
      for (std::size_t i = 0; i < n; ++i) h.doubles.push_back(PyFloat_AS_DOUBLE(seq[i].ptr()));
      return lens::AttributeArg(h.doubles);
    }
    if (PyUnicode_Check(first) && all([](PyObject* e) { return PyUnicode_Check(e); })) {
      for (std::size_t i = 0; i < n; ++i) {
        py::object b = py::reinterpret_steal<py::object>(
            PyUnicode_AsEncodedString(seq[i].ptr(), "utf-8", "replace"));
        if (!b) {
          PyErr_Clear();
          return std::nullopt;
        }
        h.strings.emplace_back(PyBytes_AS_STRING(b.ptr()),
                               static_cast<std::size_t>(PyBytes_GET_SIZE(b.ptr())));
      }
      return lens::AttributeArg(h.strings);
    }
  }
  return std::nullopt;
}

// Sets every attribute of `attributes` (a dict) that NeMo Lens would keep.
void set_attributes(lens::Span& span, const py::dict& attributes) {
  for (auto [k, v] : attributes) {
    if (!PyUnicode_Check(k.ptr())) continue;
    ValueHolder holder;
    if (auto arg = to_attribute(v, holder)) span.set_attribute(utf8_of(k.ptr()), *arg);
  }
}

py::object attribute_to_py(const lens::AttributeValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

py::dict attributes_to_py(const std::vector<lens::KeyValue>& kvs) {
  py::dict d;
  for (const auto& kv : kvs) d[py::str(kv.key)] = attribute_to_py(kv.value);
  return d;
}

/// A span Python started. The handle ends it at end() (or when the object is collected).
class PySpan {
 public:
  explicit PySpan(lens::Span span) : span_(std::move(span)) {
    const lens::SpanContext c = span_.context();
    if (c.is_valid()) {
      key_ = span_key(c.span_id);
      std::lock_guard lock(g_python_spans_mu);
      python_spans().insert(key_);
    }
  }
  PySpan(const PySpan&) = delete;
  PySpan& operator=(const PySpan&) = delete;
  ~PySpan() { end(); }

  void end() {
    span_.end();
    if (key_ != 0) {
      std::lock_guard lock(g_python_spans_mu);
      python_spans().erase(key_);
      key_ = 0;
    }
  }
  lens::Span& span() { return span_; }

 private:
  lens::Span span_;
  std::uint64_t key_ = 0;
};

// The attributes of one call (a dict), converted as to_attribute() keeps them (at most `max`), and
// the storage they point into.
struct CallAttributes {
  std::vector<ValueHolder> holders;
  std::vector<std::string> keys;
  std::vector<lens::Attribute> list;

  explicit CallAttributes(const py::handle& attributes, std::size_t max = SIZE_MAX) {
    if (attributes.is_none() || !PyDict_Check(attributes.ptr())) return;
    py::dict d = py::reinterpret_borrow<py::dict>(attributes);
    holders.resize(d.size());
    keys.reserve(d.size());  // the attributes view the keys: no reallocation below
    std::size_t i = 0;
    for (auto [k, v] : d) {
      if (list.size() == max) break;
      if (!PyUnicode_Check(k.ptr())) continue;
      if (auto arg = to_attribute(v, holders[i++])) {
        keys.emplace_back(utf8_of(k.ptr()));
        list.push_back({keys.back(), *arg});
      }
    }
  }
};

// Metrics, logs and span links: their C++ record calls take an initializer_list of attributes; a
// Python attribute dict (at most kMaxListAttributes kept, as converted by to_attribute) becomes
// one.

constexpr std::size_t kMaxListAttributes = 8;

template <class F, std::size_t... I>
void call_with_list(const std::vector<lens::Attribute>& a, F& f, std::index_sequence<I...>) {
  f({a[I]...});
}

// Calls f(std::initializer_list<Attribute>) with the converted attributes.
template <class F>
void with_attribute_list(const CallAttributes& attributes, F f) {
  const auto& a = attributes.list;
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

// ------------------------------------------------------------------------------------------------
// Enabled spans (CPython API): SpanBase, the type of what `with managed_span(...)` yields when its
// group is on. The package's Span subclasses it (adding the friendly methods in Python); the
// contextvar `current` holds the innermost span of each thread / asyncio task (a SpanBase, or a
// SpanContext attached by Context.attach()).

PyObject* g_current_var = nullptr;    // contextvars.ContextVar("nemo_lens_cpp.current")
PyTypeObject* g_span_type = nullptr;  // the package's Span (a SpanBase subclass)
PyObject* g_bridge_parent = nullptr;  // bridge_opentelemetry()'s current-parent callable, or null

struct SpanObject {
  PyObject_HEAD PyObject* group;  // str
  PyObject* name;                 // str
  PyObject* attributes;           // dict or null
  PyObject* token;                // the contextvar token while entered, else null
  lens::Span span;
  lens::Span attached;        // while a span _start() began is entered: its context, for C++
  lens::SpanContext context;  // valid once started, when the span has ids
  lens::SpanContext parent;   // an explicit parent (valid) or none
  std::uint64_t key;          // in python_spans() while open; 0: not registered
  int kind;
  bool record_exception;
  bool started;
  bool started_unentered;  // started by _start(): the first __enter__ makes it current
};

bool is_span_object(PyObject* o);

// The lens context held by the contextvar's value `v` (a SpanObject or a SpanContext); invalid
// for anything else.
lens::SpanContext context_of(PyObject* v) {
  if (v == nullptr || v == Py_None) return {};
  if (is_span_object(v)) return reinterpret_cast<SpanObject*>(v)->context;
  try {
    return py::cast<lens::SpanContext>(py::handle(v));
  } catch (const py::cast_error&) {
    return {};
  }
}

void unregister(SpanObject* s) {
  if (s->key == 0) return;
  std::lock_guard lock(g_python_spans_mu);
  python_spans().erase(s->key);
  s->key = 0;
}

// The current span as Python code on this thread / asyncio task sees it:
// - the thread's current span when C++ started it (Python code called back from a C++ span);
// - else the span current in this task (the contextvar), or the current OpenTelemetry span when
//   the bridge is installed and no lens span is current;
// - else none, even when another task's Python span is the thread's current span (`other_task`).
struct PythonCurrent {
  lens::SpanContext context;  // invalid: none
  bool from_cpp = false;      // the thread's current C++ span: the default parent
  bool other_task = false;    // the thread's current span is another task's
};

PythonCurrent python_current() {
  PythonCurrent out;
  const lens::SpanContext top = lens::current_span_context();
  if (top.is_valid() && !is_python_span(top)) {
    out.context = top;
    out.from_cpp = true;
    return out;
  }
  PyObject* v = nullptr;
  if (PyContextVar_Get(g_current_var, nullptr, &v) == 0 && v != nullptr) {
    out.context = context_of(v);
    Py_DECREF(v);
  } else {
    PyErr_Clear();
  }
  if (!out.context.is_valid() && g_bridge_parent != nullptr) {
    PyObject* b = PyObject_CallNoArgs(g_bridge_parent);
    if (b != nullptr) {
      out.context = context_of(b);
      Py_DECREF(b);
    } else {
      PyErr_Clear();  // a failing bridge gives no parent, never an exception
    }
  }
  out.other_task = !out.context.is_valid() && top.is_valid();
  return out;
}

// Starts `s`, under its explicit parent or python_current(). `make_current` is false for
// _start(): the span is then not the thread's current span for C++ either.
void start(SpanObject* s, bool make_current = true) {
  lens::SpanStartOptions options;
  options.current = make_current;
  const std::string_view group = utf8_of(s->group);
  options.group = group;
  options.kind = static_cast<lens::SpanKind>(s->kind);
  PythonCurrent current;
  if (s->parent.is_valid()) {
    options.parent = &s->parent;
  } else {
    current = python_current();
    if (current.context.is_valid() && !current.from_cpp) options.parent = &current.context;
    options.root = current.other_task;  // not a child of another task's span
  }
  s->span = lens::start_span(utf8_of(s->name), options, {});
  s->started = true;
  if (!s->span.is_recording()) return;
  s->context = s->span.context();
  if (s->attributes != nullptr) {
    set_attributes(s->span, py::reinterpret_borrow<py::dict>(s->attributes));
  }
  s->key = span_key(s->context.span_id);
  std::lock_guard lock(g_python_spans_mu);
  python_spans().insert(s->key);
}

void end(SpanObject* s) {
  s->attached.end();
  s->span.end();
  unregister(s);
}

// A new SpanBase-typed object (the package's Span) that is not started yet. Steals nothing.
PyObject* new_span(PyObject* group, PyObject* name, PyObject* attributes, bool record_exception,
                   const lens::SpanContext* parent, int kind) {
  PyTypeObject* type = g_span_type;
  auto* s = reinterpret_cast<SpanObject*>(type->tp_alloc(type, 0));
  if (s == nullptr) return nullptr;
  new (&s->span) lens::Span();
  new (&s->attached) lens::Span();
  new (&s->context) lens::SpanContext();
  new (&s->parent) lens::SpanContext(parent != nullptr ? *parent : lens::SpanContext{});
  Py_INCREF(group);
  s->group = group;
  Py_INCREF(name);
  s->name = name;
  Py_XINCREF(attributes);
  s->attributes = attributes;
  s->kind = kind;
  s->record_exception = record_exception;
  return reinterpret_cast<PyObject*>(s);
}

void span_dealloc(PyObject* o) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  end(s);  // a span dropped without __exit__ ends here
  s->attached.~Span();
  s->span.~Span();
  s->context.~SpanContext();
  s->parent.~SpanContext();
  Py_XDECREF(s->group);
  Py_XDECREF(s->name);
  Py_XDECREF(s->attributes);
  Py_XDECREF(s->token);
  PyTypeObject* type = Py_TYPE(o);
  type->tp_free(o);
  if (type->tp_flags & Py_TPFLAGS_HEAPTYPE) Py_DECREF(type);
}

PyObject* span_enter(PyObject* o, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (s->started && !s->started_unentered) {
    PyErr_SetString(PyExc_RuntimeError, "a span can be entered only once");
    return nullptr;
  }
  const bool began_unentered = s->started_unentered;
  if (!s->started) start(s);
  s->started_unentered = false;
  if (s->context.is_valid() && s->key != 0) {  // not when it has ended meanwhile
    s->token = PyContextVar_Set(g_current_var, o);
    if (s->token == nullptr) PyErr_Clear();
    // Started not current by _start(): current for C++ from now on, as an attached context.
    if (began_unentered) s->attached = lens::attach_context(s->context);
  }
  Py_INCREF(o);
  return o;
}

PyObject* span_exit(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (s->token != nullptr) {
    if (PyContextVar_Reset(g_current_var, s->token) != 0) PyErr_Clear();  // another context
    Py_CLEAR(s->token);
  }
  PyObject* exc = nargs >= 2 ? args[1] : Py_None;
  if (exc != Py_None && s->record_exception && s->span.is_recording()) {
    py::object type_name = py::reinterpret_steal<py::object>(PyType_GetQualName(Py_TYPE(exc)));
    py::object message = py::reinterpret_steal<py::object>(PyObject_Str(exc));
    if (!type_name || !message) PyErr_Clear();
    const std::string_view type = type_name ? utf8_of(type_name.ptr()) : "unknown";
    const std::string_view text = message ? utf8_of(message.ptr()) : "";
    s->span.record_exception(type, text);  // sets status ERROR with the message
  }
  end(s);
  Py_RETURN_FALSE;
}

PyObject* span_end(PyObject* o, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (!s->started) {  // ended before it started: nothing was timed, nothing is recorded
    s->started = true;
    Py_RETURN_NONE;
  }
  end(s);
  Py_RETURN_NONE;
}

// _start(): starts the span without making it current (OpenTelemetry's tracer.start_span).
PyObject* span_start(PyObject* o, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (!s->started) {
    start(s, /*current=*/false);
    s->started_unentered = true;
  }
  Py_RETURN_NONE;
}

// _add_link(context, attributes): a link to `context` (a SpanContext), on a started span.
PyObject* span_add_link(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (nargs != 2 || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_add_link(context: SpanContext, attributes: dict)");
    return nullptr;
  }
  const lens::SpanContext target = context_of(args[0]);
  if (!target.is_valid() || !s->span.is_recording()) Py_RETURN_NONE;
  const CallAttributes attributes(args[1], kMaxListAttributes);
  with_attribute_list(attributes, [&](std::initializer_list<lens::Attribute> list) {
    s->span.add_link(target, list);
  });
  Py_RETURN_NONE;
}

PyObject* span_is_recording(PyObject* o, PyObject*) {
  return PyBool_FromLong(reinterpret_cast<SpanObject*>(o)->span.is_recording());
}

PyObject* span_get_context(PyObject* o, PyObject*) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (!s->context.is_valid()) Py_RETURN_NONE;
  try {
    return py::cast(s->context).release().ptr();
  } catch (const py::error_already_set& e) {
    PyErr_SetString(PyExc_RuntimeError, e.what());
    return nullptr;
  }
}

PyObject* span_set_attributes(PyObject* o, PyObject* attributes) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (PyDict_Check(attributes) && s->span.is_recording()) {
    set_attributes(s->span, py::reinterpret_borrow<py::dict>(attributes));
  }
  Py_RETURN_NONE;
}

PyObject* span_add_event(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyDict_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_add_event(name: str, attributes: dict)");
    return nullptr;
  }
  if (!s->span.is_recording()) Py_RETURN_NONE;
  // Events take their attributes at once: converted into owned storage first.
  const CallAttributes attributes(args[1]);
  s->span.add_event(utf8_of(args[0]), attributes.list);
  Py_RETURN_NONE;
}

PyObject* span_set_status(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (nargs != 2 || !PyLong_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_set_status(code: int, description: str)");
    return nullptr;
  }
  const long code = PyLong_AsLong(args[0]);
  if (code >= 0 && code <= 2) {
    s->span.set_status(static_cast<lens::StatusCode>(code), utf8_of(args[1]));
  }
  Py_RETURN_NONE;
}

PyObject* span_record_exception(PyObject* o, PyObject* const* args, Py_ssize_t nargs) {
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (nargs != 2 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1])) {
    PyErr_SetString(PyExc_TypeError, "_record_exception(type: str, message: str)");
    return nullptr;
  }
  s->span.record_exception(utf8_of(args[0]), utf8_of(args[1]));
  Py_RETURN_NONE;
}

template <auto F>
PyCFunction fastcall() {
  return reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)()>(F));
}

PyMethodDef kSpanMethods[] = {
    {"__enter__", span_enter, METH_NOARGS, "Starts the span and makes it current; returns it."},
    {"__exit__", fastcall<span_exit>(), METH_FASTCALL,
     "Records an exception leaving the block (type, message, status ERROR) and ends the span."},
    {"end", span_end, METH_NOARGS, "Ends the span now (idempotent)."},
    {"_start", span_start, METH_NOARGS, "Starts the span without making it current."},
    {"_add_link", fastcall<span_add_link>(), METH_FASTCALL, "Adds a link to a SpanContext."},
    {"is_recording", span_is_recording, METH_NOARGS, "Whether the span records."},
    {"get_span_context", span_get_context, METH_NOARGS,
     "The span's SpanContext; None when it has none (not recording)."},
    {"_set_attributes", span_set_attributes, METH_O, "Sets the attributes of a dict."},
    {"_add_event", fastcall<span_add_event>(), METH_FASTCALL, "Adds an event."},
    {"_set_status", fastcall<span_set_status>(), METH_FASTCALL, "Sets the status."},
    {"_record_exception", fastcall<span_record_exception>(), METH_FASTCALL,
     "Records an exception by type name and message."},
    {nullptr, nullptr, 0, nullptr}};

PyType_Slot kSpanSlots[] = {
    {Py_tp_doc, const_cast<char*>("The compiled base of nemo_lens_cpp.Span.")},
    {Py_tp_dealloc, reinterpret_cast<void*>(span_dealloc)},
    {Py_tp_methods, kSpanMethods},
    {0, nullptr}};

PyType_Spec kSpanSpec = {"nemo_lens_cpp._core.SpanBase", sizeof(SpanObject), 0,
                         Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE, kSpanSlots};

PyTypeObject* g_span_base = nullptr;

bool is_span_object(PyObject* o) { return PyObject_TypeCheck(o, g_span_base) != 0; }

// new_span(group, name, attributes, record_exception, parent, kind): an unstarted span, for
// span_cm() and start_span().
PyObject* py_new_span(PyObject*, PyObject* const* args, Py_ssize_t nargs) {
  if (nargs != 6 || !PyUnicode_Check(args[0]) || !PyUnicode_Check(args[1]) ||
      !(args[2] == Py_None || PyDict_Check(args[2])) || !PyLong_Check(args[5])) {
    PyErr_SetString(PyExc_TypeError,
                    "new_span(group: str, name: str, attributes: dict | None, record_exception, "
                    "parent: SpanContext | None, kind: int)");
    return nullptr;
  }
  if (g_span_type == nullptr) {
    PyErr_SetString(PyExc_RuntimeError, "nemo_lens_cpp is not initialised");
    return nullptr;
  }
  const lens::SpanContext parent = context_of(args[4]);
  PyObject* attributes = args[2] == Py_None ? nullptr : args[2];
  return new_span(args[0], args[1], attributes, PyObject_IsTrue(args[3]) == 1,
                  parent.is_valid() ? &parent : nullptr, static_cast<int>(PyLong_AsLong(args[5])));
}

// ------------------------------------------------------------------------------------------------
// Configuration and set-up.

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
  return d;
}

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

// The unsigned big-endian integer of `bytes` (an id's W3C byte order) as a Python int.
template <std::size_t N>
py::object big_endian_int(const std::array<std::uint8_t, N>& bytes) {
  PyObject* v = _PyLong_FromByteArray(bytes.data(), N, /*little_endian=*/0, /*is_signed=*/0);
  if (v == nullptr) throw py::error_already_set();
  return py::reinterpret_steal<py::object>(v);
}

std::chrono::milliseconds millis(double ms) {
  if (!(ms >= 0)) ms = 0;
  return std::chrono::milliseconds(static_cast<std::int64_t>(std::min(ms, 1e12)));
}

// Python's exceptions for lens' errors: ValueError subclasses, as NeMo Lens raises ValueError.
PyObject* g_span_group_error = nullptr;
PyObject* g_config_error = nullptr;

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

PYBIND11_MODULE(_core, m) {
  m.doc() = "The compiled part of nemo_lens_cpp; use the package, not this module.";
  m.attr("__version__") = NEMO_LENS_VERSION_STRING;

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

  // The hot paths.
  py::object noop_type = py::reinterpret_steal<py::object>(PyType_FromSpec(&kNoopSpec));
  if (!noop_type) throw py::error_already_set();
  g_noop = PyObject_CallNoArgs(noop_type.ptr());
  g_span_gates = PyDict_New();
  g_enabled_gates = PyDict_New();
  if (g_noop == nullptr || g_span_gates == nullptr || g_enabled_gates == nullptr) {
    throw py::error_already_set();
  }
  if (PyModule_AddFunctions(m.ptr(), kFastFunctions) != 0) throw py::error_already_set();
  m.def("_set_unset_route", [](py::object fn) {
    Py_XDECREF(g_unset_route);
    g_unset_route = fn.is_none() ? nullptr : fn.release().ptr();
  });
  m.def("_set_enabled_impl", [](py::object fn) {
    Py_XDECREF(g_enabled_impl);
    g_enabled_impl = fn.release().ptr();  // kept for the life of the process
  });
  g_span_base = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kSpanSpec));
  g_current_var = PyContextVar_New("nemo_lens_cpp.current", nullptr);
  if (g_span_base == nullptr || g_current_var == nullptr) throw py::error_already_set();
  m.attr("SpanBase") = py::handle(reinterpret_cast<PyObject*>(g_span_base));
  m.attr("current") = py::handle(g_current_var);
  static PyMethodDef new_span_def = {"new_span", fastcall<py_new_span>(), METH_FASTCALL,
                                     "An unstarted span (span_cm, start_span)."};
  m.attr("new_span") = py::reinterpret_steal<py::object>(PyCFunction_New(&new_span_def, nullptr));
  m.def("_set_span_type", [](py::object type) {
    if (!PyType_Check(type.ptr()) ||
        !PyType_IsSubtype(reinterpret_cast<PyTypeObject*>(type.ptr()), g_span_base)) {
      throw py::type_error("_set_span_type() expects a subclass of SpanBase");
    }
    Py_XDECREF(reinterpret_cast<PyObject*>(g_span_type));
    g_span_type = reinterpret_cast<PyTypeObject*>(type.release().ptr());
  });
  m.def("_set_bridge_parent", [](py::object fn) {
    Py_XDECREF(g_bridge_parent);
    g_bridge_parent = fn.is_none() ? nullptr : fn.release().ptr();
  });

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
         py::object strategy, py::object to_config, bool allow_reinit) {
        auto catalog =
            std::make_shared<const lens::SpanGroupCatalog>(make_catalog(groups, presets));
        const lens::NemoLensConfig c = config_from_py(config, std::move(catalog));
        lens::SetupOptions options;
        for (auto [k, v] : resource_attributes) {
          ValueHolder holder;
          if (auto arg = to_attribute(v, holder)) {
            lens::KeyValue kv;
            kv.key = py::str(k).cast<std::string>();
            switch (arg->type()) {  // own the value: the holder goes out of scope
              case lens::AttributeArg::Type::kBool:
                kv.value = arg->as_bool();
                break;
              case lens::AttributeArg::Type::kInt:
                kv.value = arg->as_int();
                break;
              case lens::AttributeArg::Type::kDouble:
                kv.value = arg->as_double();
                break;
              case lens::AttributeArg::Type::kString:
                kv.value = std::string(arg->as_string());
                break;
              case lens::AttributeArg::Type::kBoolArray:
                kv.value = holder.bools;
                break;
              case lens::AttributeArg::Type::kIntArray:
                kv.value = holder.ints;
                break;
              case lens::AttributeArg::Type::kDoubleArray:
                kv.value = holder.doubles;
                break;
              default:
                kv.value = holder.strings;
                break;
            }
            options.resource_attributes.push_back(std::move(kv));
          }
        }
        options.exporter = std::move(exporter);
        if (!strategy.is_none()) {
          options.strategy =
              python_strategy(strategy, to_config, "setup_telemetry's export_strategy");
        }
        options.allow_reinit = allow_reinit;
        py::gil_scoped_release nogil;  // a previous set-up may be flushed; a strategy takes it
        return lens::setup_telemetry(c, rank, world_size, std::move(options));
      },
      py::arg("config"), py::arg("groups"), py::arg("presets"), py::arg("rank"),
      py::arg("world_size"), py::arg("resource_attributes"), py::arg("exporter"),
      py::arg("strategy"), py::arg("to_config"), py::arg("allow_reinit"));

  // Metrics and logs.
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

  // Contexts.
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
    const PythonCurrent c = python_current();
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
  // a Python span, so that the asyncio rule above applies to it too.
  py::class_<PySpan>(m, "AttachedContext", "A context attached as the thread's current span.")
      .def("end", &PySpan::end, "Detaches it (idempotent; any thread).");
  m.def(
      "attach_context",
      [](const lens::SpanContext& c) { return std::make_unique<PySpan>(lens::attach_context(c)); },
      py::arg("context"));
}
