// The outage buffer of the OTLP span exporter. See export_buffer.hpp.
#include "export/export_buffer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <optional>

#include "env.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/errors.hpp"
#include "private_dir.hpp"
#include "strings.hpp"

namespace nemo::lens::detail {

namespace {

constexpr std::uint64_t kMaxSegment = std::uint64_t{64} << 20;
constexpr std::uint64_t kMinSegment = std::uint64_t{1} << 20;
constexpr std::size_t kMaxSpares = 4;

// "64MiB", "1G", "4096": bytes; empty optional when it is not such a size.
std::optional<std::uint64_t> parse_size(std::string_view s) {
  s = trim(s);
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || end == s.data()) return std::nullopt;
  const std::string unit = to_lower(trim(std::string_view(end, s.data() + s.size() - end)));
  int shift = 0;
  if (unit.empty() || unit == "b") {
    shift = 0;
  } else if (unit == "k" || unit == "kib") {
    shift = 10;
  } else if (unit == "m" || unit == "mib") {
    shift = 20;
  } else if (unit == "g" || unit == "gib") {
    shift = 30;
  } else if (unit == "t" || unit == "tib") {
    shift = 40;
  } else {
    return std::nullopt;
  }
  if (shift != 0 && value > (UINT64_MAX >> shift)) return std::nullopt;
  return value << shift;
}

std::uint64_t size_setting(const NemoLensConfig& config, std::string_view key,
                           std::uint64_t fallback) {
  const auto value = config.env(key);
  if (!value) return fallback;
  const auto bytes = parse_size(*value);
  if (!bytes) {
    throw ConfigError("Invalid value for " + *config.env_variable(key) + ": '" + *value +
                      "'. Expected a size in bytes, optionally with a unit: KiB, MiB, GiB or TiB "
                      "(e.g. 64MiB; 0: none).");
  }
  return *bytes;
}

bool read_all(int fd, char* data, std::size_t size, std::uint64_t offset) {
  while (size > 0) {
    const ssize_t n = ::pread(fd, data, size, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
    offset += static_cast<std::uint64_t>(n);
  }
  return true;
}

}  // namespace

std::string default_spool_dir() {
  const std::string tmp = env_trimmed("TMPDIR").value_or("/tmp");
  return tmp + "/lens-spool-" + std::to_string(::geteuid());
}

ExportBufferSettings export_buffer_settings(const NemoLensConfig& config) {
  ExportBufferSettings s;
  s.env_prefix = config.env_prefix;
  s.memory_bytes = size_setting(config, "EXPORT_BUFFER_SIZE", s.memory_bytes);
  s.spool_bytes = size_setting(config, "EXPORT_SPOOL_SIZE", s.spool_bytes);
  const auto dir = config.env("EXPORT_SPOOL_DIR");
  if (dir && to_lower(*dir) == "off") s.spool_bytes = 0;
  if (s.spool_bytes == 0) return s;
  s.spool_dir = dir.value_or(default_spool_dir());
  if (const std::string why = make_private_dir(s.spool_dir).why; !why.empty()) {
    if (dir) {
      throw ConfigError("Invalid value for " + *config.env_variable("EXPORT_SPOOL_DIR") + ": '" +
                        *dir + "': " + why +
                        ". Name a directory of this user with mode 700, or 'off' for no spool.");
    }
    // Once per process: spans, metrics and logs each read the settings.
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) {
      std::fprintf(stderr,
                   "lens: the default export spool directory is not usable (%s): spans, metrics "
                   "and logs wait in memory only while the receiver is away. Set %s to a "
                   "directory of this user (mode 700), or to 'off'.\n",
                   why.c_str(), (config.env_prefix + "_EXPORT_SPOOL_DIR").c_str());
    }
    s.spool_dir.clear();
    s.spool_bytes = 0;
  }
  return s;
}

ExportBuffer::ExportBuffer(ExportBufferSettings settings)
    : settings_(std::move(settings)),
      segment_target_(std::clamp(settings_.spool_bytes / 8, kMinSegment, kMaxSegment)) {}

ExportBuffer::~ExportBuffer() { clear(); }

bool ExportBuffer::push(std::string& body, std::uint64_t items) noexcept {
  try {
    Entry entry;
    entry.items = items;
    entry.size = body.size();
    if (entries_.empty() || memory_bytes_ + entry.size <= settings_.memory_bytes) {
      entries_.emplace_back();  // first: if this throws, the body is still the caller's
      memory_bytes_ += entry.size;
      entry.body = std::move(body);
    } else {
      if (settings_.spool_dir.empty() || spool_bytes_ + entry.size > settings_.spool_bytes) {
        return false;
      }
      entries_.emplace_back();  // first: if this throws, nothing was written
      if (!spool(body, entry)) {
        entries_.pop_back();
        return false;
      }
      body.clear();
    }
    entries_.back() = std::move(entry);
    items_ += items;
    return true;
  } catch (...) {
    return false;
  }
}

