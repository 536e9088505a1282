// FileSpanExporter: OTLP/JSON lines appended to a file, and the path it writes to.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
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

FileSpanExporter::FileSpanExporter(std::string path, std::string_view origin)
    : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd_ < 0) {
    const int err = errno;
    std::string message = "Cannot open the trace file '" + path_ + "'";
    if (!origin.empty()) {
      message += " (from ";
      message += origin;
      message += ')';
    }
    message += ": " + std::generic_category().message(err);
    throw ConfigError(message);
  }
}

FileSpanExporter::~FileSpanExporter() {
  if (fd_ >= 0) ::close(fd_);
}

ExportResult FileSpanExporter::export_spans(std::span<const SpanData* const> spans,
                                            const Resource& resource,
                                            std::chrono::steady_clock::time_point) noexcept {
  if (fd_ < 0) return ExportResult::kFailure;
  bool any = false;
  for (const SpanData* span : spans) any = any || span != nullptr;
  if (!any) return ExportResult::kSuccess;
  try {
    buffer_.clear();
    // A previous failed write left a partial line: end it so that only that line is unreadable.
    if (line_open_) buffer_.push_back('\n');
    append_otlp_json(buffer_, spans, resource);
    buffer_.push_back('\n');
  } catch (const std::exception&) {
    return ExportResult::kFailure;  // out of memory
  }
  const std::size_t written = write_all(fd_, buffer_.data(), buffer_.size());
  if (written > 0) line_open_ = buffer_[written - 1] != '\n';
  return written == buffer_.size() ? ExportResult::kSuccess : ExportResult::kFailure;
}

bool FileSpanExporter::force_flush(std::chrono::steady_clock::time_point) noexcept {
  // Nothing is buffered in the process: every batch reached the kernel in export_spans. See the
  // class comment for why there is no fdatasync here.
  return fd_ >= 0;
}

void FileSpanExporter::shutdown(std::chrono::steady_clock::time_point) noexcept {
  if (fd_ >= 0) {
    ::close(fd_);  // not retried on EINTR: on Linux the descriptor is released regardless
    fd_ = -1;
  }
}

std::string export_path(const NemoLensConfig& config, int rank) {
  std::string path = config.env("EXPORT_PATH").value_or(std::string(kDefaultExportPath));
  const std::string rank_text = std::to_string(rank);
  constexpr std::string_view kPlaceholder = "{rank}";
  for (std::size_t pos = path.find(kPlaceholder); pos != std::string::npos;
       pos = path.find(kPlaceholder, pos + rank_text.size())) {
    path.replace(pos, kPlaceholder.size(), rank_text);
  }
  return path;
}

std::string export_path_origin(const NemoLensConfig& config) {
  if (auto variable = config.env_variable("EXPORT_PATH")) return *variable;
  return "the default of " + config.env_prefix + "_EXPORT_PATH";
}

}  // namespace nemo::lens::detail
