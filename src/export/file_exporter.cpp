// JsonLinesOutput (OTLP/JSON lines appended to a file or a stream), FileSpanExporter and the paths
// the file exporters write to.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <string>
#include <system_error>

#include "export/exporters.hpp"
#include "nemo/lens/errors.hpp"

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

FileSpanExporter::FileSpanExporter(std::string path, std::string_view origin)
    : out_(std::move(path), "trace file", origin) {}

const std::string& FileSpanExporter::path() const noexcept { return out_.path(); }

ExportResult FileSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                            const Resource& resource,
                                            std::chrono::steady_clock::time_point) noexcept {
  bool any = false;
  for (const SpanData* span : spans) any = any || span != nullptr;
  if (!any) return ExportResult::kSuccess;
  try {
    buffer_.clear();
    append_otlp_json(buffer_, spans, resource);
  } catch (const std::exception&) {
    return ExportResult::kFailure;  // out of memory
  }
  return out_.write_line(buffer_) ? ExportResult::kSuccess : ExportResult::kFailure;
}

bool FileSpanExporter::force_flush(std::chrono::steady_clock::time_point) noexcept {
  return out_.is_open();  // nothing is buffered in the process (see JsonLinesOutput)
}

void FileSpanExporter::shutdown(std::chrono::steady_clock::time_point) noexcept { out_.close(); }

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
