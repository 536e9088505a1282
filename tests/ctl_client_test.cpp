// lens ctl's client (tools/lens/ctl/ctl_client.cpp) and command (ctl_command.cpp) against endpoints
// made here on real Unix sockets in a temporary directory: one that answers as docs/control.md
// says, one that accepts and never answers, one that closes at once, one that sends garbage, a
// stale socket file nobody listens on, and a file that is not a socket.
#include "ctl/ctl_client.hpp"

#include <fcntl.h>
#include <grp.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "control/settings.hpp"
#include "ctl/ctl_output.hpp"

namespace nemo::lens::cli::ctl {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

/// A fresh directory under /tmp, mode 0700, removed with its contents at the end.
class TempDir {
 public:
  TempDir() {
    char name[] = "/tmp/lens-ctl-test-XXXXXX";
    if (::mkdtemp(name) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = name;
  }
  ~TempDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

/// A listening Unix socket bound to `path`; -1 on failure.
int listen_at(const std::string& path) {
  const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
  if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 ||
      ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

/// A control endpoint on a server thread: accepts connections until destroyed, and for each
/// one answers, holds it open without answering, or closes it at once.
class FakeEndpoint {
 public:
  enum class Mode { answer, never_answer, close_immediately };
  using Handler = std::function<std::string(const std::string& request_line)>;

  FakeEndpoint(std::string path, Mode mode, Handler handler = {})
      : path_(std::move(path)), mode_(mode), handler_(std::move(handler)) {
    listen_fd_ = listen_at(path_);
    if (listen_fd_ < 0) throw std::runtime_error("cannot listen at " + path_);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeEndpoint() {
    stop_ = true;
    thread_.join();
    for (int fd : held_) ::close(fd);
    ::close(listen_fd_);
    ::unlink(path_.c_str());
  }
  FakeEndpoint(const FakeEndpoint&) = delete;
  FakeEndpoint& operator=(const FakeEndpoint&) = delete;

  /// The request lines received so far, newline included.
  std::vector<std::string> requests() const {
    std::lock_guard lock(mutex_);
    return requests_;
  }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{listen_fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      const int fd = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) continue;
      switch (mode_) {
        case Mode::never_answer:
          held_.push_back(fd);
          break;
        case Mode::close_immediately:
          ::close(fd);
          break;
        case Mode::answer:
          answer(fd);
          ::close(fd);
          break;
      }
    }
  }

  void answer(int fd) {
    timeval two_seconds{2, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &two_seconds, sizeof two_seconds);
    std::string line;
    char c = 0;
    while (line.size() < 8192 && ::read(fd, &c, 1) == 1) {
      line += c;
      if (c == '\n') break;
    }
    {
      std::lock_guard lock(mutex_);
      requests_.push_back(line);
    }
    const std::string reply = handler_(line);
    std::size_t sent = 0;
    while (sent < reply.size()) {
      const ssize_t n = ::send(fd, reply.data() + sent, reply.size() - sent, MSG_NOSIGNAL);
      if (n <= 0) return;
      sent += static_cast<std::size_t>(n);
    }
  }

  std::string path_;
  Mode mode_;
  Handler handler_;
  int listen_fd_ = -1;
  std::atomic<bool> stop_{false};
  std::thread thread_;
  std::vector<int> held_;  // server thread only, then the destructor
  mutable std::mutex mutex_;
  std::vector<std::string> requests_;
};

/// A "process" object as an endpoint describes its process.
Json process(const std::string& run, int rank, int pid, std::vector<std::string> groups) {
  return Json{{"run_id", run},          {"rank", rank},
              {"world_size", 4},        {"pid", pid},
              {"host", "node7"},        {"service", "nemo"},
              {"exporting", rank == 0}, {"startup_spec", "default"},
              {"groups", groups},       {"track_open", "enabled"},
              {"hang_timeout_s", 0},    {"uptime_s", 10.0}};
}

/// A handler answering as the process `p` would: info, groups <spec> (refusing "bogus"),
/// groups-reset, and dump with `threads`.
FakeEndpoint::Handler behave_as(Json p, Json threads = Json::array()) {
  return [p, threads](const std::string& line) {
    Json reply = {{"protocol", 1}, {"ok", true}, {"process", p}};
    if (line == "lens-ctl/1 groups bogus\n") {
      reply["ok"] = false;
      reply["error"] = "Unknown span group or preset: 'bogus'.";
    } else if (line.starts_with("lens-ctl/1 groups ")) {
      reply["previous"] = p["groups"];
      reply["groups"] = {"all", "job"};
    } else if (line == "lens-ctl/1 groups-reset\n") {
      reply["previous"] = {"all"};
      reply["groups"] = p["groups"];
    } else if (line == "lens-ctl/1 dump\n") {
      reply["now_unix_nano"] = 1;
      reply["threads"] = threads;
      reply["stats"] = {{"spans_started", 3},
                        {"spans_ended", 2},
                        {"spans_exported", 2},
                        {"spans_buffered", 0},
                        {"spans_dropped_queue_full", 0},
                        {"spans_dropped_export_failed", 0},
                        {"spans_dropped_shutdown", 0},
                        {"spans_rejected", 0},
                        {"spans_truncated", 0},
                        {"metric_points_buffered", 0},
                        {"metric_points_dropped", 0},
                        {"log_records_buffered", 0},
                        {"log_records_dropped", 0}};
    } else if (line != "lens-ctl/1 info\n") {
      reply = {{"protocol", 1}, {"ok", false}, {"process", p}, {"error", "unknown request"}};
    }
    return reply.dump() + "\n";
  };
}

/// A socket file nobody listens on: bound, then closed without unlinking.
void make_stale_socket(const std::string& path) {
  const int fd = listen_at(path);
  ASSERT_GE(fd, 0);
  ::close(fd);
}

// ---- the client ----

TEST(CtlClient, DefaultControlDirectory) {
  // The rule the library's endpoint and lens ctl share.
  namespace detail = nemo::lens::detail;
  EXPECT_EQ(detail::default_control_dir("/run/user/1000", 1000), "/run/user/1000/lens");
  EXPECT_EQ(detail::default_control_dir("/run/user/1000/", 1000), "/run/user/1000/lens");
  EXPECT_EQ(detail::default_control_dir("", 1000), "/tmp/lens-1000");
  EXPECT_EQ(detail::default_control_dir(std::nullopt, 0), "/tmp/lens-0");
}

TEST(CtlClient, FindEndpointsListsSockFilesSorted) {
  TempDir dir;
  for (const char* name : {"b.1.2.sock", "a.0.1.sock", "notes.txt", ".sock", "c.sock.old"}) {
    std::ofstream(dir.file(name)).put('x');
  }
  const Endpoints found = find_endpoints(dir.path());
  EXPECT_TRUE(found.dir_found);
  EXPECT_EQ(found.sockets,
            (std::vector<std::string>{dir.file("a.0.1.sock"), dir.file("b.1.2.sock")}));

  const Endpoints missing = find_endpoints(dir.file("nonexistent"));
  EXPECT_FALSE(missing.dir_found);
  EXPECT_TRUE(missing.sockets.empty());

  EXPECT_THROW(find_endpoints(dir.file("notes.txt")), DirectoryError);
}

TEST(CtlClient, ExchangeWithAnAnsweringEndpoint) {
  TempDir dir;
  FakeEndpoint endpoint(dir.file("4711.3.12345.sock"), FakeEndpoint::Mode::answer,
                        behave_as(process("4711", 3, 12345, {"job"})));
  const std::vector<std::string> sockets = {dir.file("4711.3.12345.sock")};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 5s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::ok) << result[0].problem;
  EXPECT_EQ(result[0].reply["process"]["rank"], 3);
  EXPECT_EQ(result[0].reply_text, result[0].reply.dump());
  EXPECT_EQ(endpoint.requests(), std::vector<std::string>{"lens-ctl/1 info\n"});
}

TEST(CtlClient, EndpointThatNeverAnswersTimesOut) {
  TempDir dir;
  FakeEndpoint endpoint(dir.file("hang.sock"), FakeEndpoint::Mode::never_answer);
  const std::vector<std::string> sockets = {dir.file("hang.sock")};
  const auto begin = Clock::now();
  const std::vector<Exchange> result = exchange_all(sockets, "info", 200ms);
  const auto elapsed = Clock::now() - begin;
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[0].problem, "timed out after 0.2s waiting for a reply");
  EXPECT_GE(elapsed, 200ms);
  EXPECT_LT(elapsed, 2s);
}

TEST(CtlClient, EndpointThatNeverAcceptsTimesOut) {
  TempDir dir;
  const int fd = listen_at(dir.file("backlog.sock"));  // listens, never accepts
  ASSERT_GE(fd, 0);
  const std::vector<std::string> sockets = {dir.file("backlog.sock")};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 150ms);
  ::close(fd);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[0].problem.rfind("timed out after 0.15s", 0), 0u) << result[0].problem;
}

