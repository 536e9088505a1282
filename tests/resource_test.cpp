// detect_resource(): the attributes of each source, their names and types (those of NeMo Lens:
// v0.2.0's for the keys it writes), and the order in which the sources override each other.
#include "resources/resource.hpp"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "nemo/lens/errors.hpp"
#include "nemo/lens/version.hpp"
#include "scoped_env.hpp"

namespace {

namespace nl = nemo::lens;
using lens_test::ScopedEnv;

// Paths that exist on no machine, so that Kubernetes is detected, and nvidia-smi run, only where a
// test asks for it.
const nl::detail::ResourcePaths kNoKubernetes{"/nonexistent/lens-resource-test/kubernetes.io",
                                              "/nonexistent/lens-resource-test/nvidia-smi"};

nl::NemoLensConfig config() {
  nl::NemoLensConfig cfg;
  cfg.run_id = "run42";
  return cfg;
}

nl::Resource detect(const nl::NemoLensConfig& cfg = config(),
                    const std::vector<nl::KeyValue>& extra = {}, int rank = 3, int world_size = 8) {
  return nl::detail::detect_resource(cfg, rank, world_size, extra, kNoKubernetes);
}

nl::AttributeValue S(std::string v) { return nl::AttributeValue(std::move(v)); }
nl::AttributeValue I(std::int64_t v) { return nl::AttributeValue(v); }

// "key=\"text\"" for a string, "key=42" for an integer: readable when a comparison fails.
std::string render(const nl::KeyValue& kv) {
  if (const auto* s = std::get_if<std::string>(&kv.value)) return kv.key + "=\"" + *s + "\"";
  if (const auto* i = std::get_if<std::int64_t>(&kv.value)) {
    return kv.key + "=" + std::to_string(*i);
  }
  return kv.key + "=<other type>";
}

// The rendered attributes whose key starts with one of `prefixes` (all of them when none given),
// in resource order.
std::vector<std::string> rendered(const nl::Resource& r,
                                  std::initializer_list<std::string_view> prefixes = {}) {
  std::vector<std::string> out;
  for (const nl::KeyValue& kv : r.attributes) {
    bool keep = prefixes.size() == 0;
    for (std::string_view p : prefixes) keep = keep || kv.key.rfind(p, 0) == 0;
    if (keep) out.push_back(render(kv));
  }
  return out;
}

std::optional<nl::AttributeValue> get(const nl::Resource& r, std::string_view key) {
  for (const nl::KeyValue& kv : r.attributes) {
    if (kv.key == key) return kv.value;
  }
  return std::nullopt;
}

std::string hostname() {
  std::array<char, HOST_NAME_MAX + 1> host{};
  gethostname(host.data(), host.size() - 1);
  return host.data();
}

std::string pid_attr() { return "process.pid=" + std::to_string(getpid()); }

// ConfigError's message for OTEL_RESOURCE_ATTRIBUTES=`value`, or "" when nothing is thrown.
std::string error_for(ScopedEnv& env, const std::string& value) {
  env.set("OTEL_RESOURCE_ATTRIBUTES", value);
  try {
    detect();
  } catch (const nl::ConfigError& e) {
    return e.what();
  }
  return "";
}

// ---- 1. service, rank, run, user, W&B, deployment ----

TEST(ResourceTest, BaseAttributesInAnEmptyEnvironment) {
  ScopedEnv env;
  EXPECT_EQ(
      rendered(detect()),
      (std::vector<std::string>{
          "service.name=\"nemo\"", "service.version=\"" NEMO_LENS_VERSION_STRING "\"", "dl.rank=3",
          "dl.world_size=8", "nv.dl.rank=3", "nv.dl.world_size=8", "nemo.run.id=\"run42\"",
          "service.instance.id=\"run42-rank3\"", "host.name=\"" + hostname() + "\"", pid_attr()}));
}

TEST(ResourceTest, ServiceNameAndInstanceFollowConfigAndRank) {
  ScopedEnv env;
  nl::NemoLensConfig cfg = config();
  cfg.service_name = "trainer";
  cfg.run_id = "exp-7";
  nl::Resource r = detect(cfg, {}, 0, 1);
  EXPECT_EQ(get(r, "service.name"), S("trainer"));
  EXPECT_EQ(get(r, "dl.rank"), I(0));
  EXPECT_EQ(get(r, "dl.world_size"), I(1));
  EXPECT_EQ(get(r, "nemo.run.id"), S("exp-7"));
  EXPECT_EQ(get(r, "service.instance.id"), S("exp-7-rank0"));
}

TEST(ResourceTest, EmptyRunIdLeavesOutRunAttributesLikeNemoLens) {
  ScopedEnv env;
  nl::NemoLensConfig cfg = config();
  cfg.run_id.clear();
  nl::Resource r = detect(cfg);
  EXPECT_EQ(get(r, "nemo.run.id"), std::nullopt);
  EXPECT_EQ(get(r, "service.instance.id"), std::nullopt);
}

TEST(ResourceTest, UserAndWandbWhenSet) {
  ScopedEnv env;
  nl::NemoLensConfig cfg = config();
  cfg.user = "alice";
  cfg.wandb_entity = "nvidia";
  cfg.wandb_project = "gpt";
  EXPECT_EQ(rendered(detect(cfg), {"nemo.user", "wandb."}),
            (std::vector<std::string>{"nemo.user.id=\"alice\"", "wandb.entity=\"nvidia\"",
                                      "wandb.project=\"gpt\""}));
}

TEST(ResourceTest, UserAndWandbAbsentWhenEmpty) {
  ScopedEnv env;
  nl::NemoLensConfig cfg = config();
  cfg.wandb_project = "gpt";  // each is independent of the others
  EXPECT_EQ(rendered(detect(cfg), {"nemo.user", "wandb."}),
            (std::vector<std::string>{"wandb.project=\"gpt\""}));
  EXPECT_TRUE(rendered(detect(), {"nemo.user", "wandb."}).empty());
}

TEST(ResourceTest, DeploymentEnvironmentPrecedence) {
  ScopedEnv env;
  EXPECT_EQ(get(detect(), "deployment.environment"), std::nullopt);
  env.set("ENVIRONMENT", "staging");
  EXPECT_EQ(get(detect(), "deployment.environment"), S("staging"));
  env.set("DEPLOYMENT_ENV", "prod");
  EXPECT_EQ(get(detect(), "deployment.environment"), S("prod"));
  // As in NeMo Lens, a DEPLOYMENT_ENV set to "" is still the one read: no attribute.
  env.set("DEPLOYMENT_ENV", "");
  EXPECT_EQ(get(detect(), "deployment.environment"), std::nullopt);
}

// ---- 2. SLURM ----

void set_full_slurm(ScopedEnv& env) {
  env.set("SLURM_JOB_ID", "12345");
  env.set("SLURM_JOB_NAME", "train-gpt");
  env.set("SLURM_JOB_NUM_NODES", "99");  // not read: slurm.nnodes is SLURM_NNODES
  env.set("SLURM_NNODES", "4");
  env.set("SLURM_NTASKS", "16");
  env.set("SLURM_CLUSTER_NAME", "test-cluster");
  env.set("SLURM_JOB_PARTITION", "batch");
  env.set("SLURM_PARTITION", "asked");
  env.set("SLURM_RESTART_COUNT", "2");
  env.set("SLURM_JOB_USER", "alice");
  env.set("SLURM_JOB_ACCOUNT", "llm");
  env.set("SLURM_JOB_QOS", "high");
  env.set("SLURM_JOB_RESERVATION", "res1");
  env.set("SLURM_SEGMENT", "4");
  env.set("SLURM_TOPOLOGY_ADDR", "blk1.node01");
  env.set("SLURM_TOPOLOGY_ADDR_PATTERN", "block.node");
  env.set("SLURMD_NODENAME", "head-01");
  env.set("LENS_SLURM_SLUID", "sluid-1");
  env.set("NV_LAUNCH_SLUID", "ignored");  // LENS_SLURM_SLUID wins
  env.set("NV_LAUNCH_ARRAY_SLUID", "array-sluid-1");
  env.set("SLURM_NODELIST", "node[01-04]");
}

TEST(ResourceTest, FullSlurmEnvironment) {
  ScopedEnv env;
  set_full_slurm(env);
  EXPECT_EQ(
      rendered(detect(), {"slurm.", "nv.dl.job."}),
      (std::vector<std::string>{
          "slurm.job.id=\"12345\"", "slurm.job.id.raw=\"12345\"", "slurm.array.job_id=\"12345\"",
          "slurm.array.task_id=\"0\"", "slurm.array.count=1", "slurm.sluid=\"sluid-1\"",
          "slurm.array.sluid=\"array-sluid-1\"", "slurm.job.name=\"train-gpt\"",
          "slurm.cluster.name=\"test-cluster\"", "slurm.nodelist=\"node[01-04]\"",
          "slurm.partition=\"asked\"", "slurm.job.partition=\"batch\"",
          // NeMo Lens v0.2.0's strings, not integers
          "slurm.nnodes=\"4\"", "slurm.ntasks=\"16\"", "slurm.restart_count=2",
          "slurm.job.user=\"alice\"", "slurm.job.account=\"llm\"", "slurm.job.qos=\"high\"",
          "slurm.job.reservation=\"res1\"", "slurm.segment=\"4\"",
          "slurm.topology.addr=\"blk1.node01\"", "slurm.topology.addr_pattern=\"block.node\"",
          "slurm.head_node.name=\"head-01\"",
          // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.job/test-cluster/12345")
          "nv.dl.job.uuid=\"9d61581a-b1c5-55ff-90da-50a3f091d47a\""}));
}

TEST(ResourceTest, NoSlurmAttributesWithoutSlurmJobId) {
  ScopedEnv env;
  env.set("SLURM_JOB_NAME", "train-gpt");
  env.set("SLURM_NTASKS", "16");
  EXPECT_TRUE(rendered(detect(), {"slurm.", "nv.dl.job."}).empty());
  env.set("SLURM_JOB_ID", "");
  EXPECT_TRUE(rendered(detect(), {"slurm.", "nv.dl.job."}).empty());
}

TEST(ResourceTest, SlurmMinimalJobUsesDefaultsAndFallbacks) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "99");
  env.set("SLURM_NNODES", "2");
  env.set("SLURM_PARTITION", "debug");
  env.set("NV_LAUNCH_SLUID", "from-launcher");
  EXPECT_EQ(rendered(detect(), {"slurm.", "nv.dl.job."}),
            (std::vector<std::string>{
                "slurm.job.id=\"99\"", "slurm.job.id.raw=\"99\"", "slurm.array.job_id=\"99\"",
                "slurm.array.task_id=\"0\"", "slurm.array.count=1", "slurm.sluid=\"from-launcher\"",
                "slurm.partition=\"debug\"", "slurm.nnodes=\"2\"", "slurm.restart_count=0",
                // uuid.uuid5(uuid.NAMESPACE_URL, "nemo.lens.job/nocluster/99")
                "nv.dl.job.uuid=\"6182dd4c-2425-518e-96d1-34c342b051b7\""}));
}

