// Spans as a Chrome Trace Event Format file (`{"traceEvents":[...]}`), which chrome://tracing and
// the Perfetto UI open: each span a complete event ("X"), each span event an instant event
// ("i"), one process per rank and one thread per thread.id, named by metadata events ("M"); and
// each metric series of a rank as a counter track ("C") of that rank's process; each log record
// as a process-scoped instant event. Span events are
// written as requests arrive; the metrics' points (at most MetricAggregator::kMaxSeriesPoints per
// series) and the set of ranks and threads seen are kept, and the counters written at the end.
//
//   ChromeTraceWriter writer(out);            // a FILE* opened for writing
//   reader.read(file, [&](const ParsedRequest& r) { writer.add(r); }, on_malformed);
//   writer.finish();                          // throws FileError when the output failed
#pragma once

#include <cstdint>
#include <cstdio>
#include <set>
#include <string>
#include <utility>

#include "common/span_reader.hpp"
#include "report/report_metrics.hpp"

namespace nemo::lens::cli {

/// The pid of spans whose resource has no dl.rank.
inline constexpr std::int64_t kUnknownRankPid = 2147483647;

/// `ns` nanoseconds as microseconds in decimal, exactly: 1500 -> "1.5", 2000 -> "2".
std::string micros_text(std::uint64_t ns);

class ChromeTraceWriter {
 public:
  /// Writes to `out` (not closed); `path` names it in errors. Writes the opening at once.
  ChromeTraceWriter(std::FILE* out, std::string path);

  /// Writes the events of the spans of `request` (read with ReaderOptions::details) and of its
  /// log records (ReaderOptions::logs), and keeps its metrics (ReaderOptions::metrics).
  void add(const ParsedRequest& request);

  /// Writes the counter events of the metrics, the closing, and flushes. Throws FileError when
  /// any write failed.
  void finish();

  std::uint64_t spans() const { return spans_; }
  std::uint64_t events() const { return events_; }
  std::uint64_t counters() const { return counters_; }  // counter events written by finish()

 private:
  void write_event(const std::string& json);
  void name_process(std::int64_t pid, bool known_rank);
  void write_counters();

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
};

}  // namespace nemo::lens::cli
