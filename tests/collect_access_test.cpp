// Who may write to `lens collect`: its token (--token-file, --token-env) and TLS (--tls-cert,
// --tls-key), tested with the library's own OTLP exporter on the other end, over OTLP/HTTP and
// gRPC, with the right and a wrong token and the right and a wrong certificate; its warnings and
// its errors for bad options. The certificates are made by the openssl command for the test.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "export/otlp.hpp"
#include "lens_collect.hpp"
#include "nemo/lens/lens.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using lens_test::ChildProcess;
using lens_test::Collector;
using lens_test::ScopedEnv;
using Clock = std::chrono::steady_clock;
using nemo::lens::ExportResult;
using nemo::lens::SpanData;

class CollectAccess : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = ::testing::TempDir() + "lens_access_" + std::to_string(::getpid());
    // The receiver's certificate for 127.0.0.1, and another one a writer might wrongly trust.
    for (const std::string name : {"server", "other"}) {
      const std::string cmd =
          "mkdir -p " + dir_ +
          " && openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
          " -addext subjectAltName=IP:127.0.0.1 -keyout " +
          dir_ + "/" + name + "-key.pem -out " + dir_ + "/" + name + "-cert.pem 2>/dev/null";
      ASSERT_EQ(std::system(cmd.c_str()), 0);
    }
    std::ofstream(dir_ + "/token") << "s3cret-token\n";
  }
  static void TearDownTestSuite() { std::system(("rm -rf " + dir_).c_str()); }

  static std::string file(const std::string& name) { return dir_ + "/" + name; }

  // Exports one span (last span-id byte `id`) once, with an OTLP exporter for `protocol` and
  // `endpoint` that sends `headers` (OTEL_EXPORTER_OTLP_HEADERS form) and trusts `cert`.
  static ExportResult send(const std::string& protocol, const std::string& endpoint,
                           unsigned char id, const std::string& headers, const std::string& cert) {
    ScopedEnv env;
    env.set("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", protocol);
    env.set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", endpoint);
    env.set("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1500");
    if (!headers.empty()) env.set("OTEL_EXPORTER_OTLP_TRACES_HEADERS", headers);
    if (!cert.empty()) env.set("OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE", cert);
    SpanData span;
    span.name = "secure";
    span.context.trace_id.bytes[0] = 1;
    span.context.span_id.bytes[7] = id;
    const SpanData* view = &span;
    auto exporter = nemo::lens::detail::make_otlp_exporter();
    ::testing::internal::CaptureStderr();  // the exporter's one line per kind of failure
    ExportResult r = exporter->export_spans({&view, 1}, nemo::lens::Resource{}, Clock::now() + 10s);
    // A retryable failure (a TLS handshake gRPC reports as UNAVAILABLE) leaves the span in the
    // outage buffer: it counts as delivered only once the buffer is empty.
    if (r == ExportResult::kSuccess && !exporter->force_flush(Clock::now() + 2s)) {
      r = ExportResult::kFailure;
    }
    exporter->shutdown(Clock::now() + 100ms);
    last_stderr_ = ::testing::internal::GetCapturedStderr();
    return r;
  }

  // The span ids (last byte) collect wrote to `out`.
  static std::vector<int> received(const std::string& out) {
    std::vector<int> ids;
    for (const auto& [id, span] : lens_test::read_received(out).spans) {
      ids.push_back(std::stoi(id.substr(14), nullptr, 16));
    }
    return ids;
  }

  static inline std::string dir_;
  static inline std::string last_stderr_;
};

constexpr const char* kRightToken = "Authorization=Bearer%20s3cret-token";
constexpr const char* kWrongToken = "Authorization=Bearer%20guess";

TEST_F(CollectAccess, HttpsWithATokenLetsInOnlyTheRightTokenOverTheRightCertificate) {
  const std::string out = lens_test::temp_path("access_https");
  Collector collect(out, "127.0.0.1:0",
                    {"--token-file", file("token"), "--tls-cert", file("server-cert.pem"),
                     "--tls-key", file("server-key.pem"), "--grpc-listen", "off"});
  ASSERT_EQ(collect.http_base().substr(0, 8), "https://") << collect.stderr_text();
  const std::string url = collect.http_url();
  EXPECT_EQ(send("http/protobuf", url, 1, kRightToken, file("server-cert.pem")),
            ExportResult::kSuccess)
      << last_stderr_;
  EXPECT_EQ(send("http/json", url, 2, kRightToken, file("server-cert.pem")), ExportResult::kSuccess)
      << last_stderr_;
  EXPECT_EQ(send("http/protobuf", url, 3, kWrongToken, file("server-cert.pem")),
            ExportResult::kFailure);
  EXPECT_NE(last_stderr_.find("HTTP status 401"), std::string::npos) << last_stderr_;
  EXPECT_NE(last_stderr_.find("not retried"), std::string::npos) << last_stderr_;
  EXPECT_EQ(send("http/protobuf", url, 4, "", file("server-cert.pem")), ExportResult::kFailure);
  EXPECT_NE(last_stderr_.find("HTTP status 401"), std::string::npos) << last_stderr_;
  // The right token, sent to a receiver the writer does not trust: refused before it leaves.
  EXPECT_EQ(send("http/protobuf", url, 5, kRightToken, file("other-cert.pem")),
            ExportResult::kFailure);
  EXPECT_EQ(last_stderr_.find("HTTP status"), std::string::npos) << last_stderr_;
  // Plain HTTP to the HTTPS port gets no answer it could take for success.
  const std::string plain =
      "http://127.0.0.1:" + std::to_string(collect.http_port()) + "/v1/traces";
  EXPECT_EQ(send("http/protobuf", plain, 6, kRightToken, ""), ExportResult::kFailure);
  ASSERT_EQ(collect.stop(), 0);
  EXPECT_EQ(received(out), (std::vector<int>{1, 2}));
  EXPECT_NE(collect.summary().find("2 rejected"), std::string::npos) << collect.summary();
  std::remove(out.c_str());
}