bool ExportBuffer::open_segment() noexcept {
  const std::string& dir = settings_.spool_dir;
  // Unnamed where the file system allows it; else named, and removed as soon as it is open.
  int fd = ::open(dir.c_str(), O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    static std::atomic<std::uint64_t> sequence{0};
    const std::string path = dir + "/spool-" + std::to_string(::getpid()) + "-" +
                             std::to_string(sequence.fetch_add(1)) + ".tmp";
    fd = ::open(path.c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0) ::unlink(path.c_str());
  }
  if (fd < 0) {
    spool_error_ = "cannot create a spool file in " + dir + ": " + std::strerror(errno);
    return false;
  }
  try {
    segments_.push_back(Segment{next_segment_id_++, fd, 0, 0});
  } catch (...) {
    ::close(fd);
    return false;
  }
  return true;
}

ExportBuffer::Segment* ExportBuffer::find_segment(std::uint64_t id) noexcept {
  for (Segment& s : segments_) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

bool ExportBuffer::spool(const std::string& body, Entry& entry) noexcept {
  if (segments_.empty() || segments_.back().written >= segment_target_) {
    if (!open_segment()) return false;
  }
  Segment& tail = segments_.back();
  const off_t at = static_cast<off_t>(tail.written);
  std::size_t done = 0;
  while (done < body.size()) {
    const ssize_t n =
        ::pwrite(tail.fd, body.data() + done, body.size() - done, at + static_cast<off_t>(done));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      spool_error_ = "cannot write the spool in " + settings_.spool_dir + ": " +
                     std::strerror(n == 0 ? EIO : errno);
      (void)::ftruncate(tail.fd, at);  // a part written is never read: the next one overwrites it
      return false;
    }
    done += static_cast<std::size_t>(n);
  }
  entry.on_disk = true;
  entry.segment = tail.id;
  entry.offset = tail.written;
  tail.written += body.size();
  ++tail.unread;
  spool_bytes_ += body.size();
  return true;
}

const std::string* ExportBuffer::front() noexcept {
  if (entries_.empty()) return nullptr;
  const Entry& e = entries_.front();
  if (!e.on_disk) return &e.body;
  if (read_back_valid_) return &read_back_;
  const Segment* segment = find_segment(e.segment);
  if (segment == nullptr) return nullptr;
  try {
    read_back_.resize(e.size);
  } catch (...) {
    return nullptr;
  }
  if (!read_all(segment->fd, read_back_.data(), read_back_.size(), e.offset)) {
    spool_error_ = "cannot read the spool back: " + std::string(std::strerror(errno));
    return nullptr;
  }
  read_back_valid_ = true;
  return &read_back_;
}

std::uint64_t ExportBuffer::front_items() const noexcept {
  return entries_.empty() ? 0 : entries_.front().items;
}

void ExportBuffer::pop() noexcept {
  if (entries_.empty()) return;
  Entry& e = entries_.front();
  items_ -= e.items;
  if (e.on_disk) {
    read_back_valid_ = false;
    Segment* segment = find_segment(e.segment);
    if (segment != nullptr && --segment->unread == 0) {
      const bool tail = segment == &segments_.back();
      if (tail && ::ftruncate(segment->fd, 0) == 0) {  // all read: the file starts over
        spool_bytes_ -= segment->written;
        segment->written = 0;
      } else if (!tail) {  // requests are read in order: an older segment is the front one
        spool_bytes_ -= segment->written;
        ::close(segment->fd);
        segments_.pop_front();
      }
    }
  } else {
    memory_bytes_ -= e.size;
    if (spares_.size() < kMaxSpares) {
      try {
        e.body.clear();
        spares_.push_back(std::move(e.body));
      } catch (...) {
      }
    }
  }
  entries_.pop_front();
}

std::uint64_t ExportBuffer::clear() noexcept {
  const std::uint64_t items = items_;
  entries_.clear();
  for (const Segment& s : segments_) ::close(s.fd);
  segments_.clear();
  items_ = memory_bytes_ = spool_bytes_ = 0;
  read_back_valid_ = false;
  return items;
}

std::string ExportBuffer::take_spare() noexcept {
  if (spares_.empty()) return {};
  std::string s = std::move(spares_.back());
  spares_.pop_back();
  return s;
}

}  // namespace nemo::lens::detail
