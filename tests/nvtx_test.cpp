// NVTX ranges of lens spans, observed through a real NVTX tool: NVTX loads tests/nvtx's test tool
// through NVTX_INJECTION64_PATH (the mechanism Nsight Systems uses) and the tool logs every NVTX
// call to LENS_NVTX_TOOL_LOG. Each test reads the calls made since it started.
#include <gtest/gtest.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "control_client.hpp"
#include "nemo/lens/lens.hpp"
#include "nvtx/settings.hpp"
#include "scoped_env.hpp"
#include "tracing_fixture.hpp"

namespace lens = nemo::lens;
using lens::MegatronSpanGroup;

namespace {

long this_tid() { return static_cast<long>(::syscall(SYS_gettid)); }

/// Attaches the test tool as Nsight Systems attaches its own: NVTX_INJECTION64_PATH, set before the
/// first NVTX call of the process. The tool's log is one file per test process (ctest runs tests in
/// parallel), removed at the end.
class ToolLogFile : public ::testing::Environment {
 public:
  void SetUp() override {
    setenv("NVTX_INJECTION64_PATH", LENS_NVTX_TOOL, 1);
    path_ = "/tmp/lens-nvtx-test-" + std::to_string(::getpid()) + ".log";
    std::remove(path_.c_str());
    setenv("LENS_NVTX_TOOL_LOG", path_.c_str(), 1);
  }
  void TearDown() override { std::remove(path_.c_str()); }

 private:
  std::string path_;
};
[[maybe_unused]] ::testing::Environment* const kToolLogFile =
    ::testing::AddGlobalTestEnvironment(new ToolLogFile);

/// One logged NVTX call (see nvtx_test_tool.cpp for the format).
struct Call {
  std::string op;
  long tid = 0;
  std::vector<std::string> args;  // the fields after op (and tid, for push/pop/start/end)
};

/// The tool's log, read from where it ended when the object was made.
class ToolLog {
 public:
  ToolLog() : path_(std::getenv("LENS_NVTX_TOOL_LOG")) { offset_ = size(); }
  /// The whole log, from the process's first NVTX call.
  static ToolLog whole() {
    ToolLog log;
    log.offset_ = 0;
    return log;
  }

  std::vector<Call> calls() const {
    std::vector<Call> out;
    std::ifstream in(path_);
    in.seekg(static_cast<std::streamoff>(offset_));
    std::string line;
    while (std::getline(in, line)) {
      std::istringstream words(line);
      Call c;
      words >> c.op;
      if (c.op == "push" || c.op == "pop" || c.op == "start" || c.op == "end") words >> c.tid;
      std::string w;
      while (words >> w) c.args.push_back(w);
      // A registered string's or a category's text may hold spaces: keep it whole.
      if ((c.op == "string" || c.op == "category") && c.args.size() > 3) {
        for (std::size_t i = 3; i < c.args.size(); ++i) c.args[2] += " " + c.args[i];
        c.args.resize(3);
      }
      out.push_back(std::move(c));
    }
    return out;
  }