TEST(CtlClient, EndpointThatClosesImmediatelyIsReported) {
  TempDir dir;
  FakeEndpoint endpoint(dir.file("closer.sock"), FakeEndpoint::Mode::close_immediately);
  const std::vector<std::string> sockets = {dir.file("closer.sock")};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[0].problem, "closed the connection without replying");
}

TEST(CtlClient, UnparseableRepliesAreReported) {
  TempDir dir;
  FakeEndpoint garbage(dir.file("garbage.sock"), FakeEndpoint::Mode::answer,
                       [](const std::string&) { return std::string("hello\n"); });
  FakeEndpoint array(dir.file("array.sock"), FakeEndpoint::Mode::answer,
                     [](const std::string&) { return std::string("[1,2]\n"); });
  FakeEndpoint future(dir.file("future.sock"), FakeEndpoint::Mode::answer, [](const std::string&) {
    return std::string(R"({"protocol": 2, "ok": true, "process": {}})");
  });
  const std::vector<std::string> sockets = {dir.file("garbage.sock"), dir.file("array.sock"),
                                            dir.file("future.sock")};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 3u);
  for (const Exchange& e : result) EXPECT_EQ(e.status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[0].problem.rfind("unparseable reply: not JSON: ", 0), 0u) << result[0].problem;
  EXPECT_NE(result[0].problem.find("(reply begins 'hello')"), std::string::npos);
  EXPECT_EQ(result[1].problem, "unparseable reply: not a JSON object (reply begins '[1,2]')");
  EXPECT_EQ(result[2].problem.rfind("unparseable reply: protocol 2, but lens ctl speaks "
                                    "protocol 1",
                                    0),
            0u)
      << result[2].problem;
}