// NeMo Lens v0.2.0's keys are their variables' values as they are: never parsed, trimmed or
// defaulted, and left out when empty. The integer keys of later releases parse theirs.
TEST(ResourceTest, SlurmVersion020KeysAreTheVariablesAsTheyAre) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", " 77 ");
  env.set("SLURM_NNODES", "04");
  env.set("SLURM_NTASKS", " sixteen ");
  env.set("SLURM_NODELIST", "gpu-[001-003,007],login1");
  env.set("SLURM_JOB_NAME", "");
  env.set("SLURM_PARTITION", "");
  env.set("SLURM_JOB_PARTITION", "");
  env.set("SLURM_CLUSTER_NAME", "");
  env.set("SLURM_RESTART_COUNT", "twice");  // not an integer: left out, with no default either
  nl::Resource r = detect();
  EXPECT_EQ(get(r, "slurm.job.id"), S(" 77 "));
  EXPECT_EQ(get(r, "slurm.nnodes"), S("04"));
  EXPECT_EQ(get(r, "slurm.ntasks"), S(" sixteen "));
  EXPECT_EQ(get(r, "slurm.nodelist"), S("gpu-[001-003,007],login1"));
  for (const char* key : {"slurm.job.name", "slurm.partition", "slurm.job.partition",
                          "slurm.cluster.name", "slurm.restart_count"}) {
    EXPECT_EQ(get(r, key), std::nullopt) << key;
  }
  env.set("SLURM_NNODES", "");
  env.set("SLURM_JOB_NUM_NODES", "4");  // not read: SLURM sets both, to the same value
  EXPECT_EQ(get(detect(), "slurm.nnodes"), std::nullopt);
}

