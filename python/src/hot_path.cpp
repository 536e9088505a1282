// The hot path of _core, written against the CPython API: managed_span() and
// is_span_group_enabled() find a per-group gate in a dict keyed by the group string, a disabled
// site gets a static no-op context manager (so a disabled `with managed_span(...)` costs less than
// a `with nullcontext()`), and an enabled span is SpanBase, a compiled type that starts and ends a
// C++ span with no Python frame. What an enabled span costs beyond the C++ span is mostly
// CPython's: the contextvar set and reset (the largest part), the call and the `with`; what is ours
// allocates nothing it can avoid (its keyword attributes stay a tuple and go with the C++ start,
// `with` gets its bound methods from a free list, the registry of open spans takes no lock).
// Uses the attribute conversion (attributes.cpp) and nothing else of _core; the other files use
// it through core.hpp.
#include <Python.h>        // first, as Python asks
#include <structmember.h>  // T_PYSSIZET, READONLY: the vectorcall offsets

#include <cstdint>
#include <cstring>
#include <new>
#include <vector>

#include "core.hpp"
#include "nemo/lens/detail/gate.hpp"

namespace nemo_lens_cpp {

// ------------------------------------------------------------------------------------------------
// The spans Python started that are open now, by span key.

namespace {

// A set of span keys (never 0): open addressing with linear probing, so that a span's start and
// end allocate nothing (it allocates only to grow). Not thread-safe: the GIL guards the one
// instance, as every caller holds it.
class SpanKeySet {
 public:
  bool contains(std::uint64_t key) const noexcept {
    for (std::size_t i = home(key);; i = (i + 1) & mask_) {
      if (slots_[i] == key) return true;
      if (slots_[i] == 0) return false;
    }
  }

  // Throws std::bad_alloc when it cannot grow (the set is then unchanged).
  void insert(std::uint64_t key) {
    if ((count_ + 1) * 2 > slots_.size()) grow();
    std::size_t i = home(key);
    for (; slots_[i] != 0; i = (i + 1) & mask_) {
      if (slots_[i] == key) return;
    }
    slots_[i] = key;
    ++count_;
  }

  void erase(std::uint64_t key) noexcept {
    std::size_t hole = home(key);
    for (; slots_[hole] != key; hole = (hole + 1) & mask_) {
      if (slots_[hole] == 0) return;
    }
    // Backward-shift deletion: an entry after the hole in its run moves into it unless its home
    // lies after the hole, so every entry stays reachable from its home without tombstones.
    for (std::size_t j = (hole + 1) & mask_; slots_[j] != 0; j = (j + 1) & mask_) {
      if (((j - home(slots_[j])) & mask_) >= ((j - hole) & mask_)) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = 0;
    --count_;
  }

 private:
  // Span ids are random, but a test's id generator may count: Fibonacci hashing spreads both.
  std::size_t home(std::uint64_t key) const noexcept {
    return static_cast<std::size_t>((key * 0x9E3779B97F4A7C15ULL) >> shift_);
  }

  void grow() {
    std::vector<std::uint64_t> old(slots_.size() * 2, 0);
    old.swap(slots_);
    mask_ = slots_.size() - 1;
    --shift_;
    count_ = 0;
    for (const std::uint64_t key : old) {
      if (key != 0) insert(key);
    }
  }

  std::vector<std::uint64_t> slots_ = std::vector<std::uint64_t>(64, 0);
  std::size_t mask_ = 63;
  int shift_ = 58;  // 64 - log2(slots_.size())
  std::size_t count_ = 0;
};

SpanKeySet& python_spans() {
  static auto* s = new SpanKeySet();  // immortal: spans may end at exit
  return *s;
}

bool is_python_span(const lens::SpanContext& c) {
  return python_spans().contains(span_key(c.span_id));
}

}  // namespace

std::uint64_t span_key(const lens::SpanId& id) {
  std::uint64_t v = 0;
  std::memcpy(&v, id.bytes.data(), sizeof v);
  return v;
}

void register_python_span(std::uint64_t key) noexcept {
  if (key == 0) return;
  try {
    python_spans().insert(key);
  } catch (const std::bad_alloc&) {
    // Out of memory: the span counts as C++'s, so a Python span started under it in another
    // asyncio task of this thread may take it as its parent.
  }
}

void unregister_python_span(std::uint64_t key) noexcept {
  if (key != 0) python_spans().erase(key);
}

namespace {

// ------------------------------------------------------------------------------------------------
// The gates.

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

// The last gates found in one of the two dicts, by the identity of the group str: a site passes
// the same str object (a constant) each time, so most calls end here, before the dict lookup.
// Each entry holds a reference to its str, so that an identity seen here is never a new
// object's. Guarded by the GIL.
struct GateCache {
  static constexpr std::size_t kSize = 16;
  struct Entry {
    PyObject* group = nullptr;
    lens::detail::SiteGate* gate = nullptr;
  };
  Entry entries[kSize];