TEST_F(CollectAccess, TokenFromTheEnvironmentOverPlainHttp) {
  ScopedEnv env;
  env.set("LENS_TEST_COLLECT_TOKEN", "s3cret-token");
  const std::string out = lens_test::temp_path("access_env");
  Collector collect(out, "127.0.0.1:0",
                    {"--token-env", "LENS_TEST_COLLECT_TOKEN", "--grpc-listen", "off"});
  EXPECT_EQ(send("http/protobuf", collect.http_url(), 1, kRightToken, ""), ExportResult::kSuccess)
      << last_stderr_;
  // The scheme in any case, more than one space, trailing whitespace: still the token.
  EXPECT_EQ(
      send("http/protobuf", collect.http_url(), 2, "Authorization=bearer%20%20s3cret-token", ""),
      ExportResult::kSuccess)
      << last_stderr_;
  EXPECT_EQ(
      send("http/protobuf", collect.http_url(), 6, "Authorization=Bearer%20s3cret-token%20", ""),
      ExportResult::kSuccess)
      << last_stderr_;
  // A prefix, an extension, another scheme: refused.
  EXPECT_EQ(send("http/protobuf", collect.http_url(), 3, "Authorization=Bearer%20s3cret", ""),
            ExportResult::kFailure);
  EXPECT_EQ(
      send("http/protobuf", collect.http_url(), 4, "Authorization=Bearer%20s3cret-token2", ""),
      ExportResult::kFailure);
  EXPECT_EQ(send("http/protobuf", collect.http_url(), 5, "Authorization=Basic%20s3cret-token", ""),
            ExportResult::kFailure);
  ASSERT_EQ(collect.stop(), 0);
  EXPECT_EQ(received(out), (std::vector<int>{1, 2, 6}));
  std::remove(out.c_str());
}

#ifdef LENS_WITH_GRPC
TEST_F(CollectAccess, GrpcOverTlsWithATokenLetsInOnlyTheRightTokenOverTheRightCertificate) {
  const std::string out = lens_test::temp_path("access_grpc");
  Collector collect(out, "127.0.0.1:0",
                    {"--token-file", file("token"), "--tls-cert", file("server-cert.pem"),
                     "--tls-key", file("server-key.pem")});
  ASSERT_NE(collect.grpc_port(), 0) << collect.stderr_text();
  const std::string endpoint = "https://127.0.0.1:" + std::to_string(collect.grpc_port());
  EXPECT_EQ(send("grpc", endpoint, 1, kRightToken, file("server-cert.pem")), ExportResult::kSuccess)
      << last_stderr_;
  EXPECT_EQ(send("grpc", endpoint, 2, kWrongToken, file("server-cert.pem")),
            ExportResult::kFailure);
  EXPECT_NE(last_stderr_.find("gRPC status 16"), std::string::npos)
      << last_stderr_;  // UNAUTHENTICATED
  EXPECT_EQ(send("grpc", endpoint, 3, "", file("server-cert.pem")), ExportResult::kFailure);
  EXPECT_NE(last_stderr_.find("gRPC status 16"), std::string::npos) << last_stderr_;
  EXPECT_EQ(send("grpc", endpoint, 4, kRightToken, file("other-cert.pem")), ExportResult::kFailure);
  EXPECT_EQ(last_stderr_.find("gRPC status 16"), std::string::npos) << last_stderr_;
  ASSERT_EQ(collect.stop(), 0);
  EXPECT_EQ(received(out), (std::vector<int>{1}));
  std::remove(out.c_str());
}
#endif

// What lens collect prints about who can reach it.
std::string startup_lines(const std::vector<std::string>& extra) {
  const std::string out = lens_test::temp_path("access_warn");
  std::vector<std::string> args = {"--grpc-listen", "off"};
  args.insert(args.end(), extra.begin(), extra.end());
  auto collect = Collector::with_args(out, [&] {
    std::vector<std::string> a = {"--out", out};
    a.insert(a.end(), args.begin(), args.end());
    return a;
  }());
  const std::string text = collect->stderr_text();
  collect->stop();
  std::remove(out.c_str());
  std::remove((out + ".stdout").c_str());
  return text;
}

