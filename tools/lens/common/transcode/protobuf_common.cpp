// The messages of every OTLP request: the request itself, its resource and scope groups,
// Resource, InstrumentationScope, and the attributes (KeyValue, AnyValue and its arrays).
#include <cstring>
#include <string>

#include "common/transcode/protobuf_to_json.hpp"

namespace lens_cli::transcode {

void append_base64(std::string& out, std::span<const std::uint8_t> in) {
  static constexpr char kAlphabet[] =
      "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  out.push_back('"');
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t v =
        (std::uint32_t{in[i]} << 16) | (std::uint32_t{in[i + 1]} << 8) | in[i + 2];
    const char quad[4] = {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63], kAlphabet[(v >> 6) & 63],
                          kAlphabet[v & 63]};
    out.append(quad, 4);
  }
  if (const std::size_t rest = in.size() - i; rest != 0) {
    std::uint32_t v = std::uint32_t{in[i]} << 16;
    if (rest == 2) v |= std::uint32_t{in[i + 1]} << 8;
    const char quad[4] = {kAlphabet[v >> 18], kAlphabet[(v >> 12) & 63],
                          rest == 2 ? kAlphabet[(v >> 6) & 63] : '=', '='};
    out.append(quad, 4);
  }
  out.push_back('"');
}

bool ProtobufToJson::request(Signal signal, const Byte* p, const Byte* end) {
  signal_ = signal;
  const SignalShape& shape = shape_of(signal);
  out_.push_back('{');
  json::append_key(out_, shape.root_key);
  out_.push_back('[');
  bool first = true;
  while (p < end) {
    Field f;
    if (!next(p, end, f, shape.request)) return false;
    if (f.number != 1) continue;
    if (!expect(f, kLen, shape.request)) return false;
    if (!first) out_.push_back(',');
    first = false;
    if (!resource_group(f, 1)) return false;
  }
  json::append_raw(out_, "]}");
  return true;
}

bool ProtobufToJson::resource_group(const Field& m, int depth) {
  const SignalShape& shape = shape_of(signal_);
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  Field resource_field;
  bool has_resource = false;
  Repeated scopes;
  std::string_view schema_url;
  while (p < end) {
    Field f;
    if (!next(p, end, f, shape.resource_group)) return false;
    switch (f.number) {
      case 1:
        if (!expect(f, kLen, shape.resource_group)) return false;
        if (has_resource && !check_only([&] { return resource(resource_field, depth + 1); })) {
          return false;
        }
        resource_field = f;
        has_resource = true;
        break;
      case 2:
        if (!expect(f, kLen, shape.resource_group)) return false;
        scopes.note(f, p);
        break;
      case 3:
        if (!expect(f, kLen, shape.resource_group)) return false;
        schema_url = f.text();
        break;
      default:
        break;
    }
  }
  // Spans: the resource (possibly {"attributes":[]}) and the scope groups always, as the
  // library's span writer does; metrics and logs: what is present.
  const bool traces = signal_ == Signal::kTraces;
  Object o{out_};
  if (has_resource || traces) {
    o.key("resource");
    if (has_resource) {
      if (!resource(resource_field, depth + 1)) return false;
    } else {
      json::append_raw(out_, "{\"attributes\":[]}");
    }
  }
  if (traces || !scopes.empty()) {
    o.key(shape.scopes_key);
    out_.push_back('[');
    if (!each(scopes, 2, shape.resource_group,
              [&](const Field& f) { return scope_group(f, depth + 1); })) {
      return false;
    }
    out_.push_back(']');
  }
  if (!schema_url.empty()) {
    o.key("schemaUrl");
    json::append_string(out_, schema_url);
  }
  o.close();
  return true;
}

bool ProtobufToJson::resource(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  Repeated attributes;
  std::uint64_t dropped = 0;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kResourceName)) return false;
    if (f.number == 1) {
      if (!expect(f, kLen, kResourceName)) return false;
      attributes.note(f, p);
    } else if (f.number == 2) {
      if (!expect(f, kVarint, kResourceName)) return false;
      dropped = f.value;
    }
  }
  Object o{out_};
  if (signal_ == Signal::kTraces || !attributes.empty()) {  // spans: always, possibly []
    o.key("attributes");
    if (!key_values(attributes, 1, kResourceName, depth + 1)) return false;
  }
  append_count(o, "droppedAttributesCount", dropped);
  o.close();
  return true;
}

bool ProtobufToJson::scope_group(const Field& m, int depth) {
  const SignalShape& shape = shape_of(signal_);
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  Field scope_field;
  bool has_scope = false;
  Repeated items;
  std::string_view schema_url;
  while (p < end) {
    Field f;
    if (!next(p, end, f, shape.scope_group)) return false;
    switch (f.number) {
      case 1:
        if (!expect(f, kLen, shape.scope_group)) return false;
        if (has_scope && !check_only([&] { return scope(scope_field, depth + 1); })) {
          return false;
        }
        scope_field = f;
        has_scope = true;
        break;
      case 2:
        if (!expect(f, kLen, shape.scope_group)) return false;
        items.note(f, p);
        break;
      case 3:
        if (!expect(f, kLen, shape.scope_group)) return false;
        schema_url = f.text();
        break;
      default:
        break;
    }
  }
  Object o{out_};
  if (has_scope) {
    o.key("scope");
    if (!scope(scope_field, depth + 1)) return false;
  }
  if (signal_ == Signal::kTraces || !items.empty()) {  // spans: always, possibly []
    o.key(shape.items_key);
    out_.push_back('[');
    if (!each(items, 2, shape.scope_group, [&](const Field& f) {
          switch (signal_) {
            case Signal::kMetrics:
              return metric(f, depth + 1);
            case Signal::kLogs:
              return log_record(f, depth + 1);
            case Signal::kTraces:
              break;
          }
          return span(f, depth + 1);
        })) {
      return false;
    }
    out_.push_back(']');
  }
  if (!schema_url.empty()) {
    o.key("schemaUrl");
    json::append_string(out_, schema_url);
  }
  o.close();
  return true;
}

