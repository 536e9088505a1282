// The built-in span exporters and the OTLP/JSON encoding they share. Internal.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "export/json_writer.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/exporter.hpp"
#include "tracing/clock.hpp"
#include "tracing/record_exporter.hpp"

namespace nemo::lens::detail {

/// Appends one OTLP/JSON ExportTraceServiceRequest for `spans` to `out`, on one line without a
/// trailing newline (the OTLP specification's JSON Protobuf Encoding of opentelemetry-proto's
/// collector/trace/v1 request):
///
///   {"resourceSpans":[{"resource":{"attributes":[...]},
///     "scopeSpans":[{"scope":{"name":"nemo.lens","version":"<NEMO_LENS_VERSION_STRING>"},
///                    "spans":[...]}]}]}
///
/// - Keys are lowerCamelCase; trace and span ids lower-case hex strings (not base64); 64-bit
///   integers (startTimeUnixNano, endTimeUnixNano, timeUnixNano, intValue) decimal strings;
///   enums integers (kind 1 internal .. 5 consumer; status.code 0 unset, 1 ok, 2 error).
/// - `flags` (span and link, fixed32, a JSON number): bits 0-7 are the W3C trace flags of the
///   span's (link's) context; bit 8 (SPAN_FLAGS_CONTEXT_HAS_IS_REMOTE_MASK, 0x100) is always set
///   and bit 9 (SPAN_FLAGS_CONTEXT_IS_REMOTE_MASK, 0x200) is set when the parent (for a link: the
///   linked context) is remote, as trace.proto (v1.1+) defines them. A sampled local span is 257.
/// - AnyValue: {"stringValue":"s"}, {"boolValue":true}, {"intValue":"42"}, {"doubleValue":0.5},
///   {"arrayValue":{"values":[AnyValue...]}}. Doubles use the shortest round-trip form (with ".0"
///   when integral); NaN and the infinities are the strings "NaN", "Infinity", "-Infinity" (the
///   protobuf JSON mapping). Strings are escaped per RFC 8259; invalid UTF-8 becomes U+FFFD.
/// - Omitted at their proto3 default: parentSpanId (root span), traceState (empty), events and
///   links (none), every dropped*Count (0), status.message (empty). Always present: traceId,
///   spanId, flags, name, kind, both times, attributes (possibly []), status.code.
/// - Two span attributes are added after the span's own, for `lens report` and OTel backends:
///   `nemo.span.group` (string, only when SpanData::group is non-empty) and `thread.id` (int,
///   the OTel semantic convention, only when SpanData::thread_id is non-zero). When the span
///   already carries an attribute with either key, the span's own value is kept (keys stay unique).
/// - Null entries of `spans` are skipped; negative timestamps are written as "0".
void append_otlp_json(std::string& out, std::span<const SpanData* const> spans,
                      const Resource& resource);

/// The request append_otlp_json() writes for the spans the pipeline would materialize() of
/// `records` (ids from export_ids(), times converted by `clock`), written over `buffer` from `at`
/// on: `buffer` grows when the request needs room and never shrinks, its bytes past the request
/// staying as they were (a buffer kept from batch to batch is not filled with zeros again).
/// Returns the request's size: it is buffer[at, at + size). Null records are skipped.
std::size_t write_otlp_json_records(std::string& buffer, std::size_t at,
                                    std::span<const SpanRecord* const> records,
                                    const Resource& resource, const TickConverter& clock);

/// Writes one compact JSON object per span per line to a stream (stdout by default).
/// Field names are snake_case (see console_exporter.cpp); each batch is one fwrite and fflush.
class ConsoleSpanExporter : public SpanExporter {
 public:
  explicit ConsoleSpanExporter(std::FILE* out = stdout) : out_(out) {}
  ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                            std::chrono::steady_clock::time_point deadline) noexcept override;
  bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept override;

 private:
  std::FILE* out_;
  std::string buffer_;
  std::string resource_json_;
};

/// Where the JSON Lines exporters (spans, metrics, logs; file or console) write: a file opened for
/// appending, or a stdio stream. A file gets one write() per line on an O_APPEND descriptor, so a
/// crash loses at most the line in flight and processes sharing the file do not interleave lines.
/// Only a short write (which regular files give only on errors such as a full disk) is continued
/// with further write() calls, which another writer could then interleave; a line left incomplete
/// by a failed write is terminated before the next one, so only that line is lost. Writes block
/// and are not bounded by a deadline. There is no fdatasync: every line is in the kernel once
/// written, which already survives a crash of the process; fdatasync would only add durability
/// against an OS crash, at the cost of a disk (on the network filesystems of clusters, a server)
/// round trip per export. One writer at a time.
class JsonLinesOutput {
 public:
  /// Opens (creating, mode 0644) `path` for appending. Throws ConfigError "Cannot open the <what>
  /// '<path>' (from <origin>): <OS error>" (the origin part left out when empty).
  JsonLinesOutput(std::string path, std::string_view what, std::string_view origin);
  /// Writes to `stream` (stdout, say) with one fwrite and fflush per line.
  explicit JsonLinesOutput(std::FILE* stream) noexcept : stream_(stream) {}
  ~JsonLinesOutput();
  JsonLinesOutput(const JsonLinesOutput&) = delete;
  JsonLinesOutput& operator=(const JsonLinesOutput&) = delete;
  /// Appends `line` and a newline (added to `line`, which the caller reuses); false on an error.
  bool write_line(std::string& line) noexcept;
  /// Appends `line`, which ends with its newline; false on an error.
  bool write_bytes(std::string_view line) noexcept;
  /// Closes the file (not a stream). Later writes fail.
  void close() noexcept;
  /// Whether writes can still succeed (a stream, or a file not closed).
  bool is_open() const noexcept { return stream_ != nullptr || fd_ >= 0; }
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  std::FILE* stream_ = nullptr;
  bool line_open_ = false;  // a failed write left a partial line in the file
};

