// The OTLP span exporter's outage buffer: encoded requests that the receiver could not take yet
// (it is down, restarting, or answers with a retryable status) wait here, in memory up to one
// bound and then in spool files on disk up to another, and are sent again in order once it is
// back. Internal; docs/otlp.md#when-the-receiver-is-down-the-outage-buffer.
#pragma once

#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens {
struct NemoLensConfig;
}

namespace nemo::lens::detail {

/// The bounds and place of the outage buffer, from `<PREFIX>_EXPORT_BUFFER_SIZE`,
/// `<PREFIX>_EXPORT_SPOOL_DIR` and `<PREFIX>_EXPORT_SPOOL_SIZE`.
struct ExportBufferSettings {
  /// Bytes of encoded requests kept in memory while the receiver is away (the request being sent
  /// always fits).
  std::uint64_t memory_bytes = std::uint64_t{64} << 20;
  /// The directory of the spool files; empty: no spool.
  std::string spool_dir;
  /// Bytes of spool files on disk, at most.
  std::uint64_t spool_bytes = std::uint64_t{1} << 30;
  /// The prefix of the variables above, for messages.
  std::string env_prefix = "NEMO_LENS";
};

/// `<tmp>/lens-spool-<uid>`, where <tmp> is TMPDIR when it is set, else /tmp.
std::string default_spool_dir();

/// Reads the settings of `config`'s prefix (and fallback). Sizes are whole numbers of bytes,
/// optionally with a binary suffix (KiB, MiB, GiB, TiB; K, M, G, T); the spool directory `off`
/// (any case) or a spool size of 0 turns the spool off. A directory named by the variable is
/// created (mode 0700) and must belong to this user and be closed to others, else ConfigError;
/// the default one, when it cannot be used so, only turns the spool off with a warning on stderr.
/// Throws ConfigError naming the variable, the value and what is valid.
ExportBufferSettings export_buffer_settings(const NemoLensConfig& config);

/// A first-in first-out queue of encoded requests: in memory while they fit its bound, then in
/// spool files (unnamed: O_TMPFILE, or removed once opened, so that the space is freed when the
/// process ends however it ends) while they fit theirs. Not thread-safe: its owner locks.
class ExportBuffer {
 public:
  explicit ExportBuffer(ExportBufferSettings settings);
  ~ExportBuffer();
  ExportBuffer(const ExportBuffer&) = delete;
  ExportBuffer& operator=(const ExportBuffer&) = delete;

  /// Appends a request of `items` items, taking `body` (left empty or as it was on failure). False
  /// when it fits neither bound, or the spool could not be written: the request is not queued.
  /// The first request of an empty buffer always fits in memory.
  bool push(std::string& body, std::uint64_t items) noexcept;

  /// The oldest request's body, read from the spool when it lies there; null when the buffer is
  /// empty or the spool could not be read (pop() it then: it is lost). Valid until pop(); push()
  /// does not invalidate it.
  const std::string* front() noexcept;
  /// The oldest request's item count; 0 when empty.
  std::uint64_t front_items() const noexcept;
  /// Removes the oldest request. Its body's storage is kept for take_spare().
  void pop() noexcept;
  /// Removes every request; returns the items they carried.
  std::uint64_t clear() noexcept;

  /// An empty string with the capacity of a body popped earlier, if any (saves an allocation
  /// per request in steady state).
  std::string take_spare() noexcept;

  bool empty() const noexcept { return entries_.empty(); }
  std::size_t requests() const noexcept { return entries_.size(); }
  /// Items of every queued request.
  std::uint64_t items() const noexcept { return items_; }
  std::uint64_t memory_bytes() const noexcept { return memory_bytes_; }
  /// Bytes the spool files take on disk now (including requests read but not yet released).
  std::uint64_t spool_bytes() const noexcept { return spool_bytes_; }
  /// Spool files open now.
  std::size_t spool_files() const noexcept { return segments_.size(); }
  /// The last spool error ("cannot create a spool file in DIR: ..."), empty when none.
  const std::string& spool_error() const noexcept { return spool_error_; }

 private:
  struct Entry {
    std::string body;  // empty when on disk
    std::uint64_t items = 0;
    std::uint64_t size = 0;
    bool on_disk = false;
    std::uint64_t segment = 0;  // on disk: the segment's id, and where in it the body lies
    std::uint64_t offset = 0;
  };
  struct Segment {
    std::uint64_t id = 0;
    int fd = -1;
    std::uint64_t written = 0;  // bytes appended
    std::size_t unread = 0;     // requests in it not yet popped
  };

  // Appends `body` to the tail segment (a new one when it is full); sets `entry`'s place.
  bool spool(const std::string& body, Entry& entry) noexcept;
  bool open_segment() noexcept;
  Segment* find_segment(std::uint64_t id) noexcept;

  ExportBufferSettings settings_;
  std::uint64_t segment_target_;
  std::deque<Entry> entries_;
  std::deque<Segment> segments_;
  std::uint64_t next_segment_id_ = 0;
  std::uint64_t items_ = 0;
  std::uint64_t memory_bytes_ = 0;
  std::uint64_t spool_bytes_ = 0;
  std::string read_back_;  // the front request when it was read from the spool
  bool read_back_valid_ = false;
  std::vector<std::string> spares_;
  std::string spool_error_;
};

}  // namespace nemo::lens::detail
