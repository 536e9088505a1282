// `lens collect`'s OTLP/HTTP front-end under clients that hold connections or give up, as a real
// process on 127.0.0.1 spoken to over raw sockets: idle and slow connections cannot lock out a
// writer (the longest idle is shed for a new connection at a limit), keep-alive clients are all
// served and written once, a request whose client has gone is not written, and a line torn by a
// crash is cut off at the next start.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "lens_collect.hpp"

namespace {

using namespace std::chrono_literals;
using lens_test::ChildProcess;
using lens_test::Collector;
using lens_test::lines_of;
using Clock = std::chrono::steady_clock;

// A TCP connection to 127.0.0.1:`port`, from `from` (another loopback address stands for another
// machine); -1 when it cannot be made.
int connect_to(int port, const char* from = "127.0.0.1") {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in local{};
  local.sin_family = AF_INET;
  inet_pton(AF_INET, from, &local.sin_addr);
  sockaddr_in remote{};
  remote.sin_family = AF_INET;
  remote.sin_port = htons(static_cast<std::uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &remote.sin_addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local) != 0 ||
      ::connect(fd, reinterpret_cast<sockaddr*>(&remote), sizeof remote) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// An OTLP/JSON trace request of one span whose id ends in `id`.
std::string span_body(unsigned id) {
  char span_id[17];
  std::snprintf(span_id, sizeof span_id, "%016x", id);
  return std::string(R"({"resourceSpans":[{"scopeSpans":[{"spans":[{"traceId":")") +
         "0102030405060708090a0b0c0d0e0f10" + R"(","spanId":")" + span_id +
         R"(","name":"s","startTimeUnixNano":"1","endTimeUnixNano":"2"}]}]}]})";
}

// POST /v1/traces of `body`, keep-alive, with the token when one is given.
std::string post(const std::string& body, const std::string& token = "") {
  std::string r =
      "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n";
  if (!token.empty()) r += "Authorization: Bearer " + token + "\r\n";
  return r + "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body;
}

bool send_all(int fd, const std::string& data) {
  std::size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::send(fd, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n <= 0) return false;
    done += static_cast<std::size_t>(n);
  }
  return true;
}

// Reads one HTTP response from `fd` by `deadline`: its status, 0 when none came in time, -1 when
// the connection ended first.
int read_response(int fd, Clock::time_point deadline) {
  std::string in;
  for (;;) {
    const auto head_end = in.find("\r\n\r\n");
    if (head_end != std::string::npos) {
      std::size_t length = 0;
      const auto at = in.find("Content-Length: ");
      if (at != std::string::npos && at < head_end) length = std::stoul(in.substr(at + 16));
      if (in.size() >= head_end + 4 + length) return std::stoi(in.substr(9, 3));
    }
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left <= 0ms) return 0;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof buffer, 0);
    if (n <= 0) return -1;
    in.append(buffer, static_cast<std::size_t>(n));
  }
}

// How many of `fds` the other end closes within `limit`.
int count_closed(std::vector<int> fds, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  int closed = 0;
  while (!fds.empty() && Clock::now() < deadline) {
    std::vector<pollfd> polls;
    for (const int fd : fds) polls.push_back({fd, POLLIN, 0});
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (::poll(polls.data(), polls.size(), static_cast<int>(std::max<long>(left.count(), 0))) <=
        0) {
      continue;
    }
    std::vector<int> open;
    for (const pollfd& p : polls) {
      char byte;
      if (p.revents != 0 && ::recv(p.fd, &byte, 1, MSG_DONTWAIT) <= 0) {
        ++closed;
      } else {
        open.push_back(p.fd);
      }
    }
    fds = open;
  }
  return closed;
}