 private:
  std::size_t size() const {
    std::ifstream in(path_, std::ios::ate);
    return in ? static_cast<std::size_t>(in.tellg()) : 0;
  }
  std::string path_;
  std::size_t offset_ = 0;
};

/// A range as the whole log describes it: what a push named, in which category and colour.
struct Range {
  long tid = 0;
  std::string name;
  std::string category;  // the category's name, "" for none
  std::string colour;
  int depth = 0;  // pushes open on that thread before this one
};

/// Everything the log says about the "nemo.lens" domain since `log` was made, with the names of
/// strings and categories registered at any time in this process (they are registered once).
struct Timeline {
  std::vector<Range> ranges;          // in push order
  std::map<long, int> open;           // per thread: pushes not popped
  std::map<long, int> negative;       // per thread: pops with nothing open (corruption)
  std::vector<std::string> sequence;  // "push <name>" / "pop" in log order, every thread
  int other_calls = 0;                // pushes/pops/start/end outside the lens domain
};

Timeline timeline(const ToolLog& since) {
  // Names: from the whole log (strings and categories are registered once per process).
  std::map<std::string, std::string> domain_ids, strings, categories;
  for (const Call& c : ToolLog::whole().calls()) {
    if (c.op == "domain" && c.args.size() == 2) domain_ids[c.args[0]] = c.args[1];  // id -> name
    if (c.op == "string" && c.args.size() == 3) strings[c.args[0] + "/" + c.args[1]] = c.args[2];
    if (c.op == "category" && c.args.size() == 3) {
      categories[c.args[0] + "/" + c.args[1]] = c.args[2];
    }
  }
  std::string lens_domain;
  for (const auto& [id, name] : domain_ids) {
    if (name == "nemo.lens") lens_domain = id;
  }
  Timeline t;
  for (const Call& c : since.calls()) {
    const bool ranged = c.op == "push" || c.op == "pop" || c.op == "start" || c.op == "end";
    if (!ranged) continue;
    if (c.args.empty() || c.args[0] != lens_domain || c.op == "start" || c.op == "end") {
      ++t.other_calls;
      continue;
    }
    if (c.op == "push") {
      Range r;
      r.tid = c.tid;
      r.depth = t.open[c.tid]++;
      r.colour = c.args[2];
      const std::string& msg = c.args[3];
      r.name = msg.rfind('s', 0) == 0 ? strings[lens_domain + "/" + msg.substr(1)] : msg;
      r.category = c.args[1] == "0" ? "" : categories[lens_domain + "/" + c.args[1]];
      t.sequence.push_back("push " + r.name);
      t.ranges.push_back(r);
    } else {
      if (t.open[c.tid] == 0) {
        ++t.negative[c.tid];
      } else {
        --t.open[c.tid];
      }
      t.sequence.push_back("pop");
    }
  }
  return t;
}

std::vector<std::string> names(const Timeline& t) {
  std::vector<std::string> out;
  for (const Range& r : t.ranges) out.push_back(r.name);
  return out;
}

bool balanced(const Timeline& t) {
  for (const auto& [tid, n] : t.open) {
    if (n != 0) return false;
  }
  return t.negative.empty();
}

class Nvtx : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(lens::detail::nvtx_built()) << "built without NVTX"; }
  void TearDown() override { handle_.shutdown(); }

  /// Sets up `spec` of the Megatron catalog; `rank` of two ranks where rank 0 alone exports.
  void start(const std::string& spec, int rank = 0) {
    lens::NemoLensConfig c = lens_test::enabled_config(spec);
    c.export_strategy = "single_rank";
    c.export_rank = 0;
    c = with_env(c);
    lens::SetupOptions options;
    options.exporter = memory_;
    options.allow_reinit = true;
    handle_ = lens::setup_telemetry(c, rank, 2, options);
  }

  // Carries this test's NEMO_LENS_* environment into a hand-made configuration.
  static lens::NemoLensConfig with_env(lens::NemoLensConfig c) {
    lens::NemoLensConfig from = lens::NemoLensConfig::from_env<MegatronSpanGroup>();
    from.enabled = c.enabled;
    from.export_strategy = c.export_strategy;
    from.export_rank = c.export_rank;
    from.span_groups = c.span_groups;
    from.exporter = c.exporter;
    return from;
  }

  std::vector<lens::SpanData> exported() {
    EXPECT_TRUE(handle_.force_flush(std::chrono::seconds(10)));
    return memory_->spans();
  }

  lens_test::ScopedEnv env_;
  std::shared_ptr<lens::InMemorySpanExporter> memory_ =
      std::make_shared<lens::InMemorySpanExporter>();
  lens::TelemetryHandle handle_;
};

void step_with_layers(int layers) {
  LENS_SPAN(step, MegatronSpanGroup::STEP, "train_step", {"iteration", 1});
  for (int i = 0; i < layers; ++i) {
    LENS_SPAN(layer, MegatronSpanGroup::LAYER, "layer forward", {"layer", i});
  }
  LENS_SPAN(micro, MegatronSpanGroup::MICROBATCH, "microbatch");
}

