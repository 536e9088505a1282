// Resource detection. The attribute names, the variables they are read from, their types and the
// conditions under which they appear follow NeMo Lens (Python): providers.py for the service, rank
// and run attributes, resources/slurm.py, kubernetes.py and local.py for the detected ones
// (local.py asks nvidia-smi for the GPU count; so does lens, with a hard timeout). Every key NeMo
// Lens v0.2.0 writes has v0.2.0's variable, value and type, so that a job switching library keeps
// its resource; the keys only later NeMo Lens releases write follow those. The order in which the
// sources override each other is lens's own; docs/resources.md lists all three.
#include "resources/resource.hpp"

#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "env.hpp"
#include "nemo/lens/errors.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/version.hpp"
#include "strings.hpp"

extern char** environ;  // what the child gets: the environment as it is now

namespace nemo::lens::detail {

namespace {

constexpr const char* kOtelResourceAttributes = "OTEL_RESOURCE_ATTRIBUTES";

// The attributes being assembled: one entry per key, kept in the order keys first appear. Setting
// a key again replaces its value in place.
class AttributeSet {
 public:
  void set(std::string_view key, AttributeValue value) {
    if (KeyValue* kv = find(key)) {
      kv->value = std::move(value);
    } else {
      attrs_.push_back(KeyValue{std::string(key), std::move(value)});
    }
  }

  // Sets a string attribute unless `value` is empty (NeMo Lens treats "" as absent).
  void set_nonempty(std::string_view key, std::string_view value) {
    if (!value.empty()) set(key, std::string(value));
  }

  bool contains(std::string_view key) { return find(key) != nullptr; }

  std::vector<KeyValue> take() { return std::move(attrs_); }

 private:
  KeyValue* find(std::string_view key) {
    for (KeyValue& kv : attrs_) {
      if (kv.key == key) return &kv;
    }
    return nullptr;
  }

  std::vector<KeyValue> attrs_;
};

// The variable's raw value (untrimmed, possibly empty); empty optional when unset.
std::optional<std::string_view> raw_env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  return std::string_view(v);
}

// The variable's raw value, or "" when unset: Python's `environ.get(name, "")`.
std::string_view env_or_empty(const char* name) { return raw_env(name).value_or(""); }

// The first of `names` set to a non-empty value, or "".
std::string_view first_nonempty_env(std::initializer_list<const char*> names) {
  for (const char* name : names) {
    std::string_view v = env_or_empty(name);
    if (!v.empty()) return v;
  }
  return {};
}

// A whole decimal integer with an optional sign, surrounding whitespace allowed (what Python's
// int() accepts for the values lens sees); empty optional otherwise.
std::optional<std::int64_t> parse_int64(std::string_view s) {
  std::string_view t = trim(s);
  bool negative = false;
  if (!t.empty() && (t.front() == '+' || t.front() == '-')) {
    negative = t.front() == '-';
    t.remove_prefix(1);
  }
  if (t.empty() || t.front() < '0' || t.front() > '9') return std::nullopt;
  std::uint64_t magnitude = 0;
  auto [ptr, ec] = std::from_chars(t.data(), t.data() + t.size(), magnitude);
  if (ec != std::errc() || ptr != t.data() + t.size()) return std::nullopt;
  constexpr auto kMax = static_cast<std::uint64_t>(INT64_MAX);
  if (magnitude > kMax + (negative ? 1U : 0U)) return std::nullopt;
  if (negative) return magnitude == kMax + 1U ? INT64_MIN : -static_cast<std::int64_t>(magnitude);
  return static_cast<std::int64_t>(magnitude);
}

// NeMo Lens's `_set_int`: unset or empty gives `fallback` (when there is one), a value that does
// not parse gives nothing.
void set_int(AttributeSet& attrs, std::string_view key, std::string_view value,
             std::optional<std::int64_t> fallback = std::nullopt) {
  if (value.empty()) {
    if (fallback) attrs.set(key, *fallback);
    return;
  }
  if (auto n = parse_int64(value)) attrs.set(key, *n);
}

// The RFC 4122 name-based (SHA-1, version 5) UUID of `name` in the URL namespace: Python's
// uuid.uuid5(uuid.NAMESPACE_URL, name). Empty optional when SHA-1 is unavailable.
std::optional<std::string> uuid5_url(std::string_view name) {
  static constexpr std::array<unsigned char, 16> kNamespaceUrl = {
      0x6b, 0xa7, 0xb8, 0x11, 0x9d, 0xad, 0x11, 0xd1,
      0x80, 0xb4, 0x00, 0xc0, 0x4f, 0xd4, 0x30, 0xc8};
  std::string input(kNamespaceUrl.begin(), kNamespaceUrl.end());
  input.append(name);
  std::array<unsigned char, EVP_MAX_MD_SIZE> digest{};
  unsigned int len = 0;
  if (EVP_Digest(input.data(), input.size(), digest.data(), &len, EVP_sha1(), nullptr) != 1 ||
      len < 16) {
    return std::nullopt;
  }
  digest[6] = static_cast<unsigned char>((digest[6] & 0x0F) | 0x50);
  digest[8] = static_cast<unsigned char>((digest[8] & 0x3F) | 0x80);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(36);
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) out += '-';
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0x0F];
  }
  return out;
}