class CollectLimits : public ::testing::Test {
 protected:
  void SetUp() override {
    out_ = lens_test::temp_path(::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::remove(out_.c_str());
  }
  void TearDown() override {
    for (const int fd : fds_) ::close(fd);
    std::remove(out_.c_str());
    std::remove((out_ + ".stdout").c_str());
    std::remove((out_ + ".token").c_str());
  }
  int keep(int fd) {
    if (fd >= 0) fds_.push_back(fd);
    return fd;
  }

  std::string out_;
  std::vector<int> fds_;
};

// Finding 2 of issue 28: connections that never send anything filled the listener's 256 and a
// writer with the token waited for their 60 s idle timeout. Issue 39: capped at 256 per address,
// they still kept out every later connection from that address. Now, past the cap, each new
// connection takes the place of the one that has waited longest without sending a request.
TEST_F(CollectLimits, IdleConnectionsFromAnotherAddressDoNotLockOutAWriter) {
  std::ofstream(out_ + ".token") << "t0ken\n";
  auto collect = Collector::with_args(
      out_, {"--out", out_, "--token-file", out_ + ".token", "--grpc-listen", "off"});
  // 300 connections from 127.0.0.2 that never send a byte.
  int made = 0;
  for (int i = 0; i < 300; ++i) made += keep(connect_to(collect->http_port(), "127.0.0.2")) >= 0;
  ASSERT_EQ(made, 300) << "127.0.0.2 is not usable as a source address here";
  // Past 256 unproven ones, the oldest of 127.0.0.2's are shut down for the newest: 44 of them,
  // or 43 when the two listener threads each let one in at the same moment.
  EXPECT_GE(count_closed({fds_.begin(), fds_.begin() + 44}, 5s), 43);
  // The writer (the same host as the idle ones, or not) is answered well within its timeout.
  for (const char* from : {"127.0.0.1", "127.0.0.2"}) {
    const int fd = keep(connect_to(collect->http_port(), from));
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, post(span_body(from[8] == '1' ? 1 : 2), "t0ken")));
    EXPECT_EQ(read_response(fd, Clock::now() + 5s), 200) << "from " << from;
  }
  ASSERT_EQ(collect->stop(), 0);
  EXPECT_EQ(lines_of(out_).size(), 2u);
  EXPECT_NE(collect->summary().find(" idle connections shed; "), std::string::npos)
      << collect->summary();
}

// Issue 39: 300 idle connections from the writer's own address, renewed as fast as they are shed
// (what one local process holding connections open does), and an export every second for 15 s:
// each is answered 200 well within the header deadline and written.
TEST_F(CollectLimits, AWriterIsAnsweredEverySecondBesideThreeHundredIdleConnectionsOfItsAddress) {
  auto collect = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  std::vector<int> idle;
  auto top_up = [&] {  // closes the ones the collector shed, opens new ones up to 300
    std::vector<int> still;
    for (const int fd : idle) {
      char byte;
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, 0) > 0 && ::recv(fd, &byte, 1, MSG_DONTWAIT) <= 0) {
        ::close(fd);
      } else {
        still.push_back(fd);
      }
    }
    idle = std::move(still);
    while (idle.size() < 300) {
      const int fd = connect_to(collect->http_port());
      if (fd < 0) break;
      idle.push_back(fd);
    }
  };
  constexpr int kExports = 15;
  for (int i = 0; i < kExports; ++i) {
    const auto round = Clock::now();
    top_up();
    ASSERT_EQ(idle.size(), 300u);
    const int fd = connect_to(collect->http_port());
    ASSERT_GE(fd, 0);
    ASSERT_TRUE(send_all(fd, post(span_body(static_cast<unsigned>(i) + 1))));
    EXPECT_EQ(read_response(fd, Clock::now() + 5s), 200) << "export " << i;
    ::close(fd);
    std::this_thread::sleep_until(round + 1s);  // one export a second, as an exporter's schedule
  }
  for (const int fd : idle) ::close(fd);
  ASSERT_EQ(collect->stop(), 0);
  EXPECT_EQ(lines_of(out_).size(), static_cast<std::size_t>(kExports));
  EXPECT_NE(collect->summary().find(" idle connections shed; "), std::string::npos)
      << collect->summary();
  std::printf("%s", collect->summary().c_str());  // the figure docs/otlp.md quotes
}

