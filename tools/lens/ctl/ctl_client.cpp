#include "ctl/ctl_client.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "control/settings.hpp"
#include "env.hpp"
#include "private_dir.hpp"

namespace nemo::lens::cli::ctl {
namespace {

using Clock = std::chrono::steady_clock;

/// How long to wait before retrying a connect() the endpoint's full backlog refused (EAGAIN).
constexpr std::chrono::milliseconds kConnectRetry{10};

std::string errno_text(int error) { return std::strerror(error); }

/// A file descriptor closed on destruction.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }

  /// The descriptor, -1 when none.
  int get() const { return fd_; }

  /// Closes the descriptor, if any.
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

/// Where one exchange is.
enum class Phase { retry_connect, connecting, sending, reading, done };

/// One exchange in flight.
struct Connection {
  Exchange* out = nullptr;
  Fd fd;
  sockaddr_un address{};
  Phase phase = Phase::done;
  std::size_t sent = 0;
  std::string received;
  Clock::time_point next_retry{};
};

/// Ends `c` as unreachable because of `problem`.
void fail(Connection& c, std::string problem) {
  c.out->status = ExchangeStatus::unreachable;
  c.out->problem = std::move(problem);
  c.phase = Phase::done;
  c.fd.reset();
}

/// A connect() to `c` was refused: nobody listens. Removes the socket file when it is a socket
/// owned by this user.
void handle_refused(Connection& c) {
  c.phase = Phase::done;
  c.fd.reset();
  Exchange& out = *c.out;
  out.status = ExchangeStatus::stale;
  struct stat st {};
  if (::lstat(out.socket.c_str(), &st) != 0) {
    if (errno == ENOENT) {
      out.status = ExchangeStatus::gone;
      return;
    }
    out.problem =
        "nobody listens (a stale endpoint), and it cannot be examined: " + errno_text(errno);
    return;
  }
  if (!S_ISSOCK(st.st_mode)) {
    out.problem = "not a socket: ignored";
    return;
  }
  if (st.st_uid != ::geteuid()) {
    out.problem = "nobody listens (a stale endpoint), but it belongs to uid " +
                  std::to_string(st.st_uid) + ", not to you: left in place";
    return;
  }
  if (::unlink(out.socket.c_str()) != 0 && errno != ENOENT) {
    out.problem =
        "nobody listens (a stale endpoint), and it cannot be removed: " + errno_text(errno);
    return;
  }
  out.problem = "nobody listens (a stale endpoint): removed";
  out.removed = true;
}

/// Whether the process listening on the connected socket of `c` runs as this user; otherwise
/// ends `c` with what was refused. Checked before the request goes out: someone else's socket
/// must neither see a request (a `groups` switch is meant for our own jobs) nor be believed.
bool peer_is_us(Connection& c) {
  ucred peer{};
  socklen_t size = sizeof peer;
  if (::getsockopt(c.fd.get(), SOL_SOCKET, SO_PEERCRED, &peer, &size) != 0) {
    fail(c, "refused: cannot tell who serves this endpoint (SO_PEERCRED: " + errno_text(errno) +
                "); no request sent");
    return false;
  }
  if (peer.uid != ::geteuid()) {
    fail(c, "refused: served by uid " + std::to_string(peer.uid) + " (pid " +
                std::to_string(peer.pid) + "), not by you (uid " + std::to_string(::geteuid()) +
                "); no request sent");
    return false;
  }
  return true;
}

/// Handles the outcome `error` (0: connected) of a connect() attempt of `c`.
void connect_result(Connection& c, int error, Clock::time_point now) {
  switch (error) {
    case 0:
      if (peer_is_us(c)) c.phase = Phase::sending;
      return;
    case EINPROGRESS:
      c.phase = Phase::connecting;
      return;
    case EAGAIN:  // the listening socket's backlog is full: Unix sockets make us retry
    case EINTR:
      c.phase = Phase::retry_connect;
      c.next_retry = now + kConnectRetry;
      return;
    case ECONNREFUSED:
      handle_refused(c);
      return;
    case ENOENT:
      c.out->status = ExchangeStatus::gone;
      c.phase = Phase::done;
      c.fd.reset();
      return;
    default:
      fail(c, "cannot connect: " + errno_text(error));
  }
}

void try_connect(Connection& c, Clock::time_point now) {
  const int rc =
      ::connect(c.fd.get(), reinterpret_cast<const sockaddr*>(&c.address), sizeof c.address);
  connect_result(c, rc == 0 ? 0 : errno, now);
}

/// Creates the socket of `c` and starts connecting.
void start(Connection& c, Clock::time_point now) {
  const std::string& path = c.out->socket;
  if (path.size() >= sizeof c.address.sun_path) {
    fail(c, "the path is too long for a Unix socket (" + std::to_string(path.size()) +
                " bytes, at most " + std::to_string(sizeof c.address.sun_path - 1) + ")");
    return;
  }
  c.address.sun_family = AF_UNIX;
  std::memcpy(c.address.sun_path, path.data(), path.size());
  c.fd = Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (c.fd.get() < 0) {
    fail(c, "cannot create a socket: " + errno_text(errno));
    return;
  }
  try_connect(c, now);
}

/// Sends what is left of `request` on `c`.
void send_some(Connection& c, std::string_view request) {
  const ssize_t n =
      ::send(c.fd.get(), request.data() + c.sent, request.size() - c.sent, MSG_NOSIGNAL);
  if (n < 0) {
    if (errno == EAGAIN || errno == EINTR) return;
    if (errno == EPIPE || errno == ECONNRESET) {
      fail(c, "closed the connection without replying");
    } else {
      fail(c, "cannot send the request: " + errno_text(errno));
    }
    return;
  }
  c.sent += static_cast<std::size_t>(n);
  if (c.sent == request.size()) c.phase = Phase::reading;
}

/// The first bytes of `text`, control characters escaped, for a message.
std::string excerpt(std::string_view text) {
  constexpr std::size_t kMax = 60;
  std::string out;
  for (char ch : text.substr(0, kMax)) {
    const auto byte = static_cast<unsigned char>(ch);
    if (byte < 0x20 || byte == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", byte);
      out += buf;
    } else {
      out += ch;
    }
  }
  if (text.size() > kMax) out += "...";
  return out;
}

/// The endpoint closed the connection of `c`: checks what it sent.
void finish(Connection& c) {
  c.phase = Phase::done;
  c.fd.reset();
  std::string_view text = c.received;
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.remove_suffix(1);
  if (text.empty()) {
    fail(c, "closed the connection without replying");
    return;
  }
  try {
    c.out->reply = parse_reply(text);
    c.out->reply_text = std::string(text);
    c.out->status = ExchangeStatus::ok;
  } catch (const std::exception& e) {
    fail(c,
         std::string("unparseable reply: ") + e.what() + " (reply begins '" + excerpt(text) + "')");
  }
}

/// Reads what the endpoint of `c` sent so far.
void read_some(Connection& c) {
  char buf[65536];
  const ssize_t n = ::read(c.fd.get(), buf, sizeof buf);
  if (n > 0) {
    c.received.append(buf, static_cast<std::size_t>(n));
    if (c.received.size() > kMaxReplyBytes) {
      fail(c, "unparseable reply: longer than " + std::to_string(kMaxReplyBytes) + " bytes");
    }
    return;
  }
  if (n == 0) {
    finish(c);
    return;
  }
  if (errno == EAGAIN || errno == EINTR) return;
  if (errno == ECONNRESET && c.received.empty()) {
    fail(c, "closed the connection without replying");
  } else {
    fail(c, "cannot read the reply: " + errno_text(errno));
  }
}

/// Why `c` is still in flight at the deadline.
std::string timeout_problem(const Connection& c, std::chrono::milliseconds timeout) {
  const std::string after = "timed out after " + seconds_text(timeout);
  switch (c.phase) {
    case Phase::retry_connect:
    case Phase::connecting:
      return after + " connecting (the endpoint accepts no connections)";
    case Phase::sending:
      return after + " sending the request";
    case Phase::reading:
      return c.received.empty() ? after + " waiting for a reply"
                                : after + " reading the reply (" +
                                      std::to_string(c.received.size()) + " bytes received)";
    case Phase::done:
      break;
  }
  return after;
}

/// How to get a control directory lens ctl trusts, for the messages that refuse one.
constexpr std::string_view kDirectoryFix =
    "remove it if it is not yours, or give your jobs and lens ctl a directory of your own with "
    "NEMO_LENS_CONTROL_DIR (lens ctl also takes --dir)";

/// Why a control directory with status `st` cannot be trusted, or empty. Anyone who can write
/// into it, or who owns it, could put a socket there that poses as one of our processes.
std::string untrusted_directory(const struct stat& st) {
  const std::string why = detail::not_private(st);
  if (why.empty()) return {};
  if (st.st_uid != ::geteuid()) {
    return "it " + why + ", so its endpoints may pose as your processes; " +
           std::string(kDirectoryFix);
  }
  return "it " + why +
         ", so its endpoints may pose as your processes; lens makes it with mode 0700: check "
         "what is in it, then chmod 700 it";
}

}  // namespace

std::string default_control_dir() {
  return detail::env_trimmed("NEMO_LENS_CONTROL_DIR").value_or(detail::default_control_dir());
}

Endpoints find_endpoints(const std::string& dir) {
  Endpoints out;
  // Opened without following a symbolic link and checked through the descriptor, so that what
  // is checked is what is read.
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    if (error == ENOENT) return out;
    struct stat link {};
    if (error == ELOOP ||
        (error == ENOTDIR && ::lstat(dir.c_str(), &link) == 0 && S_ISLNK(link.st_mode))) {
      throw DirectoryError("refusing the control directory " + dir +
                           ": it is a symbolic link, which lens never makes (" +
                           std::string(kDirectoryFix) + ")");
    }
    throw DirectoryError("cannot read the control directory " + dir + ": " + errno_text(error));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int error = errno;
    ::close(fd);
    throw DirectoryError("cannot read the control directory " + dir + ": " + errno_text(error));
  }
  if (std::string problem = untrusted_directory(st); !problem.empty()) {
    ::close(fd);
    throw DirectoryError("refusing the control directory " + dir + ": " + problem);
  }
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    const int error = errno;
    ::close(fd);
    throw DirectoryError("cannot read the control directory " + dir + ": " + errno_text(error));
  }
  out.dir_found = true;
  const std::string prefix = dir.ends_with('/') ? dir : dir + "/";
  errno = 0;
  while (const dirent* entry = ::readdir(d)) {
    const std::string_view name = entry->d_name;
    if (name.size() > 5 && name.ends_with(".sock"))
      out.sockets.push_back(prefix + std::string(name));
    errno = 0;
  }
  const int error = errno;
  ::closedir(d);
  if (error != 0) {
    throw DirectoryError("cannot read the control directory " + dir + ": " + errno_text(error));
  }
  std::sort(out.sockets.begin(), out.sockets.end());
  return out;
}

