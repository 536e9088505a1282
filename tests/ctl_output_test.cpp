// lens ctl's output (tools/lens/ctl/ctl_output.cpp): the list table, the groups lines, the dump
// table and counters, attribute values, the process filter and the refusal to change several runs
// at once, fed with replies built here as an endpoint would send them (docs/control.md).
#include "ctl/ctl_output.hpp"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace nemo::lens::cli::ctl {
namespace {

Json process(std::string run, int rank, int pid, std::vector<std::string> groups = {"job", "step"},
             bool exporting = false, double uptime = 73.2) {
  return Json{{"run_id", std::move(run)}, {"rank", rank},
              {"world_size", 4},          {"pid", pid},
              {"host", "node7"},          {"service", "nemo"},
              {"exporting", exporting},   {"startup_spec", "default"},
              {"groups", groups},         {"track_open", "enabled"},
              {"hang_timeout_s", 0},      {"uptime_s", uptime}};
}

Json span(std::string group, std::string name, double open_s, bool exported,
          Json attributes = nullptr) {
  Json s = {{"group", std::move(group)},
            {"name", std::move(name)},
            {"start_unix_nano", 1764412345000000000},
            {"open_s", open_s},
            {"exported", exported}};
  if (!attributes.is_null()) s["attributes"] = std::move(attributes);
  return s;
}

Json thread(int tid, std::vector<Json> spans, int untracked = 0) {
  return Json{{"tid", tid}, {"untracked", untracked}, {"spans", std::move(spans)}};
}

Json stats(int started, int ended, int exported) {
  return Json{{"spans_started", started},      {"spans_ended", ended},
              {"spans_exported", exported},    {"spans_buffered", 6},
              {"spans_dropped_queue_full", 1}, {"spans_dropped_export_failed", 2},
              {"spans_dropped_shutdown", 3},   {"spans_rejected", 4},
              {"spans_truncated", 5},          {"metric_points_buffered", 7},
              {"metric_points_dropped", 8},    {"log_records_buffered", 9},
              {"log_records_dropped", 10}};
}

Json dump_reply(Json proc, std::vector<Json> threads, Json counters) {
  return Json{{"protocol", 1},
              {"ok", true},
              {"process", std::move(proc)},
              {"now_unix_nano", 1764412357500000000},
              {"threads", std::move(threads)},
              {"stats", std::move(counters)}};
}

TEST(CtlOutput, ListSortsByRunRankPidAndFormatsColumns) {
  // Numeric run ids in numeric order (9 before 10), then the others as text; rank, then pid.
  std::vector<Json> processes = {
      process("10", 1, 500, {"job"}, false, 5.04),
      process("abc", 0, 600, {}, true, 0.0),
      process("9", 2, 300, {"checkpoint", "job", "step"}, true, 1234.56),
      process("10", 0, 700, {"job", "step"}, true, 73.25),
      process("10", 1, 400, {"job"}, false, 5.0),
  };
  EXPECT_EQ(list_text(processes),
            "RUN  RANK  PID  SERVICE  GROUPS                UPTIME  EXPORTING\n"
            "9       2  300  nemo     checkpoint,job,step  1234.6s  yes\n"
            "10      0  700  nemo     job,step               73.2s  yes\n"
            "10      1  400  nemo     job                     5.0s  no\n"
            "10      1  500  nemo     job                     5.0s  no\n"
            "abc     0  600  nemo     -                       0.0s  yes\n");
}

TEST(CtlOutput, ListOfNothingIsTheHeader) {
  EXPECT_EQ(list_text({}), "RUN  RANK  PID  SERVICE  GROUPS  UPTIME  EXPORTING\n");
}

TEST(CtlOutput, ListShowsMissingMembersAsQuestionMarks) {
  EXPECT_EQ(list_text({Json{{"pid", 42}}}),
            "RUN  RANK  PID  SERVICE  GROUPS  UPTIME  EXPORTING\n"
            "?       ?   42  ?        ?            ?  ?\n");
}

TEST(CtlOutput, GroupsLineAccepted) {
  const Json reply = {{"protocol", 1},
                      {"ok", true},
                      {"process", process("4711", 3, 12345)},
                      {"previous", {"job", "step"}},
                      {"groups", {"job", "step", "microbatch"}}};
  EXPECT_EQ(groups_line(reply), "run 4711 rank 3 pid 12345: job,step -> job,step,microbatch");
}

TEST(CtlOutput, GroupsLineFromOrToNoGroups) {
  const Json reply = {{"protocol", 1},
                      {"ok", true},
                      {"process", process("4711", 0, 7)},
                      {"previous", Json::array()},
                      {"groups", {"all"}}};
  EXPECT_EQ(groups_line(reply), "run 4711 rank 0 pid 7: (none) -> all");
}

TEST(CtlOutput, GroupsLineRefused) {
  const Json reply = {{"protocol", 1},
                      {"ok", false},
                      {"process", process("4711", 3, 12345)},
                      {"error", "Unknown span group or preset: 'bogus'."}};
  EXPECT_EQ(groups_line(reply),
            "run 4711 rank 3 pid 12345: refused: Unknown span group or preset: 'bogus'.");
}

TEST(CtlOutput, GroupsLineRefusedWithoutAStringMessage) {
  Json reply = {{"protocol", 1}, {"ok", false}, {"process", process("4711", 3, 12345)}};
  EXPECT_EQ(groups_line(reply), "run 4711 rank 3 pid 12345: refused: (no error message)");
  reply["error"] = {{"code", 7}};
  EXPECT_EQ(groups_line(reply), "run 4711 rank 3 pid 12345: refused: {\"code\":7}");
}

TEST(CtlOutput, CaptureLineSaysHowManySpansWithWhichReasonAndId) {
  Json reply = {{"protocol", 1},   {"ok", true},          {"process", process("4711", 3, 12345)},
                {"captured", 120}, {"reason", "oom\x1b"}, {"capture_id", 2}};
  EXPECT_EQ(capture_line(reply),
            "run 4711 rank 3 pid 12345: captured 120 spans, reason oom\\x1b, lens.capture.id 2");
  reply = {{"protocol", 1},
           {"ok", false},
           {"process", process("4711", 3, 12345)},
           {"error", "the flight recorder is off in this process"}};
  EXPECT_EQ(capture_line(reply),
            "run 4711 rank 3 pid 12345: refused: the flight recorder is off in this process");
}

TEST(CtlOutput, DumpSortsByInnermostOpenTimeLongestFirst) {
  const std::vector<Json> replies = {
      dump_reply(process("4711", 0, 100),
                 {thread(101, {span("step", "train_step", 12.5, true, {{"iteration", 42}}),
                               span("communication", "all_reduce", 12.4, false)}),
                  thread(102, {})},  // no open span: no row
                 stats(120, 118, 100)),
      dump_reply(process("4711", 3, 400),
                 {thread(401, {span("step", "train_step", 12.6, true),
                               span("forward_backward", "forward", 0.5, true,
                                    {{"mb", 3}, {"phase", "warm up"}, {"ok", true}, {"lr", 0.5}})}),
                  thread(402, {span("data_loading", "next_batch", 30.0, false)})},
                 stats(7, 5, 0)),
      // Equal innermost open time as rank 0's all_reduce: rank order decides.
      dump_reply(process("4711", 2, 300),
                 {thread(301,
                         {span("job", "run_job", 50.0, true),
                          span("step", "train_step", 12.4, true, {{"iteration", 41}})},
                         2)},
                 stats(1, 0, 0)),
  };
  EXPECT_EQ(
      dump_text(replies),
      " OPEN  RANK  PID  TID  GROUP             NAME        EXPORTED  STACK"
      "                                  ATTRIBUTES\n"
      "30.0s     3  400  402  data_loading      next_batch  no        next_batch\n"
      "12.4s     0  100  101  communication     all_reduce  no        train_step > all_reduce\n"
      "12.4s     2  300  301  step              train_step  yes       "
      "run_job > train_step > (+2 untracked)  iteration=41\n"
      " 0.5s     3  400  401  forward_backward  forward     yes       train_step > forward"
      "                   mb=3 phase=\"warm up\" ok=true lr=0.5\n"
      "\n"
      "rank 0 pid 100: started 120 ended 118 exported 100 buffered 6 dropped 1/2/3 rejected 4 "
      "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n"
      "rank 2 pid 300: started 1 ended 0 exported 0 buffered 6 dropped 1/2/3 rejected 4 truncated "
      "5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n"
      "rank 3 pid 400: started 7 ended 5 exported 0 buffered 6 dropped 1/2/3 rejected 4 truncated "
      "5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n");
}

TEST(CtlOutput, DumpOfSeveralRunsHasARunColumn) {
  const std::vector<Json> replies = {
      dump_reply(process("4712", 0, 300), {thread(301, {span("step", "train_step", 1.0, true)})},
                 stats(3, 2, 2)),
      dump_reply(process("4711", 1, 200), {thread(201, {span("step", "train_step", 2.0, true)})},
                 stats(3, 2, 2)),
  };
  EXPECT_EQ(
      dump_text(replies),
      "RUN   OPEN  RANK  PID  TID  GROUP  NAME        EXPORTED  STACK       ATTRIBUTES\n"
      "4711  2.0s     1  200  201  step   train_step  yes       train_step\n"
      "4712  1.0s     0  300  301  step   train_step  yes       train_step\n"
      "\n"
      "run 4711 rank 1 pid 200: started 3 ended 2 exported 2 buffered 6 dropped 1/2/3 rejected 4 "
      "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n"
      "run 4712 rank 0 pid 300: started 3 ended 2 exported 2 buffered 6 dropped 1/2/3 rejected 4 "
      "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n");
}

TEST(CtlOutput, DumpWithoutOpenSpansStillShowsCounters) {
  const std::vector<Json> replies = {
      dump_reply(process("4711", 0, 100), {}, stats(10, 10, 10)),
      dump_reply(process("4711", 1, 200), {thread(201, {})}, Json::object()),
  };
  EXPECT_EQ(dump_text(replies),
            "no thread has an open span\n"
            "\n"
            "rank 0 pid 100: started 10 ended 10 exported 10 buffered 6 dropped 1/2/3 rejected 4 "
            "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n"
            "rank 1 pid 200: started ? ended ? exported ? buffered ? dropped ?/?/? rejected ? "
            "truncated ?; "
            "metric points buffered ? dropped ?; log records buffered ? dropped ?\n");
}

TEST(CtlOutput, DumpShowsTheGpuCountersWhereGpuTimeRuns) {
  Json gpu = stats(4, 3, 3);
  gpu["gpu_spans_timed"] = 3;
  gpu["gpu_spans_incomplete"] = 1;
  gpu["gpu_spans_waiting"] = 2;
  gpu["gpu_launches_dropped"] = 11;
  gpu["gpu_activities_dropped"] = 12;
  gpu["gpu_activities_late"] = 13;
  gpu["gpu_activities_unattributed"] = 14;
  gpu["gpu_activities_invalid"] = 15;
  gpu["gpu_kernel_spans"] = 16;
  gpu["gpu_kernel_spans_dropped"] = 17;
  const std::vector<Json> replies = {
      dump_reply(process("4711", 0, 100), {}, gpu),
      dump_reply(process("4711", 1, 200), {}, stats(4, 3, 3)),  // GPU time off there
  };
  EXPECT_EQ(dump_text(replies),
            "no thread has an open span\n"
            "\n"
            "rank 0 pid 100: started 4 ended 3 exported 3 buffered 6 dropped 1/2/3 rejected 4 "
            "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10; "
            "gpu spans timed 3 incomplete 1 waiting 2; gpu launches dropped 11; gpu activities "
            "dropped 12 late 13 unattributed 14 invalid 15; gpu kernel spans 16 dropped 17\n"
            "rank 1 pid 200: started 4 ended 3 exported 3 buffered 6 dropped 1/2/3 rejected 4 "
            "truncated 5; metric points buffered 7 dropped 8; log records buffered 9 dropped 10\n");
}

TEST(CtlOutput, DumpSkipsRefusedReplies) {
  const Json refused = {
      {"protocol", 1}, {"ok", false}, {"process", process("4711", 5, 500)}, {"error", "busy"}};
  EXPECT_EQ(dump_text({refused}), "no thread has an open span\n\n");
}

TEST(CtlOutput, AttributeValues) {
  EXPECT_EQ(attribute_value_text(Json("plain")), "plain");
  EXPECT_EQ(attribute_value_text(Json("two words")), "\"two words\"");
  EXPECT_EQ(attribute_value_text(Json("")), "\"\"");
  EXPECT_EQ(attribute_value_text(Json("a=b")), "\"a=b\"");
  EXPECT_EQ(attribute_value_text(Json("say \"hi\"")), "\"say \\\"hi\\\"\"");
  EXPECT_EQ(attribute_value_text(Json("tab\there")), "\"tab\\there\"");
  EXPECT_EQ(attribute_value_text(Json("équipe")), "équipe");
  EXPECT_EQ(attribute_value_text(Json(42)), "42");
  EXPECT_EQ(attribute_value_text(Json(-1.5)), "-1.5");
  EXPECT_EQ(attribute_value_text(Json(false)), "false");
  EXPECT_EQ(attribute_value_text(Json::array({1, "x"})), "[1,\"x\"]");
}

TEST(CtlOutput, AttributesKeepTheOrderSent) {
  const std::vector<Json> replies = {dump_reply(
      process("1", 0, 1),
      {thread(2, {span("step", "s", 1.0, true, Json{{"z", 1}, {"a", "x y"}, {"m", nullptr}})})},
      stats(0, 0, 0))};
  const std::string text = dump_text(replies);
  EXPECT_NE(text.find("  z=1 a=\"x y\" m=null\n"), std::string::npos) << text;
}

TEST(CtlOutput, FilterMatchesRunRanksAndPid) {
  const Json p = process("4711", 3, 12345);
  EXPECT_TRUE(ProcessFilter{}.matches(p));
  EXPECT_TRUE((ProcessFilter{"4711", {}, std::nullopt}.matches(p)));
  EXPECT_FALSE((ProcessFilter{"471", {}, std::nullopt}.matches(p)));
  EXPECT_TRUE((ProcessFilter{std::nullopt, {0, 3}, std::nullopt}.matches(p)));
  EXPECT_FALSE((ProcessFilter{std::nullopt, {0, 2}, std::nullopt}.matches(p)));
  EXPECT_TRUE((ProcessFilter{std::nullopt, {}, 12345}.matches(p)));
  EXPECT_FALSE((ProcessFilter{std::nullopt, {}, 12346}.matches(p)));
  EXPECT_FALSE((ProcessFilter{"4711", {3}, 1}.matches(p)));
  // A process without a rank matches no --rank.
  EXPECT_FALSE((ProcessFilter{std::nullopt, {0}, std::nullopt}.matches(Json{{"pid", 1}})));
  // A numeric run_id compares as its JSON text.
  EXPECT_TRUE((ProcessFilter{"4711", {}, std::nullopt}.matches(Json{{"run_id", 4711}})));
}

TEST(CtlOutput, FilterDescription) {
  EXPECT_EQ(ProcessFilter{}.describe(), "");
  EXPECT_EQ((ProcessFilter{"4711", {0, 2}, 99}.describe()), "--run 4711 --rank 0,2 --pid 99");
  EXPECT_EQ((ProcessFilter{std::nullopt, {5}, std::nullopt}.describe()), "--rank 5");
}

TEST(CtlOutput, MultipleRunsRefusal) {
  const std::vector<Json> one_run = {process("4711", 0, 1), process("4711", 1, 2)};
  EXPECT_EQ(multiple_runs_refusal(one_run, false), std::nullopt);
  EXPECT_EQ(multiple_runs_refusal({}, false), std::nullopt);

  const std::vector<Json> three_runs = {process("4712", 0, 3), process("4711", 0, 1),
                                        process("run-b", 0, 5), process("4711", 1, 2)};
  EXPECT_EQ(multiple_runs_refusal(three_runs, false),
            "the matching processes belong to 3 runs: 4711 (2 processes), 4712 (1 process), "
            "run-b (1 process); give --run RUN_ID to choose one");
  EXPECT_EQ(multiple_runs_refusal(three_runs, true), std::nullopt);
}

TEST(CtlOutput, ProcessLabelAndSeconds) {
  EXPECT_EQ(process_label(process("4711", 3, 12345)), "run 4711 rank 3 pid 12345");
  EXPECT_EQ(process_label(Json::object()), "run ? rank ? pid ?");
  EXPECT_EQ(seconds_one_decimal(12.44), "12.4s");
  EXPECT_EQ(seconds_one_decimal(0), "0.0s");
  EXPECT_EQ(seconds_one_decimal(3600.05), "3600.1s");
}

TEST(CtlOutput, JsonLineKeepsMemberOrder) {
  const Json p = Json::parse(R"({"run_id": "4711", "rank": 3, "pid": 1, "groups": ["b", "a"]})");
  EXPECT_EQ(json_line(p), R"({"run_id":"4711","rank":3,"pid":1,"groups":["b","a"]})");
}

}  // namespace
}  // namespace nemo::lens::cli::ctl