TEST(CtlClient, StaleSocketIsRemoved) {
  TempDir dir;
  const std::string path = dir.file("4711.0.99.sock");
  make_stale_socket(path);
  ASSERT_TRUE(std::filesystem::exists(path));
  const std::vector<std::string> sockets = {path};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::stale);
  EXPECT_TRUE(result[0].removed);
  EXPECT_FALSE(std::filesystem::exists(path));
}

TEST(CtlClient, FileThatIsNotASocketIsLeftAlone) {
  TempDir dir;
  const std::string path = dir.file("junk.sock");
  std::ofstream(path) << "junk";
  const std::vector<std::string> sockets = {path};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::stale);
  EXPECT_FALSE(result[0].removed);
  EXPECT_EQ(result[0].problem, "not a socket: ignored");
  EXPECT_TRUE(std::filesystem::exists(path));
}

TEST(CtlClient, VanishedSocketIsGone) {
  TempDir dir;
  const std::vector<std::string> sockets = {dir.file("exited.sock")};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::gone);
}

TEST(CtlClient, EndpointsAreAskedConcurrently) {
  TempDir dir;
  std::vector<std::unique_ptr<FakeEndpoint>> hanging;
  std::vector<std::string> sockets;
  for (const char* name : {"a.sock", "b.sock", "c.sock", "d.sock"}) {
    hanging.push_back(
        std::make_unique<FakeEndpoint>(dir.file(name), FakeEndpoint::Mode::never_answer));
    sockets.push_back(dir.file(name));
  }
  FakeEndpoint good(dir.file("e.sock"), FakeEndpoint::Mode::answer,
                    behave_as(process("1", 0, 1, {})));
  sockets.push_back(dir.file("e.sock"));
  const auto begin = Clock::now();
  const std::vector<Exchange> result = exchange_all(sockets, "info", 300ms);
  const auto elapsed = Clock::now() - begin;
  ASSERT_EQ(result.size(), 5u);
  for (std::size_t i = 0; i < 4; ++i) EXPECT_EQ(result[i].status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[4].status, ExchangeStatus::ok) << result[4].problem;
  EXPECT_LT(elapsed, 1000ms);  // one timeout for all (one after the other would take 1.2 s)
}

TEST(CtlClient, ParseReply) {
  EXPECT_EQ(parse_reply(R"({"protocol":1,"ok":true,"process":{"pid":1}})")["process"]["pid"], 1);
  // A refusal may come before the endpoint says who it is.
  EXPECT_EQ(parse_reply(R"({"protocol":1,"ok":false,"error":"not yours"})")["error"], "not yours");
  EXPECT_THROW(parse_reply(R"({"protocol":1,"ok":true})"), std::runtime_error);
  EXPECT_THROW(parse_reply(R"({"ok":true,"process":{}})"), std::runtime_error);
  EXPECT_THROW(parse_reply(R"({"protocol":1,"ok":"yes","process":{}})"), std::runtime_error);
  EXPECT_THROW(parse_reply(R"({"protocol":1,"ok":true,"process":[]})"), std::runtime_error);
  EXPECT_THROW(parse_reply(""), std::runtime_error);
}

TEST(CtlClient, SecondsText) {
  EXPECT_EQ(seconds_text(5000ms), "5s");
  EXPECT_EQ(seconds_text(250ms), "0.25s");
  EXPECT_EQ(seconds_text(1500ms), "1.5s");
}

// ---- the command, run in this process ----

/// What a run of `lens ctl ARGS...` printed and returned.
struct CtlRun {
  int status;
  std::string out;
  std::string err;
};

