// What a block of code writes on standard error, for tests of lens' one-line notices.
#pragma once

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

namespace lens_test {

/// Runs `f` with file descriptor 2 redirected to a temporary file; returns what was written.
template <typename F>
std::string capture_stderr(F&& f) {
  char path[] = "/tmp/lens-test-stderr-XXXXXX";
  const int fd = ::mkstemp(path);
  std::fflush(stderr);
  const int saved = ::dup(2);
  ::dup2(fd, 2);
  f();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  ::close(fd);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

}  // namespace lens_test
