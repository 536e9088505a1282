// `lens collect`: an OTLP receiver for people who have no collector.
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "collect/collector.hpp"
#include "commands.hpp"
#include "common/cli.hpp"

namespace nemo::lens::cli {
namespace {

constexpr std::string_view kHelp =
    "usage: lens collect [--out FILE] [--metrics-out FILE] [--logs-out FILE]\n"
    "                    [--listen HOST:PORT] [--grpc-listen HOST:PORT|off] [--max-body BYTES]\n"
    "                    [--token-file FILE | --token-env VAR] [--tls-cert FILE --tls-key FILE]\n"
    "                    [--header-timeout SECONDS]\n"
    "\n"
    "Receives spans, metrics and logs over OTLP and appends every request to its signal's file\n"
    "as one line of OTLP/JSON (the format of the file exporters, which `lens report` reads).\n"
    "Accepts POST /v1/traces, /v1/metrics and /v1/logs with application/x-protobuf or\n"
    "application/json bodies, gzip-compressed or not, and the gRPC TraceService, MetricsService\n"
    "and LogsService. At least one output is required; a signal without one is refused (HTTP 404,\n"
    "gRPC UNIMPLEMENTED) with a message naming its option. Stops on SIGINT or SIGTERM after\n"
    "finishing the requests in flight, and prints a summary line: requests and spans (data\n"
    "points, log records) per signal, rejected requests.\n"
    "\n"
    "options:\n"
    "  --out FILE               where to append spans (created when missing)\n"
    "  --metrics-out FILE       where to append metrics (may be the same file as another)\n"
    "  --logs-out FILE          where to append log records\n"
    "  --listen HOST:PORT       OTLP/HTTP address (default 127.0.0.1:4318; port 0 picks one)\n"
    "  --grpc-listen HOST:PORT  OTLP/gRPC address (default 127.0.0.1:4317), or 'off'\n"
    "  --max-body BYTES         largest request body, also after decompression (default\n"
    "                           16777216); larger ones get HTTP 413\n"
    "  --token-file FILE        require the token in FILE from every writer: HTTP\n"
    "                           'Authorization: Bearer TOKEN', gRPC metadata 'authorization';\n"
    "                           others get 401 / UNAUTHENTICATED\n"
    "  --token-env VAR          the same, with the token in the environment variable VAR\n"
    "                           (never on the command line, where ps shows it)\n"
    "  --tls-cert FILE          serve HTTPS and gRPC over TLS with this PEM certificate (chain)\n"
    "  --tls-key FILE           and its PEM private key\n"
    "  --header-timeout SECONDS how long a new HTTP connection has to send its request headers\n"
    "                           (TLS handshake included) before it is closed (default 10)\n"
    "\n"
    "Both addresses are loopback by default, so only this machine can send; give 0.0.0.0:PORT\n"
    "to accept other machines, with a token and TLS on a shared network (a warning says when\n"
    "either is missing). Writers send the token with\n"
    "OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20TOKEN and trust the certificate with\n"
    "OTEL_EXPORTER_OTLP_CERTIFICATE=FILE.\n"
    "\n"
    "Answers: 200 with an empty OTLP response; 400 for an undecodable body, 401 without the\n"
    "token, 404 for another path or a signal without output, 405 for another method, 413 for a\n"
    "body over the limit, 415 for an unsupported Content-Type or Content-Encoding. None of these\n"
    "stops the receiver.\n"
    "\n"
    "A file whose last line was torn by a crash during a write is cut back to its last whole\n"
    "line at start (a line on stderr says how many bytes went), so new lines start whole.\n";

constexpr FlagSpec kFlags[] = {
    {"--out", true},        {"--metrics-out", true}, {"--logs-out", true},
    {"--listen", true},     {"--grpc-listen", true}, {"--max-body", true},
    {"--token-file", true}, {"--token-env", true},   {"--tls-cert", true},
    {"--tls-key", true},    {"--token", true},       {"--header-timeout", true}};

// The token, certificate and key the flags name. Throws UsageError.
ReceiverAccess access_from(const ParsedFlags& flags) {
  if (flags.has("--token")) {
    throw UsageError(
        "--token is not accepted: a token on the command line shows in ps; put it in "
        "a file (--token-file FILE) or an environment variable (--token-env VAR)");
  }
  ReceiverAccess access;
  const auto file = flags.value("--token-file");
  const auto variable = flags.value("--token-env");
  access.token = read_token(file ? &*file : nullptr, variable ? &*variable : nullptr);
  const auto cert = flags.value("--tls-cert");
  const auto key = flags.value("--tls-key");
  if (cert.has_value() != key.has_value()) {
    throw UsageError(cert ? "--tls-cert needs --tls-key (the certificate's private key)"
                          : "--tls-key needs --tls-cert (the certificate it belongs to)");
  }
  if (cert) {
    access.cert_pem = read_pem(*cert, "--tls-cert");
    access.key_pem = read_pem(*key, "--tls-key");
    check_key_pair(access.cert_pem, *cert, access.key_pem, *key);
  }
  return access;
}

constexpr Signal kSignals[] = {Signal::kTraces, Signal::kMetrics, Signal::kLogs};

int run_collect(std::span<const std::string_view> args) {
  const ParsedFlags flags = parse_flags(args, kFlags);
  CollectorOutputs outputs;
  std::size_t given = 0;
  for (const Signal signal : kSignals) {
    const std::string_view option = output_option(signal);
    const auto path = flags.value(option);
    if (!path) continue;
    if (path->empty()) throw UsageError(std::string(option) + " needs a file name");
    (signal == Signal::kTraces    ? outputs.traces
     : signal == Signal::kMetrics ? outputs.metrics
                                  : outputs.logs) = *path;
    ++given;
  }
  if (given == 0) {
    throw UsageError(
        "no output given: --out FILE (spans), --metrics-out FILE or --logs-out FILE is required");
  }
  const ListenAddress http_address =
      parse_listen_address(flags.value_or("--listen", "127.0.0.1:4318"), "--listen");
  const std::string grpc_value = flags.value_or("--grpc-listen", "127.0.0.1:4317");
  std::size_t max_body = 16u << 20;
  if (auto v = flags.value("--max-body")) {
    std::size_t parsed = 0;
    try {
      std::size_t used = 0;
      parsed = std::stoull(*v, &used);
      if (used != v->size() || parsed == 0 || parsed > (1ull << 31)) throw std::out_of_range("");
    } catch (const std::exception&) {
      throw UsageError("invalid --max-body '" + *v +
                       "': expected a number of bytes from 1 to 2147483648");
    }
    max_body = parsed;
  }
  HttpLimits limits;
  if (auto v = flags.value("--header-timeout")) {
    unsigned long parsed = 0;
    std::size_t used = 0;
    try {
      parsed = std::stoul(*v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != v->size() || parsed == 0 || parsed > 3600) {
      throw UsageError("invalid --header-timeout '" + *v +
                       "': expected a number of seconds from 1 to 3600");
    }
    limits.header_timeout_s = static_cast<unsigned>(parsed);
  }
  const ReceiverAccess access = access_from(flags);
  // Every connection is a descriptor: take all the process may have (the soft limit is often
  // 1024 of a hard one far higher), so that the connection limit derived from it is not small.
  if (rlimit nofile{};
      ::getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 1 << 16);
    ::setrlimit(RLIMIT_NOFILE, &nofile);
  }

  // SIGINT and SIGTERM are taken by sigwait() below, so every thread started from here on (the
  // servers') must leave them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CollectorSink sink(outputs, max_body);
  for (const std::string& notice : sink.notices()) std::cerr << "lens collect: " << notice << "\n";
  HttpReceiver http(http_address, sink, access, limits);
  // One line per signal collected: the first says "OTLP/HTTP on" (what scripts look for; with
  // spans, the /v1/traces URL as it always was), the others "OTLP/HTTP also on".
  const std::string base = std::string(access.tls() ? "https://" : "http://") +
                           ListenAddress{http_address.host, http.port()}.to_string();
  std::string files;
  bool first = true;
  for (const Signal signal : kSignals) {
    if (!sink.collects(signal)) continue;
    std::cerr << "lens collect: OTLP/HTTP " << (first ? "on " : "also on ") << base
              << http_path(signal) << "\n";
    first = false;
    if (!files.empty()) files += ", ";
    if (given > 1 || signal != Signal::kTraces) {
      files += signal == Signal::kTraces    ? "spans to "
               : signal == Signal::kMetrics ? "metrics to "
                                            : "logs to ";
    }
    files += outputs.path(signal);
  }
  bool loopback = http_address.is_loopback();
  std::unique_ptr<GrpcReceiver> grpc;
  if (grpc_value != "off") {
    const ListenAddress grpc_address = parse_listen_address(grpc_value, "--grpc-listen");
    grpc = make_grpc_receiver(grpc_address, sink, access);
    if (grpc != nullptr) {
      std::cerr << "lens collect: OTLP/gRPC on "
                << ListenAddress{grpc_address.host, grpc->port()}.to_string()
                << (access.tls() ? " (TLS)" : "") << "\n";
      loopback = loopback && grpc_address.is_loopback();
    } else if (flags.has("--grpc-listen")) {
      throw UsageError("this build of lens has no gRPC receiver; use --grpc-listen off");
    }
  }
  if (!access.token.empty()) {
    std::cerr << "lens collect: writers must send the token (Authorization: Bearer ...); others "
                 "get 401 / UNAUTHENTICATED\n";
  }
  if (loopback) {
    std::cerr << "lens collect: listening on loopback only: processes on other machines cannot "
                 "send here (use --listen 0.0.0.0:PORT for that)\n";
  } else if (access.token.empty()) {
    std::cerr << "lens collect: warning: listening beyond loopback without a token: anyone who "
                 "can reach this port can write here; give --token-file FILE or --token-env VAR "
                 "(and --tls-cert FILE --tls-key FILE)\n";
  } else if (!access.tls()) {
    std::cerr << "lens collect: warning: listening beyond loopback without TLS: the token and the "
                 "data cross the network in clear text; give --tls-cert FILE --tls-key FILE\n";
  }
  std::cerr << "lens collect: appending " << (given > 1 || outputs.traces.empty() ? "" : "to ")
            << files << "; stop with Ctrl-C\n"
            << "lens collect: ready" << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  http.stop(10'000);
  if (grpc != nullptr) grpc->stop(10'000);
  std::cout << sink.summary(http.shed()) << std::endl;
  return 0;
}

}  // namespace

const Command& collect_command() {
  static const Command command{"collect", "receive OTLP spans, metrics and logs as OTLP/JSON lines",
                               kHelp, &run_collect};
  return command;
}

}  // namespace nemo::lens::cli