TEST(ResourceTest, SlurmArrayElement) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "12350");
  env.set("SLURM_ARRAY_JOB_ID", "12345");
  env.set("SLURM_ARRAY_TASK_ID", "7");
  env.set("SLURM_ARRAY_TASK_COUNT", "64");
  env.set("SLURM_CLUSTER_NAME", "cluster-a");
  nl::Resource r = detect();
  // The element's own id, as NeMo Lens v0.2.0 writes it; the array's are in slurm.array.*.
  EXPECT_EQ(get(r, "slurm.job.id"), S("12350"));
  EXPECT_EQ(get(r, "slurm.job.id.raw"), S("12350"));
  EXPECT_EQ(get(r, "slurm.array.job_id"), S("12345"));
  EXPECT_EQ(get(r, "slurm.array.task_id"), S("7"));
  EXPECT_EQ(get(r, "slurm.array.count"), I(64));
  // Seeded from the array's base id, so every element shares it.
  EXPECT_EQ(get(r, "nv.dl.job.uuid"), S("be34ba0f-41ed-5d53-84c1-e3f3dd25bfd7"));
}

TEST(ResourceTest, SlurmHeadNodeOnlyOutsideAJobStep) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "12345");
  env.set("SLURMD_NODENAME", "compute-01");
  EXPECT_EQ(get(detect(), "slurm.head_node.name"), S("compute-01"));
  env.set("SLURM_STEP_ID", "0");
  EXPECT_EQ(get(detect(), "slurm.head_node.name"), std::nullopt);
  env.unset("SLURM_STEP_ID");
  env.set("SLURM_STEPID", "0");
  EXPECT_EQ(get(detect(), "slurm.head_node.name"), std::nullopt);
}