TEST_F(Nvtx, RangesAreTheEnabledSpansWithTheirNamesCategoriesNestingAndThread) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("step,layer");  // microbatch off
  const ToolLog log;
  step_with_layers(2);
  const Timeline t = timeline(log);
  EXPECT_EQ(names(t), (std::vector<std::string>{"train_step", "layer forward", "layer forward"}));
  ASSERT_EQ(t.ranges.size(), 3u);
  EXPECT_EQ(t.ranges[0].category, "step");
  EXPECT_EQ(t.ranges[1].category, "layer");
  EXPECT_EQ(t.ranges[0].depth, 0);
  EXPECT_EQ(t.ranges[1].depth, 1);  // inside the step
  EXPECT_EQ(t.ranges[2].depth, 1);
  EXPECT_EQ(t.sequence, (std::vector<std::string>{"push train_step", "push layer forward", "pop",
                                                  "push layer forward", "pop", "pop"}));
  for (const Range& r : t.ranges) EXPECT_EQ(r.tid, this_tid());
  // A stable colour per group: both layer ranges share one, the step has another.
  EXPECT_EQ(t.ranges[1].colour, t.ranges[2].colour);
  EXPECT_NE(t.ranges[0].colour, t.ranges[1].colour);
  EXPECT_TRUE(balanced(t));
  EXPECT_EQ(t.other_calls, 0);
  // The ranges are the spans: the same three were exported.
  EXPECT_EQ(exported().size(), 3u);
}

TEST_F(Nvtx, NamesAreRegisteredOncePerSiteAndCategoriesOncePerGroup) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  const ToolLog log;
  for (int i = 0; i < 5; ++i) step_with_layers(3);
  int strings = 0, categories = 0;
  for (const Call& c : log.calls()) {
    strings += c.op == "string";
    categories += c.op == "category";
  }
  EXPECT_LE(strings, 3);     // train_step, layer forward, microbatch: at most once each
  EXPECT_LE(categories, 3);  // step, layer, microbatch
  const Timeline t = timeline(log);
  EXPECT_EQ(t.ranges.size(), 25u);
  EXPECT_TRUE(balanced(t));
}

TEST_F(Nvtx, ManagedSpanSpanCmAndTraceFnOpenRangesToo) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("default,step");
  const ToolLog log;
  {
    auto job = lens::span_cm("pretrain");
    auto step = lens::managed_span(MegatronSpanGroup::STEP, "step by name");
    auto off = lens::managed_span(MegatronSpanGroup::LAYER, "layer off");
    lens::trace_fn("checkpoint", "save", [] {})();
  }
  const Timeline t = timeline(log);
  EXPECT_EQ(names(t), (std::vector<std::string>{"pretrain", "step by name", "save"}));
  ASSERT_EQ(t.ranges.size(), 3u);
  EXPECT_EQ(t.ranges[0].category, "");  // ungated: no category
  EXPECT_EQ(t.ranges[1].category, "step");
  EXPECT_EQ(t.ranges[2].category, "checkpoint");
  EXPECT_EQ(t.ranges[2].depth, 2);
  EXPECT_TRUE(balanced(t));
}

TEST_F(Nvtx, ARankThatDoesNotExportShowsTheRangesOfItsGroups) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("step,layer", /*rank=*/1);
  ASSERT_FALSE(handle_.is_exporting());
  EXPECT_FALSE(lens::is_span_group_enabled(MegatronSpanGroup::STEP));  // nothing is exported
  const ToolLog log;
  step_with_layers(2);
  {
    auto by_name = lens::managed_span(MegatronSpanGroup::STEP, "step by name");
    EXPECT_FALSE(by_name);  // records nothing
  }
  const Timeline t = timeline(log);
  EXPECT_EQ(names(t), (std::vector<std::string>{"train_step", "layer forward", "layer forward",
                                                "step by name"}));
  EXPECT_TRUE(balanced(t));
  EXPECT_TRUE(exported().empty());
}

TEST_F(Nvtx, ALiveGroupSwitchSwitchesTheRanges) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("step");
  const ToolLog log;
  step_with_layers(1);
  lens::set_enabled_span_groups({std::string(MegatronSpanGroup::LAYER)});
  step_with_layers(1);
  lens::set_enabled_span_groups({});
  step_with_layers(1);
  const Timeline t = timeline(log);
  EXPECT_EQ(names(t), (std::vector<std::string>{"train_step", "layer forward"}));
  EXPECT_TRUE(balanced(t));
}

TEST_F(Nvtx, LensCtlGroupsSwitchesTheRangesOfARankThatDoesNotExport) {
  env_.set("NEMO_LENS_NVTX", "on");
  lens_test::TempDir dir;
  env_.set("NEMO_LENS_CONTROL_DIR", dir.path().string());
  start("step", /*rank=*/1);
  ASSERT_FALSE(handle_.is_exporting());
  const auto sockets = lens_test::control_sockets(dir.path());
  ASSERT_EQ(sockets.size(), 1u);
  const ToolLog log;
  step_with_layers(1);
  const auto reply = lens_test::control_request(sockets[0], "lens-ctl/1 groups layer");
  ASSERT_TRUE(reply.is_object()) << reply.dump();
  step_with_layers(1);
  const Timeline t = timeline(log);
  EXPECT_EQ(names(t), (std::vector<std::string>{"train_step", "layer forward"}));
  EXPECT_TRUE(balanced(t));
}