// 1. The service, rank and run attributes (NeMo Lens providers.py).
void add_service(AttributeSet& attrs, const NemoLensConfig& config, int rank, int world_size) {
  attrs.set(semconv::kServiceName, config.service_name);
  attrs.set(semconv::kServiceVersion, std::string(NEMO_LENS_VERSION_STRING));
  attrs.set(semconv::kDlRank, std::int64_t{rank});
  attrs.set(semconv::kDlWorldSize, std::int64_t{world_size});
  // The same two as newer NeMo Lens releases name them, so dashboards built for either work.
  attrs.set(semconv::kNvDlRank, std::int64_t{rank});
  attrs.set(semconv::kNvDlWorldSize, std::int64_t{world_size});
  if (!config.run_id.empty()) {
    attrs.set(semconv::kNemoRunId, config.run_id);
    attrs.set(semconv::kServiceInstanceId, config.run_id + "-rank" + std::to_string(rank));
  }
  attrs.set_nonempty(semconv::kNemoUserId, config.user);
  attrs.set_nonempty(semconv::kWandbEntity, config.wandb_entity);
  attrs.set_nonempty(semconv::kWandbProject, config.wandb_project);
  // DEPLOYMENT_ENV when set at all (even to ""), ENVIRONMENT otherwise; nothing when empty.
  auto deployment = raw_env("DEPLOYMENT_ENV");
  attrs.set_nonempty(semconv::kDeploymentEnvironment,
                     deployment ? *deployment : env_or_empty("ENVIRONMENT"));
}