// ---- 3. Kubernetes ----

TEST(ResourceTest, KubernetesDetectedByServiceHost) {
  ScopedEnv env;
  env.set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env.set("K8S_NAMESPACE", "ml");
  env.set("K8S_POD_NAME", "trainer-0");
  env.set("K8S_POD_UID", "uid-1");
  env.set("K8S_NODE_NAME", "node-a");
  env.set("K8S_CONTAINER_NAME", "pytorch");
  env.set("K8S_JOB_NAME", "train");
  env.set("HOSTNAME", "ignored-pod-name");  // K8S_POD_NAME wins
  EXPECT_EQ(rendered(detect(), {"k8s."}),
            (std::vector<std::string>{"k8s.namespace.name=\"ml\"", "k8s.pod.name=\"trainer-0\"",
                                      "k8s.pod.uid=\"uid-1\"", "k8s.node.name=\"node-a\"",
                                      "k8s.container.name=\"pytorch\"", "k8s.job.name=\"train\""}));
}

TEST(ResourceTest, KubernetesPodNameFallsBackToHostname) {
  ScopedEnv env;
  env.set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env.set("HOSTNAME", "trainer-0");
  EXPECT_EQ(rendered(detect(), {"k8s."}), (std::vector<std::string>{"k8s.pod.name=\"trainer-0\""}));
}

TEST(ResourceTest, KubernetesDetectedBySecretsPath) {
  ScopedEnv env;
  env.set("K8S_NAMESPACE", "ml");
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / ("lens-k8s-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  nl::Resource r =
      nl::detail::detect_resource(config(), 0, 1, {}, {dir.string(), kNoKubernetes.nvidia_smi});
  std::filesystem::remove_all(dir);
  EXPECT_EQ(rendered(r, {"k8s."}), (std::vector<std::string>{"k8s.namespace.name=\"ml\""}));
}

TEST(ResourceTest, NoKubernetesAttributesOutsideKubernetes) {
  ScopedEnv env;
  env.set("K8S_NAMESPACE", "ml");
  env.set("K8S_POD_NAME", "trainer-0");
  env.set("HOSTNAME", "trainer-0");
  EXPECT_TRUE(rendered(detect(), {"k8s."}).empty());
  env.set("KUBERNETES_SERVICE_HOST", "");  // empty is not a sign of Kubernetes
  EXPECT_TRUE(rendered(detect(), {"k8s."}).empty());
}

// ---- 4. host, process, GPUs ----

TEST(ResourceTest, HostAndProcess) {
  ScopedEnv env;
  nl::Resource r = detect();
  EXPECT_EQ(get(r, "host.name"), S(hostname()));
  EXPECT_EQ(get(r, "process.pid"), I(getpid()));
}

TEST(ResourceTest, GpuCountFromCudaVisibleDevices) {
  ScopedEnv env;
  EXPECT_EQ(get(detect(), "host.gpu.count"), std::nullopt);  // unset and no nvidia-smi
  env.set("CUDA_VISIBLE_DEVICES", "");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(0));
  env.set("CUDA_VISIBLE_DEVICES", "0,1,2");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(3));
  env.set("CUDA_VISIBLE_DEVICES",
          "GPU-8d5b2c4e-1f2a-4b3c-9d8e-7f6a5b4c3d2e,"
          "GPU-1a2b3c4d-5e6f-4a8b-9c0d-1e2f3a4b5c6d");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(2));
  // Counted as NeMo Lens v0.2.0 counts them: every entry, blank ones too; blank alone is none.
  env.set("CUDA_VISIBLE_DEVICES", " 0, 1 ,");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(3));
  env.set("CUDA_VISIBLE_DEVICES", " \t");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(0));
  env.set("CUDA_VISIBLE_DEVICES", "MIG-4f1c2d3e-5a6b-4c7d-8e9f-0a1b2c3d4e5f");
  EXPECT_EQ(get(detect(), "host.gpu.count"), I(1));
}

// The count in nvidia-smi's output (no process involved).
TEST(ResourceTest, NvidiaSmiOutputParsing) {
  using nl::detail::parse_nvidia_smi_gpu_count;
  EXPECT_EQ(parse_nvidia_smi_gpu_count("8\n8\n8\n8\n8\n8\n8\n8\n"), 8);  // one line per GPU
  EXPECT_EQ(parse_nvidia_smi_gpu_count("2\r\n2\r\n"), 2);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("\n 1 \n\n"), 1);  // blank lines skipped, values trimmed
  EXPECT_EQ(parse_nvidia_smi_gpu_count("1"), 1);          // no final newline
  EXPECT_EQ(parse_nvidia_smi_gpu_count(""), std::nullopt);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("\n \n"), std::nullopt);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("No devices were found\n"), std::nullopt);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("2\n[N/A]\n"), std::nullopt);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("-1\n"), std::nullopt);
  EXPECT_EQ(parse_nvidia_smi_gpu_count("count\n1\n"), std::nullopt);  // a header
}

