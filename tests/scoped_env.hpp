// Test helper: sets and clears environment variables for one test and restores them afterwards.
#pragma once

#include <cstdlib>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

extern char** environ;

namespace lens_test {

/// Clears every variable lens reads (any NEMO_LENS_*, OTEL_*, SLURM_*, SLURMD_*, WANDB_*, K8S_*,
/// KUBERNETES_*, HOSTNAME, CUDA_VISIBLE_DEVICES, LOCAL_RANK and the test prefixes) on construction
/// and restores the whole previous set on destruction.
class ScopedEnv {
 public:
  ScopedEnv() {
    for (char** e = environ; *e != nullptr; ++e) {
      std::string kv = *e;
      auto eq = kv.find('=');
      if (eq == std::string::npos) continue;
      std::string key = kv.substr(0, eq);
      if (relevant(key)) saved_[key] = kv.substr(eq + 1);
    }
    for (const auto& [k, v] : saved_) unsetenv(k.c_str());
  }
  ~ScopedEnv() {
    for (const auto& k : touched_) unsetenv(k.c_str());
    for (const auto& [k, v] : saved_) setenv(k.c_str(), v.c_str(), 1);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  /// Sets `key` to `value` for the rest of the test.
  void set(const std::string& key, const std::string& value) {
    touched_.push_back(key);
    setenv(key.c_str(), value.c_str(), 1);
  }

  /// Unsets `key` for the rest of the test.
  void unset(const std::string& key) {
    touched_.push_back(key);
    unsetenv(key.c_str());
  }

 private:
  static bool relevant(const std::string& key) {
    for (const char* p :
         {"NEMO_LENS_", "OTEL_", "SLURM_", "SLURMD_", "LENS_SLURM_", "NV_LAUNCH_", "WANDB_",
          "MEGATRON_OTEL_", "RL_OTEL_", "DEPLOYMENT_ENV", "ENVIRONMENT", "LOCAL_RANK",
          "KUBERNETES_", "K8S_", "HOSTNAME", "CUDA_VISIBLE_DEVICES"}) {
      if (key.rfind(p, 0) == 0) return true;
    }
    return false;
  }
  std::map<std::string, std::string> saved_;
  std::vector<std::string> touched_;
};

/// The message of the ConfigError `f` throws, or "<no ConfigError>".
template <class Error>
std::string error_message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ConfigError>";
}

}  // namespace lens_test