// 2. SLURM: only when SLURM_JOB_ID is non-empty. The keys of NeMo Lens v0.2.0's detect_slurm
// (slurm.job.id, .job.name, .nodelist, .nnodes, .ntasks, .partition, .cluster.name) are its
// variable's value as it is, a string, left out when empty; the others follow the later
// derive_slurm_resource_attributes.
void add_slurm(AttributeSet& attrs) {
  const std::string_view raw_job_id = env_or_empty("SLURM_JOB_ID");
  if (raw_job_id.empty()) return;

  // An array element: SLURM_ARRAY_TASK_ID is set (even to "").
  const auto task_var = raw_env("SLURM_ARRAY_TASK_ID");
  const bool is_array = task_var.has_value();
  const std::string_view array_job_id = env_or_empty("SLURM_ARRAY_JOB_ID");
  const std::string_view array_task_id = task_var.value_or("0");

  attrs.set_nonempty(semconv::kSlurmJobId, raw_job_id);
  attrs.set_nonempty(semconv::kSlurmJobIdRaw, raw_job_id);
  attrs.set_nonempty(semconv::kSlurmArrayJobId, array_job_id.empty() ? raw_job_id : array_job_id);
  attrs.set_nonempty(semconv::kSlurmArrayTaskId, array_task_id);
  set_int(attrs, semconv::kSlurmArrayCount, env_or_empty("SLURM_ARRAY_TASK_COUNT"), 1);
  attrs.set_nonempty(semconv::kSlurmSluid,
                     first_nonempty_env({"LENS_SLURM_SLUID", "NV_LAUNCH_SLUID"}));
  attrs.set_nonempty(semconv::kSlurmArraySluid,
                     first_nonempty_env({"LENS_SLURM_ARRAY_SLUID", "NV_LAUNCH_ARRAY_SLUID"}));
  attrs.set_nonempty(semconv::kSlurmJobName, env_or_empty("SLURM_JOB_NAME"));
  attrs.set_nonempty(semconv::kSlurmClusterName, env_or_empty("SLURM_CLUSTER_NAME"));
  attrs.set_nonempty(semconv::kSlurmNodelist, env_or_empty("SLURM_NODELIST"));
  attrs.set_nonempty(semconv::kSlurmPartition, env_or_empty("SLURM_PARTITION"));
  // The partition SLURM itself names in the job (SLURM_PARTITION is an input variable of srun).
  attrs.set_nonempty(semconv::kSlurmJobPartition, env_or_empty("SLURM_JOB_PARTITION"));
  attrs.set_nonempty(semconv::kSlurmNnodes, env_or_empty("SLURM_NNODES"));
  attrs.set_nonempty(semconv::kSlurmNtasks, env_or_empty("SLURM_NTASKS"));
  set_int(attrs, semconv::kSlurmRestartCount, env_or_empty("SLURM_RESTART_COUNT"), 0);
  attrs.set_nonempty(semconv::kSlurmJobUser, env_or_empty("SLURM_JOB_USER"));
  attrs.set_nonempty(semconv::kSlurmJobAccount, env_or_empty("SLURM_JOB_ACCOUNT"));
  attrs.set_nonempty(semconv::kSlurmJobQos, env_or_empty("SLURM_JOB_QOS"));
  attrs.set_nonempty(semconv::kSlurmJobReservation, env_or_empty("SLURM_JOB_RESERVATION"));
  attrs.set_nonempty(semconv::kSlurmSegment, env_or_empty("SLURM_SEGMENT"));
  attrs.set_nonempty(semconv::kSlurmTopologyAddr, env_or_empty("SLURM_TOPOLOGY_ADDR"));
  attrs.set_nonempty(semconv::kSlurmTopologyAddrPattern,
                     env_or_empty("SLURM_TOPOLOGY_ADDR_PATTERN"));
  // SLURMD_NODENAME names the head node only in the batch script, not inside a job step.
  if (first_nonempty_env({"SLURM_STEP_ID", "SLURM_STEPID"}).empty()) {
    attrs.set_nonempty(semconv::kSlurmHeadNodeName, env_or_empty("SLURMD_NODENAME"));
  }

  // The submitted job's stable id: the same on every rank, array element and requeue.
  std::string_view cluster = env_or_empty("SLURM_CLUSTER_NAME");
  if (cluster.empty()) cluster = "nocluster";
  std::string_view job_key = is_array ? array_job_id : raw_job_id;
  if (job_key.empty()) job_key = "nojob";
  const std::string name = "nemo.lens.job/" + std::string(cluster) + "/" + std::string(job_key);
  if (auto uuid = uuid5_url(name)) attrs.set(semconv::kNvDlJobUuid, std::move(*uuid));
}

