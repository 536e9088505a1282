// `lens collect`: an OTLP receiver for people who have no collector.
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <limits>
#include <string>

#include "cli.hpp"
#include "collector.hpp"

namespace nemo::lens::cli {
namespace {

constexpr std::string_view kHelp =
    "usage: lens collect --out FILE [--listen HOST:PORT] [--grpc-listen HOST:PORT|off]\n"
    "                    [--max-body BYTES]\n"
    "\n"
    "Receives spans over OTLP and appends every request to FILE as one line of OTLP/JSON (the\n"
    "format of the file exporter, which `lens report` reads). Accepts POST /v1/traces with\n"
    "application/x-protobuf or application/json bodies, gzip-compressed or not, and the gRPC\n"
    "TraceService. Stops on SIGINT or SIGTERM after finishing the requests in flight, and prints\n"
    "a summary line: requests, spans, rejected requests.\n"
    "\n"
    "options:\n"
    "  --out FILE               where to append (created when missing)\n"
    "  --listen HOST:PORT       OTLP/HTTP address (default 127.0.0.1:4318; port 0 picks one)\n"
    "  --grpc-listen HOST:PORT  OTLP/gRPC address (default 127.0.0.1:4317), or 'off'\n"
    "  --max-body BYTES         largest request body, also after decompression (default\n"
    "                           16777216); larger ones get HTTP 413\n"
    "\n"
    "Both addresses are loopback by default, so only this machine can send; give 0.0.0.0:PORT\n"
    "to accept other machines. Answers: 200 with an empty OTLP response; 400 for an undecodable\n"
    "body, 404 for another path, 405 for another method, 413 for a body over the limit, 415 for\n"
    "an unsupported Content-Type or Content-Encoding. None of these stops the receiver.\n";

constexpr FlagSpec kFlags[] = {
    {"--out", true}, {"--listen", true}, {"--grpc-listen", true}, {"--max-body", true}};

int run_collect(std::span<const std::string_view> args) {
  const ParsedFlags flags = parse_flags(args, kFlags);
  const auto out = flags.value("--out");
  if (!out || out->empty()) throw UsageError("--out FILE is required");
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
      throw UsageError("invalid --max-body '" + *v + "': expected a number of bytes from 1 to 2147483648");
    }
    max_body = parsed;
  }

  // SIGINT and SIGTERM are taken by sigwait() below, so every thread started from here on (the
  // servers') must leave them blocked.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  CollectorSink sink(*out, max_body);
  HttpReceiver http(http_address, sink);
  std::cerr << "lens collect: OTLP/HTTP on http://"
            << ListenAddress{http_address.host, http.port()}.to_string() << "/v1/traces\n";
  bool loopback = http_address.is_loopback();
  std::unique_ptr<GrpcReceiver> grpc;
  if (grpc_value != "off") {
    const ListenAddress grpc_address = parse_listen_address(grpc_value, "--grpc-listen");
    grpc = make_grpc_receiver(grpc_address, sink);
    if (grpc != nullptr) {
      std::cerr << "lens collect: OTLP/gRPC on "
                << ListenAddress{grpc_address.host, grpc->port()}.to_string() << "\n";
      loopback = loopback && grpc_address.is_loopback();
    } else if (flags.has("--grpc-listen")) {
      throw UsageError("this build of lens has no gRPC receiver; use --grpc-listen off");
    }
  }
  if (loopback) {
    std::cerr << "lens collect: listening on loopback only: processes on other machines cannot "
                 "send here (use --listen 0.0.0.0:PORT for that)\n";
  }
  std::cerr << "lens collect: appending to " << *out << "; stop with Ctrl-C\n"
            << "lens collect: ready" << std::endl;

  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  http.stop(10'000);
  if (grpc != nullptr) grpc->stop(10'000);
  std::cout << "lens collect: " << sink.requests() << " requests, " << sink.spans() << " spans, "
            << sink.rejected() << " rejected; written to " << *out << std::endl;
  return 0;
}

}  // namespace

const Command& collect_command() {
  static const Command command{"collect", "receive OTLP spans and write them as OTLP/JSON lines",
                               kHelp, &run_collect};
  return command;
}

}  // namespace nemo::lens::cli
