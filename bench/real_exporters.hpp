// The exporters a user runs, for the benchmarks that measure a span with a real exporter working
// on its own thread: the `file` exporter writing OTLP JSON lines to a temporary file, and the OTLP
// exporter sending HTTP protobuf to a real `lens collect` on a free loopback port. Each is set up
// through the public configuration, as a program would, and removes what it made when it ends.
//
//   lens_bench::RealExporter out(lens_bench::ExporterKind::kFile);
//   TelemetryHandle h = out.setup(config);  // config: groups, strategy, ranks as wanted
#pragma once

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "nemo/lens/lens.hpp"

namespace lens_bench {

/// `lens collect` of `binary` (the build's by default) on a free loopback port, writing OTLP JSON
/// lines to a temporary file; stopped and the file removed at the end. Throws std::runtime_error
/// when it does not start.
struct LensCollect {
  std::string out = "/tmp/lens_bench_collect_" + std::to_string(::getpid()) + ".jsonl";
  std::unique_ptr<lens_test::ChildProcess> child;
  std::string url;  // http://127.0.0.1:PORT/v1/traces

  explicit LensCollect(const std::string& binary = LENS_BINARY) {
    std::remove(out.c_str());
    child = std::make_unique<lens_test::ChildProcess>(
        std::vector<std::string>{binary, "collect", "--out", out, "--listen", "127.0.0.1:0",
                                 "--grpc-listen", "off"},
        "/dev/null");
    const auto line = child->wait_for_line("OTLP/HTTP on http://");
    if (!line || !child->wait_for_line("ready")) {
      throw std::runtime_error("lens collect (" + binary + ") did not start");
    }
    url = line->substr(line->find("http://"));
    if (const auto space = url.find_first_of(" \t\n"); space != std::string::npos) {
      url.resize(space);
    }
  }
  ~LensCollect() {
    child->signal(SIGTERM);
    child->wait();
    std::remove(out.c_str());
  }
  LensCollect(const LensCollect&) = delete;
  LensCollect& operator=(const LensCollect&) = delete;
};

/// Which real exporter a benchmark runs.
enum class ExporterKind { kFile, kOtlp };

/// The name a benchmark's label gives the exporter.
inline const char* exporter_name(ExporterKind kind) {
  return kind == ExporterKind::kFile ? "file exporter, OTLP JSON to a file"
                                     : "OTLP http/protobuf to lens collect";
}

/// A real exporter and what it writes to: a temporary file, or a running `lens collect`.
class RealExporter {
 public:
  explicit RealExporter(ExporterKind kind) : kind_(kind) {
    if (kind == ExporterKind::kOtlp) {
      collect_ = std::make_unique<LensCollect>();
    } else {
      path_ = "/tmp/lens_bench_spans_" + std::to_string(::getpid()) + ".jsonl";
    }
  }
  ~RealExporter() {
    if (!path_.empty()) std::remove(path_.c_str());
  }

  /// Empties the file the spans went to (the exporters append, O_APPEND), so that a benchmark of
  /// tens of millions of spans does not write gigabytes: call it while nothing is exported (after
  /// a flush), as the benchmarks do between bursts, outside the timing.
  void trim() const {
    const std::string& path = path_.empty() ? collect_->out : path_;
    if (::truncate(path.c_str(), 0) != 0 && errno != ENOENT) {
      throw std::runtime_error("cannot empty " + path);
    }
  }
  RealExporter(const RealExporter&) = delete;
  RealExporter& operator=(const RealExporter&) = delete;

  /// Sets up tracing (replacing an earlier set-up) with `config`, its exporter set to this one:
  /// through the variables a user sets (NEMO_LENS_EXPORT_PATH, OTEL_EXPORTER_OTLP_TRACES_*).
  /// Spans only: metrics are off (the file exporter would write them into the working directory).
  nemo::lens::TelemetryHandle setup(nemo::lens::NemoLensConfig config, int rank = 0,
                                    int world_size = 1) const {
    config.metrics_enabled = false;
    if (kind_ == ExporterKind::kFile) {
      config.exporter = "file";
      setenv("NEMO_LENS_EXPORT_PATH", path_.c_str(), 1);
    } else {
      config.exporter = "otlp";
      setenv("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf", 1);
      setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", collect_->url.c_str(), 1);
    }
    nemo::lens::SetupOptions options;
    options.allow_reinit = true;
    return nemo::lens::setup_telemetry(config, rank, world_size, options);
  }

 private:
  ExporterKind kind_;
  std::string path_;
  std::unique_ptr<LensCollect> collect_;
};

}  // namespace lens_bench