// 3. Kubernetes (NeMo Lens resources/kubernetes.py): when KUBERNETES_SERVICE_HOST is non-empty or
// the service-account secrets path exists; values from the downward-API variables.
void add_kubernetes(AttributeSet& attrs, const ResourcePaths& paths) {
  std::error_code ec;
  if (env_or_empty("KUBERNETES_SERVICE_HOST").empty() &&
      !std::filesystem::exists(paths.kubernetes_secrets, ec)) {
    return;
  }
  struct Mapping {
    const char* variable;
    std::string_view key;
  };
  static constexpr Mapping kMappings[] = {
      {"K8S_NAMESPACE", semconv::kK8sNamespaceName},
      {"K8S_POD_NAME", semconv::kK8sPodName},
      {"K8S_POD_UID", semconv::kK8sPodUid},
      {"K8S_NODE_NAME", semconv::kK8sNodeName},
      {"K8S_CONTAINER_NAME", semconv::kK8sContainerName},
      {"K8S_JOB_NAME", semconv::kK8sJobName},
      {"HOSTNAME", semconv::kK8sPodName},  // the pod name when K8S_POD_NAME is not set
  };
  for (const Mapping& m : kMappings) {
    std::string_view v = env_or_empty(m.variable);
    if (!v.empty() && !attrs.contains(m.key)) attrs.set(m.key, std::string(v));
  }
}

// The GPUs CUDA_VISIBLE_DEVICES lists, counted as NeMo Lens v0.2.0 counts them: 0 when it is blank,
// else its comma-separated entries, empty ones included ("0,1," is 3). Empty optional when the
// variable is unset.
std::optional<std::int64_t> visible_gpu_count() {
  auto visible = raw_env("CUDA_VISIBLE_DEVICES");
  if (!visible) return std::nullopt;
  if (trim(*visible).empty()) return 0;
  return static_cast<std::int64_t>(std::count(visible->begin(), visible->end(), ',')) + 1;
}

// ---- Running nvidia-smi ----
//
// posix_spawn (glibc: clone with CLONE_VM|CLONE_VFORK, then exec), so it is safe in a process
// with many threads and copies nothing. Every descriptor lens opens here is close-on-exec, so
// a child another thread spawns at the same moment inherits none of them.

using Clock = std::chrono::steady_clock;

constexpr std::size_t kNvidiaSmiMaxOutput = std::size_t{64} * 1024;

// An owned file descriptor.
class Fd {
 public:
  explicit Fd(int fd = -1) noexcept : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const noexcept { return fd_; }
  void reset(int fd = -1) noexcept {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

// `fd` moved above the standard descriptors (close-on-exec kept), so that the child's dup2 onto
// 0, 1 or 2 can neither be a no-op that leaves close-on-exec set nor overwrite the other end of
// the pipe. False when no descriptor is free.
bool above_stdio(Fd& fd) {
  if (fd.get() > STDERR_FILENO) return true;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, STDERR_FILENO + 1);
  if (moved < 0) return false;
  fd.reset(moved);
  return true;
}

// Sleeps for `d` (at most), or until a signal arrives.
void nap(Clock::duration d) {
  const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(d).count();
  if (ns <= 0) return;
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  ts.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  ::nanosleep(&ts, nullptr);
}

enum class WaitResult : std::uint8_t { kExited, kStillRunning, kGone };

// Waits for `pid` until `deadline`, polling with a growing pause (a process descriptor to poll
// on, pidfd, needs Linux 5.3). kGone: the child was reaped elsewhere (SIGCHLD ignored, or a
// waitpid(-1) in another thread), so its status is unknown.
WaitResult wait_until(pid_t pid, Clock::time_point deadline, int& status) {
  auto pause = std::chrono::microseconds(200);
  while (true) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return WaitResult::kExited;
    if (r < 0 && errno != EINTR) return WaitResult::kGone;
    const auto now = Clock::now();
    if (now >= deadline) return WaitResult::kStillRunning;
    if (r == 0) {
      nap(std::min<Clock::duration>(pause, deadline - now));
      pause = std::min<std::chrono::microseconds>(pause * 2, std::chrono::milliseconds(20));
    }
  }
}

