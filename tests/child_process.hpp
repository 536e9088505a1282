// Test helper: runs a program (lens collect) as a child process with its stderr on a pipe, waits
// for a line it prints, signals it and reaps it, all with bounded waits.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

extern char** environ;

namespace lens_test {

class ChildProcess {
 public:
  /// Starts `argv[0]` with `argv`; its stderr is readable through wait_for_line(), its stdout
  /// goes to `stdout_path` (or is inherited when empty). With `pipe_stdin`, its stdin is a pipe
  /// the child reads until close_stdin() (or this object's end).
  explicit ChildProcess(const std::vector<std::string>& argv, const std::string& stdout_path = {},
                        bool pipe_stdin = false) {
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    int in[2] = {-1, -1};
    if (pipe_stdin && pipe2(in, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDERR_FILENO);
    if (pipe_stdin) posix_spawn_file_actions_adddup2(&actions, in[0], STDIN_FILENO);
    if (!stdout_path.empty()) {
      posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, stdout_path.c_str(),
                                       O_WRONLY | O_CREAT | O_TRUNC, 0644);
    }
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    const int rc = posix_spawn(&pid_, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    ::close(fds[1]);
    err_fd_ = fds[0];
    if (pipe_stdin) {
      ::close(in[0]);
      in_fd_ = in[1];
    }
    if (rc != 0) {
      ::close(err_fd_);
      throw std::runtime_error("cannot start " + argv[0]);
    }
  }

  ~ChildProcess() {
    close_stdin();
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (err_fd_ >= 0) ::close(err_fd_);
  }

  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  /// Reads stderr until a line containing `needle` arrives; returns it, or nullopt at EOF or when
  /// `timeout` passes. Everything read is kept in stderr_text().
  std::optional<std::string> wait_for_line(const std::string& needle,
                                           std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (std::size_t nl; (nl = pending_.find('\n')) != std::string::npos;) {
        std::string line = pending_.substr(0, nl);
        pending_.erase(0, nl + 1);
        if (line.find(needle) != std::string::npos) return line;
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{err_fd_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[4096];
      const ssize_t n = ::read(err_fd_, buf, sizeof buf);
      if (n <= 0) return std::nullopt;
      pending_.append(buf, static_cast<std::size_t>(n));
      all_.append(buf, static_cast<std::size_t>(n));
    }
  }

  /// Closes the child's stdin pipe (it reads end-of-file).
  void close_stdin() {
    if (in_fd_ >= 0) ::close(in_fd_);
    in_fd_ = -1;
  }

  /// Sends `sig`.
  void signal(int sig) { ::kill(pid_, sig); }

  /// Waits up to `timeout` for the child to exit; its exit status, or -1 on timeout (the child is
  /// then killed), or 128+N when signal N ended it.
  int wait(std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    // The exit is a readable pidfd; the child's stderr is drained meanwhile so that it never
    // blocks on a full pipe.
    const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, pid_, 0));
    int status = 0;
    for (;;) {
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        pid_ = -1;
        if (pidfd >= 0) ::close(pidfd);
        return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || pidfd < 0) break;
      pollfd p[2] = {{pidfd, POLLIN, 0}, {err_fd_, POLLIN, 0}};
      const int nfds = err_fd_ >= 0 ? 2 : 1;
      if (::poll(p, static_cast<nfds_t>(nfds), static_cast<int>(left.count())) > 0 && nfds == 2 &&
          (p[1].revents & (POLLIN | POLLHUP)) != 0) {
        char buf[4096];
        const ssize_t n = ::read(err_fd_, buf, sizeof buf);
        if (n > 0) {
          all_.append(buf, static_cast<std::size_t>(n));
        } else {
          ::close(err_fd_);  // EOF: only the pidfd is left to wait for
          err_fd_ = -1;
        }
      }
    }
    if (pidfd >= 0) ::close(pidfd);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
    return -1;
  }

  /// Everything read from the child's stderr so far.
  const std::string& stderr_text() const { return all_; }

  /// The child's process id (-1 once it has been reaped), for /proc/<pid>.
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int err_fd_ = -1;
  int in_fd_ = -1;
  std::string pending_;
  std::string all_;
};

}  // namespace lens_test
