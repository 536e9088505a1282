// Test helper: `lens collect` (LENS_BINARY) as a child process writing to its own file, and the
// spans that file holds.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace lens_test {

using namespace std::chrono_literals;

/// A file name in the test's temporary directory, unique to this process.
inline std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "lens_otlp_" + name + "_" + std::to_string(::getpid()) + ".jsonl";
}

/// `lens collect` on loopback ports it picks (HTTP; gRPC unless `extra` says otherwise).
class Collector {
 public:
  /// Spans to `out`.
  explicit Collector(const std::string& out, const std::string& http = "127.0.0.1:0",
                     std::vector<std::string> extra = {})
      : Collector(out, [&] {
          std::vector<std::string> args{"--out", out, "--listen", http};
          args.insert(args.end(), extra.begin(), extra.end());
          return args;
        }()) {}

  /// `lens collect` with `args` (the outputs: --out, --metrics-out, --logs-out...; --listen and
  /// --grpc-listen default to port 0 on loopback); `scratch` names the file of its stdout
  /// (`scratch`.stdout).
  static std::unique_ptr<Collector> with_args(const std::string& scratch,
                                              std::vector<std::string> args) {
    if (std::find(args.begin(), args.end(), "--listen") == args.end()) {
      args.insert(args.end(), {"--listen", "127.0.0.1:0"});
    }
    return std::unique_ptr<Collector>(new Collector(scratch, std::move(args)));
  }

 private:
  Collector(const std::string& scratch, std::vector<std::string> args) : out_(scratch) {
    std::vector<std::string> argv{LENS_BINARY, "collect"};
    argv.insert(argv.end(), args.begin(), args.end());
    if (std::find(args.begin(), args.end(), "--grpc-listen") == args.end()) {
      argv.insert(argv.end(), {"--grpc-listen", "127.0.0.1:0"});
    }
    child_ = std::make_unique<ChildProcess>(argv, scratch + ".stdout");
    // It prints the addresses it listens on (the ports it picked), then that it is ready.
    if (!child_->wait_for_line("lens collect: ready")) {
      throw std::runtime_error("lens collect did not start: " + child_->stderr_text());
    }
    http_port_ = port_after(child_->stderr_text(), "OTLP/HTTP on http://127.0.0.1:");
    if (http_port_ == 0) {  // --tls-cert
      http_port_ = port_after(child_->stderr_text(), "OTLP/HTTP on https://127.0.0.1:");
      scheme_ = "https";
    }
    grpc_port_ = port_after(child_->stderr_text(), "OTLP/gRPC on 127.0.0.1:");
  }

 public:
  std::string http_url() const { return http_base() + "/v1/traces"; }
  /// "http://127.0.0.1:PORT" ("https://" with TLS), for the other paths.
  std::string http_base() const { return scheme_ + "://127.0.0.1:" + std::to_string(http_port_); }
  /// What it printed on stderr so far.
  std::string stderr_text() const { return child_->stderr_text(); }
  int http_port() const { return http_port_; }
  int grpc_port() const { return grpc_port_; }
  /// The process id of `lens collect`, for /proc/<pid>/status.
  pid_t pid() const { return child_->pid(); }

  /// SIGTERM, then the exit status.
  int stop() { child_->signal(SIGTERM); return child_->wait(); }
  /// Sends `sig` without waiting.
  void signal(int sig) { child_->signal(sig); }
  /// Waits for the exit; its status.
  int wait() { return child_->wait(); }
  void kill() { child_->signal(SIGKILL); child_->wait(); }
  std::string summary() const {
    std::ifstream in(out_ + ".stdout");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  // The port after `prefix` in `text`, or 0 when `prefix` does not occur.
  static int port_after(const std::string& text, const std::string& prefix) {
    const auto at = text.find(prefix);
    return at == std::string::npos ? 0 : std::stoi(text.substr(at + prefix.size()));
  }

  std::string out_;
  std::unique_ptr<ChildProcess> child_;
  std::string scheme_ = "http";
  int http_port_ = 0;
  int grpc_port_ = 0;
};

/// The lines of the file at `path`, without their newlines.
inline std::vector<std::string> lines_of(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Every span in an OTLP/JSON Lines file, keyed by span id (hex); `duplicates` counts ids seen
// more than once.
struct Received {
  std::map<std::string, nlohmann::json> spans;
  /// The resource of each span's request, by span id.
  std::map<std::string, nlohmann::json> resources;
  std::size_t duplicates = 0;
  std::vector<nlohmann::json> lines;
};

inline Received read_received(const std::string& path) {
  Received r;
  std::ifstream in(path);
  for (std::string line; std::getline(in, line);) {
    nlohmann::json doc = nlohmann::json::parse(line);
    r.lines.push_back(doc);
    for (const auto& rs : doc["resourceSpans"]) {
      for (const auto& ss : rs["scopeSpans"]) {
        for (const auto& span : ss["spans"]) {
          const std::string id = span["spanId"].get<std::string>();
          if (!r.spans.emplace(id, span).second) ++r.duplicates;
          // Not rs["resource"]: on a const object without the key that is undefined behaviour
          // (it crashed CollectLimits' test, whose requests have no resource, in CI's build).
          const auto resource = rs.find("resource");
          r.resources[id] = resource != rs.end() ? *resource : nlohmann::json::object();
        }
      }
    }
  }
  return r;
}

}  // namespace lens_test
