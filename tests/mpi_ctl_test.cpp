// `lens ctl` against a hung MPI job: four ranks under mpirun, one blocked inside its all-reduce
// span (tests/mpi/mpi_hang_job.cpp), the others waiting for it in MPI_Allreduce. Only rank 3
// exports; every rank tracks every group (NEMO_LENS_TRACK_OPEN=all).
#include <fcntl.h>
#include <poll.h>
#include <sys/stat.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "control_client.hpp"
#include "scoped_env.hpp"

namespace {

using namespace std::chrono_literals;
using Json = nlohmann::json;

struct Output {
  int status = -1;
  std::string out, err;
};

// Runs `lens ctl ARGS` and returns its exit status, stdout and stderr.
Output lens_ctl(const lens_test::TempDir& dir, std::vector<std::string> args) {
  static int counter = 0;
  const std::string out_path = (dir.path() / ("ctl_out_" + std::to_string(counter++))).string();
  args.insert(args.begin(), {LENS_BINARY, "ctl"});
  lens_test::ChildProcess p(args, out_path);
  Output o;
  o.status = p.wait(30s);
  o.err = p.stderr_text();
  std::ifstream in(out_path);
  o.out.assign(std::istreambuf_iterator<char>(in), {});
  return o;
}

std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
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
  ASSERT_EQ(::mkfifo(ready_fifo.c_str(), 0600), 0);
  ASSERT_EQ(::mkfifo(release_fifo.c_str(), 0600), 0);
  const std::string run = "hang" + std::to_string(::getpid());
  env.set("NEMO_LENS_ENABLED", "1");
  env.set("NEMO_LENS_RUN_ID", run);
  env.set("NEMO_LENS_TRACK_OPEN", "all");
  env.set("NEMO_LENS_CONTROL_DIR", ctl_dir);
  env.set("NEMO_LENS_EXPORTER", "file");
  env.set("NEMO_LENS_EXPORT_PATH", (dir.path() / "spans.jsonl").string());
  env.set("LENS_HANG_RANK", std::to_string(kStuck));
  env.set("LENS_HANG_READY", ready_fifo);
  env.set("LENS_HANG_RELEASE", release_fifo);
  // Read and write: the test holds a writer itself, so the FIFO never reports end-of-file
  // between the ranks' writes.
  const int ready_fd = ::open(ready_fifo.c_str(), O_RDWR | O_CLOEXEC);
  ASSERT_GE(ready_fd, 0);
  lens_test::ChildProcess mpirun(
      {MPIRUN, "--allow-run-as-root", "--oversubscribe", "-np", "4", MPI_HANG_JOB});
  bool released = false;
  auto release = [&] {
    if (released) return;
    released = true;
    const int fd = ::open(release_fifo.c_str(), O_WRONLY | O_CLOEXEC);  // the stuck rank reads
    if (fd >= 0) ::close(fd);
  };
  const std::set<int> ready = wait_ready(ready_fd, 4, 60s);
  ::close(ready_fd);
  ASSERT_EQ(ready, (std::set<int>{0, 1, 2, 3})) << mpirun.stderr_text();

  // The table: the stuck rank's all-reduce, open longest, is the first row.
  const Output dump = lens_ctl(dir, {"dump", "--run", run, "--dir", ctl_dir});
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
  const Output json = lens_ctl(dir, {"dump", "--run", run, "--dir", ctl_dir, "--json"});
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
  const Output groups = lens_ctl(dir, {"groups", "all", "--run", run, "--dir", ctl_dir});
  EXPECT_EQ(groups.status, 0) << groups.out << groups.err;
  EXPECT_EQ(std::count(groups.out.begin(), groups.out.end(), '\n'), 4) << groups.out;
  const Output list = lens_ctl(dir, {"list", "--run", run, "--dir", ctl_dir, "--json"});
  EXPECT_EQ(list.status, 0) << list.err;
  std::istringstream processes(list.out);
  int listed = 0;
  for (std::string line; std::getline(processes, line); ++listed) {
    EXPECT_TRUE(Json::parse(line)["groups"].size() > 3) << line;
  }
  EXPECT_EQ(listed, 4);

  release();
  EXPECT_EQ(mpirun.wait(60s), 0) << mpirun.stderr_text();
  EXPECT_TRUE(lens_test::control_sockets(ctl_dir).empty()) << "every rank removed its endpoint";
}

}  // namespace
