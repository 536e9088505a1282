// Test helper: talks to a lens control endpoint the way `lens ctl` does (one request line, one
// JSON reply), with a bounded wait, and makes private temporary directories.
#pragma once

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace lens_test {

/// Sends `request` (bytes as given) to the socket at `path` and returns everything it answers
/// until it closes the connection, or until `timeout`. Empty when it could not connect.
inline std::string control_exchange(const std::string& path, const std::string& request,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return {};
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof addr.sun_path - 1);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return {};
  }
  std::size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n = ::send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the endpoint may close early (oversized request): read its reply
    sent += static_cast<std::size_t>(n);
  }
  std::string reply;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[4096];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    reply.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return reply;
}

/// control_exchange() of one request line, parsed; a JSON null when there was no valid reply.
inline nlohmann::json control_request(const std::string& path, const std::string& line) {
  const std::string reply = control_exchange(path, line + "\n");
  return nlohmann::json::parse(reply, nullptr, /*allow_exceptions=*/false);
}

/// The control sockets in `dir`.
inline std::vector<std::string> control_sockets(const std::filesystem::path& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    if (e.path().extension() == ".sock") out.push_back(e.path().string());
  }
  return out;
}

/// A directory under /tmp, removed with its contents when the object goes.
class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/lens_ctl_test_XXXXXX";
    path_ = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace lens_test