// Kills the child's process group (the child and whatever it started; its group id is its pid,
// held while it is unreaped) and reaps the child. SIGKILL normally takes effect at once; a child
// stuck in the kernel (a hung GPU driver) dies only when it leaves it, so after a short grace a
// detached thread does the blocking reap: set-up does not wait for it and no zombie is left.
void kill_and_reap(pid_t pid) {
  ::kill(-pid, SIGKILL);
  ::kill(pid, SIGKILL);  // in case the group could not be set up
  int status = 0;
  if (wait_until(pid, Clock::now() + std::chrono::milliseconds(500), status) !=
      WaitResult::kStillRunning) {
    return;
  }
  try {
    std::thread([pid] {
      int st = 0;
      while (::waitpid(pid, &st, 0) < 0 && errno == EINTR) {
      }
    }).detach();
  } catch (const std::system_error&) {
    // No thread to spare: the child stays a zombie until the process exits.
  }
}

// The standard output of `argv` (argv[0] looked up on PATH when it has no '/'), with stdin and
// stderr on /dev/null, when it exits with status 0 before `deadline` having written at most
// kNvidiaSmiMaxOutput bytes. Empty optional otherwise; the child is never left running or
// unreaped.
std::optional<std::string> run_for_output(const std::vector<std::string>& argv,
                                          Clock::time_point deadline) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return std::nullopt;
  Fd read_end(fds[0]);
  Fd write_end(fds[1]);
  if (!above_stdio(read_end) || !above_stdio(write_end)) return std::nullopt;

  posix_spawn_file_actions_t actions;
  if (posix_spawn_file_actions_init(&actions) != 0) return std::nullopt;
  posix_spawnattr_t attr;
  if (posix_spawnattr_init(&attr) != 0) {
    posix_spawn_file_actions_destroy(&actions);
    return std::nullopt;
  }
  // The child gets its own process group (so that a timeout kills what it started too), an empty
  // signal mask and default handling of the signals a program usually relies on.
  sigset_t no_signals;
  sigemptyset(&no_signals);
  sigset_t defaults;
  sigemptyset(&defaults);
  for (int sig : {SIGPIPE, SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGALRM, SIGCHLD}) {
    sigaddset(&defaults, sig);
  }
  const bool prepared =
      posix_spawn_file_actions_adddup2(&actions, write_end.get(), STDOUT_FILENO) == 0 &&
      posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0) == 0 &&
      posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0) == 0 &&
      posix_spawnattr_setflags(
          &attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF) == 0 &&
      posix_spawnattr_setpgroup(&attr, 0) == 0 &&
      posix_spawnattr_setsigmask(&attr, &no_signals) == 0 &&
      posix_spawnattr_setsigdefault(&attr, &defaults) == 0;

  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = -1;
  const int spawned =
      prepared ? posix_spawnp(&pid, args[0], &actions, &attr, args.data(), environ) : -1;
  posix_spawnattr_destroy(&attr);
  posix_spawn_file_actions_destroy(&actions);
  write_end.reset();  // EOF on the read end once the child (and its children) close stdout
  if (spawned != 0) return std::nullopt;  // not found, not executable, ...

  // Read until EOF, within the time left.
  std::string out;
  std::array<char, 4096> buffer{};
  bool complete = false;
  while (true) {
    const auto left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) break;
    pollfd p{read_end.get(), POLLIN, 0};
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(left).count();
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<std::int64_t>(ms, INT_MAX)));
    if (ready < 0) {
      if (errno == EINTR) continue;
      break;
    }
    if (ready == 0) continue;  // the loop head checks the deadline
    const ssize_t n = ::read(read_end.get(), buffer.data(), buffer.size());
    if (n > 0) {
      out.append(buffer.data(), static_cast<std::size_t>(n));
      if (out.size() > kNvidiaSmiMaxOutput) break;
      continue;
    }
    if (n == 0) {
      complete = true;
      break;
    }
    if (errno != EINTR && errno != EAGAIN) break;
  }
  read_end.reset();

  if (complete) {
    // Then wait for its exit, within the time left.
    int status = 0;
    switch (wait_until(pid, deadline, status)) {
      case WaitResult::kExited:
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return out;
        return std::nullopt;
      case WaitResult::kGone:
        return std::nullopt;
      case WaitResult::kStillRunning:
        break;
    }
  }
  kill_and_reap(pid);
  return std::nullopt;
}

