// The control endpoint through its real Unix socket: where it lives and who may talk to it, the
// protocol, live group switches, the open-span dump on exporting and non-exporting ranks, the
// hang watchdog and fork.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <functional>
#include <latch>
#include <mutex>
#include <set>
#include <thread>

#include "control_client.hpp"
#include "nemo/lens/lens.hpp"
#include "quiet_fork.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

namespace fs = std::filesystem;
using lens_test::control_request;
using lens_test::control_sockets;
using lens_test::ScopedEnv;
using lens_test::TempDir;
using nlohmann::json;

// Tracing with the control endpoint in a private directory and an in-memory exporter.
class Control : public ::testing::Test {
 protected:
  void SetUp() override { env_.set("NEMO_LENS_CONTROL_DIR", control_dir().string()); }
  void TearDown() override { handle_.shutdown(); }

  fs::path control_dir() const { return tmp_.path() / "ctl"; }

  void start(const std::string& spec, int rank = 0, int world_size = 1,
             const std::string& strategy = "all_ranks") {
    NemoLensConfig c = lens_test::enabled_config(spec);
    c.span_group_catalog = std::make_shared<SpanGroupCatalog>(MegatronSpanGroup::catalog());
    c.export_strategy = strategy;
    c.run_id = "run-42";
    SetupOptions o;
    o.exporter = memory_;
    o.allow_reinit = true;
    handle_ = setup_telemetry(c, rank, world_size, o);
  }

  std::string socket() const {
    auto all = control_sockets(control_dir());
    return all.size() == 1 ? all[0] : std::string();
  }

  json request(const std::string& line) { return control_request(socket(), line); }

  std::multiset<std::string> exported_names() {
    EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    std::multiset<std::string> out;
    for (const auto& s : memory_->spans()) out.insert(s.name);
    return out;
  }

  ScopedEnv env_;
  TempDir tmp_;
  std::shared_ptr<InMemorySpanExporter> memory_ = std::make_shared<InMemorySpanExporter>();
  TelemetryHandle handle_;
};

// The groups `spec` resolves to in the Megatron catalog, as a JSON array.
json groups_of(std::string_view spec) {
  json out = json::array();
  for (const auto& g : MegatronSpanGroup::catalog().resolve(spec)) out.push_back(g);
  return out;
}

// The spans of the dump's thread `tid`, outermost first, as "group/name".
std::vector<std::string> stack_of(const json& dump, std::int64_t tid) {
  std::vector<std::string> out;
  for (const auto& t : dump["threads"]) {
    if (t["tid"].get<std::int64_t>() != tid) continue;
    for (const auto& s : t["spans"]) {
      out.push_back(s["group"].get<std::string>() + "/" + s["name"].get<std::string>());
    }
  }
  return out;
}

std::int64_t this_tid() { return static_cast<std::int64_t>(::gettid()); }

