// JsonLinesOutput (OTLP/JSON lines appended to a file or a stream), FileSpanExporter and the paths
// the file exporters write to.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <exception>
#include <span>
#include <string>
#include <system_error>
#include <type_traits>
#include <variant>
#include <vector>

#include "export/exporters.hpp"
#include "tracing/engine.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

constexpr std::string_view kDefaultExportPath = "lens-traces-rank{rank}.jsonl";

// Writes all of [data, data + size) with as many write() calls as it takes, retrying on EINTR.
// Returns the number of bytes written; less than `size` means an error stopped it.
std::size_t write_all(int fd, const char* data, std::size_t size) noexcept {
  std::size_t done = 0;
  while (done < size) {
    const ssize_t n = ::write(fd, data + done, size - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (n == 0) break;  // cannot happen for a regular file; do not spin
    done += static_cast<std::size_t>(n);
  }
  return done;
}

}  // namespace

JsonLinesOutput::JsonLinesOutput(std::string path, std::string_view what, std::string_view origin)
    : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    std::string message = "Cannot open the " + std::string(what) + " '" + path_ + "'";
    if (!origin.empty()) {
      message += " (from ";
      message += origin;
      message += ')';
    }
    message += ": " + std::generic_category().message(err);
    throw ConfigError(message);
  }
}

JsonLinesOutput::~JsonLinesOutput() { close(); }

void JsonLinesOutput::close() noexcept {
  if (fd_ >= 0) {
    ::close(fd_);  // not retried on EINTR: on Linux the descriptor is released regardless
    fd_ = -1;
  }
}

bool JsonLinesOutput::write_line(std::string& line) noexcept {
  try {
    line.push_back('\n');
  } catch (...) {
    return false;
  }
  return write_bytes(line);
}

bool JsonLinesOutput::write_bytes(std::string_view line) noexcept {
  if (stream_ != nullptr) {
    const bool ok = std::fwrite(line.data(), 1, line.size(), stream_) == line.size();
    return std::fflush(stream_) == 0 && ok;
  }
  if (fd_ < 0) return false;
  std::size_t done = 0;
  if (line_open_) {
    // A previous failed write left a partial line: end it so that only that line is unreadable.
    if (write_all(fd_, "\n", 1) != 1) return false;
    line_open_ = false;
  }
  done = write_all(fd_, line.data(), line.size());
  if (done > 0) line_open_ = line[done - 1] != '\n';
  return done == line.size();
}

FileSpanExporter::FileSpanExporter(std::string path, std::string_view origin,
                                   std::size_t max_line_bytes)
    : out_(std::move(path), "trace file", origin), max_line_bytes_(max_line_bytes) {}

const std::string& FileSpanExporter::path() const noexcept { return out_.path(); }

namespace {

// Strings longer than `cap` bytes are cut to it (at a UTF-8 character boundary) and marked with
// their length, so that a reader sees both that and how much was lost.
struct Cutter {
  std::size_t cap;
  bool cut = false;

  std::string operator()(const std::string& s) {
    if (s.size() <= cap) return s;
    cut = true;
    const std::string mark = "\xE2\x80\xA6[lens: cut from " + std::to_string(s.size()) + " bytes]";
    const std::size_t n = cut_length(s, cap);
    std::string out;
    out.reserve(n + mark.size());  // one allocation of the (still long) result
    out.append(s, 0, n).append(mark);
    return out;
  }
  AttributeValue operator()(const AttributeValue& v) {
    if (const auto* s = std::get_if<std::string>(&v)) return (*this)(*s);
    if (const auto* a = std::get_if<std::vector<std::string>>(&v)) {
      std::vector<std::string> out;
      out.reserve(a->size());
      for (const std::string& e : *a) out.push_back((*this)(e));
      return out;
    }
    return v;
  }
  std::vector<KeyValue> operator()(const std::vector<KeyValue>& attributes) {
    std::vector<KeyValue> out;
    out.reserve(attributes.size());
    for (const KeyValue& kv : attributes) out.push_back({(*this)(kv.key), (*this)(kv.value)});
    return out;
  }

