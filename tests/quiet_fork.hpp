// Test helper: fork() only while every other thread of the test sleeps in a blocking call.
//
// GCC 12's ASan takes no allocator lock around fork(): a child forked while another thread is
// inside ASan's allocator (a thread that is starting frees its attributes there) inherits that
// lock held and hangs at its first allocation of the same size class. glibc's malloc locks its
// arenas around fork(), so a program without ASan has no such hazard; a test that forks with
// lens' threads running waits for them to be asleep first.
#pragma once

#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <sstream>
#include <string>
#include <thread>

namespace lens_test {

/// Whether thread `tid` of this process sleeps in a call that blocks until something wakes it
/// (futex, poll, epoll, read, accept, sleeps): its /proc state is S and, where the kernel shows
/// it, its system call is one of those. A thread in an allocator is running, runnable or in
/// another call (mmap), and a thread waiting for an allocator lock has a holder that is not
/// asleep.
inline bool thread_asleep(long tid) {
  const std::string dir = "/proc/self/task/" + std::to_string(tid);
  std::ifstream stat(dir + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // it has exited
  const auto close = line.rfind(')');
  if (close == std::string::npos || close + 2 >= line.size() || line[close + 2] != 'S') {
    return false;
  }
  std::ifstream syscall_file(dir + "/syscall");
  std::string call;
  if (!(syscall_file >> call)) return true;  // not shown here: the state alone decides
  if (call == "running") return false;
  long number = -1;
  try {
    number = std::stol(call);
  } catch (...) {
    return false;
  }
  for (long blocking : {
#ifdef SYS_poll
           static_cast<long>(SYS_poll),
#endif
#ifdef SYS_epoll_wait
           static_cast<long>(SYS_epoll_wait),
#endif
#ifdef SYS_select
           static_cast<long>(SYS_select),
#endif
#ifdef SYS_accept
           static_cast<long>(SYS_accept),
#endif
#ifdef SYS_nanosleep
           static_cast<long>(SYS_nanosleep),
#endif
           static_cast<long>(SYS_futex), static_cast<long>(SYS_ppoll),
           static_cast<long>(SYS_epoll_pwait), static_cast<long>(SYS_pselect6),
           static_cast<long>(SYS_read), static_cast<long>(SYS_accept4),
           static_cast<long>(SYS_recvfrom), static_cast<long>(SYS_recvmsg),
           static_cast<long>(SYS_clock_nanosleep), static_cast<long>(SYS_wait4)}) {
    if (number == blocking) return true;
  }
  return false;
}

/// The threads of this process other than the caller that are not asleep (thread_asleep()), as
/// "tid (name)" separated by spaces; empty when all are.
inline std::string threads_awake() {
  const long self = static_cast<long>(::syscall(SYS_gettid));
  std::ostringstream awake;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task", ec)) {
    long tid = 0;
    try {
      tid = std::stol(entry.path().filename().string());
    } catch (...) {
      continue;
    }
    if (tid == self || thread_asleep(tid)) continue;
    std::ifstream comm(entry.path() / "comm");
    std::string name;
    std::getline(comm, name);
    awake << (awake.tellp() > 0 ? " " : "") << tid << " (" << name << ")";
  }
  return awake.str();
}

/// Waits until every other thread of this process is asleep (threads_awake() is empty) or
/// `timeout` passed, yielding between looks; returns the threads still awake then (empty on
/// success). Nothing signals that a thread finished starting, so this looks.
inline std::string wait_for_other_threads_to_sleep(
    std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::string awake = threads_awake();
  while (!awake.empty() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::yield();
    awake = threads_awake();
  }
  return awake;
}

}  // namespace lens_test