// A thread that opens a span and stays inside it until released.
class BlockedThread {
 public:
  explicit BlockedThread(std::string group, std::string name)
      : thread_([this, group = std::move(group), name = std::move(name)] {
          auto outer = managed_span("step", "train_step", {{"iteration", 7}});
          auto inner = managed_span(group, name, {{"bytes", 1024}});
          std::unique_lock lock(mu_);
          tid_ = this_tid();
          inside_ = true;
          cv_.notify_all();
          cv_.wait(lock, [&] { return released_; });
        }) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return inside_; });
  }
  ~BlockedThread() { release(); }
  void release() {
    {
      std::lock_guard lock(mu_);
      released_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
  std::int64_t tid() {
    std::lock_guard lock(mu_);
    return tid_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool inside_ = false;
  bool released_ = false;
  std::int64_t tid_ = 0;
  std::thread thread_;
};

TEST_F(Control, EndpointIsPrivateNamedByRunRankPidAndRemovedAtShutdown) {
  start("default", 2, 4);
  struct stat dir {};
  ASSERT_EQ(::stat(control_dir().c_str(), &dir), 0);
  EXPECT_EQ(dir.st_mode & 0777, 0700u);
  const std::string path = socket();
  ASSERT_FALSE(path.empty());
  EXPECT_EQ(fs::path(path).filename().string(), "run-42.2." + std::to_string(::getpid()) + ".sock");
  struct stat sock {};
  ASSERT_EQ(::stat(path.c_str(), &sock), 0);
  EXPECT_TRUE(S_ISSOCK(sock.st_mode));
  EXPECT_EQ(sock.st_mode & 0777, 0600u);
  handle_.shutdown();
  EXPECT_FALSE(fs::exists(path));
}

TEST_F(Control, InfoDescribesTheProcess) {
  start("default", 1, 2);
  const json r = request("lens-ctl/1 info");
  ASSERT_TRUE(r.is_object()) << "no reply";
  EXPECT_EQ(r["protocol"], 1);
  EXPECT_EQ(r["ok"], true);
  const json& p = r["process"];
  EXPECT_EQ(p["run_id"], "run-42");
  EXPECT_EQ(p["rank"], 1);
  EXPECT_EQ(p["world_size"], 2);
  EXPECT_EQ(p["pid"], ::getpid());
  EXPECT_EQ(p["service"], "nemo");
  EXPECT_EQ(p["exporting"], true);
  EXPECT_EQ(p["startup_spec"], "default");
  EXPECT_EQ(p["groups"], groups_of("default"));
  EXPECT_EQ(p["track_open"], "enabled");
  EXPECT_GE(p["uptime_s"].get<double>(), 0.0);
}

TEST_F(Control, ControlOffStartsNoEndpoint) {
  env_.set("NEMO_LENS_CONTROL", "off");
  start("default");
  EXPECT_TRUE(control_sockets(control_dir()).empty());
}

TEST_F(Control, DumpShowsEveryThreadsOpenSpansAndHowLongTheyHaveBeenOpen) {
  start("all");
  BlockedThread blocked("communication", "all_reduce");
  auto job = span_cm("pretrain");
  LENS_SPAN(step, "step", "train_step");
  const json first = request("lens-ctl/1 dump");
  ASSERT_EQ(first["ok"], true) << first.dump();
  EXPECT_EQ(stack_of(first, this_tid()),
            (std::vector<std::string>{"/pretrain", "step/train_step"}));
  // The dump made the ids of `step` (nothing had asked for them): the span keeps them.
  for (const auto& t : first["threads"]) {
    if (t["tid"] != this_tid()) continue;
    EXPECT_EQ(t["spans"][1]["span_id"], step.context().span_id.to_hex());
    EXPECT_EQ(t["spans"][1]["trace_id"], job.context().trace_id.to_hex());
  }
  EXPECT_EQ(stack_of(first, blocked.tid()),
            (std::vector<std::string>{"step/train_step", "communication/all_reduce"}));
  double first_open = -1;
  for (const auto& t : first["threads"]) {
    if (t["tid"] != blocked.tid()) continue;
    const json& s = t["spans"][1];
    EXPECT_EQ(s["exported"], true);
    EXPECT_EQ(s["attributes"]["bytes"], 1024);
    EXPECT_EQ(s["trace_id"].get<std::string>().size(), 32u);
    EXPECT_EQ(t["spans"][0]["attributes"]["iteration"], 7);
    first_open = s["open_s"].get<double>();
  }
  ASSERT_GE(first_open, 0.0);
  // Another dump, after something that takes time for sure: the blocked span's age grew.
  const json second = [&] {
    json r;
    do {
      r = request("lens-ctl/1 dump");
    } while (r["now_unix_nano"] == first["now_unix_nano"]);
    return r;
  }();
  for (const auto& t : second["threads"]) {
    if (t["tid"] == blocked.tid()) {
      EXPECT_GT(t["spans"][1]["open_s"].get<double>(), first_open);
    }
  }
  EXPECT_EQ(second["stats"]["spans_dropped_queue_full"], 0);
  // GPU time of spans is off: none of its counters (gpu_time_test has them on).
  for (const auto& [key, value] : second["stats"].items()) {
    EXPECT_NE(key.rfind("gpu_", 0), 0u) << key;
  }
  blocked.release();
  step.end();
  job.end();
  const json after = request("lens-ctl/1 dump");
  EXPECT_TRUE(after["threads"].empty()) << after["threads"].dump();
}

TEST_F(Control, SwitchesGroupsLiveAndResetsToTheStartupSpec) {
  start("default");
  auto job = span_cm("job_root");
  auto emit = [] {
    LENS_SPAN(a, "checkpoint", "save");
    LENS_SPAN(b, "layer", "layer_forward");
  };
  emit();
  EXPECT_EQ(exported_names().count("layer_forward"), 0u);

  const json on = request("lens-ctl/1 groups all");
  ASSERT_EQ(on["ok"], true) << on.dump();
  EXPECT_EQ(on["previous"], groups_of("default"));
  EXPECT_TRUE(on["groups"].get<std::set<std::string>>().contains("layer"));
  EXPECT_EQ(on["groups"], on["process"]["groups"]);
  EXPECT_TRUE(is_span_group_enabled("layer"));
  emit();
  EXPECT_EQ(exported_names().count("layer_forward"), 1u);

  // An invalid spec is refused with set-up's message and changes nothing.
  std::string expected;
  try {
    MegatronSpanGroup::catalog().resolve("per_stepp");
  } catch (const SpanGroupError& e) {
    expected = e.what();
  }
  ASSERT_FALSE(expected.empty());
  const json bad = request("lens-ctl/1 groups per_stepp");
  EXPECT_EQ(bad["ok"], false);
  EXPECT_EQ(bad["error"], expected);
  EXPECT_TRUE(is_span_group_enabled("layer"));

  const json reset = request("lens-ctl/1 groups-reset");
  ASSERT_EQ(reset["ok"], true);
  EXPECT_EQ(reset["groups"], groups_of("default"));
  emit();
  EXPECT_EQ(exported_names().count("layer_forward"), 1u);
  EXPECT_EQ(exported_names().count("save"), 3u);

  // Both switches are recorded on the open root span.
  job.end();
  int changes = 0;
  ASSERT_TRUE(handle_.force_flush());
  for (const auto& s : memory_->spans()) {
    if (s.name != "job_root") continue;
    for (const auto& e : s.events) changes += e.name == "lens.span_groups_changed";
  }
  EXPECT_EQ(changes, 2);
}

TEST_F(Control, ANonExportingRankCostsTheGateUnlessTrackOpenIsAll) {
  start("default", 0, 2, "single_rank");  // rank 1 exports, this rank does not
  EXPECT_FALSE(handle_.is_exporting());
  {
    LENS_SPAN(save, "checkpoint", "save");
    EXPECT_FALSE(static_cast<bool>(save));
    const json r = request("lens-ctl/1 dump");
    ASSERT_EQ(r["ok"], true);
    EXPECT_EQ(r["process"]["exporting"], false);
    EXPECT_TRUE(r["threads"].empty()) << "enabled: only recorded spans are tracked";
  }
  env_.set("NEMO_LENS_TRACK_OPEN", "all");
  start("default", 0, 2, "single_rank");
  LENS_SPAN(save, "checkpoint", "save");
  LENS_SPAN(layer, "layer", "layer_forward");
  const json r = request("lens-ctl/1 dump");
  EXPECT_EQ(stack_of(r, this_tid()),
            (std::vector<std::string>{"checkpoint/save", "layer/layer_forward"}));
  for (const auto& t : r["threads"]) {
    for (const auto& sp : t["spans"]) {
      EXPECT_EQ(sp["exported"], false);
      EXPECT_FALSE(sp.contains("attributes"));
    }
  }
  EXPECT_FALSE(is_span_group_enabled("checkpoint"));  // the gate is what it was: off here
  EXPECT_FALSE(static_cast<bool>(save));
}

// A dump copies a thread's records under its span lock. A thread that holds that lock the whole
// time (here: copying a large array attribute, again and again) is not waited for: the dump shows
// its light entries, read without the lock, and says the owner was busy.
TEST_F(Control, ADumpDoesNotWaitForAThreadThatHoldsItsSpanLock) {
  env_.set("NEMO_LENS_TRACK_OPEN", "all");
  start("default");  // `layer` is off: a light entry
  std::atomic<bool> stop{false};
  std::atomic<std::int64_t> owner_tid{0};
  std::latch ready(2);
  std::thread owner([&] {
    LENS_SPAN(light, "layer", "layer_forward");
    auto busy = span_cm("busy");
    const std::vector<std::string> big(200000, std::string(32, 'x'));
    owner_tid = this_tid();
    ready.arrive_and_wait();
    while (!stop.load()) busy.set_attribute("big", big);  // copied under the span lock
  });
  ready.arrive_and_wait();
  bool seen_busy = false;
  for (int i = 0; i < 200 && !seen_busy; ++i) {
    const json r = request("lens-ctl/1 dump");
    ASSERT_EQ(r["ok"], true);
    for (const auto& t : r["threads"]) {
      if (t["tid"] != owner_tid.load() || !t.value("owner_busy", false)) continue;
      seen_busy = true;
      ASSERT_EQ(t["spans"].size(), 1u) << t.dump();
      EXPECT_EQ(t["spans"][0]["name"], "layer_forward");
      EXPECT_EQ(t["spans"][0]["exported"], false);
    }
  }
  stop = true;
  owner.join();
  EXPECT_TRUE(seen_busy) << "no dump found the owner's lock busy";
}

TEST_F(Control, TrackOpenAllTracksEveryGroupAndOffTracksNone) {
  // Under the default tracking the pair starts nothing, and the thread remembers its group off;
  // TRACK_OPEN=all must still see it.
  auto microbatch = [] { return managed_span("microbatch", "mb", {{"id", 1}}); };
  start("default");
  EXPECT_FALSE(microbatch());
  env_.set("NEMO_LENS_TRACK_OPEN", "all");
  start("default");
  {
    LENS_SPAN(layer, "layer", "layer_forward");
    auto m = microbatch();
    const json r = request("lens-ctl/1 dump");
    EXPECT_EQ(r["process"]["track_open"], "all");
    EXPECT_EQ(stack_of(r, this_tid()),
              (std::vector<std::string>{"layer/layer_forward", "microbatch/mb"}));
  }
  EXPECT_EQ(exported_names().count("layer_forward"), 0u);
  env_.set("NEMO_LENS_TRACK_OPEN", "off");
  start("default");
  LENS_SPAN(save, "checkpoint", "save");
  const json r = request("lens-ctl/1 dump");
  EXPECT_TRUE(r["threads"].empty());
}

// Opens 70 nested spans, ends the third and then the sixth (on another thread), and checks what
// `dump` (a dump request) lists: `listed` spans at first, `listed_after` after those two ended,
// `untracked` throughout.
void check_deep_nesting(const std::function<json()>& dump, std::size_t listed,
                        std::size_t listed_after, int untracked) {
  std::vector<Span> spans;
  for (int i = 0; i < 70; ++i) spans.push_back(managed_span("layer", "l" + std::to_string(i)));
  json r = dump();
  ASSERT_EQ(r["threads"].size(), 1u);
  EXPECT_EQ(r["threads"][0]["spans"].size(), listed);
  EXPECT_EQ(r["threads"][0]["untracked"], untracked);
  spans[2].end();
  std::thread([s = std::move(spans[5])]() mutable { s.end(); }).join();
  r = dump();
  EXPECT_EQ(r["threads"][0]["untracked"], untracked);
  const auto stack = stack_of(r, this_tid());
  ASSERT_EQ(stack.size(), listed_after);
  EXPECT_EQ(stack[2], "layer/l3");
  EXPECT_EQ(stack[4], "layer/l6");
  EXPECT_EQ(stack.back(), "layer/l" + std::to_string(listed == 70 ? 69 : 63));
  spans.clear();
  r = dump();
  EXPECT_TRUE(r["threads"].empty()) << r.dump();
}

// Recorded spans are the records on the thread's span stack: every one is listed, however deep.
TEST_F(Control, RecordedSpansAreListedHoweverDeepAndEndInAnyOrder) {
  start("all");
  check_deep_nesting([&] { return request("lens-ctl/1 dump"); }, 70, 68, 0);
}

// Spans tracked without a record (light entries) beyond the registry's 64 are counted; they stay
// untracked when shallower ones end (they never move in).
TEST_F(Control, LightEntriesDeeperThanTheRegistryAreCountedAndEndInAnyOrder) {
  env_.set("NEMO_LENS_TRACK_OPEN", "all");
  start("default");  // `layer` is off: its spans get light entries
  check_deep_nesting([&] { return request("lens-ctl/1 dump"); }, 64, 62, 6);
}

TEST_F(Control, MalformedOversizedAndSlowRequestsGetErrorsAndTheProgramRunsOn) {
  start("default");
  const std::string path = socket();
  for (const char* line : {"hello", "lens-ctl/2 info", "lens-ctl/1 frobnicate", "lens-ctl/1 groups",
                           "lens-ctl/1 info extra"}) {
    const json r = control_request(path, line);
    EXPECT_EQ(r["ok"], false) << line;
    EXPECT_FALSE(r["error"].get<std::string>().empty()) << line;
  }
  const json big = json::parse(lens_test::control_exchange(path, std::string(10000, 'x')));
  EXPECT_EQ(big["error"], "request longer than 4096 bytes");
  // Connect and say nothing: after the request time-out, an error and a closed connection.
  const json slow = json::parse(lens_test::control_exchange(path, ""));
  EXPECT_EQ(slow["error"], "no complete request line within 2 s");
  // Binary garbage with a newline.
  const json bin = json::parse(lens_test::control_exchange(path, std::string("\0\xff\n", 3)));
  EXPECT_EQ(bin["ok"], false);
  { LENS_SPAN(s, "checkpoint", "still_works"); }
  EXPECT_EQ(exported_names().count("still_works"), 1u);
  EXPECT_EQ(request("lens-ctl/1 info")["ok"], true);
}

TEST_F(Control, AnotherUserIsRefused) {
  if (::geteuid() != 0 || ::access("/usr/bin/setpriv", X_OK) != 0 ||
      ::access("/usr/bin/python3", X_OK) != 0) {
    GTEST_SKIP() << "needs root, setpriv and python3 to connect as a second uid";
  }
  start("default");
  const std::string path = socket();
  // Open the directory and the socket to everyone, as a careless administrator might: the
  // credential check still refuses the other user.
  fs::permissions(tmp_.path(), fs::perms::all);
  fs::permissions(control_dir(), fs::perms::all);
  fs::permissions(path, fs::perms::all);
  const std::string out_path = (tmp_.path() / "reply").string();
  const std::string script = (tmp_.path() / "client.py").string();
  std::ofstream(script) << "import socket, sys\n"
                           "s = socket.socket(socket.AF_UNIX)\n"
                           "s.settimeout(10)\n"
                           "s.connect(sys.argv[1])\n"
                           "try:\n"
                           "    s.sendall(b'lens-ctl/1 groups all\\n')\n"
                           "except OSError:\n"
                           "    pass  # the endpoint may answer and close before reading\n"
                           "sys.stdout.write(s.makefile().read())\n";
  fs::permissions(script, fs::perms::all);
  const std::string cmd = "setpriv --reuid=65534 --regid=65534 --clear-groups /usr/bin/python3 " +
                          script + " " + path + " > " + out_path;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(out_path);
  const json r = json::parse(in);
  EXPECT_EQ(r["ok"], false);
  EXPECT_EQ(r["error"], "permission denied: this endpoint answers only uid 0, not uid 65534");
  EXPECT_FALSE(r.contains("process")) << "a stranger learns nothing about the process";
  EXPECT_FALSE(is_span_group_enabled("layer"));
}

TEST_F(Control, ADirectoryOthersCanEnterGetsNoEndpointButTracingWorks) {
  fs::create_directory(control_dir());
  fs::permissions(control_dir(), fs::perms::owner_all | fs::perms::group_read |
                                     fs::perms::group_exec | fs::perms::others_read |
                                     fs::perms::others_exec);
  testing::internal::CaptureStderr();
  start("default");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("no control endpoint"), std::string::npos) << err;
  EXPECT_NE(err.find("(mode 0755); it must be 0700: chmod 700 " + control_dir().string() +
                     ", or set NEMO_LENS_CONTROL_DIR to a directory of your own (lens ctl reads "
                     "the same variable)"),
            std::string::npos)
      << err;
  EXPECT_TRUE(control_sockets(control_dir()).empty());
  { LENS_SPAN(s, "checkpoint", "save"); }
  EXPECT_EQ(exported_names().count("save"), 1u);
}

// Another local user made the directory first (as anyone can under /tmp when XDG_RUNTIME_DIR is
// unset): the job says why it has no endpoint and how to get one, and traces as before.
TEST_F(Control, ADirectoryOfAnotherUserGetsNoEndpointAndSaysHowToFixIt) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the directory to a second uid";
  fs::create_directory(control_dir());
  ASSERT_EQ(::chown(control_dir().c_str(), 65534, 65534), 0);
  env_.set("RL_CONTROL_DIR", control_dir().string());  // named in the message, as it is read
  env_.unset("NEMO_LENS_CONTROL_DIR");
  NemoLensConfig c = lens_test::enabled_config("default");
  c.env_prefix = "RL";
  SetupOptions o;
  o.exporter = memory_;
  o.allow_reinit = true;
  testing::internal::CaptureStderr();
  handle_ = setup_telemetry(c, 0, 1, o);
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(err, "lens: rank 0: no control endpoint (lens ctl will not see this process): " +
                     control_dir().string() +
                     " belongs to uid 65534, not to this user (uid 0), so it may not be trusted; "
                     "have it removed, or set RL_CONTROL_DIR to a directory of your own (and give "
                     "lens ctl the same with NEMO_LENS_CONTROL_DIR or --dir)\n");
  EXPECT_TRUE(control_sockets(control_dir()).empty());
  { LENS_SPAN(s, "checkpoint", "save"); }
  EXPECT_EQ(exported_names().count("save"), 1u);
}

