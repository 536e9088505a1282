// OtlpSettings from the standard variables (OpenTelemetry specification, "OTLP Exporter
// Configuration"): each setting reads the signal's OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_<KEY>
// first, then OTEL_EXPORTER_OTLP_<KEY>. Values lens cannot use are refused with a ConfigError instead of being
// ignored with a warning, as for every other variable lens reads.
#include <charconv>
#include <fstream>
#include <string>

#include "env.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

std::string_view signal_variable_part(OtlpSignal signal) {
  switch (signal) {
    case OtlpSignal::kMetrics: return "METRICS";
    case OtlpSignal::kLogs: return "LOGS";
    case OtlpSignal::kTraces: break;
  }
  return "TRACES";
}

struct Found {
  std::string value;
  std::string variable;  // empty when neither variable is set
};

Found lookup(OtlpSignal signal, const std::string& key) {
  const std::string specific =
      "OTEL_EXPORTER_OTLP_" + std::string(signal_variable_part(signal)) + "_" + key;
  for (const std::string& name : {specific, "OTEL_EXPORTER_OTLP_" + key}) {
    if (auto v = env_trimmed(name)) return {*v, name};
  }
  return {};
}

[[noreturn]] void invalid(const Found& f, const std::string& expected) {
  throw ConfigError("Invalid value for " + f.variable + ": '" + f.value + "'. " + expected);
}

bool is_http_url(std::string_view s) {
  const std::string lower = to_lower(s);
  const std::string_view v(lower);
  for (std::string_view scheme : {"http://", "https://"}) {
    if (v.substr(0, scheme.size()) == scheme && v.size() > scheme.size()) return true;
  }
  return false;
}

// RFC 9110 token characters, the only ones a header name may use.
bool is_token(std::string_view s) {
  if (s.empty()) return false;
  for (char c : s) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
    if (!ok) return false;
  }
  return true;
}

