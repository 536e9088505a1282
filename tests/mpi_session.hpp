// Test helper: gives the Open MPI jobs a test starts (mpirun, or MPI_Init's singleton start) a
// session directory of their own.
//
// Open MPI keeps its per-user session directory under one base shared by every job of the machine
// (<TMPDIR>/ompi.<host>.<uid>). Two jobs that start at once where it does not exist yet race to
// create it, and the loser dies in orte_init ("mkdir ... File exists"): ctest -j2 on a fresh
// machine lost that race once (issue 39). With a base of its own per test, no two jobs ever create
// the same directory.
//
//   lens_test::PrivateMpiSession session;   // before mpirun starts, or before MPI_Init
//   lens_test::ChildProcess mpirun({MPIRUN, "--allow-run-as-root", "-np", "4", JOB});
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

namespace lens_test {

/// Open MPI 4's variable for the base of its session directories (ORTE's orte_tmpdir_base).
inline constexpr const char* kOmpiTmpdirVariable = "OMPI_MCA_orte_tmpdir_base";

/// A fresh directory under the test's temporary directory, made the base of the session directories
/// of every Open MPI job started from this process (through the environment) until destroyed, when
/// the previous value comes back and the directory is removed. Not thread-safe (setenv).
class PrivateMpiSession {
 public:
  PrivateMpiSession() {
    std::string pattern = ::testing::TempDir() + "lens_ompi_XXXXXX";
    if (::mkdtemp(pattern.data()) == nullptr)
      throw std::runtime_error("mkdtemp failed: " + pattern);
    base_ = pattern;
    if (const char* old = ::getenv(kOmpiTmpdirVariable)) previous_ = old;
    ::setenv(kOmpiTmpdirVariable, base_.c_str(), 1);
  }
  ~PrivateMpiSession() {
    if (previous_) {
      ::setenv(kOmpiTmpdirVariable, previous_->c_str(), 1);
    } else {
      ::unsetenv(kOmpiTmpdirVariable);
    }
    std::error_code ignored;
    std::filesystem::remove_all(base_, ignored);
  }
  PrivateMpiSession(const PrivateMpiSession&) = delete;
  PrivateMpiSession& operator=(const PrivateMpiSession&) = delete;

  /// The directory Open MPI's session directories go under.
  const std::string& base() const { return base_; }

 private:
  std::string base_;
  std::optional<std::string> previous_;
};

}  // namespace lens_test