TEST_F(Control, BadControlVariablesAreConfigErrorsNamingThem) {
  const std::pair<const char*, const char*> cases[] = {
      {"NEMO_LENS_TRACK_OPEN", "sometimes"},
      {"NEMO_LENS_HANG_TIMEOUT", "-1"},
      {"NEMO_LENS_HANG_TIMEOUT", "10m"},
      {"NEMO_LENS_CONTROL", "maybe"},
  };
  for (const auto& [var, value] : cases) {
    ScopedEnv inner;
    inner.set(var, value);
    try {
      start("default");
      ADD_FAILURE() << var << "=" << value << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(std::string(var) + ": '" + value + "'"),
                std::string::npos)
          << e.what();
    }
  }
  ScopedEnv inner;
  inner.set("NEMO_LENS_HANG_TIMEOUT", "5");
  inner.set("NEMO_LENS_TRACK_OPEN", "off");
  EXPECT_THROW(start("default"), ConfigError);
}

// Reads fd 2 through a pipe until `needle` has appeared `count` times (or 20 s pass).
class StderrCapture {
 public:
  StderrCapture() {
    if (::pipe2(fds_, O_CLOEXEC) != 0) return;
    saved_ = ::dup(2);
    ::dup2(fds_[1], 2);
  }
  ~StderrCapture() {
    ::dup2(saved_, 2);
    ::close(saved_);
    ::close(fds_[0]);
    ::close(fds_[1]);
  }
  bool wait_for(const std::string& needle, int count) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (occurrences(needle) < count) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      pollfd p{fds_[0], POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return false;
      char buf[4096];
      const ssize_t n = ::read(fds_[0], buf, sizeof buf);
      if (n > 0) text_.append(buf, static_cast<std::size_t>(n));
    }
    return true;
  }
  int occurrences(const std::string& needle) const {
    int n = 0;
    for (auto i = text_.find(needle); i != std::string::npos; i = text_.find(needle, i + 1)) ++n;
    return n;
  }
  const std::string& text() const { return text_; }

 private:
  int fds_[2] = {-1, -1};
  int saved_ = -1;
  std::string text_;
};

