// Reading OTLP JSON Lines (what `lens collect` and the `file` exporter write) one line at a time,
// for `lens report` and `lens convert`: each line is one ExportTraceServiceRequest (or a metrics or
// logs request) in the OTLP/JSON encoding; it is parsed with nlohmann/json's SAX interface
// straight into flat span records, so memory is bounded by the longest line, never by the size
// of the file.
//
//   SpanLineReader reader({.details = false});
//   InputFile file("traces-0.jsonl");                // throws FileError naming the file
//   reader.read(file, [&](const ParsedRequest& r) { /* r.spans() */ },
//               [&](const MalformedLine& bad) { /* skipped, never fatal */ });
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens::cli {

/// A file that cannot be read or written at all: missing, a directory, an I/O error. The verbs
/// print the message (which names the file) and exit with status 2.
class FileError : public std::runtime_error {
 public:
  explicit FileError(const std::string& message) : std::runtime_error(message) {}
};

/// An input file opened for reading; "-" is standard input. Throws FileError when it cannot be
/// opened or is a directory.
class InputFile {
 public:
  explicit InputFile(std::string path);
  ~InputFile();
  InputFile(const InputFile&) = delete;
  InputFile& operator=(const InputFile&) = delete;
  InputFile(InputFile&& other) noexcept;
  InputFile& operator=(InputFile&&) = delete;

  const std::string& path() const { return path_; }
  std::FILE* stream() const { return stream_; }

 private:
  std::string path_;
  std::FILE* stream_ = nullptr;
};

/// The resource of the spans that follow it in a request: what tells ranks apart.
struct SpanResource {
  std::optional<std::int64_t> rank;  // dl.rank (else nv.dl.rank): an intValue, or decimal digits
  std::string instance_id;           // service.instance.id
  std::string run_id;                // nemo.run.id
};

/// The GPU-time attributes of a span of a GPU-timed group (the library's GPU timing writes them):
/// int attributes, ns. docs/report.md#gpu-time has what `lens report` makes of them.
inline constexpr std::string_view kGpuBusyKey = "gpu.busy";        // union of its GPU activity
inline constexpr std::string_view kGpuKernelsKey = "gpu.kernels";  // kernels attributed
inline constexpr std::string_view kGpuStartKey = "gpu.start";      // first activity's start, Unix
inline constexpr std::string_view kGpuEndKey = "gpu.end";          // last activity's end, Unix

/// The attribute that numbers a training step (an intValue): `lens report` matches the steps of
/// several ranks by it (docs/report.md#stragglers).
inline constexpr std::string_view kIterationKey = "iteration";

/// A span's gpu.* attributes (each a non-negative intValue; other values are ignored).
struct SpanGpu {
  std::optional<std::uint64_t> busy_ns;
  std::optional<std::uint64_t> kernels;
  std::optional<std::uint64_t> start_ns;
  std::optional<std::uint64_t> end_ns;
  /// The span was GPU-timed: it has any of the four.
  bool timed() const { return busy_ns || kernels || start_ns || end_ns; }
  /// Its GPU interval [start_ns, end_ns]: both present, the end not before the start.
  bool has_interval() const { return start_ns && end_ns && *end_ns >= *start_ns; }
};

/// A span event (read only with ReaderOptions::details).
struct SpanEventRecord {
  std::string name;
  std::uint64_t time_ns = 0;
  nlohmann::ordered_json attributes = nlohmann::ordered_json::object();
};

/// One span of a request.
struct SpanRecord {
  std::uint64_t span_id = 0;
  std::uint64_t parent_span_id = 0;  // 0 for a root (parentSpanId absent, empty or all zeros)
  std::uint64_t trace_key = 0;       // the trace id's two halves mixed (trace_key_of()), any case
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;  // >= start_ns (checked)
  std::string name;
  std::string group;  // the nemo.span.group attribute, empty when absent
  bool has_group = false;
  std::optional<std::int64_t> thread_id;  // the thread.id attribute
  std::optional<std::int64_t> iteration;  // the iteration attribute (an intValue)
  bool truncated = false;                 // nemo.span.truncated is true
  /// lens.capture.reason (a stringValue): the flight recorder captured it
  /// (docs/flight-recorder.md); empty for a span exported as it ended.
  std::string capture_reason;
  std::optional<std::int64_t> capture_id;  // lens.capture.id (an intValue)
  SpanGpu gpu;                             // the gpu.* attributes (none: not GPU-timed)
  /// A kernel span (<PREFIX>_GPU_KERNEL_SPANS: it carries gpu.correlation_id): a kernel, copy or
  /// memset on the GPU, on stream `gpu_stream`, not a span of a CPU thread.
  bool gpu_kernel = false;
  std::int64_t gpu_stream = 0;
  std::size_t resource = 0;  // index into ParsedRequest::resources

  // Read only with ReaderOptions::details:
  std::string trace_id;  // as written (32 hex digits, checked)
  int status_code = 0;   // 0 unset, 1 ok, 2 error
  std::string status_message;
  nlohmann::ordered_json attributes = nlohmann::ordered_json::object();  // AnyValues as plain JSON
  std::vector<SpanEventRecord> events;

  std::uint64_t duration_ns() const { return end_ns - start_ns; }
};

/// The kind of a metric's data (the member of OTLP's Metric.data oneof).
enum class MetricType : std::uint8_t {
  kNone,
  kGauge,
  kSum,
  kHistogram,
  kExponentialHistogram,
  kSummary
};

/// One side (positive or negative) of an exponential histogram's buckets: bucket `offset + i`
/// holds counts[i] values.
struct ExponentialBuckets {
  std::int32_t offset = 0;
  std::vector<std::uint64_t> counts;
};

/// One data point of a metric (read only with ReaderOptions::metrics).
struct MetricPoint {
  /// The point's attributes as "key=value" pairs sorted by key and joined by ", " (values as plain
  /// JSON): what tells the series of a metric apart.
  std::string series;
  std::uint64_t start_ns = 0;
  std::uint64_t time_ns = 0;
  // Gauges and sums: the value (asInt or asDouble); none for a point without one (or flagged
  // as having no recorded value).
  bool has_value = false;
  bool is_int = false;
  std::int64_t int_value = 0;
  double value = 0;  // also set for asInt
  // Histograms (explicit buckets), exponential histograms and summaries.
  std::uint64_t count = 0;
  std::optional<double> sum, min, max;
  std::vector<std::uint64_t> bucket_counts;  // explicitBounds.size() + 1 entries, or none
  std::vector<double> explicit_bounds;
  // Exponential histograms: with base = 2^(2^-scale), positive bucket k holds the values in
  // (base^k, base^(k+1)], negative bucket k those in [-base^(k+1), -base^k), and zero_count the
  // values within zero_threshold of 0.
  std::int32_t scale = 0;
  std::uint64_t zero_count = 0;
  double zero_threshold = 0;
  ExponentialBuckets positive, negative;
};

/// One metric of a line: its name and type, and its points.
struct MetricRecord {
  std::size_t resource = 0;  // index into ParsedRequest::resources
  std::string name;
  std::string unit;
  MetricType type = MetricType::kNone;
  int temporality = 0;  // AggregationTemporality: 1 delta, 2 cumulative, 0 unspecified
  bool monotonic = false;
  std::vector<MetricPoint> points;
};

/// One log record of a line (read only with ReaderOptions::logs).
struct LogEntry {
  std::size_t resource = 0;   // index into ParsedRequest::resources
  std::uint64_t time_ns = 0;  // timeUnixNano, else observedTimeUnixNano; 0 without either
  int severity_number = 0;    // OTLP SeverityNumber: 1-4 trace, 5-8 debug, 9-12 info, 13-16 warn,
                              // 17-20 error, 21-24 fatal; 0 unspecified
  std::string severity_text;
  std::string body;  // a stringValue as it is, another AnyValue as plain JSON; at most 1000 bytes
};

/// The spans (and metrics) of one line, valid until the next line is read.
struct ParsedRequest {
  std::vector<SpanResource> resources;
  std::vector<SpanRecord> span_storage;  // reused between lines: only the first span_count count
  std::size_t span_count = 0;
  /// The line has a resourceSpans member, or none of the three signals' members (a request).
  bool has_spans = false;
  /// The line has a resourceMetrics member; its metrics (ReaderOptions::metrics) follow.
  bool has_metrics = false;
  /// The line has a resourceLogs member; its log records (ReaderOptions::logs) are in `logs`.
  bool has_logs = false;
  std::vector<MetricRecord> metrics;
  std::size_t data_points = 0;  // in `metrics`
  std::vector<LogEntry> logs;

  std::span<const SpanRecord> spans() const { return {span_storage.data(), span_count}; }
};

/// A line that was skipped: its file, its 1-based number and why.
struct MalformedLine {
  std::string_view file;
  std::uint64_t line = 0;
  std::string error;
};

struct ReaderOptions {
  /// Also read trace ids, status, every attribute (AnyValues as plain JSON: intValue a number,
  /// arrayValue an array, kvlistValue an object) and events. `lens report` needs none of it.
  bool details = false;
  /// Threads parsing lines in parallel (requests are still handed on in input order, on the
  /// calling thread). 0: the number of cores, at most 4; 1: parse on the calling thread.
  unsigned threads = 0;
  /// Also read the metrics of lines with resourceMetrics (ParsedRequest::metrics). Without it
  /// such lines are only checked to be JSON and counted.
  bool metrics = false;
  /// Also read the log records of lines with resourceLogs (ParsedRequest::logs). A record or
  /// field of an unexpected shape is skipped: a line of logs is malformed only when it is not
  /// JSON, its resourceLogs is not an array, or it is nested more than 64 levels deep.
  bool logs = false;
};

/// What a reader has seen so far, over every file it read.
struct ReaderCounts {
  std::uint64_t lines = 0;         // non-blank lines
  std::uint64_t requests = 0;      // lines read as trace requests (ParsedRequest::has_spans)
  std::uint64_t spans = 0;         // spans in those requests
  std::uint64_t metric_lines = 0;  // lines with metrics (ParsedRequest::has_metrics)
  std::uint64_t data_points = 0;   // data points in those (with ReaderOptions::metrics)
  std::uint64_t log_lines = 0;     // lines with log records (ParsedRequest::has_logs)
  std::uint64_t malformed = 0;     // lines skipped
};

/// Reads OTLP JSON Lines. Lines of metrics (an object with resourceMetrics) and of logs (with
/// resourceLogs) are counted and handed on too (with their metrics, see ReaderOptions::metrics),
/// and are malformed when their structure is broken as described for spans below: arrays of
/// objects for resourceMetrics, scopeMetrics, metrics and dataPoints, a name for every metric,
/// decimal integers for times and counts, numbers for values, as many bucketCounts as
/// explicitBounds plus one. A line is skipped as malformed when it is not one JSON object (syntax
/// error, a truncated last line, trailing text), when resourceSpans, scopeSpans, spans,
/// attributes, events or arrayValue/kvlistValue values are not arrays (or null) of objects, or
/// when one of its spans has no valid spanId (16 hex digits, not all zero) or traceId (32 hex
/// digits), a parentSpanId that is neither empty nor 16 hex digits, a startTimeUnixNano or
/// endTimeUnixNano missing or not a decimal integer (string or number), an end before its
/// start, or an attribute value of the wrong type (intValue not an integer, ...). Blank lines
/// are ignored; a line longer than kMaxLineBytes is malformed. Unknown fields are ignored.
class SpanLineReader {
 public:
  static constexpr std::size_t kMaxLineBytes = std::size_t{256} << 20;

  explicit SpanLineReader(ReaderOptions options = {}) : options_(options) {}

  using RequestCallback = std::function<void(const ParsedRequest&)>;
  using MalformedCallback = std::function<void(const MalformedLine&)>;

  /// Reads `file` to its end, calling `on_request` for each valid line and `on_malformed` for each
  /// skipped one, in input order, on the calling thread. Throws FileError on a read error. With
  /// several threads, memory holds up to 2 chunks of 1 MiB (or 256 lines) per thread.
  void read(InputFile& file, const RequestCallback& on_request,
            const MalformedCallback& on_malformed);

  /// Parses one line into `out`; returns the error that makes it malformed, empty when valid.
  std::string parse_line(std::string_view line, ParsedRequest& out) const;

  const ReaderCounts& counts() const { return counts_; }

 private:
  unsigned thread_count() const;
  void deliver(std::string_view path, std::uint64_t number, std::string& error,
               const ParsedRequest& request, const RequestCallback& on_request,
               const MalformedCallback& on_malformed);

  ReaderOptions options_;
  ReaderCounts counts_;
  ParsedRequest request_;
};

}  // namespace nemo::lens::cli