// 4. Host and process (NeMo Lens resources/local.py). host.gpu.count follows NeMo Lens's
// _detect_gpu_count: CUDA_VISIBLE_DEVICES when it is set (even to ""), else nvidia-smi, else
// nothing.
void add_host(AttributeSet& attrs, const ResourcePaths& paths) {
  std::array<char, HOST_NAME_MAX + 1> host{};
  if (gethostname(host.data(), host.size() - 1) == 0) {
    attrs.set(semconv::kHostName, std::string(host.data()));
  }
  attrs.set(semconv::kProcessPid, std::int64_t{getpid()});
  std::optional<std::int64_t> gpus = visible_gpu_count();
  if (!gpus && !paths.nvidia_smi.empty()) gpus = nvidia_smi_gpu_count(paths.nvidia_smi);
  if (gpus) attrs.set(semconv::kHostGpuCount, *gpus);
}

// The type a SLURM resource key has when detected, which its OTEL_RESOURCE_ATTRIBUTES value takes
// (later NeMo Lens releases' SLURM_RESOURCE_TYPES, with v0.2.0's strings for v0.2.0's keys);
// kNone for every other key.
enum class SlurmKeyType : std::uint8_t { kNone, kString, kInt };

SlurmKeyType slurm_key_type(std::string_view key) {
  static constexpr std::string_view kIntKeys[] = {semconv::kSlurmArrayCount,
                                                  semconv::kSlurmRestartCount};
  // NeMo Lens v0.2.0's seven keys, then the string keys of later releases.
  static constexpr std::string_view kStringKeys[] = {
      semconv::kSlurmJobId,        semconv::kSlurmJobName,      semconv::kSlurmNodelist,
      semconv::kSlurmNnodes,       semconv::kSlurmNtasks,       semconv::kSlurmPartition,
      semconv::kSlurmClusterName,  semconv::kSlurmJobIdRaw,     semconv::kSlurmArrayJobId,
      semconv::kSlurmArrayTaskId,  semconv::kSlurmSluid,        semconv::kSlurmArraySluid,
      semconv::kSlurmJobPartition, semconv::kSlurmHeadNodeName, semconv::kSlurmJobUser,
      semconv::kSlurmJobAccount,   semconv::kSlurmJobQos,       semconv::kSlurmJobReservation,
      semconv::kSlurmSegment,      semconv::kSlurmTopologyAddr, semconv::kSlurmTopologyAddrPattern,
      semconv::kNvDlJobUuid,       semconv::kNvDlRunUuid};
  for (std::string_view k : kIntKeys) {
    if (k == key) return SlurmKeyType::kInt;
  }
  for (std::string_view k : kStringKeys) {
    if (k == key) return SlurmKeyType::kString;
  }
  return SlurmKeyType::kNone;
}

[[noreturn]] void throw_malformed(std::string_view entry, const std::string& problem) {
  throw ConfigError("Invalid value for " + std::string(kOtelResourceAttributes) + ": entry '" +
                    std::string(entry) + "' " + problem +
                    ". Expected comma-separated key=value pairs with percent-encoded values, "
                    "e.g. 'team=ml,note=a%2Cb'.");
}

// A value of OTEL_RESOURCE_ATTRIBUTES: trimmed, then percent-decoded.
std::string decode_value(std::string_view entry, std::string_view value) {
  value = trim(value);
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] != '%') {
      out += value[i];
      continue;
    }
    const int high = i + 1 < value.size() ? hex_digit(value[i + 1]) : -1;
    const int low = i + 2 < value.size() ? hex_digit(value[i + 2]) : -1;
    if (high < 0 || low < 0) {
      throw_malformed(entry, "has an invalid percent-escape '" + std::string(value.substr(i, 3)) +
                                 "' (a '%' must be followed by two hex digits)");
    }
    out += static_cast<char>(high * 16 + low);
    i += 2;
  }
  return valid_utf8(out);
}

struct ParsedAttribute {
  std::string key;
  std::string value;
};