  // A copy of `span` with every string of it cut: built field by field, so that the long strings
  // are never copied whole.
  SpanData operator()(const SpanData& span) {
    SpanData c;
    c.name = (*this)(span.name);
    c.group = (*this)(span.group);
    c.context = span.context;
    c.parent_span_id = span.parent_span_id;
    c.parent_is_remote = span.parent_is_remote;
    c.kind = span.kind;
    c.start_time_unix_nano = span.start_time_unix_nano;
    c.end_time_unix_nano = span.end_time_unix_nano;
    c.attributes = (*this)(span.attributes);
    c.dropped_attributes_count = span.dropped_attributes_count;
    for (const SpanEvent& e : span.events) {
      c.events.push_back(
          {(*this)(e.name), e.time_unix_nano, (*this)(e.attributes), e.dropped_attributes_count});
    }
    c.dropped_events_count = span.dropped_events_count;
    for (const SpanLink& l : span.links) {
      c.links.push_back({l.context, (*this)(l.attributes), l.dropped_attributes_count});
    }
    c.dropped_links_count = span.dropped_links_count;
    c.status_code = span.status_code;
    c.status_message = (*this)(span.status_message);
    c.thread_id = span.thread_id;
    c.truncated = span.truncated;
    return c;
  }
};

// Calls f(string) for every string of `attributes`, and counts its attributes and elements.
template <class F>
void for_each_string(std::span<const KeyValue> attributes, std::size_t& items, F&& f) {
  for (const KeyValue& kv : attributes) {
    ++items;
    f(kv.key);
    if (const auto* s = std::get_if<std::string>(&kv.value)) f(*s);
    if (const auto* a = std::get_if<std::vector<std::string>>(&kv.value)) {
      for (const std::string& e : *a) f(e);
    }
    std::visit(
        [&](const auto& v) {  // an array's elements
          if constexpr (!std::is_same_v<std::decay_t<decltype(v)>, std::string> &&
                        requires { v.size(); }) {
            items += v.size();
          }
        },
        kv.value);
  }
}

// Calls f(string) for every string of `span` that the encoder writes; returns how many other
// items (attributes, array elements, events, links) it holds.
template <class F>
std::size_t for_each_string(const SpanData& span, F&& f) {
  std::size_t items = 0;
  f(span.name);
  f(span.group);
  f(span.status_message);
  f(span.context.trace_state);
  for_each_string(span.attributes, items, f);
  for (const SpanEvent& e : span.events) {
    ++items;
    f(e.name);
    for_each_string(e.attributes, items, f);
  }
  for (const SpanLink& l : span.links) {
    items += 2;  // a link's ids and flags take about two attributes' room
    f(l.context.trace_state);
    for_each_string(l.attributes, items, f);
  }
  return items;
}

// Room for everything of a span but its strings' text (ids, times, keys of the encoding, numbers,
// the attributes the encoder adds), and for each further item: generous, so that the sums below
// are upper bounds.
constexpr std::size_t kSpanRoom = 1024;
constexpr std::size_t kItemRoom = 64;
constexpr std::size_t kStringRoom = 4;  // quotes and a separator
// The request around the spans (resourceSpans, scope) without the resource's attributes.
constexpr std::size_t kFrameRoom = 512;

// The length of `s` escaped as the JSON writer escapes it, without its quotes; computed a chunk at
// a time so that a long string costs no memory. (A chunk boundary inside invalid UTF-8 may shift
// a replacement character or two: the slack covers it.)
std::size_t escaped_size(std::string_view s) {
  constexpr std::size_t kChunk = 64 * 1024;
  thread_local std::string scratch;
  std::size_t total = 0;
  while (!s.empty()) {
    std::size_t n = cut_length(s, kChunk);
    if (n == 0) n = std::min(kChunk, s.size());
    scratch.clear();
    json::append_string(scratch, s.substr(0, n));
    total += scratch.size() - 2 + 8;
    s.remove_prefix(n);
  }
  return total;
}

// An upper bound of the length of `span` in a line: with `exact`, from its strings' escaped
// lengths; else from six bytes per byte of text (\u00XX, the longest escape), which costs no
// pass over the text.
std::size_t span_size(const SpanData& span, bool exact) {
  std::size_t text = 0;
  const std::size_t items = for_each_string(span, [&](const std::string& s) {
    text += kStringRoom + (exact ? escaped_size(s) : 6 * s.size());
  });
  return kSpanRoom + items * kItemRoom + text;
}

std::size_t frame_size(const Resource& resource, bool exact) {
  std::size_t text = 0;
  std::size_t items = 0;
  for_each_string(resource.attributes, items, [&](const std::string& s) {
    text += kStringRoom + (exact ? escaped_size(s) : 6 * s.size());
  });
  return kFrameRoom + items * kItemRoom + text;
}

// At least span_size(span, false) of the SpanData materialize() makes of `r`, from the record:
// an inline attribute's key and value are counted at their slot's capacity.
std::size_t record_size(const SpanRecord& r) {
  constexpr std::size_t kInlineRoom = kItemRoom + 2 * kStringRoom +
                                      6 * (InlineAttribute::kKeyCapacity +
                                           InlineAttribute::kStringCapacity);
  std::size_t text = 4 * kStringRoom + 6 * (r.name().size() + r.group().size());
  std::size_t items = 0;
  const SpanCold* c = r.cold_part();
  if (NEMO_LENS_UNLIKELY(c != nullptr)) {
    auto add = [&](std::string_view s) { text += kStringRoom + 6 * s.size(); };
    add(c->trace_state);
    add(c->status_message);
    for_each_string(std::span(c->attributes.data(), c->attributes_used), items, add);
    for (const SpanEvent& e : c->events) {
      ++items;
      add(e.name);
      for_each_string(e.attributes, items, add);
    }
    for (const SpanLink& l : c->links) {
      items += 2;
      add(l.context.trace_state);
      for_each_string(l.attributes, items, add);
    }
  }
  return kSpanRoom + r.inline_used * kInlineRoom + items * kItemRoom + text;
}

std::size_t longest_string(const SpanData& span) {
  std::size_t n = 0;
  for_each_string(span, [&](const std::string& s) { n = std::max(n, s.size()); });
  return n;
}

}  // namespace