  static std::size_t index(PyObject* group) {
    return (reinterpret_cast<std::uintptr_t>(group) >> 4) % kSize;  // objects are 16-aligned
  }
};
GateCache g_span_gate_cache;
GateCache g_enabled_gate_cache;

lens::detail::SiteGate* gate_in_dict(PyObject* gates, PyObject* group);

// The gate for `group` (a str) in `gates` (through `cache`); null when the table is full or
// memory ran out (the caller then asks by name). Requires the GIL.
lens::detail::SiteGate* gate_for(PyObject* gates, GateCache& cache, PyObject* group) {
  GateCache::Entry& e = cache.entries[GateCache::index(group)];
  if (e.group == group) return e.gate;
  lens::detail::SiteGate* gate = gate_in_dict(gates, group);
  if (gate != nullptr) {
    Py_INCREF(group);
    PyObject* old = e.group;
    e.group = group;
    e.gate = gate;
    Py_XDECREF(old);  // last: its deallocation cannot see the entry half-written
  }
  return gate;
}

// The gate for `group` in `gates`, made on first use.
lens::detail::SiteGate* gate_in_dict(PyObject* gates, PyObject* group) {
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

// ------------------------------------------------------------------------------------------------
// Enabled spans (CPython API): SpanBase, the type of what `with managed_span(...)` yields when its
// group is on. The package's Span subclasses it (adding the friendly methods in Python); the
// contextvar `current` holds the innermost span of each thread / asyncio task (a SpanBase, or a
// SpanContext attached by Context.attach()).

PyObject* g_current_var = nullptr;    // contextvars.ContextVar("nemo_lens_cpp.current")
PyTypeObject* g_span_type = nullptr;  // the package's Span (a SpanBase subclass)
PyObject* g_bridge_parent = nullptr;  // bridge_opentelemetry()'s current-parent callable, or null
// What the bridge's callable reads, when the bridge gave it: the ContextVar holding OpenTelemetry's
// current context (a dict) and the key of the span in it. A context without that span needs no
// call: a root span then costs no Python frame.
PyObject* g_bridge_var = nullptr;
PyObject* g_bridge_key = nullptr;

// Whether OpenTelemetry's current context surely holds no span (false: ask the bridge's callable).
bool bridge_context_has_no_span() {
  if (g_bridge_var == nullptr) return false;
  PyObject* ctx = nullptr;
  if (PyContextVar_Get(g_bridge_var, nullptr, &ctx) != 0) {
    PyErr_Clear();
    return false;
  }
  if (ctx == nullptr) return false;  // no value, no default: the callable decides
  bool none = false;
  if (PyDict_Check(ctx)) {
    PyObject* span = PyDict_GetItemWithError(ctx, g_bridge_key);  // borrowed
    if (span == nullptr && PyErr_Occurred()) {
      PyErr_Clear();
    } else {
      none = span == nullptr || span == Py_None;
    }
  }
  Py_DECREF(ctx);
  return none;
}

struct SpanObject {
  PyObject_HEAD PyObject* group;  // str
  PyObject* name;                 // str
  PyObject* attributes;           // a dict; the values of managed_span()'s keywords (a tuple); null
  PyObject* attribute_names;      // with a tuple of values: their names (the call's kwnames)
  PyObject* token;                // the contextvar token while entered, else null
  lens::Span span;
  lens::Span attached;        // while a span _start() began is entered: its context, for C++
  lens::SpanContext context;  // valid once started, when the span has ids
  // Recorded only (flight recorder): the context of its nearest exported ancestor, which the
  // exported spans started under it take as their parent; unused when `exported_self`.
  lens::SpanContext exported;
  lens::SpanContext parent;  // an explicit parent (valid) or none
  std::uint64_t key;         // in python_spans() while open; 0: not registered
  int kind;
  bool record_exception;
  bool started;
  bool started_unentered;  // started by _start(): the first __enter__ makes it current
  bool exported_self;      // its group is exported: exported spans under it take `context`
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

// What a span of an exported group started under the contextvar's value `v` takes as its
// parent: context_of(v), or for a recorded-only span its nearest exported ancestor's context.
lens::SpanContext exported_of(PyObject* v) {
  if (v != nullptr && is_span_object(v)) {
    const auto* s = reinterpret_cast<SpanObject*>(v);
    return s->exported_self ? s->context : s->exported;
  }
  return context_of(v);
}

void unregister(SpanObject* s) {
  if (s->key == 0) return;
  unregister_python_span(s->key);
  s->key = 0;
}

}  // namespace

PythonCurrent python_current(bool for_exported, lens::SpanContext* exported) {
  PythonCurrent out;
  const lens::SpanContext top = lens::detail::innermost_span_context();
  if (top.is_valid() && !is_python_span(top)) {
    out.context = for_exported ? lens::current_span_context() : top;
    if (exported != nullptr) *exported = for_exported ? out.context : lens::current_span_context();
    out.from_cpp = true;
    return out;
  }
  lens::SpanContext for_export;  // what python_current(true) gives, while `exported` wants it
  PyObject* v = nullptr;
  if (PyContextVar_Get(g_current_var, nullptr, &v) == 0 && v != nullptr) {
    out.context = for_exported ? exported_of(v) : context_of(v);
    if (exported != nullptr) for_export = for_exported ? out.context : exported_of(v);
    Py_DECREF(v);
  } else {
    PyErr_Clear();
  }
  // The bridge, asked once, gives whichever of the two has no span.
  const bool export_missing = exported != nullptr && !for_export.is_valid();
  if ((!out.context.is_valid() || export_missing) && g_bridge_parent != nullptr &&
      !bridge_context_has_no_span()) {
    PyObject* b = PyObject_CallNoArgs(g_bridge_parent);
    if (b != nullptr) {
      const lens::SpanContext from_bridge = context_of(b);
      if (!out.context.is_valid()) out.context = from_bridge;
      if (export_missing) for_export = from_bridge;
      Py_DECREF(b);
    } else {
      PyErr_Clear();  // a failing bridge gives no parent, never an exception
    }
  }
  if (exported != nullptr) *exported = for_export;
  out.other_task = !out.context.is_valid() && top.is_valid();
  return out;
}

namespace {

// Starts `s`, under its explicit parent or python_current(). `make_current` is false for
// _start(): the span is then not the thread's current span for C++ either.
void start(SpanObject* s, bool make_current = true, std::int64_t start_unix_nano = 0) {
  lens::SpanStartOptions options;
  options.current = make_current;
  options.start_time_unix_nano = start_unix_nano;
  const std::string_view group = utf8_of(s->group);
  options.group = group;
  options.kind = static_cast<lens::SpanKind>(s->kind);
  // Recorded only (flight recorder): the exported spans started under it take its nearest
  // exported ancestor as their parent, as it does when it is exported under a recorded-only one.
  lens::detail::SiteGate* gate = gate_for(g_span_gates, g_span_gate_cache, s->group);
  s->exported_self = gate == nullptr || !lens::detail::site_records_only(*gate);
  // Before the start, which makes this span the current one.
  lens::SpanContext* exported = s->exported_self ? nullptr : &s->exported;
  PythonCurrent current;
  if (s->parent.is_valid()) {
    options.parent = &s->parent;
    if (exported != nullptr) *exported = s->parent;
  } else {
    current = python_current(s->exported_self, exported);
    if (current.context.is_valid() && !current.from_cpp) options.parent = &current.context;
    options.root = current.other_task;  // not a child of another task's span
  }
  // The attributes go with the start when they can: start_span() stores them at less cost than
  // set_attribute() calls after it.
  StartAttributes first;
  bool with_start = false;
  if (s->attribute_names != nullptr) {
    with_start = first.convert(s->attribute_names, s->attributes);
  } else if (s->attributes != nullptr) {
    with_start = first.convert(s->attributes);
  } else {
    with_start = true;  // none
  }
  const std::string_view name = utf8_of(s->name);
  if (with_start) {
    with_attribute_list(first.view(), [&](std::initializer_list<lens::Attribute> list) {
      s->span = lens::start_span(name, options, list);
    });
  } else {
    s->span = lens::start_span(name, options, {});
  }
  s->started = true;
  if (!s->span.is_recording()) return;
  s->context = s->span.context();
  if (!with_start && s->attribute_names != nullptr) {
    set_attributes(s->span, s->attribute_names, s->attributes);
  } else if (!with_start) {
    set_attributes(s->span, py::reinterpret_borrow<py::dict>(s->attributes));
  }
  s->key = span_key(s->context.span_id);
  register_python_span(s->key);
}

void end(SpanObject* s, std::int64_t end_unix_nano = 0) {
  s->attached.end();
  s->span.end(end_unix_nano);
  unregister(s);
}

// An optional time argument in Unix nanoseconds (OpenTelemetry's start_time, end_time), given
// by position or as the keyword `keyword`: an int, or None / absent for now (0). False, with a
// Python error set, for anything else.
bool time_argument(PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames, const char* keyword,
                   std::int64_t& out) {
  out = 0;
  const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
  if (nargs + nkw > 1 ||
      (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0), keyword) != 0)) {
    PyErr_Format(PyExc_TypeError, "expected at most one argument, %s", keyword);
    return false;
  }
  if (nargs + nkw == 0 || args[0] == Py_None) return true;
  if (!PyLong_Check(args[0])) {
    PyErr_Format(PyExc_TypeError, "%s: expected an int of Unix nanoseconds or None", keyword);
    return false;
  }
  const long long v = PyLong_AsLongLong(args[0]);
  if (v == -1 && PyErr_Occurred()) return false;
  out = v;
  return true;
}

// A new SpanBase-typed object (the package's Span) that is not started yet. Its attributes: a
// dict, or a tuple of values and their names (`attribute_names`, a tuple of str), or none (null).
// Steals nothing.
PyObject* new_span(PyObject* group, PyObject* name, PyObject* attributes, PyObject* attribute_names,
                   bool record_exception, const lens::SpanContext* parent, int kind) {
  PyTypeObject* type = g_span_type;
  auto* s = reinterpret_cast<SpanObject*>(type->tp_alloc(type, 0));
  if (s == nullptr) return nullptr;
  new (&s->span) lens::Span();
  new (&s->attached) lens::Span();
  new (&s->context) lens::SpanContext();
  new (&s->exported) lens::SpanContext();
  new (&s->parent) lens::SpanContext(parent != nullptr ? *parent : lens::SpanContext{});
  Py_INCREF(group);
  s->group = group;
  Py_INCREF(name);
  s->name = name;
  Py_XINCREF(attributes);
  s->attributes = attributes;
  Py_XINCREF(attribute_names);
  s->attribute_names = attribute_names;
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
  s->exported.~SpanContext();
  s->parent.~SpanContext();
  Py_XDECREF(s->group);
  Py_XDECREF(s->name);
  Py_XDECREF(s->attributes);
  Py_XDECREF(s->attribute_names);
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

// end(end_time=None): ends the span now, or at `end_time` (Unix ns, OpenTelemetry's).
PyObject* span_end(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  std::int64_t at = 0;
  if (!time_argument(args, nargs, kwnames, "end_time", at)) return nullptr;
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (!s->started) {  // ended before it started: nothing was timed, nothing is recorded
    s->started = true;
    Py_RETURN_NONE;
  }
  end(s, at);
  Py_RETURN_NONE;
}

// _start(start_time=None): starts the span without making it current (OpenTelemetry's
// tracer.start_span), now or at `start_time` (Unix ns).
PyObject* span_start(PyObject* o, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  std::int64_t at = 0;
  if (!time_argument(args, nargs, kwnames, "start_time", at)) return nullptr;
  auto* s = reinterpret_cast<SpanObject*>(o);
  if (!s->started) {
    start(s, /*current=*/false, at);
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
    {"end", fastcall<span_end>(), METH_FASTCALL | METH_KEYWORDS,
     "Ends the span now, or at end_time (Unix ns) when given (idempotent)."},
    {"_start", fastcall<span_start>(), METH_FASTCALL | METH_KEYWORDS,
     "Starts the span without making it current, now or at start_time (Unix ns)."},
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

// ------------------------------------------------------------------------------------------------
// SpanBase's __enter__ and __exit__. `with` looks both up on every span it enters, and a method
// descriptor would allocate a bound builtin method for each (a GC object, made and freed per
// span); these descriptors hand out bound methods from a free list instead, called through
// vectorcall.

struct SpanMethodDescr {
  PyObject_HEAD vectorcallfunc vectorcall;  // called on the class: SpanBase.__exit__(span, ...)
  PyObject* (*impl)(PyObject* self, PyObject* const* args, Py_ssize_t nargs);
  const char* name;
  const char* doc;
};

struct BoundSpanMethod {
  PyObject_HEAD vectorcallfunc vectorcall;
  PyObject* self;          // the span
  SpanMethodDescr* descr;  // a strong reference
};

PyTypeObject* g_bound_method_type = nullptr;
constexpr int kFreeBoundMethods = 8;  // `with` holds two at a time; nesting, a few more
BoundSpanMethod* g_free_bound_methods[kFreeBoundMethods] = {};
int g_free_bound_method_count = 0;  // guarded by the GIL

PyObject* enter_impl(PyObject* self, PyObject* const*, Py_ssize_t nargs) {
  if (nargs != 0) {
    PyErr_Format(PyExc_TypeError, "__enter__() takes no arguments (%zd given)", nargs);
    return nullptr;
  }
  return span_enter(self, nullptr);
}

PyObject* call_impl(SpanMethodDescr* d, PyObject* self, PyObject* const* args, Py_ssize_t nargs,
                    PyObject* kwnames) {
  if (kwnames != nullptr && PyTuple_GET_SIZE(kwnames) != 0) {
    PyErr_Format(PyExc_TypeError, "%s() takes no keyword arguments", d->name);
    return nullptr;
  }
  return d->impl(self, args, nargs);
}

PyObject* bound_method_vectorcall(PyObject* callable, PyObject* const* args, std::size_t nargsf,
                                  PyObject* kwnames) {
  auto* b = reinterpret_cast<BoundSpanMethod*>(callable);
  return call_impl(b->descr, b->self, args, PyVectorcall_NARGS(nargsf), kwnames);
}

void bound_method_dealloc(PyObject* o) {
  auto* b = reinterpret_cast<BoundSpanMethod*>(o);
  PyObject* self = b->self;
  PyObject* descr = reinterpret_cast<PyObject*>(b->descr);
  PyTypeObject* type = Py_TYPE(o);
  if (g_free_bound_method_count < kFreeBoundMethods) {
    g_free_bound_methods[g_free_bound_method_count++] = b;
  } else {
    type->tp_free(o);
  }
  Py_DECREF(type);  // instances of a heap type hold a reference to it (PyObject_Init takes one)
  Py_DECREF(self);
  Py_DECREF(descr);
}

PyObject* bound_method_repr(PyObject* o) {
  auto* b = reinterpret_cast<BoundSpanMethod*>(o);
  return PyUnicode_FromFormat("<built-in method %s of %s object at %p>", b->descr->name,
                              Py_TYPE(b->self)->tp_name, b->self);
}

PyObject* bound_method_name(PyObject* o, void*) {
  return PyUnicode_FromString(reinterpret_cast<BoundSpanMethod*>(o)->descr->name);
}

PyObject* bound_method_doc(PyObject* o, void*) {
  return PyUnicode_FromString(reinterpret_cast<BoundSpanMethod*>(o)->descr->doc);
}

PyObject* bound_method_self(PyObject* o, void*) {
  return Py_NewRef(reinterpret_cast<BoundSpanMethod*>(o)->self);
}

PyGetSetDef kBoundMethodGetSet[] = {{"__name__", bound_method_name, nullptr, nullptr, nullptr},
                                    {"__doc__", bound_method_doc, nullptr, nullptr, nullptr},
                                    {"__self__", bound_method_self, nullptr, nullptr, nullptr},
                                    {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef kBoundMethodMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(BoundSpanMethod, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot kBoundMethodSlots[] = {{Py_tp_dealloc, reinterpret_cast<void*>(bound_method_dealloc)},
                                   {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                                   {Py_tp_repr, reinterpret_cast<void*>(bound_method_repr)},
                                   {Py_tp_getset, kBoundMethodGetSet},
                                   {Py_tp_members, kBoundMethodMembers},
                                   {0, nullptr}};

PyType_Spec kBoundMethodSpec = {"nemo_lens_cpp._core.SpanMethod", sizeof(BoundSpanMethod), 0,
                                Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kBoundMethodSlots};

PyObject* descr_get(PyObject* descr, PyObject* obj, PyObject*) {
  if (obj == nullptr || obj == Py_None) return Py_NewRef(descr);  // SpanBase.__exit__
  if (!is_span_object(obj)) {
    PyErr_Format(PyExc_TypeError, "descriptor '%s' requires a SpanBase object, got %.100s",
                 reinterpret_cast<SpanMethodDescr*>(descr)->name, Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  BoundSpanMethod* b = nullptr;
  if (g_free_bound_method_count > 0) {
    b = g_free_bound_methods[--g_free_bound_method_count];
    PyObject_Init(reinterpret_cast<PyObject*>(b), g_bound_method_type);
  } else {
    b = PyObject_New(BoundSpanMethod, g_bound_method_type);
    if (b == nullptr) return nullptr;
  }
  b->vectorcall = bound_method_vectorcall;
  b->self = Py_NewRef(obj);
  b->descr = reinterpret_cast<SpanMethodDescr*>(Py_NewRef(descr));
  return reinterpret_cast<PyObject*>(b);
}

PyObject* descr_vectorcall(PyObject* callable, PyObject* const* args, std::size_t nargsf,
                           PyObject* kwnames) {
  auto* d = reinterpret_cast<SpanMethodDescr*>(callable);
  const Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
  if (nargs < 1 || !is_span_object(args[0])) {
    PyErr_Format(PyExc_TypeError, "descriptor '%s' needs a SpanBase object as its argument",
                 d->name);
    return nullptr;
  }
  return call_impl(d, args[0], args + 1, nargs - 1, kwnames);
}

PyObject* descr_repr(PyObject* o) {
  return PyUnicode_FromFormat("<method '%s' of 'SpanBase' objects>",
                              reinterpret_cast<SpanMethodDescr*>(o)->name);
}

PyObject* descr_name(PyObject* o, void*) {
  return PyUnicode_FromString(reinterpret_cast<SpanMethodDescr*>(o)->name);
}

PyObject* descr_doc(PyObject* o, void*) {
  return PyUnicode_FromString(reinterpret_cast<SpanMethodDescr*>(o)->doc);
}

PyGetSetDef kDescrGetSet[] = {{"__name__", descr_name, nullptr, nullptr, nullptr},
                              {"__doc__", descr_doc, nullptr, nullptr, nullptr},
                              {nullptr, nullptr, nullptr, nullptr, nullptr}};

PyMemberDef kDescrMembers[] = {
    {"__vectorcalloffset__", T_PYSSIZET, offsetof(SpanMethodDescr, vectorcall), READONLY, nullptr},
    {nullptr, 0, 0, 0, nullptr}};

PyType_Slot kDescrSlots[] = {{Py_tp_descr_get, reinterpret_cast<void*>(descr_get)},
                             {Py_tp_call, reinterpret_cast<void*>(PyVectorcall_Call)},
                             {Py_tp_repr, reinterpret_cast<void*>(descr_repr)},
                             {Py_tp_getset, kDescrGetSet},
                             {Py_tp_members, kDescrMembers},
                             {0, nullptr}};

PyType_Spec kDescrSpec = {"nemo_lens_cpp._core.SpanMethodDescriptor", sizeof(SpanMethodDescr), 0,
                          Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_VECTORCALL, kDescrSlots};

// Puts __enter__ and __exit__ into SpanBase's dict. Throws on failure (a Python error is set).
void add_span_methods(PyTypeObject* span_base) {
  PyObject* descr_type = PyType_FromSpec(&kDescrSpec);
  g_bound_method_type = reinterpret_cast<PyTypeObject*>(PyType_FromSpec(&kBoundMethodSpec));
  if (descr_type == nullptr || g_bound_method_type == nullptr) throw py::error_already_set();
  struct Method {
    const char* name;
    PyObject* (*impl)(PyObject*, PyObject* const*, Py_ssize_t);
    const char* doc;
  };
  const Method methods[] = {
      {"__enter__", enter_impl, "Starts the span and makes it current; returns it."},
      {"__exit__", span_exit,
       "Records an exception leaving the block (type, message, status ERROR) and ends the "
       "span."}};
  for (const Method& m : methods) {
    auto* d = PyObject_New(SpanMethodDescr, reinterpret_cast<PyTypeObject*>(descr_type));
    if (d == nullptr) throw py::error_already_set();
    d->vectorcall = descr_vectorcall;
    d->impl = m.impl;
    d->name = m.name;
    d->doc = m.doc;
    const int rc = PyObject_SetAttrString(reinterpret_cast<PyObject*>(span_base), m.name,
                                          reinterpret_cast<PyObject*>(d));
    Py_DECREF(d);
    if (rc != 0) throw py::error_already_set();
  }
  Py_DECREF(descr_type);  // the descriptors hold it
}

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
  return new_span(args[0], args[1], attributes, nullptr, PyObject_IsTrue(args[3]) == 1,
                  parent.is_valid() ? &parent : nullptr, static_cast<int>(PyLong_AsLong(args[5])));
}

// ------------------------------------------------------------------------------------------------
// The module functions.

PyObject* g_tracer_name = nullptr;  // "tracer", interned

// Whether the keyword `key` (a str) is "tracer"; the compiler interns keyword names, so mostly
// without comparing characters.
bool is_tracer(PyObject* key) {
  return key == g_tracer_name ||
         (PyUnicode_GET_LENGTH(key) == 6 && PyUnicode_CompareWithASCIIString(key, "tracer") == 0);
}

// managed_span(group, name, tracer=None, **attributes): the no-op context manager when the group's
// sites are closed; else an unstarted span made here, or by the package's Python callables for
// what this does not take (lens not set up, a `tracer`, arguments that are not two str).
PyObject* fast_managed_span(PyObject*, PyObject* const* args, Py_ssize_t nargs, PyObject* kwnames) {
  const Py_ssize_t positional = PyVectorcall_NARGS(nargs);
  if (positional >= 1 && PyUnicode_CheckExact(args[0])) {
    lens::detail::SiteGate* gate = gate_for(g_span_gates, g_span_gate_cache, args[0]);
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
  // the Python implementation honours when it is not None; None is skipped as any None value).
  // The values are kept in a tuple beside the call's kwnames, cheaper than a dict.
  if (positional == 2 && PyUnicode_CheckExact(args[0]) && PyUnicode_Check(args[1])) {
    const Py_ssize_t nkw = kwnames != nullptr ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      if (args[positional + i] != Py_None && is_tracer(PyTuple_GET_ITEM(kwnames, i))) {
        return PyObject_Vectorcall(g_enabled_impl, args, nargs, kwnames);
      }
    }
    if (nkw == 0) return new_span(args[0], args[1], nullptr, nullptr, true, nullptr, 1);
    PyObject* values = PyTuple_New(nkw);
    if (values == nullptr) return nullptr;
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      Py_INCREF(args[positional + i]);
      PyTuple_SET_ITEM(values, i, args[positional + i]);
    }
    PyObject* span = new_span(args[0], args[1], values, kwnames, true, nullptr, 1);
    Py_DECREF(values);
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
  if (lens::detail::SiteGate* gate = PyUnicode_CheckExact(group)
                                         ? gate_for(g_enabled_gates, g_enabled_gate_cache, group)
                                         : nullptr) {
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
     "None skipped, bool/int/float/str and lists of them kept, redacted keys masked. An\n"
     "OpenTelemetry `tracer` that is not lens' makes the span (behind lens' gate), as in NeMo "
     "Lens.\n"},
    {"is_span_group_enabled", fast_is_span_group_enabled, METH_O,
     "is_span_group_enabled(group) -> bool: whether spans of `group` are enabled."},
    {nullptr, nullptr, 0, nullptr}};

}  // namespace

void bind_hot_path(py::module_& m) {
  py::object noop_type = py::reinterpret_steal<py::object>(PyType_FromSpec(&kNoopSpec));
  if (!noop_type) throw py::error_already_set();
  g_noop = PyObject_CallNoArgs(noop_type.ptr());
  g_span_gates = PyDict_New();
  g_enabled_gates = PyDict_New();
  g_tracer_name = PyUnicode_InternFromString("tracer");
  if (g_noop == nullptr || g_span_gates == nullptr || g_enabled_gates == nullptr ||
      g_tracer_name == nullptr) {
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
  add_span_methods(g_span_base);
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
  // _set_bridge_parent(fn, context_var=None, span_key=None): fn() gives the parent of a root span
  // (a SpanContext or None). With a ContextVar whose value is a dict (OpenTelemetry's current
  // context) and the key of the span in it, fn is called only when that dict holds the key.
  m.def(
      "_set_bridge_parent",
      [](py::object fn, py::object context_var, py::object span_key) {
        Py_XDECREF(g_bridge_parent);
        g_bridge_parent = fn.is_none() ? nullptr : fn.release().ptr();
        Py_CLEAR(g_bridge_var);
        Py_CLEAR(g_bridge_key);
        if (g_bridge_parent != nullptr && PyContextVar_CheckExact(context_var.ptr()) &&
            !span_key.is_none()) {
          g_bridge_var = context_var.release().ptr();
          g_bridge_key = span_key.release().ptr();
        }
      },
      py::arg("fn"), py::arg("context_var") = py::none(), py::arg("span_key") = py::none());
}

}  // namespace nemo_lens_cpp
