#include "common/reader/otlp_values.hpp"

namespace nemo::lens::cli::reader {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

std::optional<std::uint64_t> parse_span_id(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    const int d = hex_digit(c);
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

std::uint64_t trace_key_of(std::string_view trace_id) {
  const std::uint64_t high = parse_span_id(trace_id.substr(0, 16)).value_or(0);
  const std::uint64_t low = parse_span_id(trace_id.substr(16, 16)).value_or(0);
  return (high * 0x9E3779B97F4A7C15ull) ^ low;
}

bool is_trace_id(std::string_view s) {
  if (s.size() != 32) return false;
  bool nonzero = false;
  for (char c : s) {
    const int d = hex_digit(c);
    if (d < 0) return false;
    nonzero = nonzero || d != 0;
  }
  return nonzero;
}

std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  if (s.size() > 40) out += "...";
  return out;
}

std::string plain_value(const ojson& any, ojson& out, int depth) {
  if (depth > 32) return "attribute value nested more than 32 deep";
  if (!any.is_object()) return "attribute value is not an object";
  out = nullptr;
  for (const auto& [key, v] : any.items()) {
    if (key == "stringValue" || key == "bytesValue") {
      if (!v.is_string()) return key + " is not a string";
      out = v;
    } else if (key == "boolValue") {
      if (!v.is_boolean()) return "boolValue is not a boolean";
      out = v;
    } else if (key == "intValue") {
      if (v.is_number_integer()) {
        out = v;
      } else if (auto n = v.is_string()
                              ? parse_decimal<std::int64_t>(v.get_ref<const std::string&>())
                              : std::nullopt) {
        out = *n;
      } else {
        return "intValue is not a 64-bit integer";
      }
    } else if (key == "doubleValue") {
      if (!v.is_number() && !v.is_string()) return "doubleValue is not a number";
      out = v;
    } else if (key == "arrayValue" || key == "kvlistValue") {
      const bool kvlist = key == "kvlistValue";
      if (!v.is_object()) return key + " is not an object";
      out = kvlist ? ojson::object() : ojson::array();
      auto values = v.find("values");
      if (values == v.end() || values->is_null()) continue;
      if (!values->is_array()) return key + ".values is not an array";
      for (const ojson& element : *values) {
        ojson plain;
        if (!kvlist) {
          if (std::string e = plain_value(element, plain, depth + 1); !e.empty()) return e;
          out.push_back(std::move(plain));
          continue;
        }
        if (!element.is_object()) return "kvlistValue element is not an object";
        auto k = element.find("key");
        if (k == element.end() || !k->is_string()) return "kvlistValue element has no string key";
        auto value = element.find("value");
        if (value != element.end() && !value->is_null()) {
          if (std::string e = plain_value(*value, plain, depth + 1); !e.empty()) return e;
        }
        out[k->get<std::string>()] = std::move(plain);
      }
    }
  }
  return {};
}

}  // namespace nemo::lens::cli::reader