bool FileSpanExporter::write_cut(const SpanData& span, const Resource& resource,
                                 std::size_t estimate) {
  // Start from the longest string shrunk by the factor the line is over, with a margin, then
  // halve: a few encodings in all, the first usually enough (one huge value dominates). The span
  // is never encoded whole: its line could be six times its text.
  constexpr std::size_t kMinCap = 64;
  const double over = static_cast<double>(max_line_bytes_) / static_cast<double>(estimate);
  std::size_t cap =
      static_cast<std::size_t>(static_cast<double>(longest_string(span)) * over * 0.9);
  for (;;) {
    cap = std::max(cap, kMinCap);
    Cutter cutter{cap};
    const SpanData copy = cutter(span);
    const SpanData* one = &copy;
    buffer_.clear();
    buffer_.reserve(max_line_bytes_ + 1);  // address space: no doubling of a line this long
    append_otlp_json(buffer_, std::span(&one, 1), resource);
    if (buffer_.size() <= max_line_bytes_) break;
    if (cap == kMinCap) return false;  // not written: a span of millions of attributes
    cap /= 2;
  }
  if (spans_cut_++ == 0) {
    std::fprintf(stderr,
                 "lens: a span's OTLP/JSON line in '%s' would exceed %zu bytes, the longest "
                 "line lens report reads: its longest strings were cut to fit, each ending "
                 "in \"\xE2\x80\xA6[lens: cut from N bytes]\". Later cuts are counted, not "
                 "printed.\n",
                 out_.path().c_str(), max_line_bytes_);
  }
  return out_.write_line(buffer_);
}

bool FileSpanExporter::write_group(std::span<const SpanData* const> spans,
                                   const Resource& resource) {
  if (spans.empty()) return true;
  buffer_.clear();
  append_otlp_json(buffer_, spans, resource);
  if (buffer_.size() <= max_line_bytes_) return out_.write_line(buffer_);
  // Not reached while span_size() is an upper bound; if it ever is not, a line per span.
  bool ok = true;
  for (const SpanData* span : spans) {
    buffer_.clear();
    append_otlp_json(buffer_, std::span(&span, 1), resource);
    ok = (buffer_.size() <= max_line_bytes_ ? out_.write_line(buffer_)
                                            : write_cut(*span, resource, buffer_.size())) &&
         ok;
  }
  return ok;
}