// Fake nvidia-smi programs (shell scripts) in a fresh temporary directory: this machine has no
// GPU, and the failures (a hang, an error, garbage) cannot be produced with a real one.
class NvidiaSmiTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl =
        (std::filesystem::temp_directory_path() / "lens-nvidia-smi-test-XXXXXX").string();
    ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }

  void TearDown() override {
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    // Every child was reaped: none left, running or zombie.
    errno = 0;
    EXPECT_EQ(waitpid(-1, nullptr, WNOHANG), -1);
    EXPECT_EQ(errno, ECHILD);
  }

  // Writes an executable script `name` running `body` under /bin/sh; returns its path. "$DIR" in
  // the body is this test's directory.
  std::string fake(const std::string& body, const std::string& name = "nvidia-smi") {
    const std::filesystem::path path = dir_ / name;
    {
      std::ofstream out(path);
      out << "#!/bin/sh\nDIR='" << dir_.string() << "'\n" << body << "\n";
    }
    std::filesystem::permissions(path, std::filesystem::perms::owner_all);
    return path.string();
  }

  std::filesystem::path marker(const std::string& name) const { return dir_ / name; }

  // detect() with nvidia-smi at `program`.
  nl::Resource detect_with(const std::string& program) const {
    nl::detail::ResourcePaths paths = kNoKubernetes;
    paths.nvidia_smi = program;
    return nl::detail::detect_resource(config(), 0, 1, {}, paths);
  }

  std::optional<nl::AttributeValue> gpu_count(const std::string& program) const {
    return get(detect_with(program), "host.gpu.count");
  }

  std::filesystem::path dir_;
};

// Sets PATH for one test and restores it afterwards.
class ScopedPath {
 public:
  explicit ScopedPath(const std::string& value) {
    if (const char* p = std::getenv("PATH")) saved_ = p;
    setenv("PATH", value.c_str(), 1);
  }
  ~ScopedPath() {
    if (saved_) {
      setenv("PATH", saved_->c_str(), 1);
    } else {
      unsetenv("PATH");
    }
  }
  ScopedPath(const ScopedPath&) = delete;
  ScopedPath& operator=(const ScopedPath&) = delete;

 private:
  std::optional<std::string> saved_;
};

// True once `pid` has exited (gone, or a zombie waiting for its new parent), waiting up to 3 s.
bool process_ends(pid_t pid) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(3);
  do {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string content;
    if (!stat || !std::getline(stat, content)) return true;
    const auto paren = content.rfind(')');
    if (paren != std::string::npos && content.size() > paren + 2 && content[paren + 2] == 'Z') {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (std::chrono::steady_clock::now() < deadline);
  return false;
}

// The fake answers only NeMo Lens's query, and only with stdin and stderr on /dev/null.
constexpr const char* kCheckedInvocation =
    "[ \"$1\" = --query-gpu=count ] && [ \"$2\" = --format=csv,noheader ] && [ $# -eq 2 ] "
    "|| exit 11\n"
    "[ \"$(readlink /proc/$$/fd/0)\" = /dev/null ] || exit 12\n"
    "[ \"$(readlink /proc/$$/fd/2)\" = /dev/null ] || exit 13\n"
    "echo 'an error message on stderr' >&2\n";

TEST_F(NvidiaSmiTest, CountsTheGpusNvidiaSmiLists) {
  ScopedEnv env;
  const std::string smi = fake(std::string(kCheckedInvocation) + "printf '2\\n2\\n'");
  EXPECT_EQ(gpu_count(smi), I(2));
  EXPECT_EQ(nl::detail::nvidia_smi_gpu_count(smi), 2);
}

TEST_F(NvidiaSmiTest, FoundOnPath) {
  ScopedEnv env;
  fake(std::string(kCheckedInvocation) + "printf '4\\n4\\n4\\n4\\n'");
  const char* path = std::getenv("PATH");
  ScopedPath scoped(dir_.string() + ":" + (path != nullptr ? path : "/usr/bin:/bin"));
  EXPECT_EQ(gpu_count("nvidia-smi"), I(4));
  // The default paths name "nvidia-smi" too.
  EXPECT_EQ(get(nl::detail::detect_resource(config(), 0, 1, {}), "host.gpu.count"), I(4));
}

TEST_F(NvidiaSmiTest, NoLinesLeavesTheCountOut) {
  ScopedEnv env;
  EXPECT_EQ(gpu_count(fake("exit 0")), std::nullopt);
  EXPECT_EQ(gpu_count(fake("printf '\\n  \\n'", "blank")), std::nullopt);
}

TEST_F(NvidiaSmiTest, NonZeroExitLeavesTheCountOut) {
  ScopedEnv env;
  EXPECT_EQ(gpu_count(fake("printf '2\\n2\\n'\nexit 6")), std::nullopt);
  EXPECT_EQ(gpu_count(fake("kill -TERM $$", "killed")), std::nullopt);
}

TEST_F(NvidiaSmiTest, GarbageLeavesTheCountOut) {
  ScopedEnv env;
  EXPECT_EQ(gpu_count(fake("echo 'No devices were found'")), std::nullopt);
  EXPECT_EQ(gpu_count(fake("printf '2\\nNVIDIA-SMI has failed\\n'", "mixed")), std::nullopt);
}

TEST_F(NvidiaSmiTest, EndlessOutputIsCutShort) {
  ScopedEnv env;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(gpu_count(fake("exec yes 1")), std::nullopt);  // valid lines, but over 64 KiB
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(5));
}

