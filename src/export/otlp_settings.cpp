// OtlpSettings from the standard variables (OpenTelemetry specification, "OTLP Exporter
// Configuration"): each setting reads the signal's OTEL_EXPORTER_OTLP_{TRACES,METRICS,LOGS}_<KEY>
// first, then OTEL_EXPORTER_OTLP_<KEY>. Values lens cannot use are refused with a ConfigError
// instead of being ignored with a warning, as for every other variable lens reads.
#include <curl/curl.h>

#include <charconv>
#include <fstream>
#include <memory>
#include <string>

#include "env.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

std::string_view signal_variable_part(OtlpSignal signal) {
  switch (signal) {
    case OtlpSignal::kMetrics:
      return "METRICS";
    case OtlpSignal::kLogs:
      return "LOGS";
    case OtlpSignal::kTraces:
      break;
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

// Whether `s` starts with http:// or https:// (any case); url_problem() checks the rest.
bool has_http_scheme(std::string_view s) {
  const std::string lower = to_lower(s.substr(0, 8));
  return lower.starts_with("http://") || lower.starts_with("https://");
}

// What is wrong with the host and port of `url` (which has a scheme), or empty. libcurl's URL
// parser, the one the HTTP transport uses, decides; gRPC targets are checked the same way so
// that a value neither could reach is refused at set-up, not at every export.
std::string url_problem(const std::string& url) {
  const auto authority = url.find("://");
  if (authority != std::string::npos && url.compare(authority + 3, 1, "/") == 0) {
    return "The URL has no host";  // libcurl would take the path's first segment for one
  }
  const std::unique_ptr<CURLU, decltype(&curl_url_cleanup)> u(curl_url(), &curl_url_cleanup);
  if (!u) throw std::bad_alloc();
  switch (curl_url_set(u.get(), CURLUPART_URL, url.c_str(), 0)) {
    case CURLUE_OK:
      break;
    case CURLUE_NO_HOST:
      return "The URL has no host";
    case CURLUE_BAD_PORT_NUMBER:
      return "The port must be a number from 1 to 65535";
    case CURLUE_BAD_IPV6:
      return "The IPv6 address is malformed or its closing ']' is missing";
    case CURLUE_BAD_HOSTNAME:
      return "The host name is malformed";
    case CURLUE_OUT_OF_MEMORY:
      throw std::bad_alloc();
    default:
      return "It is not a valid URL";
  }
  char* port = nullptr;
  std::string problem;
  if (curl_url_get(u.get(), CURLUPART_PORT, &port, 0) == CURLUE_OK && port != nullptr) {
    if (std::string_view(port) == "0") problem = "The port must be a number from 1 to 65535";
  }
  curl_free(port);
  return problem;
}

// The gRPC endpoint forms lens takes: http://host:port, https://host:port, host:port.
bool has_scheme(std::string_view s) { return s.find("://") != std::string_view::npos; }

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

// Why the header `name` (lower case) with `value` cannot be sent, or empty. Refused are the
// headers the exporter or its transport set themselves, whose other values would break every
// request (the OpenTelemetry SDKs let them through and fail at each export), and, for gRPC, what
// gRPC's metadata rules forbid (PROTOCOL-HTTP2.md: names of [0-9a-z_.-], "grpc-" reserved,
// printable ASCII values unless the name ends in "-bin").
std::string header_problem(const std::string& name, std::string_view value, bool grpc) {
  if (name == "content-type") {
    return "the exporter sets it from the protocol (application/x-protobuf, application/json, "
           "application/grpc)";
  }
  if (name == "content-encoding") {
    return "the exporter sets it from OTEL_EXPORTER_OTLP_COMPRESSION";
  }
  if (name == "content-length" || name == "transfer-encoding") {
    return "the transport frames each request's body itself";
  }
  if (name == "connection" || name == "keep-alive" || name == "proxy-connection" ||
      name == "upgrade" || name == "te") {
    return "it is specific to a connection, which the transport manages (it keeps one open "
           "between batches), and HTTP/2, which gRPC uses and https may, forbids it";
  }
  if (!grpc) return {};
  if (name.starts_with("grpc-")) return "names starting with 'grpc-' are reserved for gRPC itself";
  if (name == "user-agent") return "gRPC sets it (lens' prefix, then gRPC's own)";
  if (name == "host") return "gRPC sends the endpoint's host as the :authority of each call";
  for (char c : name) {
    if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_' || c == '-' || c == '.')) {
      return "gRPC metadata names may use only letters, digits, '_', '-' and '.'";
    }
  }
  if (!name.ends_with("-bin")) {
    for (char c : value) {
      if (c < 0x20 || c > 0x7e) {
        return "gRPC metadata values must be printable ASCII, unless the name ends in '-bin'";
      }
    }
  }
  return {};
}

// "k1=v1,k2=v2" (W3C Baggage-like, values percent-encoded) into `headers`, replacing same names.
void parse_headers(const Found& f, bool grpc,
                   std::vector<std::pair<std::string, std::string>>& headers) {
  for (std::string_view part : split(f.value, ',')) {
    part = trim(part);
    if (part.empty()) continue;
    const auto eq = part.find('=');
    if (eq == std::string_view::npos) {
      invalid(f,
              "Expected comma-separated name=value pairs; '" + std::string(part) + "' has no '='.");
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
    if (const std::string why = header_problem(to_lower(name), value, grpc); !why.empty()) {
      invalid(
          f, "Header '" + name + "' cannot be set" + (grpc ? " with gRPC" : "") + ": " + why + ".");
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
    case OtlpProtocol::kGrpc:
      return "grpc";
    case OtlpProtocol::kHttpProtobuf:
      return "http/protobuf";
    case OtlpProtocol::kHttpJson:
      return "http/json";
  }
  return "http/protobuf";
}

std::string_view signal_path(OtlpSignal signal) noexcept {
  switch (signal) {
    case OtlpSignal::kMetrics:
      return "v1/metrics";
    case OtlpSignal::kLogs:
      return "v1/logs";
    case OtlpSignal::kTraces:
      break;
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
      invalid(protocol,
              "Valid protocols: " + quoted_list({"grpc", "http/json", "http/protobuf"}) + ".");
    }
    if (s.protocol == OtlpProtocol::kGrpc && !grpc_built_in()) {
      invalid(protocol,
              "This build of lens has no gRPC exporter (built without gRPC); use "
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
  if (s.endpoint_origin != "default") {
    const std::string given = *env_trimmed(s.endpoint_origin);
    const std::string example =
        http ? "http://localhost:4318" +
                   (s.endpoint_origin == specific_endpoint ? "/" + path : std::string())
             : "http://localhost:4317";
    const auto refuse = [&](const std::string& what) {
      throw ConfigError("Invalid value for " + s.endpoint_origin + ": '" + given + "'. " + what +
                        ", e.g. " + example + ".");
    };
    if (http && !has_http_scheme(given)) refuse("Expected an http:// or https:// URL");
    if (!http && has_scheme(given) && !has_http_scheme(given)) {
      refuse("Expected http://host:port (plaintext), https://host:port (TLS) or host:port");
    }
    // A gRPC target without a scheme is checked as the authority of an http:// URL.
    if (const std::string problem = url_problem(has_scheme(given) ? given : "http://" + given);
        !problem.empty()) {
      refuse(problem + "; expected " +
             (http ? std::string("an http:// or https:// URL")
                   : "http://host:port (plaintext), https://host:port (TLS) or host:port"));
    }
  }

  const std::string specific_headers =
      "OTEL_EXPORTER_OTLP_" + std::string(signal_variable_part(signal)) + "_HEADERS";
  for (const std::string& name : {std::string("OTEL_EXPORTER_OTLP_HEADERS"), specific_headers}) {
    if (auto v = env_trimmed(name)) parse_headers(Found{*v, name}, !http, s.headers);
  }

  if (const Found t = lookup(signal, "TIMEOUT"); !t.variable.empty()) {
    long long ms = 0;
    auto [ptr, ec] = std::from_chars(t.value.data(), t.value.data() + t.value.size(), ms);
    if (ec != std::errc() || ptr != t.value.data() + t.value.size() || ms < 1 || ms > 86'400'000) {
      invalid(t,
              "Expected a whole number of milliseconds from 1 to 86400000 (the OTel "
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