CtlRun run_ctl(std::vector<std::string> args) {
  std::vector<std::string_view> views(args.begin(), args.end());
  std::ostringstream out;
  std::ostringstream err;
  std::streambuf* const old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* const old_err = std::cerr.rdbuf(err.rdbuf());
  int status = -1;
  try {
    status = ctl_command().run(views);
  } catch (const UsageError& e) {
    err << "UsageError: " << e.what();
    status = 2;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {status, out.str(), err.str()};
}

/// Two ranks of run 4711 and one of run 4712, all answering.
class CtlCommand : public ::testing::Test {
 protected:
  CtlCommand()
      : rank0_(dir_.file("4711.0.100.sock"), FakeEndpoint::Mode::answer,
               behave_as(process("4711", 0, 100, {"job", "step"}),
                         Json::parse(R"([{"tid": 101, "untracked": 0, "spans": [
                           {"group": "step", "name": "train_step", "open_s": 9.5,
                            "exported": true, "attributes": {"iteration": 7}},
                           {"group": "communication", "name": "all_reduce", "open_s": 9.4,
                            "exported": false}]}])"))),
        rank1_(dir_.file("4711.1.200.sock"), FakeEndpoint::Mode::answer,
               behave_as(process("4711", 1, 200, {"job", "step"}),
                         Json::parse(R"([{"tid": 201, "untracked": 0, "spans": [
                           {"group": "step", "name": "train_step", "open_s": 9.6,
                            "exported": true, "attributes": {"iteration": 7}},
                           {"group": "optimizer", "name": "optimizer_step", "open_s": 0.3,
                            "exported": true}]}])"))),
        other_run_(dir_.file("4712.0.300.sock"), FakeEndpoint::Mode::answer,
                   behave_as(process("4712", 0, 300, {}))) {}

  std::vector<std::string> with_dir(std::vector<std::string> args) const {
    args.push_back("--dir");
    args.push_back(dir_.path());
    args.push_back("--timeout");
    args.push_back("2");
    return args;
  }

  TempDir dir_;
  FakeEndpoint rank0_;
  FakeEndpoint rank1_;
  FakeEndpoint other_run_;
};