// A connection that sends a header line now and then (never the end of its headers) is shut at
// the header deadline, however active it looks.
TEST_F(CollectLimits, SlowHeadersAreCutAtTheHeaderDeadline) {
  auto collect =
      Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off", "--header-timeout", "1"});
  const int fd = keep(connect_to(collect->http_port()));
  ASSERT_GE(fd, 0);
  ASSERT_TRUE(send_all(fd, "POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"));
  const auto start = Clock::now();
  bool open = true;
  for (int i = 0; i < 40 && open; ++i) {  // a line each 100 ms, for at most 4 s
    open = send_all(fd, "X-Slow: " + std::to_string(i) + "\r\n");
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) == 1) open = false;  // the end (or an error answer before it)
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_FALSE(open);
  EXPECT_GE(seconds, 0.8);
  EXPECT_LT(seconds, 3.5);
  // A writer that sends its headers at once is served as ever.
  const int writer = keep(connect_to(collect->http_port()));
  ASSERT_TRUE(send_all(writer, post(span_body(1))));
  EXPECT_EQ(read_response(writer, Clock::now() + 5s), 200);
  ASSERT_EQ(collect->stop(), 0);
  EXPECT_EQ(lines_of(out_).size(), 1u);
}

// Finding 3: 250 keep-alive clients of 3 requests each, all connected at once; about 128 were
// not served before their timeout (the 256 connections were split between the two server
// threads, and the idle keep-alive connections held them) and many were written after the client
// gave up. Now each is answered in time and written exactly once. Issue 39: with 8 requests each,
// MHD's epoll left a round unanswered about once in 20 runs (the receiver now polls).
TEST_F(CollectLimits, KeepAliveClientsAreAllAnsweredAndWrittenOnce) {
  auto collect = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  constexpr int kClients = 250;
  constexpr int kRequests = 8;  // rounds: MHD's epoll lost one now and then (collector.cpp)
  std::vector<int> clients;
  for (int c = 0; c < kClients; ++c) clients.push_back(keep(connect_to(collect->http_port())));
  int answered = 0;
  for (int r = 0; r < kRequests; ++r) {  // each round: every client sends, then reads its answer
    for (int c = 0; c < kClients; ++c) {
      ASSERT_TRUE(
          send_all(clients[c], post(span_body(static_cast<unsigned>(r * kClients + c + 1)))));
    }
    const auto deadline = Clock::now() + 10s;  // lens' exporter's default timeout
    int round = 0;
    std::map<int, int> statuses;
    for (const int fd : clients) {
      const int st = read_response(fd, deadline);
      ++statuses[st];
      round += st == 200;
    }
    answered += round;
    std::string dist;
    for (auto [k, v] : statuses) dist += std::to_string(k) + ":" + std::to_string(v) + " ";
    ASSERT_EQ(round, kClients) << "round " << r << ": statuses (0: none in time) " << dist;
  }
  for (int& fd : fds_) {  // the clients go away, as exporters do
    ::close(fd);
  }
  fds_.clear();
  ASSERT_EQ(collect->stop(), 0);
  const lens_test::Received received = lens_test::read_received(out_);
  EXPECT_EQ(received.lines.size(), static_cast<std::size_t>(answered));
  EXPECT_EQ(received.spans.size(), static_cast<std::size_t>(kClients * kRequests));
  EXPECT_EQ(received.duplicates, 0u);
}

// "Written once, only if answered": a client that sent a whole request and left before the answer
// (an exporter that timed out) finds nothing written, so its retry does not duplicate it. The
// request and the end of the connection travel in one segment (TCP_CORK, then shutdown()), so the
// receiver sees the end before it could answer, every time.
TEST_F(CollectLimits, ARequestWhoseClientLeftIsNotWritten) {
  auto collect = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  const int fd = keep(connect_to(collect->http_port()));
  ASSERT_GE(fd, 0);
  const int one = 1;
  ASSERT_EQ(::setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof one), 0);
  ASSERT_TRUE(send_all(fd, post(span_body(7))));
  ASSERT_EQ(::shutdown(fd, SHUT_WR), 0);
  // Whatever it is sent (499, or the end of the connection), it is not a 200.
  const int status = read_response(fd, Clock::now() + 5s);
  EXPECT_TRUE(status == 499 || status == -1) << status;
  // A writer that waits is written.
  const int writer = keep(connect_to(collect->http_port()));
  ASSERT_TRUE(send_all(writer, post(span_body(8))));
  EXPECT_EQ(read_response(writer, Clock::now() + 5s), 200);
  ASSERT_EQ(collect->stop(), 0);
  const lens_test::Received received = lens_test::read_received(out_);
  ASSERT_EQ(received.spans.size(), 1u);
  EXPECT_EQ(received.spans.begin()->first, "0000000000000008");
  EXPECT_NE(collect->summary().find("1 requests, 1 spans, 1 rejected"), std::string::npos)
      << collect->summary();
}

