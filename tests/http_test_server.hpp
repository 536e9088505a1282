// Test helpers: a programmable HTTP server on 127.0.0.1 (libmicrohttpd) that records requests and
// answers as the test says, a "black hole" that accepts connections, reads and never answers, and
// a free-port finder.
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace lens_test {

/// A request as the server received it. Header names are lower-cased.
struct RecordedRequest {
  std::string method, path, body;
  std::map<std::string, std::string> headers;
  std::chrono::steady_clock::time_point received;
};

/// What the server answers.
struct Reply {
  int status = 200;
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
};

class TestHttpServer {
 public:
  /// `handler` gets each complete request and its 0-based index.
  using Handler = std::function<Reply(const RecordedRequest&, std::size_t index)>;

  /// A PEM certificate and key: the server then speaks HTTPS.
  struct Tls {
    std::string cert_pem, key_pem;
  };

  explicit TestHttpServer(Handler handler, const Tls* tls = nullptr) : handler_(std::move(handler)) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    const unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                           (tls != nullptr ? static_cast<unsigned>(MHD_USE_TLS) : 0U);
    if (tls != nullptr) {
      scheme_ = "https";
      daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &TestHttpServer::handle, this,
                                 MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr),
                                 MHD_OPTION_NOTIFY_COMPLETED, &TestHttpServer::completed, this,
                                 MHD_OPTION_HTTPS_MEM_CERT, tls->cert_pem.c_str(),
                                 MHD_OPTION_HTTPS_MEM_KEY, tls->key_pem.c_str(), MHD_OPTION_END);
    } else {
      daemon_ = MHD_start_daemon(flags, 0, nullptr, nullptr, &TestHttpServer::handle, this,
                                 MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&addr),
                                 MHD_OPTION_NOTIFY_COMPLETED, &TestHttpServer::completed, this,
                                 MHD_OPTION_END);
    }
    if (daemon_ == nullptr) throw std::runtime_error("cannot start the test HTTP server");
    port_ = MHD_get_daemon_info(daemon_, MHD_DAEMON_INFO_BIND_PORT)->port;
  }
  ~TestHttpServer() { MHD_stop_daemon(daemon_); }
  TestHttpServer(const TestHttpServer&) = delete;
  TestHttpServer& operator=(const TestHttpServer&) = delete;

  std::uint16_t port() const { return port_; }
  std::string url(const std::string& path = "/v1/traces") const {
    return scheme_ + "://127.0.0.1:" + std::to_string(port_) + path;
  }

  /// The requests answered so far.
  std::vector<RecordedRequest> requests() const {
    std::lock_guard lock(mu_);
    return requests_;
  }

  /// Waits up to `timeout` until at least `n` requests were answered.
  bool wait_for_requests(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return requests_.size() >= n; });
  }

 private:
  struct Pending {
    RecordedRequest request;
  };

  static MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
    auto* headers = static_cast<std::map<std::string, std::string>*>(cls);
    std::string k(key);
    for (char& c : k) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    (*headers)[k] = value == nullptr ? "" : value;
    return MHD_YES;
  }

  static MHD_Result handle(void* cls, MHD_Connection* connection, const char* url, const char* method,
                           const char*, const char* data, size_t* size, void** state) {
    auto* self = static_cast<TestHttpServer*>(cls);
    auto* pending = static_cast<Pending*>(*state);
    if (pending == nullptr) {
      pending = new Pending();
      pending->request.method = method;
      pending->request.path = url;
      MHD_get_connection_values(connection, MHD_HEADER_KIND, &collect_header, &pending->request.headers);
      *state = pending;
      return MHD_YES;
    }
    if (*size != 0) {
      pending->request.body.append(data, *size);
      *size = 0;
      return MHD_YES;
    }
    pending->request.received = std::chrono::steady_clock::now();
    std::size_t index = 0;
    {
      std::lock_guard lock(self->mu_);
      index = self->answered_++;
    }
    const Reply reply = self->handler_(pending->request, index);
    {
      std::lock_guard lock(self->mu_);
      self->requests_.push_back(pending->request);
    }
    self->cv_.notify_all();
    MHD_Response* response = MHD_create_response_from_buffer(
        reply.body.size(), const_cast<char*>(reply.body.data()), MHD_RESPMEM_MUST_COPY);
    for (const auto& [k, v] : reply.headers) MHD_add_response_header(response, k.c_str(), v.c_str());
    const MHD_Result r = MHD_queue_response(connection, static_cast<unsigned>(reply.status), response);
    MHD_destroy_response(response);
    return r;
  }

  static void completed(void*, MHD_Connection*, void** state, MHD_RequestTerminationCode) {
    delete static_cast<Pending*>(*state);
    *state = nullptr;
  }

  Handler handler_;
  std::string scheme_ = "http";
  MHD_Daemon* daemon_ = nullptr;
  std::uint16_t port_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<RecordedRequest> requests_;
  std::size_t answered_ = 0;
};

/// A receiver on 127.0.0.1 that accepts every connection and reads everything sent on it, and
/// never answers: a hung collector or a dead load balancer. Its thread waits in poll() and ends
/// when the object goes (a byte on a pipe wakes it).
class BlackHole {
 public:
  BlackHole() {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof addr;
    if (listen_fd_ < 0 ||
        ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(listen_fd_, 64) != 0 ||
        ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&addr), &len) != 0 ||
        ::pipe2(wake_, O_CLOEXEC) != 0) {
      throw std::runtime_error("cannot open the black hole");
    }
    port_ = ntohs(addr.sin_port);
    thread_ = std::thread([this] { run(); });
  }
  ~BlackHole() {
    const char stop = 0;
    (void)!::write(wake_[1], &stop, 1);
    thread_.join();
    for (int fd : clients_) ::close(fd);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  BlackHole(const BlackHole&) = delete;
  BlackHole& operator=(const BlackHole&) = delete;
  std::uint16_t port() const { return port_; }

  /// Waits up to `timeout` until at least `n` bytes arrived (over every connection).
  bool wait_for_bytes(std::uint64_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, timeout, [&] { return bytes_ >= n; });
  }
  /// Connections accepted so far.
  std::size_t connections() const {
    std::lock_guard lock(mu_);
    return accepted_;
  }

 private:
  void run() {
    for (;;) {
      std::vector<pollfd> fds = {{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (int fd : clients_) fds.push_back({fd, POLLIN, 0});
      if (::poll(fds.data(), fds.size(), -1) < 0) continue;
      if (fds[0].revents != 0) return;
      if (fds[1].revents != 0) {
        for (int fd;
             (fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK)) >= 0;) {
          clients_.push_back(fd);
          std::lock_guard lock(mu_);
          ++accepted_;
        }
      }
      for (std::size_t i = 2; i < fds.size(); ++i) {
        if (fds[i].revents == 0) continue;
        char buf[65536];
        ssize_t n = 0;
        std::uint64_t got = 0;
        while ((n = ::read(fds[i].fd, buf, sizeof buf)) > 0) got += static_cast<std::uint64_t>(n);
        if (got != 0) {
          std::lock_guard lock(mu_);
          bytes_ += got;
          cv_.notify_all();
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {  // the peer closed
          ::close(fds[i].fd);
          std::erase(clients_, fds[i].fd);
        }
      }
    }
  }

  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::uint16_t port_ = 0;
  std::vector<int> clients_;  // the thread's
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::uint64_t bytes_ = 0;
  std::size_t accepted_ = 0;
  std::thread thread_;
};

/// A port on 127.0.0.1 that was free a moment ago (bound to port 0, then released).
inline std::uint16_t free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof addr;
  if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

}  // namespace lens_test