TEST_F(CtlCommand, List) {
  make_stale_socket(dir_.file("4711.2.999.sock"));
  const CtlRun r = run_ctl(with_dir({"list"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "RUN   RANK  PID  SERVICE  GROUPS    UPTIME  EXPORTING\n"
            "4711     0  100  nemo     job,step   10.0s  yes\n"
            "4711     1  200  nemo     job,step   10.0s  no\n"
            "4712     0  300  nemo     -          10.0s  yes\n");
  EXPECT_EQ(r.err, "lens ctl: removed stale endpoint " + dir_.file("4711.2.999.sock") + "\n");
}

TEST_F(CtlCommand, ListJsonWithFilter) {
  const CtlRun r = run_ctl(with_dir({"list", "--json", "--run", "4711", "--rank", "1"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, json_line(process("4711", 1, 200, {"job", "step"})) + "\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(CtlCommand, ListReportsAnUnreachableEndpointAndShowsTheOthers) {
  FakeEndpoint hang(dir_.file("4711.5.500.sock"), FakeEndpoint::Mode::never_answer);
  const CtlRun r = run_ctl({"list", "--dir", dir_.path(), "--timeout", "0.2", "--run", "4712"});
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("4712     0  300"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "lens ctl: " + dir_.file("4711.5.500.sock") +
                       ": timed out after 0.2s waiting for a reply\n");
}

TEST_F(CtlCommand, GroupsRefusesSeveralRunsWithoutRun) {
  const CtlRun r = run_ctl(with_dir({"groups", "all"}));
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err,
            "lens ctl: the matching processes belong to 2 runs: 4711 (2 processes), 4712 (1 "
            "process); give --run RUN_ID to choose one\n");
  // Nothing was sent but info.
  for (const std::string& line : rank0_.requests()) EXPECT_EQ(line, "lens-ctl/1 info\n");
}

TEST_F(CtlCommand, GroupsOfOneRun) {
  const CtlRun r = run_ctl(with_dir({"groups", "all", "--run", "4711"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "run 4711 rank 0 pid 100: job,step -> all,job\n"
            "run 4711 rank 1 pid 200: job,step -> all,job\n");
  EXPECT_EQ(r.err, "");
  EXPECT_EQ(rank0_.requests(),
            (std::vector<std::string>{"lens-ctl/1 info\n", "lens-ctl/1 groups all\n"}));
  EXPECT_EQ(other_run_.requests(), std::vector<std::string>{"lens-ctl/1 info\n"});
}

TEST_F(CtlCommand, GroupsOfRanksOfSeveralRunsNeedsRun) {
  // --rank 0 matches a process of each run.
  EXPECT_EQ(run_ctl(with_dir({"groups", "all", "--rank", "0"})).status, 2);
  // --pid picks one: no ambiguity.
  const CtlRun r = run_ctl(with_dir({"groups", "all", "--pid", "300"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "run 4712 rank 0 pid 300: (none) -> all,job\n");
}

TEST_F(CtlCommand, GroupsResetWithRepeatedAndListedRanks) {
  const CtlRun r =
      run_ctl(with_dir({"groups", "--reset", "--run=4711", "--rank", "1", "--rank=0,1", "--json"}));
  EXPECT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<int> ranks;
  while (std::getline(lines, line)) {
    const Json reply = Json::parse(line);
    EXPECT_EQ(reply["groups"], Json({"job", "step"}));
    ranks.push_back(reply["process"]["rank"].get<int>());
  }
  EXPECT_EQ(ranks, (std::vector<int>{0, 1}));
  EXPECT_EQ(rank1_.requests().back(), "lens-ctl/1 groups-reset\n");
}

TEST_F(CtlCommand, GroupsRefusedExitsOne) {
  const CtlRun r = run_ctl(with_dir({"groups", "bogus", "--run", "4711", "--rank", "1"}));
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out, "run 4711 rank 1 pid 200: refused: Unknown span group or preset: 'bogus'.\n");
}

TEST_F(CtlCommand, GroupsWithNoMatchExitsThree) {
  const CtlRun r = run_ctl(with_dir({"groups", "all", "--run", "9999"}));
  EXPECT_EQ(r.status, 3);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "lens ctl: no lens process in " + dir_.path() +
                       " matches --run 9999 (found runs: 4711 (2 processes), 4712 (1 process))\n");
}

TEST_F(CtlCommand, DumpIsOneTableLongestOpenFirst) {
  const CtlRun r = run_ctl(with_dir({"dump", "--run", "4711"}));
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out,
            "OPEN  RANK  PID  TID  GROUP          NAME            EXPORTED  STACK"
            "                        ATTRIBUTES\n"
            "9.4s     0  100  101  communication  all_reduce      no        "
            "train_step > all_reduce\n"
            "0.3s     1  200  201  optimizer      optimizer_step  yes       "
            "train_step > optimizer_step\n"
            "\n"
            "rank 0 pid 100: started 3 ended 2 exported 2 buffered 0 dropped 0/0/0 rejected 0 "
            "truncated 0; metric points buffered 0 dropped 0; log records buffered 0 dropped 0\n"
            "rank 1 pid 200: started 3 ended 2 exported 2 buffered 0 dropped 0/0/0 rejected 0 "
            "truncated 0; metric points buffered 0 dropped 0; log records buffered 0 dropped 0\n");
  EXPECT_EQ(r.err, "");
}

TEST_F(CtlCommand, DumpJsonIsTheRepliesUnchanged) {
  const CtlRun r = run_ctl(with_dir({"dump", "--json"}));
  EXPECT_EQ(r.status, 0) << r.err;
  std::istringstream lines(r.out);
  std::string line;
  std::vector<int> pids;
  while (std::getline(lines, line)) {
    const Json reply = Json::parse(line);
    EXPECT_EQ(line, reply.dump());  // as the endpoint sent it (nlohmann's compact dump)
    pids.push_back(reply["process"]["pid"].get<int>());
  }
  EXPECT_EQ(pids, (std::vector<int>{100, 200, 300}));
}

TEST_F(CtlCommand, DumpOfNothingMatchingExitsThree) {
  const CtlRun r = run_ctl(with_dir({"dump", "--pid", "1"}));
  EXPECT_EQ(r.status, 3);
  EXPECT_NE(r.err.find("matches --pid 1"), std::string::npos) << r.err;
}

TEST_F(CtlCommand, DumpRefusedByOneProcessExitsOneAndShowsTheOthers) {
  FakeEndpoint refusing(
      dir_.file("4711.2.250.sock"), FakeEndpoint::Mode::answer, [](const std::string&) {
        return Json{
            {"protocol", 1}, {"ok", false}, {"process", process("4711", 2, 250, {})}, {"error", 42}}
            .dump();
      });
  const CtlRun r = run_ctl(with_dir({"dump", "--run", "4711"}));
  EXPECT_EQ(r.status, 1);
  EXPECT_NE(r.out.find("rank 0 pid 100: started 3"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("rank 1 pid 200: started 3"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("pid 250"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "lens ctl: run 4711 rank 2 pid 250 (" + dir_.file("4711.2.250.sock") +
                       "): refused: 42\n");
}

TEST_F(CtlCommand, GroupsReportsAProcessThatStopsAnswering) {
  // Answers info, then takes longer than --timeout over groups.
  const Json p = process("4711", 7, 700, {"job"});
  FakeEndpoint slow(dir_.file("4711.7.700.sock"), FakeEndpoint::Mode::answer,
                    [p, info = behave_as(p)](const std::string& line) {
                      if (line != "lens-ctl/1 info\n") std::this_thread::sleep_for(600ms);
                      return info(line);
                    });
  const CtlRun r =
      run_ctl({"groups", "all", "--run", "4711", "--dir", dir_.path(), "--timeout", "0.3"});
  EXPECT_EQ(r.status, 1);
  EXPECT_EQ(r.out,
            "run 4711 rank 0 pid 100: job,step -> all,job\n"
            "run 4711 rank 1 pid 200: job,step -> all,job\n"
            "run 4711 rank 7 pid 700: not reached: timed out after 0.3s waiting for a reply\n");
  EXPECT_EQ(r.err, "lens ctl: " + dir_.file("4711.7.700.sock") +
                       ": timed out after 0.3s waiting for a reply\n");
}

// ---- whom lens ctl trusts ----

/// The unprivileged uid (and gid) of "nobody", the second local user of these tests.
constexpr uid_t kOtherUid = 65534;

/// An endpoint served by another user: a child process that listens on `path` as uid 65534 and
/// answers every connection with `reply` until the test is over. With `make_dir`, the child
/// first makes the directory of `path` as that user, mode 0777, as another local user could
/// under /tmp. Without it, the child binds `path` (in a directory of ours) as root and becomes
/// uid 65534 before listen(), which is whose credentials connecting peers see. Needs root.
class ForeignEndpoint {
 public:
  ForeignEndpoint(const std::string& path, std::string reply, bool make_dir) {
    int ready[2];
    int stop[2];
    if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(stop, O_CLOEXEC) != 0) {
      throw std::runtime_error("pipe2 failed");
    }
    const std::string dir = path.substr(0, path.rfind('/'));
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::strncpy(address.sun_path, path.c_str(), sizeof address.sun_path - 1);
    pid_ = ::fork();
    if (pid_ < 0) throw std::runtime_error("fork failed");
    if (pid_ == 0) {
      ::close(ready[0]);
      ::close(stop[1]);
      serve(ready[1], stop[0], dir, address, reply, make_dir);  // never returns
    }
    ::close(ready[1]);
    ::close(stop[0]);
    stop_ = stop[1];
    pollfd p{ready[0], POLLIN, 0};
    char status = 'x';
    const bool up = ::poll(&p, 1, 10'000) == 1 && ::read(ready[0], &status, 1) == 1;
    ::close(ready[0]);
    if (!up || status != 'r') {
      finish();
      throw std::runtime_error("the endpoint of uid 65534 did not start (" +
                               std::string(1, status) + ")");
    }
  }
  ~ForeignEndpoint() { finish(); }
  ForeignEndpoint(const ForeignEndpoint&) = delete;
  ForeignEndpoint& operator=(const ForeignEndpoint&) = delete;

  /// Stops the child; how many request bytes it received (at most 255).
  int finish() {
    if (pid_ <= 0) return received_;
    ::close(stop_);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    received_ = WIFEXITED(status) ? WEXITSTATUS(status) : 255;
    return received_;
  }

 private:
  // The child: only system calls from here on. Reports 'r' when listening, else a letter saying
  // which step failed.
  [[noreturn]] static void serve(int ready, int stop, const std::string& dir,
                                 const sockaddr_un& address, const std::string& reply,
                                 bool make_dir) {
    auto fail = [ready](char step) {
      (void)!::write(ready, &step, 1);
      ::_exit(254);
    };
    auto become_other = [&] {
      if (::setgroups(0, nullptr) != 0 || ::setgid(kOtherUid) != 0 || ::setuid(kOtherUid) != 0) {
        fail('u');
      }
    };
    if (make_dir) {
      become_other();
      ::umask(0);
      if (::mkdir(dir.c_str(), 0777) != 0) fail('d');
    }
    const int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail('s');
    if (::bind(fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) fail('b');
    if (!make_dir) become_other();
    if (::listen(fd, 16) != 0) fail('l');
    (void)!::write(ready, "r", 1);
    int received = 0;
    for (int rounds = 0; rounds < 300; ++rounds) {  // at most 30 s, should the test hang
      pollfd p[2] = {{stop, POLLIN, 0}, {fd, POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0) continue;
      if (p[0].revents != 0) break;  // the test closed its end
      const int c = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      pollfd in{c, POLLIN, 0};
      char buf[512];
      if (::poll(&in, 1, 500) == 1) {
        const ssize_t n = ::recv(c, buf, sizeof buf, MSG_DONTWAIT);
        if (n > 0) received += static_cast<int>(n);
      }
      (void)!::send(c, reply.data(), reply.size(), MSG_NOSIGNAL);
      ::close(c);
    }
    ::_exit(received > 253 ? 253 : received);
  }

  pid_t pid_ = -1;
  int stop_ = -1;
  int received_ = 0;
};

/// What another user's endpoint would say to pass for one of our processes, with escape
/// sequences in its service name.
std::string impostor_reply() {
  Json p = process("4711", 0, 4242, {"job"});
  p["service"] = "nemo\x1b]0;owned\x07";
  return Json{{"protocol", 1}, {"ok", true}, {"process", p}}.dump() + "\n";
}

bool running_as_root() { return ::geteuid() == 0; }

TEST(CtlTrust, ADirectoryOfAnotherUserIsRefusedAndItsEndpointsGetNoRequest) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to act as a second local user (uid 65534)";
  // As under /tmp: a directory everyone may create entries in.
  TempDir base;
  ASSERT_EQ(::chmod(base.path().c_str(), 01777), 0);
  const std::string dir = base.file("lens-" + std::to_string(::geteuid()));
  ForeignEndpoint impostor(dir + "/4711.0.4242.sock", impostor_reply(), /*make_dir=*/true);
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"list"}, {"groups", "all"}, {"dump"}}) {
    std::vector<std::string> full = args;
    full.insert(full.end(), {"--dir", dir, "--timeout", "2"});
    const CtlRun r = run_ctl(full);
    EXPECT_EQ(r.status, 2) << args[0];
    EXPECT_EQ(r.out, "") << args[0];
    EXPECT_EQ(r.err,
              "lens ctl: refusing the control directory " + dir +
                  ": it belongs to uid 65534, not to this user (uid 0), so its endpoints may "
                  "pose as your processes; remove it if it is not yours, or give your "
                  "jobs and lens ctl a directory of your own with NEMO_LENS_CONTROL_DIR "
                  "(lens ctl also takes --dir)\n")
        << args[0];
  }
  EXPECT_EQ(impostor.finish(), 0) << "no request may reach another user's endpoint";
}

TEST(CtlTrust, ADirectoryOpenToOtherUsersIsRefused) {
  TempDir dir;
  FakeEndpoint ours(dir.file("4711.0.100.sock"), FakeEndpoint::Mode::answer,
                    behave_as(process("4711", 0, 100, {"job"})));
  for (const unsigned mode : {0777u, 0770u, 0705u}) {
    ASSERT_EQ(::chmod(dir.path().c_str(), mode), 0);
    const CtlRun r = run_ctl({"groups", "all", "--dir", dir.path()});
    char text[8];
    std::snprintf(text, sizeof text, "%04o", static_cast<unsigned>(mode));
    EXPECT_EQ(r.status, 2) << text;
    EXPECT_EQ(r.err, "lens ctl: refusing the control directory " + dir.path() +
                         ": it is open to other users (mode " + text +
                         "), so its endpoints may pose as your processes; lens makes it with "
                         "mode 0700: check what is in it, then chmod 700 it\n");
  }
  EXPECT_TRUE(ours.requests().empty());
  ASSERT_EQ(::chmod(dir.path().c_str(), 0700), 0);
  EXPECT_EQ(run_ctl({"list", "--dir", dir.path()}).status, 0);
}

TEST(CtlTrust, ASymbolicLinkToADirectoryIsRefused) {
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("real").c_str(), 0700), 0);
  FakeEndpoint ours(dir.file("real/4711.0.100.sock"), FakeEndpoint::Mode::answer,
                    behave_as(process("4711", 0, 100, {"job"})));
  ASSERT_EQ(::symlink("real", dir.file("link").c_str()), 0);
  const CtlRun r = run_ctl({"list", "--dir", dir.file("link")});
  EXPECT_EQ(r.status, 2);
  EXPECT_EQ(r.err.rfind("lens ctl: refusing the control directory " + dir.file("link") +
                            ": it is a symbolic link, which lens never makes",
                        0),
            0u)
      << r.err;
  EXPECT_TRUE(ours.requests().empty());
}

TEST(CtlTrust, AnEndpointServedByAnotherUserGetsNoRequestAndIsNamed) {
  if (!running_as_root()) GTEST_SKIP() << "needs root to act as a second local user (uid 65534)";
  TempDir dir;  // ours, mode 0700: only root could put another user's socket here
  const std::string foreign_path = dir.file("4711.0.4242.sock");
  ForeignEndpoint impostor(foreign_path, impostor_reply(), /*make_dir=*/false);
  FakeEndpoint ours(dir.file("4711.1.200.sock"), FakeEndpoint::Mode::answer,
                    behave_as(process("4711", 1, 200, {"job"})));

  const std::vector<std::string> sockets = {foreign_path};
  const std::vector<Exchange> result = exchange_all(sockets, "info", 2s);
  ASSERT_EQ(result.size(), 1u);
  EXPECT_EQ(result[0].status, ExchangeStatus::unreachable);
  EXPECT_EQ(result[0].problem.rfind("refused: served by uid 65534 (pid ", 0), 0u)
      << result[0].problem;
  EXPECT_NE(result[0].problem.find("), not by you (uid 0); no request sent"), std::string::npos)
      << result[0].problem;

  const CtlRun list = run_ctl({"list", "--dir", dir.path(), "--timeout", "2"});
  EXPECT_EQ(list.status, 1);
  EXPECT_EQ(list.out,
            "RUN   RANK  PID  SERVICE  GROUPS  UPTIME  EXPORTING\n"
            "4711     1  200  nemo     job      10.0s  no\n");
  EXPECT_EQ(list.err.rfind("lens ctl: " + foreign_path + ": refused: served by uid 65534", 0), 0u)
      << list.err;
  const CtlRun groups = run_ctl({"groups", "all", "--dir", dir.path(), "--timeout", "2"});
  EXPECT_EQ(groups.status, 1);
  EXPECT_EQ(groups.out, "run 4711 rank 1 pid 200: job -> all,job\n");
  EXPECT_EQ(impostor.finish(), 0) << "no request may reach another user's endpoint";
}

TEST(CtlCommandLine, MissingDirectory) {
  const CtlRun list = run_ctl({"list", "--dir", "/nonexistent/lens-ctl"});
  EXPECT_EQ(list.status, 0);
  EXPECT_EQ(list.out, "");
  EXPECT_EQ(list.err, "lens ctl: no lens processes found in /nonexistent/lens-ctl\n");
  EXPECT_EQ(run_ctl({"dump", "--dir", "/nonexistent/lens-ctl"}).status, 3);
  EXPECT_EQ(run_ctl({"groups", "all", "--dir", "/nonexistent/lens-ctl"}).status, 3);
  EXPECT_EQ(run_ctl({"capture", "--dir", "/nonexistent/lens-ctl"}).status, 3);
}

TEST(CtlCommandLine, UsageErrors) {
  EXPECT_EQ(run_ctl({}).err,
            "UsageError: no sub-command given: expected one of list, groups, dump, capture");
  EXPECT_EQ(run_ctl({"frob"}).err,
            "UsageError: unknown sub-command 'frob': expected one of list, groups, dump, capture");
  EXPECT_EQ(run_ctl({"groups"}).err,
            "UsageError: no SPEC given: expected a span-group spec (e.g. all) or --reset");
  EXPECT_EQ(run_ctl({"groups", "all", "--reset"}).err,
            "UsageError: give either SPEC or --reset, not both");
  EXPECT_EQ(run_ctl({"groups", "all", "job"}).err.rfind("UsageError: unexpected argument 'job'", 0),
            0u);
  EXPECT_EQ(run_ctl({"groups", "a\nb"}).err,
            "UsageError: invalid SPEC: it must not contain line breaks or control characters");
  EXPECT_EQ(
      run_ctl({"groups", std::string(5000, 'a')}).err.rfind("UsageError: SPEC is too long", 0), 0u);
  EXPECT_EQ(run_ctl({"capture", "a", "b"}).err.rfind("UsageError: unexpected argument 'b'", 0), 0u);
  EXPECT_EQ(run_ctl({"capture", "x\ty"}).err,
            "UsageError: invalid REASON: it must not be empty or contain control characters");
  EXPECT_EQ(run_ctl({"capture", ""}).err,
            "UsageError: invalid REASON: it must not be empty or contain control characters");
  EXPECT_EQ(
      run_ctl({"capture", std::string(5000, 'a')}).err.rfind("UsageError: REASON is too long", 0),
      0u);
  EXPECT_EQ(run_ctl({"list", "extra"}).err, "UsageError: unexpected argument 'extra'");
  EXPECT_EQ(run_ctl({"list", "--reset"}).err, "UsageError: unknown option '--reset'");
  EXPECT_EQ(run_ctl({"dump", "--rank", "0,,1"}).err,
            "UsageError: invalid value '0,,1' for --rank: expected a rank >= 0 or a "
            "comma-separated list of them, e.g. 3 or 0,2");
  EXPECT_EQ(run_ctl({"dump", "--rank", "-1"}).err,
            "UsageError: invalid value '-1' for --rank: expected a rank >= 0 or a "
            "comma-separated list of them, e.g. 3 or 0,2");
  EXPECT_EQ(run_ctl({"dump", "--pid", "0"}).err,
            "UsageError: invalid value '0' for --pid: expected a process id >= 1, e.g. 12345");
  for (const char* bad : {"0", "-1", "abc", "5s", "nan", "inf", "3601", ""}) {
    EXPECT_EQ(run_ctl({"list", "--timeout", bad}).err,
              "UsageError: invalid value '" + std::string(bad) +
                  "' for --timeout: expected a number of seconds > 0 and <= 3600, e.g. 5 or 0.5")
        << bad;
  }
  EXPECT_EQ(run_ctl({"list", "--dir="}).err, "UsageError: --dir requires a directory");
  EXPECT_EQ(run_ctl({"list", "--run="}).err, "UsageError: --run requires a run id");
}

}  // namespace
}  // namespace nemo::lens::cli::ctl