// Every logged call, one per line, for a failure message.
std::string describe(const std::vector<Call>& calls) {
  std::string out;
  for (const Call& c : calls) {
    out += c.op + " " + std::to_string(c.tid);
    for (const auto& a : c.args) out += " " + a;
    out += "\n";
  }
  return out;
}

TEST_F(Nvtx, OffEmitsNothingThoughAToolIsAttached) {
  env_.set("NEMO_LENS_NVTX", "OFF");
  start("all");
  const ToolLog log;
  step_with_layers(3);
  { auto s = lens::span_cm("ungated"); }
  EXPECT_TRUE(log.calls().empty()) << describe(log.calls());
  EXPECT_EQ(exported().size(), 6u);  // the spans themselves are unaffected
}

TEST_F(Nvtx, AutoEmitsUnderAToolAndNothingWithoutOne) {
  // Auto with NVTX_INJECTION64_PATH set: ranges. This also loads the tool into the library's NVTX
  // copy, so that any later call would be logged.
  start("step");
  {
    const ToolLog log;
    step_with_layers(0);
    EXPECT_EQ(names(timeline(log)), (std::vector<std::string>{"train_step"}));
  }
  handle_.shutdown();
  // Without the variable, auto means no tool: not one NVTX call, on any rank.
  const std::string tool = std::getenv("NVTX_INJECTION64_PATH");
  unsetenv("NVTX_INJECTION64_PATH");
  EXPECT_FALSE(lens::detail::nvtx_tool_attached());
  for (int rank : {0, 1}) {
    start("all", rank);
    const ToolLog log;
    step_with_layers(2);
    { auto s = lens::span_cm("ungated"); }
    EXPECT_TRUE(log.calls().empty()) << "rank " << rank << "\n" << describe(log.calls());
    handle_.shutdown();
  }
  setenv("NVTX_INJECTION64_PATH", tool.c_str(), 1);
}

TEST_F(Nvtx, NoRangesAfterShutdownOrWhenDisabled) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  handle_.shutdown();
  const ToolLog log;
  step_with_layers(1);
  lens::NemoLensConfig disabled = with_env(lens_test::enabled_config("all"));
  disabled.enabled = false;
  handle_ = lens::setup_telemetry(disabled);
  step_with_layers(1);
  EXPECT_TRUE(log.calls().empty());
}

TEST_F(Nvtx, ASpanEndedBeforeTheSpansItEnclosesKeepsTheNestingIntact) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  const ToolLog log;
  {
    auto outer = lens::managed_span(MegatronSpanGroup::STEP, "outer");
    auto inner = lens::managed_span(MegatronSpanGroup::LAYER, "inner");
    outer.end();  // out of order: its range cannot be popped before inner's
    { LENS_SPAN(deeper, MegatronSpanGroup::LAYER, "deeper"); }
    inner.end();  // pops inner, then outer
  }
  const Timeline t = timeline(log);
  EXPECT_EQ(t.sequence, (std::vector<std::string>{"push outer", "push inner", "push deeper", "pop",
                                                  "pop", "pop"}));
  EXPECT_TRUE(balanced(t));
  EXPECT_EQ(exported().size(), 3u);  // the spans keep their own end times
}

TEST_F(Nvtx, ASpanEndedOnAnotherThreadIsPoppedByItsOwnThread) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  const ToolLog log;
  lens::Span handed = lens::managed_span(MegatronSpanGroup::COMMUNICATION, "handed over");
  std::thread([s = std::move(handed)]() mutable { s.end(); }).join();
  {
    LENS_SPAN(next, MegatronSpanGroup::STEP, "next");  // this thread's next range pops it first
  }
  const Timeline t = timeline(log);
  EXPECT_EQ(t.sequence, (std::vector<std::string>{"push handed over", "pop", "push next", "pop"}));
  EXPECT_TRUE(balanced(t));
  for (const Range& r : t.ranges) EXPECT_EQ(r.tid, this_tid());  // no pop from the other thread
}

