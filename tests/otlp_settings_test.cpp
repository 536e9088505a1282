// OtlpSettings from the OTEL_EXPORTER_OTLP_* variables: the OTel specification's precedence and
// endpoint rules, and a ConfigError naming the variable for every value lens cannot use.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "scoped_env.hpp"

namespace {

using lens_test::error_message_of;
using lens_test::ScopedEnv;
using nemo::lens::ConfigError;
using nemo::lens::detail::grpc_built_in;
using nemo::lens::detail::otlp_settings_from_env;
using nemo::lens::detail::OtlpProtocol;

TEST(OtlpSettings, DefaultsFollowTheBuild) {
  ScopedEnv env;
  const auto s = otlp_settings_from_env();
  if (grpc_built_in()) {
    EXPECT_EQ(s.protocol, OtlpProtocol::kGrpc);  // NeMo Lens' default
    EXPECT_EQ(s.endpoint, "http://localhost:4317");
  } else {
    EXPECT_EQ(s.protocol, OtlpProtocol::kHttpProtobuf);
    EXPECT_EQ(s.endpoint, "http://localhost:4318/v1/traces");
  }
  EXPECT_EQ(s.protocol_origin, "default");
  EXPECT_EQ(s.endpoint_origin, "default");
  EXPECT_EQ(s.timeout, std::chrono::milliseconds(10'000));
  EXPECT_FALSE(s.gzip);
  EXPECT_TRUE(s.headers.empty());
}

TEST(OtlpSettings, HttpDefaultEndpointHasTheTracesPath) {
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
  const auto s = otlp_settings_from_env();
  EXPECT_EQ(s.protocol, OtlpProtocol::kHttpJson);
  EXPECT_EQ(s.protocol_origin, "OTEL_EXPORTER_OTLP_PROTOCOL");
  EXPECT_EQ(s.endpoint, "http://localhost:4318/v1/traces");
}

TEST(OtlpSettings, SignalSpecificVariablesWin) {
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "HTTP/Protobuf");
  env.set("OTEL_EXPORTER_OTLP_TIMEOUT", "5000");
  env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "250");
  env.set("OTEL_EXPORTER_OTLP_COMPRESSION", "none");
  env.set("OTEL_EXPORTER_OTLP_TRACES_COMPRESSION", "gzip");
  const auto s = otlp_settings_from_env();
  EXPECT_EQ(s.protocol, OtlpProtocol::kHttpProtobuf);
  EXPECT_EQ(s.protocol_origin, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL");
  EXPECT_EQ(s.timeout, std::chrono::milliseconds(250));
  EXPECT_TRUE(s.gzip);
}

TEST(OtlpSettings, GeneralEndpointGetsTheSignalPathSpecificIsUsedAsGiven) {
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
  EXPECT_EQ(otlp_settings_from_env().endpoint, "http://collector:4318/v1/traces");
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "https://collector:4318/base/");
  EXPECT_EQ(otlp_settings_from_env().endpoint, "https://collector:4318/base/v1/traces");
  env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:9999/custom");
  const auto s = otlp_settings_from_env();
  EXPECT_EQ(s.endpoint, "http://other:9999/custom");
  EXPECT_EQ(s.endpoint_origin, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT");
}

TEST(OtlpSettings, MetricsAndLogsReadTheirOwnVariablesAndPaths) {
  using nemo::lens::detail::OtlpSignal;
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318");
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "x-team=a");
  EXPECT_EQ(otlp_settings_from_env(OtlpSignal::kMetrics).endpoint,
            "http://collector:4318/v1/metrics");
  EXPECT_EQ(otlp_settings_from_env(OtlpSignal::kLogs).endpoint, "http://collector:4318/v1/logs");
  env.set("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json");
  env.set("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://metrics:9090/ingest");
  env.set("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-team=b");
  env.set("OTEL_EXPORTER_OTLP_LOGS_TIMEOUT", "750");
  const auto m = otlp_settings_from_env(OtlpSignal::kMetrics);
  EXPECT_EQ(m.signal, OtlpSignal::kMetrics);
  EXPECT_EQ(m.protocol, OtlpProtocol::kHttpJson);
  EXPECT_EQ(m.protocol_origin, "OTEL_EXPORTER_OTLP_METRICS_PROTOCOL");
  EXPECT_EQ(m.endpoint, "http://metrics:9090/ingest");
  ASSERT_EQ(m.headers.size(), 1u);
  EXPECT_EQ(m.headers[0].second, "b");
  const auto l = otlp_settings_from_env(OtlpSignal::kLogs);
  EXPECT_EQ(l.protocol, OtlpProtocol::kHttpProtobuf);  // the metrics variable is not the logs'
  EXPECT_EQ(l.timeout, std::chrono::milliseconds(750));
  EXPECT_EQ(otlp_settings_from_env().timeout, std::chrono::milliseconds(10'000));
  env.set("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "collector:4318");
  EXPECT_EQ(error_message_of<ConfigError>([] { otlp_settings_from_env(OtlpSignal::kLogs); }),
            "Invalid value for OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: 'collector:4318'. Expected an "
            "http:// or https:// URL, e.g. http://localhost:4318/v1/logs.");
}

TEST(OtlpSettings, HeadersArePercentDecodedAndSpecificOnesReplaceGeneral) {
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_HEADERS",
          "api-key=abc%3D%3D, X-Tenant = team a ,Authorization=Basic%20x");
  env.set("OTEL_EXPORTER_OTLP_TRACES_HEADERS", "authorization=Bearer%20t");
  const auto s = otlp_settings_from_env();
  ASSERT_EQ(s.headers.size(), 3u);
  EXPECT_EQ(s.headers[0], (std::pair<std::string, std::string>{"api-key", "abc=="}));
  EXPECT_EQ(s.headers[1], (std::pair<std::string, std::string>{"X-Tenant", "team a"}));
  EXPECT_EQ(s.headers[2], (std::pair<std::string, std::string>{"authorization", "Bearer t"}));
}

TEST(OtlpSettings, BadValuesNameTheVariableAndWhatIsValid) {
  struct Case {
    const char* variable;
    const char* value;
    const char* expected;
  };
  const Case cases[] = {
      {"OTEL_EXPORTER_OTLP_PROTOCOL", "http",
       "Valid protocols: ['grpc', 'http/json', 'http/protobuf']"},
      {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318",
       "Expected an http:// or https:// URL"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "novalue", "'novalue' has no '='"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "bad name=x", "is not a valid HTTP header name"},
      {"OTEL_EXPORTER_OTLP_TRACES_HEADERS", "k=a%0Db", "no line breaks"},
      {"OTEL_EXPORTER_OTLP_HEADERS", "k=%zz", "%XX escapes"},
      {"OTEL_EXPORTER_OTLP_TIMEOUT", "10s", "whole number of milliseconds"},
      {"OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "0", "from 1 to 86400000"},
      {"OTEL_EXPORTER_OTLP_COMPRESSION", "zstd", "Valid compressions: ['gzip', 'none']"},
      {"OTEL_EXPORTER_OTLP_CERTIFICATE", "/nonexistent/ca.pem", "cannot be read"},
      {"OTEL_EXPORTER_OTLP_INSECURE", "maybe", "Expected a boolean"},
  };
  for (const Case& c : cases) {
    ScopedEnv env;
    env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
    env.set(c.variable, c.value);
    const std::string message = error_message_of<ConfigError>([] { otlp_settings_from_env(); });
    EXPECT_NE(message.find(c.variable), std::string::npos) << message;
    EXPECT_NE(message.find(std::string("'") + c.value + "'"), std::string::npos) << message;
    EXPECT_NE(message.find(c.expected), std::string::npos) << message;
  }
}

// The protocols this build can export with.
std::vector<std::string> built_protocols() {
  std::vector<std::string> out = {"http/protobuf", "http/json"};
  if (grpc_built_in()) out.push_back("grpc");
  return out;
}

// An endpoint no request could reach is a ConfigError at set-up for every protocol and every
// signal's variable, naming the variable, the value and what is wrong, not a failure at every
// export.
TEST(OtlpSettings, EndpointsWithoutAHostOrWithABadPortAreRefused) {
  using nemo::lens::detail::OtlpSignal;
  struct Case {
    const char* value;
    const char* problem;
  };
  const Case cases[] = {
      {"http://", "The URL has no host"},
      {"https://:4318", "The URL has no host"},
      {"http:///v1/traces", "The URL has no host"},
      {"http://127.0.0.1:99999", "The port must be a number from 1 to 65535"},
      {"http://127.0.0.1:0", "The port must be a number from 1 to 65535"},
      {"http://collector:43x7", "The port must be a number from 1 to 65535"},
      {"http://[::1", "The IPv6 address is malformed or its closing ']' is missing"},
      {"http://coll ector:4318", "The host name is malformed"},
  };
  const std::pair<OtlpSignal, const char*> signals[] = {{OtlpSignal::kTraces, "TRACES"},
                                                        {OtlpSignal::kMetrics, "METRICS"},
                                                        {OtlpSignal::kLogs, "LOGS"}};
  for (const std::string& protocol : built_protocols()) {
    for (const auto& [signal, part] : signals) {
      for (const std::string& variable :
           {std::string("OTEL_EXPORTER_OTLP_ENDPOINT"),
            "OTEL_EXPORTER_OTLP_" + std::string(part) + "_ENDPOINT"}) {
        for (const Case& c : cases) {
          ScopedEnv env;
          env.set("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
          env.set(variable, c.value);
          const std::string message =
              error_message_of<ConfigError>([signal] { otlp_settings_from_env(signal); });
          EXPECT_EQ(message.rfind("Invalid value for " + variable + ": '" + c.value + "'. " +
                                      c.problem + "; expected ",
                                  0),
                    0u)
              << protocol << " " << message;
        }
      }
    }
  }
}

TEST(OtlpSettings, GrpcEndpointsAreHostPortWithOrWithoutAnHttpScheme) {
  if (!grpc_built_in()) GTEST_SKIP() << "built without gRPC";
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
  for (const char* good : {"localhost:4317", "[::1]:4317", "http://127.0.0.1:4317",
                           "https://collector.example.com", "collector"}) {
    env.set("OTEL_EXPORTER_OTLP_ENDPOINT", good);
    EXPECT_EQ(otlp_settings_from_env().endpoint, good);
  }
  const std::pair<const char*, const char*> bad[] = {
      {"[::1",
       "The IPv6 address is malformed or its closing ']' is missing; expected "
       "http://host:port (plaintext), https://host:port (TLS) or host:port, e.g. "
       "http://localhost:4317."},
      {"collector:99999",
       "The port must be a number from 1 to 65535; expected http://host:port "
       "(plaintext), https://host:port (TLS) or host:port, e.g. "
       "http://localhost:4317."},
      {"dns:///collector:4317",
       "Expected http://host:port (plaintext), https://host:port (TLS) "
       "or host:port, e.g. http://localhost:4317."},
  };
  for (const auto& [value, expected] : bad) {
    env.set("OTEL_EXPORTER_OTLP_ENDPOINT", value);
    EXPECT_EQ(
        error_message_of<ConfigError>([] { otlp_settings_from_env(); }),
        "Invalid value for OTEL_EXPORTER_OTLP_ENDPOINT: '" + std::string(value) + "'. " + expected);
  }
}

// Headers the exporter or its transport set themselves, whose other values would break every
// request, are refused at set-up naming the header and the variable; gRPC also refuses what its
// metadata rules forbid.
TEST(OtlpSettings, HeadersThatWouldBreakEveryRequestAreRefused) {
  const char* for_every_protocol[] = {"Content-Length=5",      "content-type=text/plain",
                                      "Content-Encoding=gzip", "Transfer-Encoding=chunked",
                                      "Connection=close",      "Keep-Alive=timeout%3D5",
                                      "Upgrade=h2c",           "TE=trailers",
                                      "Proxy-Connection=close"};
  for (const std::string& protocol : built_protocols()) {
    for (const char* header : for_every_protocol) {
      for (const char* variable :
           {"OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS"}) {
        ScopedEnv env;
        env.set("OTEL_EXPORTER_OTLP_PROTOCOL", protocol);
        const std::string value = std::string("x-team=a,") + header;
        env.set(variable, value);
        const std::string message = error_message_of<ConfigError>([] { otlp_settings_from_env(); });
        const std::string name(header, std::string_view(header).find('='));
        EXPECT_EQ(message.rfind("Invalid value for " + std::string(variable) + ": '" + value +
                                    "'. Header '" + name + "' cannot be set",
                                0),
                  0u)
            << protocol << " " << message;
      }
    }
  }
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "Content-Length=5");
  EXPECT_EQ(error_message_of<ConfigError>([] { otlp_settings_from_env(); }),
            "Invalid value for OTEL_EXPORTER_OTLP_HEADERS: 'Content-Length=5'. Header "
            "'Content-Length' cannot be set: the transport frames each request's body itself.");
  // Over HTTP a Host (virtual hosting through an address) and a User-Agent replace lens' own.
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "Host=collector.internal,User-Agent=trainer/1,x=caf%C3%A9");
  EXPECT_EQ(otlp_settings_from_env().headers.size(), 3u);
  if (!grpc_built_in()) return;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
  const std::pair<const char*, const char*> grpc_only[] = {
      {"grpc-timeout=1S", "names starting with 'grpc-' are reserved for gRPC itself"},
      {"User-Agent=trainer/1", "gRPC sets it"},
      {"Host=collector.internal", "gRPC sends the endpoint's host as the :authority"},
      {"x!team=a", "gRPC metadata names may use only letters, digits, '_', '-' and '.'"},
      {"x-team=caf%C3%A9", "gRPC metadata values must be printable ASCII"},
  };
  for (const auto& [header, why] : grpc_only) {
    env.set("OTEL_EXPORTER_OTLP_HEADERS", header);
    const std::string message = error_message_of<ConfigError>([] { otlp_settings_from_env(); });
    EXPECT_NE(message.find("cannot be set with gRPC: " + std::string(why)), std::string::npos)
        << message;
    EXPECT_NE(message.find("OTEL_EXPORTER_OTLP_HEADERS"), std::string::npos) << message;
  }
  // Binary metadata carries any bytes; upper case names are sent in lower case.
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "X-Trace-Bin=caf%C3%A9,X-Team=a");
  EXPECT_EQ(otlp_settings_from_env().headers.size(), 2u);
}

TEST(OtlpSettings, CertificateFilesThatExistAreKept) {
  ScopedEnv env;
  const std::string path = ::testing::TempDir() + "lens_ca.pem";
  std::ofstream(path) << "-----BEGIN CERTIFICATE-----\n";
  env.set("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", path);
  env.set("OTEL_EXPORTER_OTLP_CLIENT_KEY", path);
  env.set("OTEL_EXPORTER_OTLP_CLIENT_CERTIFICATE", path);
  const auto s = otlp_settings_from_env();
  EXPECT_EQ(s.certificate, path);
  EXPECT_EQ(s.client_key, path);
  EXPECT_EQ(s.client_certificate, path);
  std::remove(path.c_str());
}

TEST(OtlpSettings, GrpcIsRefusedOnlyWhereItIsNotBuiltIn) {
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc");
  if (grpc_built_in()) {
    EXPECT_EQ(otlp_settings_from_env().protocol, OtlpProtocol::kGrpc);
  } else {
    const std::string message = error_message_of<ConfigError>([] { otlp_settings_from_env(); });
    EXPECT_NE(message.find("built without gRPC"), std::string::npos) << message;
  }
}

}  // namespace
