// Spans as a Chrome Trace Event Format file (`{"traceEvents":[...]}`), which chrome://tracing and
// the Perfetto UI open: each span a complete event ("X"), each span event an instant event
// ("i"), one process per rank and one thread per thread.id, named by metadata events ("M"), a
// span's group its category (and "captured" a second one for a span the flight recorder
// captured, whose lens.capture.* attributes are in its args like the others); and
// each metric series of a rank as a counter track ("C") of that rank's process; each log record
// as a process-scoped instant event. Span events are
// written as requests arrive; the metrics' points (at most MetricAggregator::kMaxSeriesPoints per
// series) and the set of ranks and threads seen are kept, and the counters written at the end.
// The GPU intervals ([gpu.start, gpu.end]) of each trace's leaf GPU-timed spans are complete events
// on a rank's "GPU" track (tid kGpuTid; spans whose GPU intervals overlap go on further tracks,
// "GPU 2", ... at kGpuTid - 1, ...), written at the end: they need each trace whole, so every
// span's ids are kept in a SpanSpill as `lens report` keeps them (read back only when some span
// had GPU times).
//
//   ChromeTraceWriter writer(out);            // a FILE* opened for writing
//   reader.read(file, [&](const ParsedRequest& r) { writer.add(r); }, on_malformed);
//   writer.finish();                          // throws FileError when the output failed
#pragma once

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "common/span_reader.hpp"
#include "report/report_metrics.hpp"
#include "report/span_spill.hpp"

namespace nemo::lens::cli {

/// The pid of spans whose resource has no dl.rank.
inline constexpr std::int64_t kUnknownRankPid = 2147483647;

/// The tid of a rank's "GPU" track (far above Linux thread ids); overlapping GPU intervals go on
/// kGpuTid - 1, kGpuTid - 2, ...
inline constexpr std::int64_t kGpuTid = 2147483646;
/// The tracks of kernel spans (<PREFIX>_GPU_KERNEL_SPANS), one per GPU stream: "GPU stream N" at
/// kGpuStreamTid - N % kGpuStreams, below the GPU tracks.
inline constexpr std::int64_t kGpuStreamTid = 2147000000;
inline constexpr std::int64_t kGpuStreams = 400000;

/// `ns` nanoseconds as microseconds in decimal, exactly: 1500 -> "1.5", 2000 -> "2".
std::string micros_text(std::uint64_t ns);

class ChromeTraceWriter {
 public:
  /// Writes to `out` (not closed); `path` names it in errors. Writes the opening at once.
  ChromeTraceWriter(std::FILE* out, std::string path);

  /// Writes the events of the spans of `request` (read with ReaderOptions::details) and of its
  /// log records (ReaderOptions::logs), and keeps its metrics (ReaderOptions::metrics).
  void add(const ParsedRequest& request);

  /// Writes the GPU tracks' events, the counter events of the metrics, the closing, and flushes.
  /// Throws FileError when any write failed (or a temporary file of the spans could not be read).
  void finish();

  std::uint64_t spans() const { return spans_; }
  std::uint64_t events() const { return events_; }
  std::uint64_t counters() const { return counters_; }      // counter events written by finish()
  std::uint64_t gpu_events() const { return gpu_events_; }  // GPU track events by finish()

 private:
  void write_event(const std::string& json);
  void name_process(std::int64_t pid, bool known_rank);
  void write_counters();
  void write_gpu_tracks();
  std::uint32_t name_id(std::string_view group, std::string_view name);

  std::FILE* out_;
  std::string path_;
  bool first_ = true;
  std::uint64_t spans_ = 0;
  std::uint64_t events_ = 0;
  std::uint64_t counters_ = 0;
  MetricAggregator metrics_;
  std::set<std::int64_t> processes_;
  std::set<std::pair<std::int64_t, std::int64_t>> threads_;
  std::string buffer_;
  // The GPU tracks: every span's ids (and the GPU records of GPU-timed ones), and the names.
  SpanSpill spill_;
  bool any_gpu_ = false;
  std::uint64_t gpu_events_ = 0;
  std::unordered_map<std::string, std::uint32_t> name_ids_;  // "group\x1fname" -> index
  std::vector<std::pair<std::string, std::string>> names_;   // (group, name) by index
};

}  // namespace nemo::lens::cli
