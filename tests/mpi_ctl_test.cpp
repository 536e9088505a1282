// `lens ctl` against a hung MPI job: four ranks under mpirun, one blocked inside its all-reduce
// span (tests/mpi/mpi_hang_job.cpp), the others waiting for it in MPI_Allreduce. Only rank 3
// exports; every rank tracks every group (NEMO_LENS_TRACK_OPEN=all).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "control_client.hpp"
#include "ctl_run.hpp"
#include "mpi_session.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

using lens_test::words;

lens_test::CtlOutput lens_ctl(const lens_test::TempDir& dir, std::vector<std::string> args) {
  return lens_test::run_lens_ctl(dir.path(), std::move(args));
}

// Reads "ready <rank>" lines from `fd` until `count` ranks said so or `timeout` passed.
std::set<int> wait_ready(int fd, int count, std::chrono::milliseconds timeout) {
  std::set<int> ready;
  std::string pending;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (static_cast<int>(ready.size()) < count) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) break;
    char buf[256];
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) break;
    pending.append(buf, static_cast<std::size_t>(n));
    for (std::size_t nl; (nl = pending.find('\n')) != std::string::npos; pending.erase(0, nl + 1)) {
      const auto w = words(pending.substr(0, nl));
      if (w.size() == 2 && w[0] == "ready") ready.insert(std::stoi(w[1]));
    }
  }
  return ready;
}