// Percent-decodes `s`; false on a malformed escape.
bool percent_decode(std::string_view s, std::string& out) {
  out.clear();
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out.push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;
    const int hi = hex_digit(s[i + 1]);
    const int lo = hex_digit(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

bool same_name(std::string_view a, std::string_view b) { return to_lower(a) == to_lower(b); }

// "k1=v1,k2=v2" (W3C Baggage-like, values percent-encoded) into `headers`, replacing same names.
void parse_headers(const Found& f, std::vector<std::pair<std::string, std::string>>& headers) {
  for (std::string_view part : split(f.value, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      invalid(f, "Expected comma-separated name=value pairs; '" + std::string(part) +
                     "' has no '='.");
    }
    std::string name;
    std::string value;
    if (!percent_decode(trim(part.substr(0, eq)), name) || !is_token(name)) {
      invalid(f, "'" + std::string(trim(part.substr(0, eq))) +
                     "' is not a valid HTTP header name (letters, digits and !#$%&'*+-.^_`|~).");
    }
    if (!percent_decode(trim(part.substr(eq + 1)), value) ||
        value.find_first_of("\r\n") != std::string::npos || value.find('\0') != std::string::npos) {
      invalid(f, "The value of header '" + name +
                     "' is not valid: use %XX escapes only for bytes, and no line breaks.");
    }
    std::erase_if(headers, [&](const auto& h) { return same_name(h.first, name); });
    headers.emplace_back(std::move(name), std::move(value));
  }
}

void check_readable(const Found& f) {
  std::ifstream in(f.value);
  if (!in) invalid(f, "The file cannot be read.");
}

}  // namespace

bool grpc_built_in() noexcept {
#ifdef NEMO_LENS_WITH_GRPC
  return true;
#else
  return false;
#endif
}

std::string_view protocol_name(OtlpProtocol protocol) noexcept {
  switch (protocol) {
    case OtlpProtocol::kGrpc: return "grpc";
    case OtlpProtocol::kHttpProtobuf: return "http/protobuf";
    case OtlpProtocol::kHttpJson: return "http/json";
  }
  return "http/protobuf";
}

std::string_view signal_path(OtlpSignal signal) noexcept {
  switch (signal) {
    case OtlpSignal::kMetrics: return "v1/metrics";
    case OtlpSignal::kLogs: return "v1/logs";
    case OtlpSignal::kTraces: break;
  }
  return "v1/traces";
}

OtlpSettings otlp_settings_from_env(OtlpSignal signal) {
  OtlpSettings s;
  s.signal = signal;
  const std::string specific_endpoint =
      "OTEL_EXPORTER_OTLP_" + std::string(signal_variable_part(signal)) + "_ENDPOINT";
  const std::string path(signal_path(signal));
  const Found protocol = lookup(signal, "PROTOCOL");
  if (protocol.variable.empty()) {
    s.protocol = grpc_built_in() ? OtlpProtocol::kGrpc : OtlpProtocol::kHttpProtobuf;
    s.protocol_origin = "default";
  } else {
    const std::string p = to_lower(protocol.value);
    if (p == "grpc") {
      s.protocol = OtlpProtocol::kGrpc;
    } else if (p == "http/protobuf") {
      s.protocol = OtlpProtocol::kHttpProtobuf;
    } else if (p == "http/json") {
      s.protocol = OtlpProtocol::kHttpJson;
    } else {
      invalid(protocol, "Valid protocols: " + quoted_list({"grpc", "http/json", "http/protobuf"}) + ".");
    }
    if (s.protocol == OtlpProtocol::kGrpc && !grpc_built_in()) {
      invalid(protocol, "This build of lens has no gRPC exporter (built without gRPC); use "
                        "'http/protobuf' or 'http/json'.");
    }
    s.protocol_origin = protocol.variable;
  }
  const bool http = s.protocol != OtlpProtocol::kGrpc;

  // The signal-specific endpoint is used as given; the general one is a base URL to which HTTP
  // appends the signal's path.
  if (auto specific = env_trimmed(specific_endpoint)) {
    s.endpoint = *specific;
    s.endpoint_origin = specific_endpoint;
  } else if (auto general = env_trimmed("OTEL_EXPORTER_OTLP_ENDPOINT")) {
    s.endpoint = *general;
    s.endpoint_origin = "OTEL_EXPORTER_OTLP_ENDPOINT";
    if (http) s.endpoint += s.endpoint.ends_with('/') ? path : "/" + path;
  } else {
    s.endpoint = http ? "http://localhost:4318/" + path : "http://localhost:4317";
    s.endpoint_origin = "default";
  }
  if (s.endpoint_origin != "default" && http && !is_http_url(s.endpoint)) {
    throw ConfigError("Invalid value for " + s.endpoint_origin + ": '" +
                      std::string(*env_trimmed(s.endpoint_origin)) +
                      "'. Expected an http:// or https:// URL, e.g. http://localhost:4318" +
                      (s.endpoint_origin == specific_endpoint ? "/" + path : "") + ".");
  }

  const std::string specific_headers =
      "OTEL_EXPORTER_OTLP_" + std::string(signal_variable_part(signal)) + "_HEADERS";
  for (const std::string& name : {std::string("OTEL_EXPORTER_OTLP_HEADERS"), specific_headers}) {
    if (auto v = env_trimmed(name)) parse_headers(Found{*v, name}, s.headers);
  }

  if (const Found t = lookup(signal, "TIMEOUT"); !t.variable.empty()) {
    long long ms = 0;
    auto [ptr, ec] = std::from_chars(t.value.data(), t.value.data() + t.value.size(), ms);
    if (ec != std::errc() || ptr != t.value.data() + t.value.size() || ms < 1 || ms > 86'400'000) {
      invalid(t, "Expected a whole number of milliseconds from 1 to 86400000 (the OTel "
                 "specification's unit; 10000 is 10 s).");
    }
    s.timeout = std::chrono::milliseconds(ms);
  }

  if (const Found c = lookup(signal, "COMPRESSION"); !c.variable.empty()) {
    const std::string v = to_lower(c.value);
    if (v == "gzip") {
      s.gzip = true;
    } else if (v != "none") {
      invalid(c, "Valid compressions: " + quoted_list({"gzip", "none"}) + ".");
    }
  }

  if (const Found c = lookup(signal, "CERTIFICATE"); !c.variable.empty()) {
    check_readable(c);
    s.certificate = c.value;
  }
  if (const Found c = lookup(signal, "CLIENT_KEY"); !c.variable.empty()) {
    check_readable(c);
    s.client_key = c.value;
  }
  if (const Found c = lookup(signal, "CLIENT_CERTIFICATE"); !c.variable.empty()) {
    check_readable(c);
    s.client_certificate = c.value;
  }
  if (const Found i = lookup(signal, "INSECURE"); !i.variable.empty()) {
    auto b = parse_bool(i.value);
    if (!b) invalid(i, "Expected a boolean: true/false, 1/0, yes/no or on/off.");
    s.insecure = *b;
  }
  return s;
}

}  // namespace nemo::lens::detail