std::vector<Exchange> exchange_all(std::span<const std::string> sockets, std::string_view request,
                                   std::chrono::milliseconds timeout) {
  std::vector<Exchange> exchanges(sockets.size());
  const std::string line =
      "lens-ctl/" + std::to_string(kProtocolVersion) + " " + std::string(request) + "\n";
  std::vector<Connection> connections(sockets.size());
  const Clock::time_point begin = Clock::now();
  const Clock::time_point deadline = begin + timeout;
  for (std::size_t i = 0; i < sockets.size(); ++i) {
    exchanges[i].socket = sockets[i];
    connections[i].out = &exchanges[i];
    connections[i].phase = Phase::retry_connect;
    if (line.size() > kMaxRequestLine) {
      fail(connections[i],
           "the request is longer than " + std::to_string(kMaxRequestLine) + " bytes");
    } else {
      start(connections[i], begin);
    }
  }

  std::vector<pollfd> fds;
  std::vector<Connection*> polled;
  for (;;) {
    const Clock::time_point now = Clock::now();
    fds.clear();
    polled.clear();
    Clock::time_point wake = deadline;
    bool active = false;
    for (Connection& c : connections) {
      if (c.phase == Phase::done) continue;
      active = true;
      if (now >= deadline) {
        fail(c, timeout_problem(c, timeout));
        continue;
      }
      if (c.phase == Phase::retry_connect) {
        if (c.next_retry <= now) {
          try_connect(c, now);
          if (c.phase == Phase::done) continue;
        }
        if (c.phase == Phase::retry_connect) {
          wake = std::min(wake, c.next_retry);
          continue;
        }
      }
      if (c.phase == Phase::sending) send_some(c, line);
      if (c.phase == Phase::done) continue;
      const short events = c.phase == Phase::reading ? POLLIN : POLLOUT;
      fds.push_back(pollfd{c.fd.get(), events, 0});
      polled.push_back(&c);
    }
    if (!active || now >= deadline) break;
    const auto wait = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int rc = ::poll(fds.data(), static_cast<nfds_t>(fds.size()),
                          static_cast<int>(std::clamp<long long>(wait, 0, 60'000)));
    if (rc < 0 && errno != EINTR) {
      for (Connection& c : connections) {
        if (c.phase != Phase::done) fail(c, "poll() failed: " + errno_text(errno));
      }
      break;
    }
    for (std::size_t i = 0; rc > 0 && i < fds.size(); ++i) {
      if (fds[i].revents == 0) continue;
      Connection& c = *polled[i];
      if (c.phase == Phase::connecting) {
        int error = 0;
        socklen_t size = sizeof error;
        if (::getsockopt(c.fd.get(), SOL_SOCKET, SO_ERROR, &error, &size) != 0) error = errno;
        connect_result(c, error, Clock::now());
      } else if (c.phase == Phase::reading) {
        read_some(c);
      }
      // Phase::sending is served at the top of the loop.
    }
  }
  return exchanges;
}

nlohmann::ordered_json parse_reply(std::string_view text) {
  nlohmann::ordered_json reply;
  try {
    reply = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    std::string what = e.what();
    if (what.starts_with("[json.exception.")) what.erase(0, what.find("] ") + 2);
    throw std::runtime_error("not JSON: " + what);
  }
  if (!reply.is_object()) throw std::runtime_error("not a JSON object");
  const auto protocol = reply.find("protocol");
  if (protocol == reply.end()) throw std::runtime_error("no \"protocol\" member");
  if (!protocol->is_number_integer() || protocol->get<long long>() != kProtocolVersion) {
    throw std::runtime_error("protocol " + protocol->dump() + ", but lens ctl speaks protocol " +
                             std::to_string(kProtocolVersion));
  }
  const auto ok = reply.find("ok");
  if (ok == reply.end() || !ok->is_boolean()) {
    throw std::runtime_error("no boolean \"ok\" member");
  }
  const auto process = reply.find("process");
  if (process != reply.end() && !process->is_object()) {
    throw std::runtime_error("\"process\" is not an object");
  }
  if (ok->get<bool>() && process == reply.end()) throw std::runtime_error("no \"process\" member");
  return reply;
}

std::string seconds_text(std::chrono::milliseconds timeout) {
  const double seconds = static_cast<double>(timeout.count()) / 1000.0;
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, seconds);
  return ec == std::errc() ? std::string(buf, end) + "s" : std::to_string(timeout.count()) + "ms";
}

}  // namespace nemo::lens::cli::ctl
