// Directories that only this user may use: the control endpoints' (src/control, lens ctl) and the
// export spool's (src/export/export_buffer.cpp). Under /tmp anyone can make a directory first, so
// each is checked before it is trusted. Internal.
#pragma once

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

namespace nemo::lens::detail {

/// Why a directory with status `st` is not private to this user: "belongs to uid 1001, not to
/// this user (uid 1000)" or "is open to other users (mode 0777)"; empty when it is.
inline std::string not_private(const struct stat& st) {
  if (st.st_uid != ::geteuid()) {
    return "belongs to uid " + std::to_string(st.st_uid) + ", not to this user (uid " +
           std::to_string(::geteuid()) + ")";
  }
  if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return std::string("is open to other users (mode ") + mode + ")";
  }
  return {};
}

/// What make_private_dir() found.
struct PrivateDir {
  enum class Problem { kNone, kCannotCreate, kNotADirectory, kForeign, kOpen };
  Problem problem = Problem::kNone;
  /// Empty, or what is wrong with the directory first: "/tmp/lens-1000 belongs to uid 1001, not
  /// to this user (uid 1000)".
  std::string why;
};

/// Creates `dir` (mode 0700) when it does not exist, then checks without following a symbolic
/// link that it is a directory private to this user.
inline PrivateDir make_private_dir(const std::string& dir) {
  using Problem = PrivateDir::Problem;
  if (::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return {Problem::kCannotCreate, "cannot create " + dir + ": " + std::strerror(errno)};
  }
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    return {Problem::kCannotCreate, "cannot inspect " + dir + ": " + std::strerror(errno)};
  }
  if (!S_ISDIR(st.st_mode)) {
    return {Problem::kNotADirectory, dir + " is not a directory (a symbolic link is not followed)"};
  }
  std::string why = not_private(st);
  if (why.empty()) return {};
  return {st.st_uid != ::geteuid() ? Problem::kForeign : Problem::kOpen, dir + " " + why};
}

}  // namespace nemo::lens::detail