ExportResult FileSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                            const Resource& resource,
                                            std::chrono::steady_clock::time_point) noexcept {
  bool ok = true;
  try {
    std::size_t count = 0;
    std::size_t bound = frame_size(resource, false);
    for (const SpanData* span : spans) {
      if (span == nullptr) continue;
      ++count;
      bound += span_size(*span, false);
    }
    if (count == 0) return ExportResult::kSuccess;
    if (bound <= max_line_bytes_) {  // the usual case: one line, no pass over the text
      buffer_.clear();
      append_otlp_json(buffer_, spans, resource);
      return out_.write_line(buffer_) ? ExportResult::kSuccess : ExportResult::kFailure;
    }
    // Perhaps longer than lens report reads: spans packed into lines by their escaped sizes, and
    // a span too long alone written cut.
    std::vector<const SpanData*> present;
    present.reserve(count);
    for (const SpanData* span : spans) {
      if (span != nullptr) present.push_back(span);
    }
    const std::size_t frame = frame_size(resource, true);
    std::size_t begin = 0;
    std::size_t size = frame;
    for (std::size_t i = 0; i < present.size(); ++i) {
      const std::size_t s = span_size(*present[i], true);
      if (frame + s > max_line_bytes_) {
        ok = write_group(std::span(present).subspan(begin, i - begin), resource) && ok;
        ok = write_cut(*present[i], resource, frame + s) && ok;
        begin = i + 1;
        size = frame;
        continue;
      }
      if (size + s > max_line_bytes_) {
        ok = write_group(std::span(present).subspan(begin, i - begin), resource) && ok;
        begin = i;
        size = frame;
      }
      size += s;
    }
    ok = write_group(std::span(present).subspan(begin), resource) && ok;
  } catch (const std::exception&) {
    ok = false;  // out of memory
  }
  // Do not keep the memory of lines that long for the next, ordinary batches.
  std::string().swap(buffer_);
  return ok ? ExportResult::kSuccess : ExportResult::kFailure;
}

ExportResult FileSpanExporter::export_records(std::span<const SpanRecord* const> records,
                                              const Resource& resource, const TickConverter& clock,
                                              std::chrono::steady_clock::time_point deadline) noexcept {
  try {
    std::size_t bound = frame_size(resource, false);
    for (const SpanRecord* r : records) {
      if (r != nullptr) bound += record_size(*r);
    }
    if (bound <= max_line_bytes_) {  // the usual case: one line, encoded from the records
      const std::size_t size = write_otlp_json_records(buffer_, 0, records, resource, clock);
      if (size == buffer_.size()) {
        buffer_.push_back('\n');
      } else {
        buffer_[size] = '\n';
      }
      return out_.write_bytes(std::string_view(buffer_.data(), size + 1)) ? ExportResult::kSuccess
                                                                          : ExportResult::kFailure;
    }
    // Perhaps longer than lens report reads: the spans as SpanData, packed into lines (and cut)
    // by export_spans().
    if (views_.size() < records.size()) views_.resize(records.size());
    view_ptrs_.clear();
    RecordIds ids[1];
    for (std::size_t i = 0; i < records.size(); ++i) {
      if (records[i] == nullptr) continue;
      export_ids(records.subspan(i, 1), ids);
      materialize(*records[i], clock, views_[i]);
      views_[i].context.trace_id = ids[0].trace_id;
      views_[i].context.span_id = ids[0].span_id;
      view_ptrs_.push_back(&views_[i]);
    }
  } catch (const std::exception&) {
    return ExportResult::kFailure;  // out of memory
  }
  const ExportResult result = export_spans(view_ptrs_, resource, deadline);
  // Do not keep the memory of spans that long for the next, ordinary batches.
  std::vector<SpanData>().swap(views_);
  return result;
}

bool FileSpanExporter::force_flush(std::chrono::steady_clock::time_point) noexcept {
  return out_.is_open();  // nothing is buffered in the process (see JsonLinesOutput)
}

void FileSpanExporter::shutdown(std::chrono::steady_clock::time_point) noexcept {
  out_.close();
  if (spans_cut_ > 1) {
    std::fprintf(stderr, "lens: %llu spans in '%s' were written with strings cut to fit a line.\n",
                 static_cast<unsigned long long>(spans_cut_), out_.path().c_str());
  }
}

std::string export_path(const NemoLensConfig& config, int rank) {
  return rank_path(config, rank, "EXPORT_PATH", kDefaultExportPath);
}

std::string export_path_origin(const NemoLensConfig& config) {
  return path_origin(config, "EXPORT_PATH");
}

std::string rank_path(const NemoLensConfig& config, int rank, std::string_view key,
                      std::string_view default_path) {
  std::string path = config.env(key).value_or(std::string(default_path));
  const std::string rank_text = std::to_string(rank);
  constexpr std::string_view kPlaceholder = "{rank}";
  for (std::size_t pos = path.find(kPlaceholder); pos != std::string::npos;
       pos = path.find(kPlaceholder, pos + rank_text.size())) {
    path.replace(pos, kPlaceholder.size(), rank_text);
  }
  return path;
}

std::string path_origin(const NemoLensConfig& config, std::string_view key) {
  if (auto variable = config.env_variable(key)) return *variable;
  return "the default of " + config.env_prefix + "_" + std::string(key);
}

}  // namespace nemo::lens::detail