TEST_F(Control, HangWatchdogReportsEachStuckSpanOnce) {
  env_.set("NEMO_LENS_HANG_TIMEOUT", "0.2");
  StderrCapture err;
  auto logs = std::make_shared<InMemoryLogExporter>();
  {
    NemoLensConfig c = lens_test::enabled_config("all");
    c.span_group_catalog = std::make_shared<SpanGroupCatalog>(MegatronSpanGroup::catalog());
    c.logs_enabled = true;
    SetupOptions o;
    o.exporter = memory_;
    o.log_exporter = logs;
    o.allow_reinit = true;
    handle_ = setup_telemetry(c, 0, 1, o);
  }
  auto first = std::make_unique<BlockedThread>("communication", "all_reduce");
  ASSERT_TRUE(err.wait_for("'communication/all_reduce' open for", 1)) << err.text();
  // A second stuck span later: the watchdog has run many more checks by the time it reports
  // it, and none of them reported the first span again.
  auto second = std::make_unique<BlockedThread>("checkpoint", "save");
  ASSERT_TRUE(err.wait_for("'checkpoint/save' open for", 1)) << err.text();
  EXPECT_EQ(err.occurrences("'communication/all_reduce' open for"), 1) << err.text();
  EXPECT_NE(err.text().find("(timeout 0.2s)"), std::string::npos);
  EXPECT_NE(err.text().find("step/train_step"), std::string::npos) << "the whole dump";
  first.reset();
  second.reset();
  std::size_t hang_events = 0;
  ASSERT_TRUE(handle_.force_flush());
  for (const auto& s : memory_->spans()) {
    for (const auto& e : s.events) {
      if (e.name != "lens.hang") continue;
      ++hang_events;
      EXPECT_TRUE(s.name == "all_reduce" || s.name == "save") << s.name;
    }
  }
  EXPECT_EQ(hang_events, 2u);
  // The same reports as log records, with the stuck spans' ids.
  std::multiset<std::string> logged;
  for (const auto& r : logs->records()) {
    EXPECT_EQ(r.severity_text, "WARN");
    EXPECT_TRUE(r.span_id.is_valid());
    for (const auto& kv : r.attributes) {
      if (kv.key == "lens.hang.span") logged.insert(std::get<std::string>(kv.value));
    }
  }
  EXPECT_EQ(logged, (std::multiset<std::string>{"communication/all_reduce", "checkpoint/save"}));
}

