// Python values <-> lens attributes, as NeMo Lens' safe_set_span_attributes keeps them (the
// conversion every other file of _core uses; it uses none of them).
#include <iterator>
#include <new>
#include <type_traits>
#include <variant>

#include "core.hpp"

namespace nemo_lens_cpp {

std::string_view utf8_of_encoded(PyObject* s) {
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
    const char* p = utf8_and_size(o, &n);
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

namespace {

// Sets `value` under `key` (a str) when NeMo Lens would keep it. The common values (an exact
// float, int, str or bool) are converted here, without to_attribute()'s holder.
void set_one(lens::Span& span, PyObject* key, PyObject* value) {
  PyTypeObject* type = Py_TYPE(value);
  if (type == &PyFloat_Type) {
    span.set_attribute(utf8_of(key), lens::AttributeArg(PyFloat_AS_DOUBLE(value)));
    return;
  }
  if (type == &PyLong_Type) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return;  // beyond 64 bits: OpenTelemetry drops it too
    }
    span.set_attribute(utf8_of(key), lens::AttributeArg(static_cast<std::int64_t>(x)));
    return;
  }
  if (type == &PyUnicode_Type) {
    Py_ssize_t n = 0;
    if (const char* p = utf8_and_size(value, &n)) {
      span.set_attribute(utf8_of(key),
                         lens::AttributeArg(std::string_view(p, static_cast<std::size_t>(n))));
      return;
    }
    PyErr_Clear();  // lone surrogates: to_attribute() keeps what can be kept
  }
  if (type == &PyBool_Type) {
    span.set_attribute(utf8_of(key), lens::AttributeArg(value == Py_True));
    return;
  }
  ValueHolder holder;
  if (auto arg = to_attribute(value, holder)) span.set_attribute(utf8_of(key), *arg);
}

}  // namespace

void set_attributes(lens::Span& span, const py::dict& attributes) {
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(attributes.ptr(), &pos, &key, &value)) {
    if (PyUnicode_Check(key)) set_one(span, key, value);
  }
}

void set_attributes(lens::Span& span, PyObject* names, PyObject* values) {
  const Py_ssize_t n = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject* key = PyTuple_GET_ITEM(names, i);
    if (PyUnicode_Check(key)) set_one(span, key, PyTuple_GET_ITEM(values, i));
  }
}

// The storage is never destroyed attribute by attribute.
static_assert(std::is_trivially_destructible_v<lens::Attribute>);

bool StartAttributes::add(PyObject* key, PyObject* value) {
  if (!PyUnicode_Check(key) || value == Py_None) return true;  // skipped
  if (count_ == kMaxListAttributes) return false;
  auto* slot = reinterpret_cast<lens::Attribute*>(storage_) + count_;
  // As to_attribute() converts them, in its order (a bool is an int), without its holder.
  if (PyFloat_CheckExact(value)) {  // the most common first: a metric
    new (slot) lens::Attribute{utf8_of(key), lens::AttributeArg(PyFloat_AS_DOUBLE(value))};
  } else if (PyBool_Check(value)) {
    new (slot) lens::Attribute{utf8_of(key), lens::AttributeArg(value == Py_True)};
  } else if (PyLong_Check(value)) {
    int overflow = 0;
    const long long x = PyLong_AsLongLongAndOverflow(value, &overflow);
    if (overflow != 0 || (x == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      return true;  // beyond 64 bits: skipped, as OpenTelemetry does
    }
    new (slot) lens::Attribute{utf8_of(key), lens::AttributeArg(static_cast<std::int64_t>(x))};
  } else if (PyFloat_Check(value)) {
    new (slot) lens::Attribute{utf8_of(key), lens::AttributeArg(PyFloat_AS_DOUBLE(value))};
  } else if (PyUnicode_Check(value)) {
    Py_ssize_t n = 0;
    const char* p = utf8_and_size(value, &n);
    if (p == nullptr) {
      PyErr_Clear();
      return false;  // lone surrogates: to_attribute() converts it into a holder
    }
    new (slot) lens::Attribute{
        utf8_of(key), lens::AttributeArg(std::string_view(p, static_cast<std::size_t>(n)))};
  } else {
    // A list or tuple needs a holder; anything else is skipped.
    return !(PyList_Check(value) || PyTuple_Check(value));
  }
  ++count_;
  return true;
}

bool StartAttributes::convert(PyObject* names, PyObject* values) {
  const Py_ssize_t n = PyTuple_GET_SIZE(values);
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (!add(PyTuple_GET_ITEM(names, i), PyTuple_GET_ITEM(values, i))) return false;
  }
  return true;
}

bool StartAttributes::convert(PyObject* dict) {
  PyObject* key = nullptr;
  PyObject* value = nullptr;
  Py_ssize_t pos = 0;
  while (PyDict_Next(dict, &pos, &key, &value)) {
    if (!add(key, value)) return false;
  }
  return true;
}

namespace {

py::object attribute_to_py(const lens::AttributeValue& v) {
  return std::visit([](const auto& x) -> py::object { return py::cast(x); }, v);
}

}  // namespace

py::dict attributes_to_py(const std::vector<lens::KeyValue>& kvs) {
  py::dict d;
  for (const auto& kv : kvs) d[py::str(kv.key)] = attribute_to_py(kv.value);
  return d;
}

std::optional<lens::KeyValue> to_key_value(const py::handle& key, const py::handle& value) {
  ValueHolder holder;
  const std::optional<lens::AttributeArg> arg = to_attribute(value, holder);
  if (!arg) return std::nullopt;
  lens::KeyValue kv;
  kv.key = py::str(key).cast<std::string>();
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
  return kv;
}

CallAttributes::CallAttributes(const py::handle& attributes, std::size_t max) {
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

}  // namespace nemo_lens_cpp