TEST_F(Nvtx, ASpanThatOutlivesItsThreadEndsOnAThreadWithoutSpansOfItsOwn) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  const ToolLog log;
  lens::Span orphan;
  long started_on = 0;
  std::thread([&] {
    started_on = this_tid();
    orphan = lens::managed_span(MegatronSpanGroup::DATA_LOADING, "outlives its thread");
  }).join();
  // A thread that never started a span ends it: it must not wait on the exited thread's state.
  std::thread([&] { orphan.end(); }).join();
  // A new thread may reuse the exited thread's state: its ranges start from an empty stack.
  long reused_on = 0;
  std::thread([&] {
    reused_on = this_tid();
    step_with_layers(1);
  }).join();
  const Timeline t = timeline(log);
  ASSERT_EQ(t.ranges.size(), 4u);
  EXPECT_EQ(t.ranges[0].tid, started_on);
  EXPECT_EQ(t.open.at(started_on), 1);  // its thread exited with the range open, as NVTX sees it
  for (std::size_t i = 1; i < t.ranges.size(); ++i) EXPECT_EQ(t.ranges[i].tid, reused_on);
  EXPECT_EQ(t.ranges[1].depth, 0);
  EXPECT_EQ(t.open.at(reused_on), 0);
  EXPECT_TRUE(t.negative.empty());
  EXPECT_EQ(exported().size(), 4u);
}

TEST_F(Nvtx, EveryThreadNestsItsOwnRanges) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("all");
  const ToolLog log;
  constexpr int kThreads = 4, kSteps = 50;
  std::vector<std::thread> threads;
  std::vector<long> tids(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, &tids] {
      tids[i] = this_tid();
      for (int s = 0; s < kSteps; ++s) step_with_layers(2);
    });
  }
  for (auto& t : threads) t.join();
  const Timeline t = timeline(log);
  EXPECT_EQ(t.ranges.size(), static_cast<std::size_t>(kThreads * kSteps * 4));
  EXPECT_TRUE(balanced(t));
  std::map<long, int> per_thread;
  for (const Range& r : t.ranges) {
    ++per_thread[r.tid];
    EXPECT_EQ(r.depth, r.name == "train_step" ? 0 : 1) << r.name;
  }
  for (long tid : tids) EXPECT_EQ(per_thread[tid], kSteps * 4);
}

TEST_F(Nvtx, DisabledSitesOpenNoRange) {
  env_.set("NEMO_LENS_NVTX", "on");
  start("default");
  const ToolLog log;
  step_with_layers(4);
  EXPECT_TRUE(timeline(log).ranges.empty());
  EXPECT_FALSE(LENS_GROUP_ENABLED(MegatronSpanGroup::LAYER));
}

TEST(NvtxSettings, TheModeIsReadWithPrefixAndFallbackAndABadValueNamesTheVariable) {
  lens_test::ScopedEnv env;
  lens::NemoLensConfig c = lens::NemoLensConfig::from_env();
  EXPECT_EQ(lens::detail::nvtx_mode(c), lens::detail::NvtxMode::kAuto);
  env.set("NEMO_LENS_NVTX", " On ");
  EXPECT_EQ(lens::detail::nvtx_mode(lens::NemoLensConfig::from_env()), lens::detail::NvtxMode::kOn);
  env.set("MEGATRON_OTEL_NVTX", "off");
  EXPECT_EQ(lens::detail::nvtx_mode(lens::NemoLensConfig::from_env("MEGATRON_OTEL", "NEMO_LENS")),
            lens::detail::NvtxMode::kOff);
  env.set("MEGATRON_OTEL_NVTX", "");  // blank: the fallback's value
  EXPECT_EQ(lens::detail::nvtx_mode(lens::NemoLensConfig::from_env("MEGATRON_OTEL", "NEMO_LENS")),
            lens::detail::NvtxMode::kOn);
  env.set("NEMO_LENS_NVTX", "sometimes");
  const std::string message = lens_test::error_message_of<lens::ConfigError>([] {
    lens::NemoLensConfig bad = lens::NemoLensConfig::from_env();
    bad.enabled = true;
    (void)lens::setup_telemetry(bad);
  });
  EXPECT_NE(message.find("NEMO_LENS_NVTX"), std::string::npos) << message;
  EXPECT_NE(message.find("'sometimes'"), std::string::npos) << message;
  EXPECT_NE(message.find("auto, on, off"), std::string::npos) << message;
}

}  // namespace