// The flight recorder (docs/flight-recorder.md): a stuck step's recorded spans leave with the
// watchdog's report, those that ended and the one still open (as a truncated copy).
TEST_F(Control, TheHangWatchdogCapturesWhatTheStuckStepRecorded) {
  env_.set("NEMO_LENS_HANG_TIMEOUT", "0.2");
  env_.set("NEMO_LENS_RECORD_GROUPS", "all");
  StderrCapture err;
  start("step");
  std::mutex mu;
  std::condition_variable cv;
  bool inside = false, released = false;
  std::thread stuck([&] {
    auto step = managed_span("step", "train_step", {{"iteration", 7}});
    for (int i = 0; i < 3; ++i) auto mb = managed_span("microbatch", "microbatch");
    auto layer = managed_span("layer", "stuck_layer");
    std::unique_lock lock(mu);
    inside = true;
    cv.notify_all();
    cv.wait(lock, [&] { return released; });
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return inside; });
  }
  ASSERT_TRUE(err.wait_for("the flight recorder captured 4 spans since the stuck step began", 1))
      << err.text();
  {
    std::lock_guard lock(mu);
    released = true;
  }
  cv.notify_all();
  stuck.join();
  ASSERT_TRUE(handle_.force_flush());
  std::multiset<std::string> captured;
  for (const auto& s : memory_->spans()) {
    for (const auto& kv : s.attributes) {
      if (kv.key == semconv::kLensCaptureReason) {
        EXPECT_EQ(std::get<std::string>(kv.value), "hang");
        captured.insert(s.name);
      }
    }
  }
  EXPECT_EQ(captured,
            (std::multiset<std::string>{"microbatch", "microbatch", "microbatch", "stuck_layer"}));
  EXPECT_EQ(handle_.stats().record_spans_held, 0u) << "the open layer's own end went nowhere";
}