/// Appends one OTLP/JSON line per batch to a file (a JsonLinesOutput), each at most
/// `max_line_bytes` long (json::kMaxLineBytes, what lens report reads): a batch whose line might
/// be longer is written as several lines of whole spans, and a span whose line alone would be
/// longer has its longest strings cut (each ending in "…[lens: cut from N bytes]") until it fits.
/// Such spans are counted (spans_cut()), and reported on stderr the first time and at shutdown.
/// It encodes the pipeline's records itself (write_otlp_json_records()) unless a batch might make
/// a line that long: then it makes SpanData of them and goes the way of export_spans().
class FileSpanExporter : public SpanExporter, public RecordSpanExporter {
 public:
  /// Opens (creating, mode 0644) `path` for appending. Throws ConfigError naming the path, where
  /// it came from (`origin`, e.g. export_path_origin(); left out when empty) and the OS error.
  /// `max_line_bytes` other than the default is for tests.
  explicit FileSpanExporter(std::string path, std::string_view origin = {},
                            std::size_t max_line_bytes = json::kMaxLineBytes);
  FileSpanExporter(const FileSpanExporter&) = delete;
  FileSpanExporter& operator=(const FileSpanExporter&) = delete;
  ExportResult export_spans(std::span<const SpanData* const> spans, const Resource& resource,
                            std::chrono::steady_clock::time_point deadline) noexcept override;
  bool encodes_records() const noexcept override { return true; }
  ExportResult export_records(std::span<const SpanRecord* const> records, const Resource& resource,
                              const TickConverter& clock,
                              std::chrono::steady_clock::time_point deadline) noexcept override;
  bool force_flush(std::chrono::steady_clock::time_point deadline) noexcept override;
  void shutdown(std::chrono::steady_clock::time_point deadline) noexcept override;
  const std::string& path() const noexcept;
  /// Spans written with strings cut to fit max_line_bytes.
  std::uint64_t spans_cut() const noexcept { return spans_cut_; }

 private:
  // Writes `span` with its strings cut until its line fits (`estimate`: its line's length uncut);
  // false when even strings of a few bytes do not make it fit (millions of attributes) or the
  // write failed.
  bool write_cut(const SpanData& span, const Resource& resource, std::size_t estimate);
  // Writes `spans` as one line, expected to fit.
  bool write_group(std::span<const SpanData* const> spans, const Resource& resource);

  JsonLinesOutput out_;
  std::string buffer_;  // export_records() writes over it (write_otlp_json_records())
  std::size_t max_line_bytes_;
  // export_records() for a batch that might make too long a line: its spans as SpanData.
  std::vector<SpanData> views_;
  std::vector<const SpanData*> view_ptrs_;
  std::uint64_t spans_cut_ = 0;
};

/// The file exporter's path for `rank`: `<PREFIX>_EXPORT_PATH` (default
/// "lens-traces-rank{rank}.jsonl") with every "{rank}" replaced.
std::string export_path(const NemoLensConfig& config, int rank);

/// Where export_path() came from, for error messages: the variable it was read from, or
/// "the default of <PREFIX>_EXPORT_PATH".
std::string export_path_origin(const NemoLensConfig& config);

/// `<PREFIX>_<key>` (else `default_path`) with every "{rank}" replaced by `rank`.
std::string rank_path(const NemoLensConfig& config, int rank, std::string_view key,
                      std::string_view default_path);
/// Where rank_path() came from: the variable it was read from, or "the default of <PREFIX>_<key>".
std::string path_origin(const NemoLensConfig& config, std::string_view key);

/// The exporter config.exporter names (trimmed, any case): "console" (stdout), "file"
/// (export_path(config, rank)) or "otlp" (make_otlp_exporter(), settings from
/// OTEL_EXPORTER_OTLP_*). Throws ConfigError naming the variable (or NemoLensConfig::exporter when
/// it was not read from one), the value and the valid exporters.
std::shared_ptr<SpanExporter> make_exporter(const NemoLensConfig& config, int rank);

}  // namespace nemo::lens::detail
