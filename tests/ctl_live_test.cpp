// `lens ctl` against a live multi-threaded program (tests/ctl/ctl_target.cpp): the dump puts the
// thread blocked in communication first while another thread steps, a group switch reaches
// the running program and is undone by --reset (an invalid spec changes nothing), and a capture
// exports what the flight recorder holds.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "control_client.hpp"
#include "ctl_run.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

using lens_test::words;

class CtlLive : public ::testing::Test {
 protected:
  void SetUp() override {
    env_.set("NEMO_LENS_ENABLED", "1");
    env_.set("NEMO_LENS_RUN_ID", run_);
    env_.set("NEMO_LENS_EXPORT_STRATEGY", "all_ranks");
    env_.set("NEMO_LENS_SPAN_GROUPS", "per_step");
    env_.set("NEMO_LENS_CONTROL_DIR", ctl_dir_);
    env_.set("NEMO_LENS_EXPORTER", "file");
    env_.set("NEMO_LENS_EXPORT_PATH", spans_path_);
    // Metrics are on by default: their file goes beside the spans, not into the working directory.
    env_.set("NEMO_LENS_METRICS_EXPORT_PATH", (dir_.path() / "metrics.jsonl").string());
    target_ = std::make_unique<lens_test::ChildProcess>(std::vector<std::string>{CTL_TARGET},
                                                        std::string(), /*pipe_stdin=*/true);
    ASSERT_TRUE(target_->wait_for_line("ready")) << target_->stderr_text();
  }

  // Ends the target; its exit status.
  int finish() {
    target_->close_stdin();
    return target_->wait(30s);
  }

  lens_test::CtlOutput ctl(std::vector<std::string> args) {
    args.insert(args.end(), {"--dir", ctl_dir_, "--run", run_});
    return lens_test::run_lens_ctl(dir_.path(), std::move(args));
  }

  // The exported spans (OTLP/JSON).
  std::vector<Json> exported_spans() {
    std::ifstream in(spans_path_);
    std::vector<Json> spans;
    for (std::string line; std::getline(in, line);) {
      const Json request = Json::parse(line);
      for (const auto& rs : request["resourceSpans"]) {
        for (const auto& ss : rs["scopeSpans"]) {
          for (const auto& s : ss["spans"]) spans.push_back(s);
        }
      }
    }
    return spans;
  }

  // The exported spans named `name`.
  int exported(const std::string& name) {
    int n = 0;
    for (const Json& s : exported_spans()) n += s["name"] == name;
    return n;
  }

  lens_test::ScopedEnv env_;
  lens_test::TempDir dir_;
  const std::string run_ = "live" + std::to_string(::getpid());
  const std::string ctl_dir_ = (dir_.path() / "ctl").string();
  const std::string spans_path_ = (dir_.path() / "spans.jsonl").string();
  std::unique_ptr<lens_test::ChildProcess> target_;
};

// The innermost span's open_s of the thread inside communication/all_reduce.
double blocked_open_s(const std::string& json_lines) {
  const Json reply = Json::parse(json_lines.substr(0, json_lines.find('\n')));
  for (const auto& t : reply["threads"]) {
    const auto& spans = t["spans"];
    if (!spans.empty() && spans.back()["name"] == "all_reduce") return spans.back()["open_s"];
  }
  return -1;
}

TEST_F(CtlLive, DumpPutsTheBlockedCommunicationSpanFirstAndItsAgeGrows) {
  const auto first = ctl({"dump", "--json"});
  ASSERT_EQ(first.status, 0) << first.err;
  const auto table = ctl({"dump"});
  ASSERT_EQ(table.status, 0) << table.err;
  const auto second = ctl({"dump", "--json"});
  ASSERT_EQ(second.status, 0) << second.err;

  std::istringstream lines(table.out);
  std::string header, row;
  std::getline(lines, header);
  std::getline(lines, row);
  const auto h = words(header), r = words(row);
  ASSERT_GE(r.size(), 8u) << table.out;
  EXPECT_EQ(h[4], "GROUP");
  EXPECT_EQ(r[4], "communication") << table.out;
  EXPECT_EQ(r[5], "all_reduce") << table.out;
  EXPECT_EQ(r[6], "yes") << "Megatron's per_step has communication";
  EXPECT_NE(row.find("train_step > all_reduce"), std::string::npos) << table.out;

  const double a = blocked_open_s(first.out), b = blocked_open_s(second.out);
  ASSERT_GE(a, 0) << first.out;
  EXPECT_GT(b, a) << second.out;
  EXPECT_EQ(finish(), 0) << target_->stderr_text();
}