// `capture [reason]` over the control socket: the rings' spans leave, marked; a process whose
// recorder is off refuses, saying how to turn it on.
TEST_F(Control, ACaptureRequestExportsTheRecordedSpans) {
  env_.set("NEMO_LENS_RECORD_GROUPS", "all");
  start("step");
  for (int i = 0; i < 4; ++i) auto mb = managed_span("microbatch", "microbatch");
  json reply = request("lens-ctl/1 capture loss spike");
  EXPECT_EQ(reply["ok"], true) << reply;
  EXPECT_EQ(reply["captured"], 4);
  EXPECT_EQ(reply["reason"], "loss spike");
  EXPECT_EQ(exported_names(),
            (std::multiset<std::string>{"microbatch", "microbatch", "microbatch", "microbatch"}));
  reply = request("lens-ctl/1 dump");
  EXPECT_EQ(reply["stats"]["spans_recorded"], 4) << reply["stats"];
  EXPECT_EQ(reply["stats"]["spans_captured"], 4);
  EXPECT_EQ(reply["stats"]["record_captures"], 1);

  env_.set("NEMO_LENS_RECORD_GROUPS", "");
  start("step");
  reply = request("lens-ctl/1 capture");
  EXPECT_EQ(reply["ok"], false);
  EXPECT_NE(reply["error"].get<std::string>().find("RECORD_GROUPS"), std::string::npos) << reply;
  EXPECT_FALSE(request("lens-ctl/1 dump")["stats"].contains("spans_recorded"));
}

TEST_F(Control, AForkedChildNeverAnswersForItsParent) {
  start("default");
  const std::string path = socket();
  int to_child[2], to_parent[2];
  ASSERT_EQ(::pipe(to_child), 0);
  ASSERT_EQ(::pipe(to_parent), 0);
  ASSERT_EQ(lens_test::wait_for_other_threads_to_sleep(), "");  // the endpoint may be starting
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    char c = 0;
    (void)!::write(to_parent[1], "r", 1);
    (void)!::read(to_child[0], &c, 1);
    handle_.shutdown();  // must leave the parent's socket alone
    _exit(0);
  }
  char c = 0;
  ASSERT_EQ(::read(to_parent[0], &c, 1), 1);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(request("lens-ctl/1 info")["process"]["pid"], ::getpid());
  ASSERT_EQ(::write(to_child[1], "x", 1), 1);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_EQ(request("lens-ctl/1 info")["process"]["pid"], ::getpid());
  for (int fd : {to_child[0], to_child[1], to_parent[0], to_parent[1]}) ::close(fd);
}

}  // namespace
}  // namespace nemo::lens