TEST(MpiCtl, DumpNamesTheRankStuckInsideItsAllReduce) {
  constexpr int kStuck = 2;
  lens_test::ScopedEnv env;
  lens_test::TempDir dir;
  const std::string ctl_dir = (dir.path() / "ctl").string();
  const std::string ready_fifo = (dir.path() / "ready").string();
  const std::string release_fifo = (dir.path() / "release").string();
  const std::string proceed_fifo = (dir.path() / "proceed").string();
  ASSERT_EQ(::mkfifo(ready_fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(release_fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(proceed_fifo.c_str(), 0600), 0);
  const std::string run = "hang" + std::to_string(::getpid());
  env.set("NEMO_LENS_ENABLED", "1");
  env.set("NEMO_LENS_RUN_ID", run);
  env.set("NEMO_LENS_TRACK_OPEN", "all");
  env.set("NEMO_LENS_CONTROL_DIR", ctl_dir);
  env.set("NEMO_LENS_EXPORTER", "file");
  env.set("NEMO_LENS_EXPORT_PATH", (dir.path() / "spans.jsonl").string());
  // Metrics are on by default: each rank's file goes into the test's directory, not the working
  // one.
  env.set("NEMO_LENS_METRICS_EXPORT_PATH", (dir.path() / "metrics-{rank}.jsonl").string());
  env.set("LENS_HANG_RANK", std::to_string(kStuck));
  env.set("LENS_HANG_READY", ready_fifo);
  env.set("LENS_HANG_RELEASE", release_fifo);
  env.set("LENS_HANG_PROCEED", proceed_fifo);
  // Read and write: the test holds a writer itself, so the FIFO never reports end-of-file
  // between the ranks' writes.
  const int ready_fd = ::open(ready_fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(ready_fd, 0);
  const lens_test::PrivateMpiSession session;
  lens_test::ChildProcess mpirun(
      {MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", MPI_HANG_JOB});
  // Opening a FIFO for writing and closing it lets the stuck rank, blocked reading it, go on.
  auto signal_fifo = [](const std::string& path) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd >= 0) ::close(fd);
  };
  // Whatever fails below, the job is let go and stopped, so no rank is left blocked on a FIFO.
  struct Cleanup {
    lens_test::ChildProcess& job;
    std::vector<std::string> fifos;
    bool done = false;
    ~Cleanup() {
      if (done) return;
      for (const auto& f : fifos) {
        const int fd = ::open(f.c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);  // only if read
        if (fd >= 0) ::close(fd);
      }
      job.signal(SIGTERM);  // mpirun stops its ranks
      job.wait(std::chrono::seconds(20));
    }
  } cleanup{mpirun, {proceed_fifo, release_fifo}};
  ASSERT_EQ(wait_ready(ready_fd, 1, 60s), std::set<int>{kStuck}) << mpirun.stderr_text();
  // Alone in its collective: only the stuck rank is inside all_reduce.
  const auto alone = lens_ctl(dir, {"dump", "--run", run, "--dir", ctl_dir, "--json"});
  std::istringstream alone_lines(alone.out);
  int inside = 0;
  for (std::string line; std::getline(alone_lines, line);) {
    const Json r = Json::parse(line);
    for (const auto& t : r["threads"]) {
      if (!t["spans"].empty() && t["spans"].back()["name"] == "all_reduce") {
        ++inside;
        EXPECT_EQ(r["process"]["rank"], kStuck) << line;
      }
    }
  }
  EXPECT_EQ(inside, 1) << alone.out;
  signal_fifo(proceed_fifo);
  const std::set<int> ready = wait_ready(ready_fd, 3, 60s);
  ::close(ready_fd);
  ASSERT_EQ(ready, (std::set<int>{0, 1, 3})) << mpirun.stderr_text();

  // The table: the stuck rank's all-reduce, open longest, is the first row.
  const auto dump = lens_ctl(dir, {"dump", "--run", run, "--dir", ctl_dir});
  EXPECT_EQ(dump.status, 0) << dump.err;
  std::istringstream table(dump.out);
  std::string header, first;
  std::getline(table, header);
  std::getline(table, first);
  const auto h = words(header), row = words(first);
  ASSERT_GE(h.size(), 7u) << dump.out;
  ASSERT_EQ(h[0], "OPEN") << dump.out;
  ASSERT_GE(row.size(), 7u) << dump.out;
  EXPECT_EQ(row[1], std::to_string(kStuck)) << dump.out;
  EXPECT_EQ(row[4], "communication") << dump.out;
  EXPECT_EQ(row[5], "all_reduce") << dump.out;

  // The JSON Lines: one reply per rank, every rank inside pretrain > train_step > all_reduce.
  // Only rank 3 exports, and only the ungated pretrain span: step and communication are not in
  // `default`, they are tracked (NEMO_LENS_TRACK_OPEN=all), not exported.
  const auto json = lens_ctl(dir, {"dump", "--run", run, "--dir", ctl_dir, "--json"});
  EXPECT_EQ(json.status, 0) << json.err;
  std::istringstream lines(json.out);
  std::set<int> ranks;
  for (std::string line; std::getline(lines, line);) {
    const Json r = Json::parse(line);
    const int rank = r["process"]["rank"];
    ranks.insert(rank);
    EXPECT_EQ(r["process"]["exporting"], rank == 3);
    bool found = false;
    for (const auto& t : r["threads"]) {
      const auto& spans = t["spans"];
      if (spans.size() != 3) continue;
      found = spans[0]["name"] == "pretrain" && spans[1]["name"] == "train_step" &&
              spans[2]["name"] == "all_reduce" && spans[0]["exported"] == (rank == 3) &&
              spans[1]["exported"] == false && spans[2]["exported"] == false;
    }
    EXPECT_TRUE(found) << line;
  }
  EXPECT_EQ(ranks, (std::set<int>{0, 1, 2, 3}));

  // Every rank switches groups at once, and lists itself.
  const auto groups = lens_ctl(dir, {"groups", "all", "--run", run, "--dir", ctl_dir});
  EXPECT_EQ(groups.status, 0) << groups.out << groups.err;
  EXPECT_EQ(std::count(groups.out.begin(), groups.out.end(), '\n'), 4) << groups.out;
  const auto list = lens_ctl(dir, {"list", "--run", run, "--dir", ctl_dir, "--json"});
  EXPECT_EQ(list.status, 0) << list.err;
  std::istringstream processes(list.out);
  int listed = 0;
  for (std::string line; std::getline(processes, line); ++listed) {
    EXPECT_TRUE(Json::parse(line)["groups"].size() > 3) << line;
  }
  EXPECT_EQ(listed, 4);

  signal_fifo(release_fifo);
  cleanup.done = true;
  EXPECT_EQ(mpirun.wait(60s), 0) << mpirun.stderr_text();
  EXPECT_TRUE(lens_test::control_sockets(ctl_dir).empty()) << "every rank removed its endpoint";
}

}  // namespace