// OTEL_RESOURCE_ATTRIBUTES as the OpenTelemetry specification defines it: comma-separated
// key=value pairs, keys and values trimmed, values percent-decoded (keys are not). Blank entries
// (",,", a trailing comma) are skipped. Throws ConfigError for anything else that does not parse.
std::vector<ParsedAttribute> parse_otel_resource_attributes(std::string_view text) {
  std::vector<ParsedAttribute> out;
  for (std::string_view entry : split(text, ',')) {
    if (trim(entry).empty()) continue;
    const size_t eq = entry.find('=');
    if (eq == std::string_view::npos) throw_malformed(trim(entry), "has no '='");
    std::string_view key = trim(entry.substr(0, eq));
    if (key.empty()) throw_malformed(trim(entry), "has an empty key");
    out.push_back({std::string(key), decode_value(trim(entry), entry.substr(eq + 1))});
  }
  return out;
}

// 5. OTEL_RESOURCE_ATTRIBUTES: string values overriding what was detected, except that
//  - service.name here replaces only the default service name: OTEL_SERVICE_NAME and a
//    service_name set in the config win (the specification's OTEL_SERVICE_NAME precedence);
//  - a SLURM resource key takes the type detection gives it (slurm.restart_count=2 is the integer
//    2, slurm.nnodes=8 the string "8"), and a value that is empty or not an integer where one is
//    expected does not replace a detected value.
void add_otel_resource_attributes(AttributeSet& attrs, const NemoLensConfig& config) {
  auto text = raw_env(kOtelResourceAttributes);
  if (!text) return;
  const bool service_name_given =
      config.service_name != "nemo" || env_trimmed("OTEL_SERVICE_NAME").has_value();
  for (ParsedAttribute& a : parse_otel_resource_attributes(*text)) {
    if (a.key == semconv::kServiceName && service_name_given) continue;
    switch (slurm_key_type(a.key)) {
      case SlurmKeyType::kNone:
        attrs.set(a.key, std::move(a.value));
        break;
      case SlurmKeyType::kString:
        if (!a.value.empty() || !attrs.contains(a.key)) attrs.set(a.key, std::move(a.value));
        break;
      case SlurmKeyType::kInt:
        if (auto n = parse_int64(a.value)) {
          attrs.set(a.key, *n);
        } else if (!attrs.contains(a.key)) {
          attrs.set(a.key, std::move(a.value));
        }
        break;
    }
  }
}

}  // namespace

std::optional<std::int64_t> parse_nvidia_smi_gpu_count(std::string_view output) {
  std::int64_t count = 0;
  for (std::string_view line : split(output, '\n')) {
    line = trim(line);
    if (line.empty()) continue;
    const bool digits =
        std::all_of(line.begin(), line.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (!digits) return std::nullopt;  // "No devices were found", an error message, ...
    ++count;
  }
  if (count == 0) return std::nullopt;
  return count;
}

std::optional<std::int64_t> nvidia_smi_gpu_count(const std::string& program) {
  // NeMo Lens's query: one line per GPU (each holding the total), counted by line.
  const auto deadline = Clock::now() + std::chrono::milliseconds(kNvidiaSmiTimeoutMs);
  std::optional<std::string> out =
      run_for_output({program, "--query-gpu=count", "--format=csv,noheader"}, deadline);
  if (!out) return std::nullopt;
  return parse_nvidia_smi_gpu_count(*out);
}

Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra, const ResourcePaths& paths) {
  AttributeSet attrs;
  add_service(attrs, config, rank, world_size);
  add_slurm(attrs);
  add_kubernetes(attrs, paths);
  add_host(attrs, paths);
  add_otel_resource_attributes(attrs, config);
  for (const KeyValue& kv : extra) attrs.set(kv.key, kv.value);  // 6. the caller's, last
  return Resource{attrs.take()};
}

Resource detect_resource(const NemoLensConfig& config, int rank, int world_size,
                         const std::vector<KeyValue>& extra) {
  return detect_resource(config, rank, world_size, extra, ResourcePaths{});
}

}  // namespace nemo::lens::detail