bool ProtobufToJson::scope(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::string_view name;
  std::string_view version;
  Repeated attributes;
  std::uint64_t dropped = 0;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kScopeName)) return false;
    switch (f.number) {
      case 1:
        if (!expect(f, kLen, kScopeName)) return false;
        name = f.text();
        break;
      case 2:
        if (!expect(f, kLen, kScopeName)) return false;
        version = f.text();
        break;
      case 3:
        if (!expect(f, kLen, kScopeName)) return false;
        attributes.note(f, p);
        break;
      case 4:
        if (!expect(f, kVarint, kScopeName)) return false;
        dropped = f.value;
        break;
      default:
        break;
    }
  }
  Object o{out_};
  if (!name.empty()) {
    o.key("name");
    json::append_string(out_, name);
  }
  if (!version.empty()) {
    o.key("version");
    json::append_string(out_, version);
  }
  if (!attributes.empty()) {
    o.key("attributes");
    if (!key_values(attributes, 3, kScopeName, depth + 1)) return false;
  }
  append_count(o, "droppedAttributesCount", dropped);
  o.close();
  return true;
}

bool ProtobufToJson::key_value(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  std::string_view key;
  Field value;
  bool has_value = false;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kKeyValueName)) return false;
    if (f.number == 1) {
      if (!expect(f, kLen, kKeyValueName)) return false;
      key = f.text();
    } else if (f.number == 2) {
      if (!expect(f, kLen, kKeyValueName)) return false;
      if (has_value && !check_only([&] { return any_value(value, depth + 1); })) return false;
      value = f;
      has_value = true;
    }
  }
  json::append_raw(out_, "{\"key\":");
  json::append_string(out_, key);
  if (has_value) {
    json::append_raw(out_, ",\"value\":");
    if (!any_value(value, depth + 1)) return false;
  }
  out_.push_back('}');
  return true;
}

bool ProtobufToJson::any_member(const Field& f, int depth) {
  switch (f.number) {
    case 1:
      json::append_raw(out_, "{\"stringValue\":");
      json::append_string(out_, f.text());
      break;
    case 2:
      json::append_raw(out_, f.value != 0 ? std::string_view("{\"boolValue\":true")
                                          : std::string_view("{\"boolValue\":false"));
      break;
    case 3:
      json::append_raw(out_, "{\"intValue\":");
      json::append_quoted_int(out_, static_cast<std::int64_t>(f.value));
      break;
    case 4: {
      double d = 0;
      static_assert(sizeof d == sizeof f.value);
      std::memcpy(&d, &f.value, sizeof d);
      json::append_raw(out_, "{\"doubleValue\":");
      json::append_double(out_, d);
      break;
    }
    case 5:
      json::append_raw(out_, "{\"arrayValue\":");
      if (!array_value(f, depth + 1)) return false;
      break;
    case 6:
      json::append_raw(out_, "{\"kvlistValue\":");
      if (!key_value_list(f, depth + 1)) return false;
      break;
    case 7:
      json::append_raw(out_, "{\"bytesValue\":");
      append_base64(out_, f.bytes());
      break;
    default:
      break;
  }
  out_.push_back('}');
  return true;
}

bool ProtobufToJson::any_value(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  static constexpr std::uint32_t kWire[8] = {0, kLen, kVarint, kVarint, kFixed64, kLen, kLen, kLen};
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  Field member;  // the oneof: the last member present wins
  bool has_member = false;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kAnyValueName)) return false;
    if (f.number > 7) continue;
    if (!expect(f, kWire[f.number], kAnyValueName)) return false;
    if (has_member && (member.number == 5 || member.number == 6) &&
        !check_only([&] { return any_member(member, depth); })) {
      return false;
    }
    member = f;
    has_member = true;
  }
  if (!has_member) {
    json::append_raw(out_, "{}");
    return true;
  }
  return any_member(member, depth);
}

bool ProtobufToJson::array_value(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  json::append_raw(out_, "{\"values\":[");
  bool first = true;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kArrayValueName)) return false;
    if (f.number != 1) continue;
    if (!expect(f, kLen, kArrayValueName)) return false;
    if (!first) out_.push_back(',');
    first = false;
    if (!any_value(f, depth + 1)) return false;
  }
  json::append_raw(out_, "]}");
  return true;
}

bool ProtobufToJson::key_value_list(const Field& m, int depth) {
  if (depth > kMaxDepth) return too_deep(m);
  const Byte* p = m.data;
  const Byte* const end = p + m.size;
  json::append_raw(out_, "{\"values\":[");
  bool first = true;
  while (p < end) {
    Field f;
    if (!next(p, end, f, kKeyValueListName)) return false;
    if (f.number != 1) continue;
    if (!expect(f, kLen, kKeyValueListName)) return false;
    if (!first) out_.push_back(',');
    first = false;
    if (!key_value(f, depth + 1)) return false;
  }
  json::append_raw(out_, "]}");
  return true;
}

}  // namespace lens_cli::transcode