TEST_F(NvidiaSmiTest, MissingProgramLeavesTheCountOut) {
  ScopedEnv env;
  EXPECT_EQ(gpu_count((dir_ / "no-such-nvidia-smi").string()), std::nullopt);
  ScopedPath scoped(dir_.string());  // nothing named nvidia-smi on PATH
  EXPECT_EQ(gpu_count("nvidia-smi"), std::nullopt);
  // Present but not executable.
  std::ofstream(dir_ / "nvidia-smi") << "#!/bin/sh\necho 1\n";
  EXPECT_EQ(gpu_count((dir_ / "nvidia-smi").string()), std::nullopt);
}

TEST_F(NvidiaSmiTest, HangingProgramIsKilledAtTheTimeout) {
  ScopedEnv env;
  // Prints a valid line, starts a child of its own holding stdout, then hangs.
  const std::string smi = fake(
      "touch \"$DIR/started\"\n"
      "echo 1\n"
      "sleep 30 &\n"
      "echo $! > \"$DIR/sleep.pid\"\n"
      "sleep 30");
  const auto start = std::chrono::steady_clock::now();
  const auto count = gpu_count(smi);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(count, std::nullopt);
  EXPECT_LT(elapsed, std::chrono::seconds(5));  // a bound, not a wait: the timeout is 2 s
  EXPECT_GE(elapsed, std::chrono::milliseconds(nl::detail::kNvidiaSmiTimeoutMs));
  EXPECT_TRUE(std::filesystem::exists(marker("started")));  // it did run, and was stopped
  // Its own child was killed with it (the whole process group).
  std::ifstream pid_file(marker("sleep.pid"));
  pid_t sleep_pid = 0;
  ASSERT_TRUE(pid_file >> sleep_pid);
  EXPECT_TRUE(process_ends(sleep_pid));
}

TEST_F(NvidiaSmiTest, ProgramThatClosesStdoutThenHangsIsKilledAtTheTimeout) {
  ScopedEnv env;
  // Its output is complete and valid, but it never exits.
  const std::string smi = fake("echo 1\nexec >/dev/null\nsleep 30");
  const auto start = std::chrono::steady_clock::now();
  const auto count = gpu_count(smi);
  const auto elapsed = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(count, std::nullopt);
  EXPECT_LT(elapsed, std::chrono::seconds(5));
  EXPECT_GE(elapsed, std::chrono::milliseconds(nl::detail::kNvidiaSmiTimeoutMs));
}

TEST_F(NvidiaSmiTest, CudaVisibleDevicesTakesPrecedence) {
  ScopedEnv env;
  const std::string smi = fake("touch \"$DIR/ran\"\nprintf '8\\n8\\n8\\n8\\n8\\n8\\n8\\n8\\n'");
  env.set("CUDA_VISIBLE_DEVICES", "0,1");
  EXPECT_EQ(gpu_count(smi), I(2));
  env.set("CUDA_VISIBLE_DEVICES", "");  // set but empty: 0 GPUs, nvidia-smi not asked either
  EXPECT_EQ(gpu_count(smi), I(0));
  EXPECT_FALSE(std::filesystem::exists(marker("ran")));  // the fake never ran
  env.unset("CUDA_VISIBLE_DEVICES");
  EXPECT_EQ(gpu_count(smi), I(8));
  EXPECT_TRUE(std::filesystem::exists(marker("ran")));
}

// ---- 5. OTEL_RESOURCE_ATTRIBUTES ----

