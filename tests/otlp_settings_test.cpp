// OtlpSettings from the OTEL_EXPORTER_OTLP_* variables: the OTel specification's precedence and
// endpoint rules, and a ConfigError naming the variable for every value lens cannot use.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "export/otlp.hpp"
#include "nemo/lens/errors.hpp"
#include "scoped_env.hpp"

namespace {

using nemo::lens::ConfigError;
using nemo::lens::detail::grpc_built_in;
using nemo::lens::detail::OtlpProtocol;
using nemo::lens::detail::otlp_settings_from_env;
using lens_test::error_message_of;
using lens_test::ScopedEnv;

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
  env.set("OTEL_EXPORTER_OTLP_HEADERS", "api-key=abc%3D%3D, X-Tenant = team a ,Authorization=Basic%20x");
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
      {"OTEL_EXPORTER_OTLP_PROTOCOL", "http", "Valid protocols: ['grpc', 'http/json', 'http/protobuf']"},
      {"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "collector:4318", "Expected an http:// or https:// URL"},
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