TEST_F(CollectAccess, WarnsWhenListeningBeyondLoopbackWithoutATokenOrTls) {
  const std::string open = startup_lines({"--listen", "0.0.0.0:0"});
  EXPECT_NE(open.find("warning: listening beyond loopback without a token"), std::string::npos)
      << open;
  const std::string token = startup_lines({"--listen", "0.0.0.0:0", "--token-file", file("token")});
  EXPECT_EQ(token.find("without a token"), std::string::npos) << token;
  EXPECT_NE(token.find("warning: listening beyond loopback without TLS"), std::string::npos)
      << token;
  const std::string both =
      startup_lines({"--listen", "0.0.0.0:0", "--token-file", file("token"), "--tls-cert",
                     file("server-cert.pem"), "--tls-key", file("server-key.pem")});
  EXPECT_EQ(both.find("warning"), std::string::npos) << both;
  const std::string loopback = startup_lines({});
  EXPECT_EQ(loopback.find("warning"), std::string::npos) << loopback;
  EXPECT_NE(loopback.find("listening on loopback only"), std::string::npos) << loopback;
}

// `lens collect ARGS` exits with `status` and an error naming what was wrong.
void expect_refused(const std::vector<std::string>& args, int status, const std::string& message) {
  std::vector<std::string> argv = {LENS_BINARY, "collect", "--out",
                                   lens_test::temp_path("refused")};
  argv.insert(argv.end(), args.begin(), args.end());
  ChildProcess child(argv);
  EXPECT_EQ(child.wait(), status) << child.stderr_text();
  EXPECT_NE(child.stderr_text().find(message), std::string::npos) << child.stderr_text();
  EXPECT_EQ(child.stderr_text().find("ready"), std::string::npos) << child.stderr_text();
  std::remove(lens_test::temp_path("refused").c_str());
}

TEST_F(CollectAccess, BadTokenAndCertificateOptionsAreRefusedClearly) {
  expect_refused({"--token", "abc"}, 2,
                 "--token is not accepted: a token on the command line shows in ps");
  expect_refused({"--token-env", "LENS_TEST_UNSET_VARIABLE"}, 2,
                 "the environment variable LENS_TEST_UNSET_VARIABLE is not set");
  expect_refused({"--token-file", file("missing")}, 2,
                 "cannot read --token-file '" + file("missing"));
  std::ofstream(file("empty-token")) << "\n";
  expect_refused({"--token-file", file("empty-token")}, 2, "holds an empty token");
  std::ofstream(file("spaced-token")) << "two words\n";
  expect_refused({"--token-file", file("spaced-token")}, 2,
                 "holds whitespace, a control character or a byte beyond ASCII");
  std::ofstream(file("latin1-token")) << "caf\xe9\n";
  expect_refused({"--token-file", file("latin1-token")}, 2, "use printable ASCII characters only");
  std::ofstream(file("long-token")) << std::string(5000, 'k') << "\n";
  expect_refused({"--token-file", file("long-token")}, 2, "the token is 5000 bytes; at most 4096");
  std::ofstream(file("huge-token")) << std::string(100000, 'k');
  expect_refused({"--token-file", file("huge-token")}, 2, "is larger than 65536 bytes");
  // A directory and a device are refused by what they are, without reading (/dev/zero never ends).
  expect_refused({"--token-file", dir_}, 2, "is not a regular file (a directory)");
  expect_refused({"--token-file", "/dev/zero"}, 2, "'/dev/zero' is not a regular file");
  expect_refused({"--token-file", file("token"), "--token-env", "X"}, 2,
                 "one of --token-file and --token-env");
  expect_refused({"--tls-cert", file("server-cert.pem")}, 2, "--tls-cert needs --tls-key");
  expect_refused({"--tls-key", file("server-key.pem")}, 2, "--tls-key needs --tls-cert");
  expect_refused({"--tls-cert", file("token"), "--tls-key", file("server-key.pem")}, 2,
                 "--tls-cert '" + file("token") + "' is not a PEM file");
  // A certificate with another certificate's key: said as such, not taken for a port in use.
  expect_refused({"--tls-cert", file("server-cert.pem"), "--tls-key", file("other-key.pem"),
                  "--grpc-listen", "off", "--listen", "127.0.0.1:0"},
                 2,
                 "--tls-key '" + file("other-key.pem") +
                     "' is not the private key of --tls-cert '" + file("server-cert.pem") +
                     "': the certificate holds another public key");
  expect_refused(
      {"--tls-cert", file("server-key.pem"), "--tls-key", file("server-key.pem")}, 2,
      "--tls-cert '" + file("server-key.pem") + "' does not start with a PEM certificate");
  expect_refused(
      {"--tls-cert", file("server-cert.pem"), "--tls-key", file("server-cert.pem")}, 2,
      "--tls-key '" + file("server-cert.pem") + "' is not an unencrypted PEM private key");
}

}  // namespace
