#include "checkpoint.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <system_error>

namespace lens_train {

namespace {

constexpr char kMagic[8] = {'L', 'E', 'N', 'S', 'C', 'K', 'P', 'T'};
constexpr std::uint32_t kVersion = 1;
constexpr std::uint32_t kMaxLayers = 64;
constexpr int kMaxWidth = 1 << 20;
constexpr std::string_view kPrefix = "step_";
constexpr std::string_view kSuffix = ".ckpt";

/// Appends plain values to a byte buffer.
class Writer {
 public:
  template <class T>
  void put(const T& value) {
    const auto* p = reinterpret_cast<const std::byte*>(&value);
    out_.insert(out_.end(), p, p + sizeof(T));
  }
  void put_floats(const std::vector<float>& values) {
    put(static_cast<std::uint64_t>(values.size()));
    const auto* p = reinterpret_cast<const std::byte*>(values.data());
    out_.insert(out_.end(), p, p + values.size() * sizeof(float));
  }
  std::vector<std::byte>& bytes() noexcept { return out_; }

 private:
  std::vector<std::byte> out_;
};

/// Reads plain values back, refusing to read past the end.
class Reader {
 public:
  explicit Reader(std::span<const std::byte> in) : in_(in) {}
  template <class T>
  T get() {
    T value;
    take(&value, sizeof(T));
    return value;
  }
  std::vector<float> get_floats(std::size_t expected) {
    if (get<std::uint64_t>() != expected) throw CheckpointError("checkpoint: array size mismatch");
    std::vector<float> values(expected);
    take(values.data(), expected * sizeof(float));
    return values;
  }
  void skip(std::size_t n) { take(nullptr, n); }
  std::size_t offset() const noexcept { return pos_; }

 private:
  void take(void* dst, std::size_t n) {
    if (in_.size() - pos_ < n) throw CheckpointError("checkpoint: file is truncated");
    if (dst != nullptr) std::memcpy(dst, in_.data() + pos_, n);
    pos_ += n;
  }
  std::span<const std::byte> in_;
  std::size_t pos_ = 0;
};

/// The step of a checkpoint file name, or -1 when the name is not one.
std::int64_t step_of(const std::string& name) {
  if (name.size() <= kPrefix.size() + kSuffix.size() || !name.starts_with(kPrefix) ||
      !name.ends_with(kSuffix)) {
    return -1;
  }
  const char* first = name.data() + kPrefix.size();
  const char* last = name.data() + name.size() - kSuffix.size();
  std::int64_t step = -1;
  const auto [end, ec] = std::from_chars(first, last, step);
  return ec == std::errc() && end == last ? step : -1;
}

[[noreturn]] void throw_system_error(const std::string& what, const std::filesystem::path& path) {
  throw CheckpointError(what + " '" + path.string() + "': " + std::strerror(errno));
}

}  // namespace

std::uint64_t fnv1a(std::span<const std::byte> bytes) noexcept {
  std::uint64_t hash = 0xcbf29ce484222325ULL;
  for (const std::byte b : bytes) {
    hash ^= static_cast<std::uint64_t>(b);
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

std::vector<std::byte> encode_checkpoint(const TrainingState& state) {
  Writer w;
  w.put(kMagic);
  w.put(kVersion);
  w.put(state.step);
  w.put(state.seed);
  w.put(static_cast<std::uint32_t>(state.dims.size()));
  for (const int d : state.dims) w.put(static_cast<std::int32_t>(d));
  w.put_floats(state.parameters);
  w.put_floats(state.adam_m);
  w.put_floats(state.adam_v);
  w.put(state.adam_steps);
  w.put(fnv1a(w.bytes()));
  return std::move(w.bytes());
}

TrainingState decode_checkpoint(std::span<const std::byte> bytes) {
  if (bytes.size() < sizeof(kMagic) + sizeof(std::uint64_t)) {
    throw CheckpointError("checkpoint: file is truncated");
  }
  const std::span<const std::byte> body = bytes.first(bytes.size() - sizeof(std::uint64_t));
  std::uint64_t stored = 0;
  std::memcpy(&stored, bytes.data() + body.size(), sizeof(stored));
  if (std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    throw CheckpointError("checkpoint: not a lens_train checkpoint");
  }
  if (fnv1a(body) != stored) throw CheckpointError("checkpoint: checksum mismatch (corrupt file)");

  Reader r(body);
  r.skip(sizeof(kMagic));
  if (r.get<std::uint32_t>() != kVersion) throw CheckpointError("checkpoint: unknown version");
  TrainingState state;
  state.step = r.get<std::int64_t>();
  state.seed = r.get<std::uint64_t>();
  const auto layers = r.get<std::uint32_t>();
  if (layers < 2 || layers > kMaxLayers) throw CheckpointError("checkpoint: bad layer count");
  std::size_t parameters = 0;
  for (std::uint32_t l = 0; l < layers; ++l) {
    const auto d = r.get<std::int32_t>();
    if (d <= 0 || d > kMaxWidth) throw CheckpointError("checkpoint: bad layer width");
    if (l > 0) parameters += static_cast<std::size_t>(state.dims.back() + 1) * d;
    state.dims.push_back(d);
  }
  state.parameters = r.get_floats(parameters);
  state.adam_m = r.get_floats(parameters);
  state.adam_v = r.get_floats(parameters);
  state.adam_steps = r.get<std::int64_t>();
  if (r.offset() != body.size()) throw CheckpointError("checkpoint: trailing bytes");
  if (state.step < 0 || state.adam_steps < 0) throw CheckpointError("checkpoint: negative step");
  return state;
}

std::string checkpoint_file_name(std::int64_t step) {
  char name[48];
  std::snprintf(name, sizeof(name), "step_%08lld.ckpt", static_cast<long long>(step));
  return name;
}

std::optional<std::filesystem::path> find_latest_checkpoint(const std::filesystem::path& dir) {
  std::error_code ec;
  std::optional<std::filesystem::path> latest;
  std::int64_t latest_step = -1;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::int64_t step = step_of(entry.path().filename().string());
    if (step > latest_step && entry.is_regular_file(ec)) {
      latest_step = step;
      latest = entry.path();
    }
  }
  return latest;
}

void write_file_atomically(const std::filesystem::path& path, std::span<const std::byte> bytes) {
  const std::filesystem::path dir = path.has_parent_path() ? path.parent_path() : ".";
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw CheckpointError("cannot create '" + dir.string() + "': " + ec.message());

  std::filesystem::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw_system_error("cannot create", tmp);
  std::size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int saved = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      errno = saved;
      throw_system_error("cannot write", tmp);
    }
    done += static_cast<std::size_t>(n);
  }
  const bool synced = ::fsync(fd) == 0;
  const int sync_errno = errno;
  const bool closed = ::close(fd) == 0;
  if (!synced || !closed) {
    const int saved = synced ? errno : sync_errno;
    ::unlink(tmp.c_str());
    errno = saved;
    throw_system_error("cannot flush", tmp);
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    const int saved = errno;
    ::unlink(tmp.c_str());
    errno = saved;
    throw_system_error("cannot rename to", path);
  }
  // Make the rename itself durable.
  if (const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

std::vector<std::byte> read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_system_error("cannot open", path);
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (in.bad()) throw_system_error("cannot read", path);
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

}  // namespace lens_train