// Finding 4: a crash during a write leaves a torn last line. lens report still reads every whole
// line before it (the fragment is one malformed line), and the next lens collect cuts the
// fragment off, saying so, instead of appending its first line onto it.
TEST_F(CollectLimits, ATornLastLineIsCutAtStartAndTheWholeLinesStay) {
  const std::string whole = span_body(1) + "\n" + span_body(2) + "\n";
  const std::string fragment = span_body(3).substr(0, 40);
  std::ofstream(out_, std::ios::binary) << whole << fragment;
  {
    ChildProcess report({LENS_BINARY, "report", "--json", out_}, out_ + ".stdout");
    ASSERT_EQ(report.wait(), 0) << report.stderr_text();
    std::ifstream in(out_ + ".stdout");
    const nlohmann::json j = nlohmann::json::parse(in);
    EXPECT_EQ(j["input"]["spans"], 2);
    EXPECT_EQ(j["input"]["malformed_lines"], 1);
  }
  auto collect = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  EXPECT_NE(collect->stderr_text().find("--out '" + out_ +
                                        "': removed the 40 bytes of a torn "
                                        "last line"),
            std::string::npos)
      << collect->stderr_text();
  const int writer = keep(connect_to(collect->http_port()));
  ASSERT_TRUE(send_all(writer, post(span_body(4))));
  EXPECT_EQ(read_response(writer, Clock::now() + 5s), 200);
  ASSERT_EQ(collect->stop(), 0);
  const lens_test::Received received = lens_test::read_received(out_);  // throws on a bad line
  EXPECT_EQ(received.lines.size(), 3u);
  EXPECT_EQ(received.spans.count("0000000000000004"), 1u);
  // A file that ends whole is left alone, and nothing is said.
  auto again = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  EXPECT_EQ(again->stderr_text().find("torn"), std::string::npos) << again->stderr_text();
  ASSERT_EQ(again->stop(), 0);
  EXPECT_EQ(lines_of(out_).size(), 3u);
}

// A port in use is said to be one, not confused with a certificate problem.
TEST_F(CollectLimits, APortInUseIsSaidToBeInUse) {
  auto collect = Collector::with_args(out_, {"--out", out_, "--grpc-listen", "off"});
  ChildProcess second({LENS_BINARY, "collect", "--out", out_, "--grpc-listen", "off", "--listen",
                       "127.0.0.1:" + std::to_string(collect->http_port())});
  EXPECT_NE(second.wait(), 0);
  EXPECT_NE(second.stderr_text().find(
                "Cannot listen for OTLP/HTTP on 127.0.0.1:" + std::to_string(collect->http_port()) +
                ": the port is in use (pick another with --listen)"),
            std::string::npos)
      << second.stderr_text();
  ASSERT_EQ(collect->stop(), 0);
}

TEST_F(CollectLimits, ABadHeaderTimeoutIsRefusedNamingTheFlagAndTheRange) {
  for (const std::string value : {"0", "abc", "-1", "3601", "5s", ""}) {
    ChildProcess child({LENS_BINARY, "collect", "--out", out_, "--header-timeout", value});
    EXPECT_EQ(child.wait(), 2) << value;
    EXPECT_NE(child.stderr_text().find("invalid --header-timeout '" + value +
                                       "': expected a number of seconds from 1 to 3600"),
              std::string::npos)
        << child.stderr_text();
  }
}

}  // namespace