TEST(ResourceTest, OtelResourceAttributesParsing) {
  ScopedEnv env;
  env.set("OTEL_RESOURCE_ATTRIBUTES",
          " team = ml , note=a%2Cb%3Dc%20d ,path=%2Fdata%2fx,eq=a=b,plus=1+1,empty=,"
          ",  ,key%2Cpart=v,utf8=%C3%A9,bad=%FF%C3");
  EXPECT_EQ(
      rendered(detect(), {"team", "note", "path", "eq", "plus", "empty", "key", "utf8", "bad"}),
      (std::vector<std::string>{
          "team=\"ml\"", "note=\"a,b=c d\"", "path=\"/data/x\"", "eq=\"a=b\"", "plus=\"1+1\"",
          "empty=\"\"",
          "key%2Cpart=\"v\"",                                          // keys are not decoded
          "utf8=\"\xC3\xA9\"", "bad=\"\xEF\xBF\xBD\xEF\xBF\xBD\""}));  // ill-formed UTF-8 -> U+FFFD
}

TEST(ResourceTest, OtelResourceAttributesOverrideDetectedKeys) {
  ScopedEnv env;
  env.set("ENVIRONMENT", "staging");
  env.set("CUDA_VISIBLE_DEVICES", "0,1");
  env.set("OTEL_RESOURCE_ATTRIBUTES",
          "deployment.environment=prod,host.name=node-x,dl.rank=9,host.gpu.count=4,site=us");
  nl::Resource r = detect();
  EXPECT_EQ(get(r, "deployment.environment"), S("prod"));
  EXPECT_EQ(get(r, "host.name"), S("node-x"));
  EXPECT_EQ(get(r, "dl.rank"), S("9"));  // string values
  EXPECT_EQ(get(r, "host.gpu.count"), S("4"));
  EXPECT_EQ(get(r, "site"), S("us"));
  EXPECT_EQ(r.attributes.back().key, "site");  // new keys come after the detected ones
}

// Each SLURM key keeps the type detection gives it: the integer keys of later NeMo Lens releases
// parse the value, v0.2.0's keys (slurm.nnodes, slurm.ntasks...) stay strings.
TEST(ResourceTest, OtelResourceAttributesSlurmKeysKeepTheirDetectedTypes) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "12345");
  env.set("SLURM_NNODES", "4");
  env.set("SLURM_NTASKS", "16");
  env.set("SLURM_NODELIST", "node[1-4]");
  env.set("SLURM_JOB_NAME", "fallback-name");
  env.set("SLURM_RESTART_COUNT", "1");
  env.set("OTEL_RESOURCE_ATTRIBUTES",
          "slurm.job.id=from-launch,slurm.nnodes=8,slurm.ntasks=invalid,slurm.job.name=,"
          "slurm.nodelist=,slurm.restart_count=3,slurm.array.count=x,"
          "nv.dl.run.uuid=run-from-launch");
  nl::Resource r = detect();
  EXPECT_EQ(get(r, "slurm.job.id"), S("from-launch"));
  EXPECT_EQ(get(r, "slurm.job.id.raw"), S("12345"));
  EXPECT_EQ(get(r, "slurm.nnodes"), S("8"));        // a string, as v0.2.0 detects it
  EXPECT_EQ(get(r, "slurm.ntasks"), S("invalid"));  // a string key takes any non-empty value
  EXPECT_EQ(get(r, "slurm.job.name"), S("fallback-name"));  // empty: the detected value stays
  EXPECT_EQ(get(r, "slurm.nodelist"), S("node[1-4]"));
  EXPECT_EQ(get(r, "slurm.restart_count"), I(3));  // an integer key: parsed
  EXPECT_EQ(get(r, "slurm.array.count"), I(1));    // not an integer: the detected value stays
  EXPECT_EQ(get(r, "nv.dl.run.uuid"), S("run-from-launch"));
}

TEST(ResourceTest, OtelResourceAttributesSlurmKeysWithoutSlurm) {
  ScopedEnv env;
  env.set("OTEL_RESOURCE_ATTRIBUTES",
          "slurm.job.id=from-launch,slurm.nnodes=8,slurm.restart_count=2,slurm.array.count=x");
  nl::Resource r = detect();
  EXPECT_EQ(get(r, "slurm.job.id"), S("from-launch"));
  EXPECT_EQ(get(r, "slurm.nnodes"), S("8"));
  EXPECT_EQ(get(r, "slurm.restart_count"), I(2));
  EXPECT_EQ(get(r, "slurm.array.count"), S("x"));  // nothing detected to keep: the string as given
}