TEST_F(CtlLive, GroupSwitchReachesTheRunningProgramAndResetUndoesIt) {
  const auto on = ctl({"groups", "all"});
  ASSERT_EQ(on.status, 0) << on.out << on.err;
  EXPECT_NE(on.out.find("-> activation_offload,checkpoint,communication"), std::string::npos)
      << on.out;
  ASSERT_TRUE(target_->wait_for_line("layer on")) << target_->stderr_text();

  // An invalid spec is refused with set-up's message; the program keeps `all`.
  const auto bad = ctl({"groups", "per_stepp"});
  EXPECT_EQ(bad.status, 1);
  EXPECT_NE(bad.out.find("refused: Unknown span group"), std::string::npos) << bad.out;
  const auto list = ctl({"list", "--json"});
  ASSERT_EQ(list.status, 0) << list.err;
  EXPECT_EQ(Json::parse(list.out)["groups"].size(), 14u) << list.out;

  const auto reset = ctl({"groups", "--reset"});
  ASSERT_EQ(reset.status, 0) << reset.out << reset.err;
  ASSERT_TRUE(target_->wait_for_line("layer off")) << target_->stderr_text();
  ASSERT_EQ(finish(), 0) << target_->stderr_text();

  // Every layer span the program recorded while `all` was on was exported; none before.
  const std::string text = target_->stderr_text();
  const auto at = text.find("layer spans ");
  ASSERT_NE(at, std::string::npos) << text;
  const int recorded = std::stoi(text.substr(at + 12));
  EXPECT_GT(recorded, 0);
  ASSERT_NE(text.find("dropped 0\n"), std::string::npos) << text;
  EXPECT_EQ(exported("layer_forward"), recorded);
  EXPECT_GT(exported("train_step"), recorded);
}

// The target with the flight recorder on: per_step exported, every group recorded.
class CtlLiveRecording : public CtlLive {
 protected:
  void SetUp() override {
    env_.set("NEMO_LENS_RECORD_GROUPS", "all");
    CtlLive::SetUp();
  }
};

// An OTLP/JSON span's attribute `key` as JSON ("stringValue" or "intValue"), or null.
Json attribute(const Json& span, const std::string& key) {
  for (const auto& a : span["attributes"]) {
    if (a["key"] != key) continue;
    const Json& v = a["value"];
    if (v.contains("stringValue")) return v["stringValue"];
    if (v.contains("intValue")) return v["intValue"];
  }
  return nullptr;
}

TEST_F(CtlLiveRecording, CaptureExportsTheRecordedSpansMarkedWithReasonAndId) {
  // Recorded spans record from the first step, which may come before "ready", read by SetUp.
  ASSERT_TRUE(target_->stderr_text().find("layer on\n") != std::string::npos ||
              target_->wait_for_line("layer on"))
      << "recorded spans record";
  const auto first = ctl({"capture", "incident 7", "--json"});
  ASSERT_EQ(first.status, 0) << first.out << first.err;
  const Json reply = Json::parse(first.out.substr(0, first.out.find('\n')));
  ASSERT_TRUE(reply.value("ok", false)) << first.out;
  const std::uint64_t captured = reply["captured"];
  const std::int64_t id = reply["capture_id"];
  EXPECT_GT(captured, 0u) << first.out;
  EXPECT_EQ(reply["reason"], "incident 7");
  EXPECT_GT(id, 0);

  // A second capture, in text: the spans recorded since, with a later id (the target's steps
  // of a quarter of a millisecond are now and then twice their median: slow_step captures
  // may come between).
  const auto second = ctl({"capture"});
  ASSERT_EQ(second.status, 0) << second.out << second.err;
  EXPECT_NE(second.out.find("rank 0 pid "), std::string::npos) << second.out;
  const auto at = second.out.find("captured ");
  const auto id_at = second.out.find(", reason manual, lens.capture.id ");
  ASSERT_TRUE(at != std::string::npos && id_at != std::string::npos) << second.out;
  const std::uint64_t captured_again = std::stoull(second.out.substr(at + 9));
  const std::int64_t second_id = std::stoll(second.out.substr(id_at + 33));
  EXPECT_GT(second_id, id);
  ASSERT_EQ(finish(), 0) << target_->stderr_text();
  ASSERT_NE(target_->stderr_text().find("dropped 0\n"), std::string::npos)
      << target_->stderr_text();

  // Exactly the captured spans left (those two captures' and slow steps'), all layer spans
  // (per_step exports the steps and the communication span), each under an exported step span.
  std::set<std::string> step_ids;
  std::uint64_t first_capture = 0, second_capture = 0;
  std::vector<Json> layers;
  for (const Json& s : exported_spans()) {
    if (s["name"] == "train_step") step_ids.insert(s["spanId"].get<std::string>());
    if (s["name"] == "layer_forward") layers.push_back(s);
    if (s["name"] != "layer_forward") {
      EXPECT_TRUE(attribute(s, "lens.capture.reason").is_null()) << s.dump();
    }
  }
  for (const Json& s : layers) {
    const Json reason = attribute(s, "lens.capture.reason");
    const Json capture_id = attribute(s, "lens.capture.id");
    if (reason == "incident 7" && capture_id == std::to_string(id)) {
      ++first_capture;
    } else if (reason == "manual" && capture_id == std::to_string(second_id)) {
      ++second_capture;
    } else if (reason != "slow_step") {
      ADD_FAILURE() << "a layer span outside the captures: " << s.dump();
    }
    EXPECT_EQ(step_ids.count(s["parentSpanId"].get<std::string>()), 1u) << s.dump();
  }
  EXPECT_EQ(first_capture, captured);
  EXPECT_EQ(second_capture, captured_again);
}

TEST_F(CtlLive, CaptureIsRefusedWhereTheFlightRecorderIsOff) {
  const auto out = ctl({"capture"});
  EXPECT_EQ(out.status, 1) << out.out << out.err;
  EXPECT_NE(out.out.find("refused: the flight recorder is off in this process"), std::string::npos)
      << out.out;
  EXPECT_EQ(finish(), 0) << target_->stderr_text();
}

}  // namespace
