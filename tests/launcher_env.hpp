// Test helper: a ScopedEnv that also clears the launcher variables discover_ranks() reads, so that
// a test run under mpirun, torchrun or srun sees only what the test sets.
#pragma once

#include <cstdlib>
#include <map>
#include <string>

#include "scoped_env.hpp"

namespace lens_test {

/// Clears what ScopedEnv clears (SLURM_*, LOCAL_RANK among others) and the OpenMPI, torchrun and
/// PMI rank variables; restores all of them on destruction.
class LauncherEnv {
 public:
  /// Sets `key` to `value` for the rest of the test.
  void set(const std::string& key, const std::string& value) { env_.set(key, value); }
  /// Unsets `key` for the rest of the test.
  void unset(const std::string& key) { env_.unset(key); }

 private:
  // Declared before env_: clears first and restores last, after env_ has unset what the test set.
  struct SavedLaunchers {
    SavedLaunchers() {
      for (const char* key : kKeys) {
        if (const char* v = std::getenv(key)) values[key] = v;
        unsetenv(key);
      }
    }
    ~SavedLaunchers() {
      for (const char* key : kKeys) unsetenv(key);
      for (const auto& [k, v] : values) setenv(k.c_str(), v.c_str(), 1);
    }
    SavedLaunchers(const SavedLaunchers&) = delete;
    SavedLaunchers& operator=(const SavedLaunchers&) = delete;

    static constexpr const char* kKeys[] = {"OMPI_COMM_WORLD_RANK",
                                            "OMPI_COMM_WORLD_SIZE",
                                            "OMPI_COMM_WORLD_LOCAL_RANK",
                                            "RANK",
                                            "WORLD_SIZE",
                                            "PMI_RANK",
                                            "PMI_SIZE",
                                            "PMI_LOCAL_RANK",
                                            "MPI_LOCALRANKID"};
    std::map<std::string, std::string> values;
  };

  SavedLaunchers saved_;
  ScopedEnv env_;
};

}  // namespace lens_test