TEST(ResourceTest, ServiceNameFromOtelResourceAttributesReplacesOnlyTheDefault) {
  ScopedEnv env;
  env.set("OTEL_RESOURCE_ATTRIBUTES", "service.name=from-attributes");
  EXPECT_EQ(get(detect(), "service.name"), S("from-attributes"));

  // OTEL_SERVICE_NAME takes precedence (the OpenTelemetry specification), even when it is "nemo".
  env.set("OTEL_SERVICE_NAME", "from-service-name");
  EXPECT_EQ(get(detect(nl::NemoLensConfig::from_env()), "service.name"), S("from-service-name"));
  env.set("OTEL_SERVICE_NAME", "nemo");
  EXPECT_EQ(get(detect(nl::NemoLensConfig::from_env()), "service.name"), S("nemo"));

  // A name the program put in the config wins too.
  env.unset("OTEL_SERVICE_NAME");
  nl::NemoLensConfig cfg = config();
  cfg.service_name = "from-config";
  EXPECT_EQ(get(detect(cfg), "service.name"), S("from-config"));
}

TEST(ResourceTest, MalformedOtelResourceAttributes) {
  ScopedEnv env;
  const std::string expected = "Expected comma-separated key=value pairs";

  std::string msg = error_for(env, "team=ml,oops");
  EXPECT_NE(msg.find("OTEL_RESOURCE_ATTRIBUTES"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'oops' has no '='"), std::string::npos) << msg;
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;

  msg = error_for(env, " =value");
  EXPECT_NE(msg.find("OTEL_RESOURCE_ATTRIBUTES"), std::string::npos) << msg;
  EXPECT_NE(msg.find("'=value' has an empty key"), std::string::npos) << msg;
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;

  msg = error_for(env, "note=100%zz");
  EXPECT_NE(msg.find("'note=100%zz' has an invalid percent-escape '%zz'"), std::string::npos)
      << msg;
  EXPECT_NE(msg.find(expected), std::string::npos) << msg;

  msg = error_for(env, "note=100%");
  EXPECT_NE(msg.find("invalid percent-escape '%'"), std::string::npos) << msg;
  msg = error_for(env, "note=%4");
  EXPECT_NE(msg.find("invalid percent-escape '%4'"), std::string::npos) << msg;

  EXPECT_EQ(error_for(env, ""), "");  // empty: nothing to add, not an error
  EXPECT_EQ(error_for(env, "a=1,"), "");
}

// ---- 6. the caller's attributes; one entry per key ----

TEST(ResourceTest, ExtraOverridesEverything) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "12345");
  env.set("OTEL_RESOURCE_ATTRIBUTES", "site=us,service.name=from-attributes");
  nl::Resource r = detect(config(), {{"service.name", S("mine")},
                                     {"host.name", S("my-host")},
                                     {"slurm.job.id", I(7)},
                                     {"site", S("eu")},
                                     {"flag", nl::AttributeValue(true)}});
  EXPECT_EQ(get(r, "service.name"), S("mine"));
  EXPECT_EQ(get(r, "host.name"), S("my-host"));
  EXPECT_EQ(get(r, "slurm.job.id"), I(7));  // the caller's type is kept
  EXPECT_EQ(get(r, "site"), S("eu"));
  EXPECT_EQ(get(r, "flag"), nl::AttributeValue(true));
}

TEST(ResourceTest, OneEntryPerKeyInFirstAppearanceOrder) {
  ScopedEnv env;
  env.set("SLURM_JOB_ID", "12345");
  env.set("KUBERNETES_SERVICE_HOST", "10.0.0.1");
  env.set("HOSTNAME", "pod-0");
  env.set("CUDA_VISIBLE_DEVICES", "0");
  env.set("OTEL_RESOURCE_ATTRIBUTES", "site=a,dl.rank=5,site=b,k8s.pod.name=pod-x");
  nl::Resource r = detect(config(), {{"site", S("c")}, {"dl.rank", I(6)}, {"site", S("d")}});
  std::vector<std::string> keys;
  for (const nl::KeyValue& kv : r.attributes) {
    EXPECT_EQ(std::count(keys.begin(), keys.end(), kv.key), 0) << kv.key << " appears twice";
    keys.push_back(kv.key);
  }
  EXPECT_EQ(keys[2], "dl.rank");  // replaced in place
  EXPECT_EQ(get(r, "dl.rank"), I(6));
  EXPECT_EQ(get(r, "site"), S("d"));
  EXPECT_EQ(get(r, "k8s.pod.name"), S("pod-x"));
  EXPECT_EQ(keys.back(), "site");
}

TEST(ResourceTest, DefaultPathsOverloadDetectsTheSameWithoutKubernetes) {
  ScopedEnv env;
  env.set("CUDA_VISIBLE_DEVICES", "0");
  std::error_code ec;
  if (std::filesystem::exists("/var/run/secrets/kubernetes.io", ec)) {
    GTEST_SKIP() << "running inside Kubernetes";
  }
  EXPECT_EQ(rendered(nl::detail::detect_resource(config(), 3, 8, {})), rendered(detect()));
}

}  // namespace
