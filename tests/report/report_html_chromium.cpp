// The page `lens report --html` writes, rendered by headless Chromium: its script must have run
// (data-lens-rendered="ok" and the #lens-rendered marker) and drawn one timeline row per rank,
// the straggler row, the per-name rows, the step breakdown, and a chart per metric with a line
// per rank (on the timeline's axis: a point at the first step's start is drawn where that step's
// bar starts); a screenshot of it must not be blank, and the page must log nothing to its
// console. A second page, of 40 ranks' metrics, must draw the aggregate (median, min-max band,
// the ranks furthest from the median named). A third, of a DDP-like job, must draw the spans
// beside the steps on their own row under the steps, overlapped and exposed parts to scale. A
// fourth, of GPU-timed steps, must draw a GPU row under the steps of the rank that has GPU times,
// one box per leaf GPU-timed span, to scale and in its group's colour. A fifth, of 1,024 ranks
// of a synchronous job with one slow rank, must draw a rank x step heat map whose reddest row,
// in a screenshot, is that rank's, named beside it; a sixth, of a job whose step the flight
// recorder captured on every rank, must mark it on the timeline and draw each rank's spans of it,
// the stalled rank first; and a page of two runs a section each. Exits
// 77 (ctest: skipped) when no Chromium is installed; the CHROMIUM variable names one explicitly.
//
//   report_html_chromium LENS_BINARY SYNC_JOB WORK_DIR
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "metrics_fixture.hpp"
#include "report_fixture.hpp"

namespace {

// The number of distinct byte values in a PNG's decompressed image rows (IDAT chunks inflated
// with zlib), or -1 when the file is not a PNG zlib can read. A blank page, once PNG's row
// filters have turned its flat colour into zeros, has only a handful; a rendered report with text,
// bars and tables has hundreds.
int distinct_pixel_bytes(const std::string& png) {
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 8 || std::memcmp(png.data(), kSignature, 8) != 0) return -1;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const auto* p = reinterpret_cast<const unsigned char*>(png.data() + at);
    const std::size_t length =
        (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
    if (at + 12 + length > png.size()) return -1;
    if (std::memcmp(p + 4, "IDAT", 4) == 0) idat.append(png, at + 8, length);
    at += 12 + length;
  }
  z_stream zs{};
  if (inflateInit(&zs) != Z_OK) return -1;
  zs.next_in = reinterpret_cast<Bytef*>(idat.data());
  zs.avail_in = static_cast<uInt>(idat.size());
  bool seen[256] = {};
  unsigned char chunk[1 << 16];
  int rc = Z_OK;
  while (rc == Z_OK) {
    zs.next_out = chunk;
    zs.avail_out = sizeof chunk;
    rc = inflate(&zs, Z_NO_FLUSH);
    for (std::size_t i = 0; i < sizeof chunk - zs.avail_out; ++i) seen[chunk[i]] = true;
  }
  inflateEnd(&zs);
  if (rc != Z_STREAM_END) return -1;
  int distinct = 0;
  for (bool b : seen) distinct += b ? 1 : 0;
  return distinct;
}

// A PNG's pixels as RGB rows (8-bit RGB or RGBA, not interlaced, as Chromium writes its
// screenshots), its IDAT chunks inflated and each row's filter undone; empty when the file is
// not such a PNG.
struct Image {
  std::size_t width = 0, height = 0;
  std::vector<unsigned char> rgb;  // width x height x 3
  const unsigned char* at(std::size_t x, std::size_t y) const { return &rgb[(y * width + x) * 3]; }
};

Image decode_png(const std::string& png) {
  Image image;
  static constexpr unsigned char kSignature[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  if (png.size() < 33 || std::memcmp(png.data(), kSignature, 8) != 0) return image;
  auto u32 = [&](std::size_t at) {
    const auto* p = reinterpret_cast<const unsigned char*>(png.data() + at);
    return (std::size_t{p[0]} << 24) | (std::size_t{p[1]} << 16) | (std::size_t{p[2]} << 8) | p[3];
  };
  const std::size_t width = u32(16), height = u32(20);
  const int depth = static_cast<unsigned char>(png[24]), type = static_cast<unsigned char>(png[25]);
  const int interlace = static_cast<unsigned char>(png[28]);
  if (depth != 8 || (type != 2 && type != 6) || interlace != 0) return image;
  const std::size_t bpp = type == 6 ? 4 : 3, stride = width * bpp;
  std::string idat;
  for (std::size_t at = 8; at + 12 <= png.size();) {
    const std::size_t length = u32(at);
    if (at + 12 + length > png.size()) return image;
    if (std::memcmp(png.data() + at + 4, "IDAT", 4) == 0) idat.append(png, at + 8, length);
    at += 12 + length;
  }
  std::vector<unsigned char> raw((stride + 1) * height);
  uLongf size = static_cast<uLongf>(raw.size());
  if (uncompress(raw.data(), &size, reinterpret_cast<const Bytef*>(idat.data()),
                 static_cast<uLong>(idat.size())) != Z_OK ||
      size != raw.size()) {
    return image;
  }
  std::vector<unsigned char> previous(stride, 0), row(stride);
  image.width = width;
  image.height = height;
  image.rgb.resize(width * height * 3);
  for (std::size_t y = 0; y < height; ++y) {
    const unsigned char filter = raw[y * (stride + 1)];
    const unsigned char* in = &raw[y * (stride + 1) + 1];
    for (std::size_t i = 0; i < stride; ++i) {
      const int a = i >= bpp ? row[i - bpp] : 0, b = previous[i],
                c = i >= bpp ? previous[i - bpp] : 0;
      int predicted = 0;
      switch (filter) {
        case 1:
          predicted = a;
          break;
        case 2:
          predicted = b;
          break;
        case 3:
          predicted = (a + b) / 2;
          break;
        case 4: {
          const int p = a + b - c, pa = std::abs(p - a), pb = std::abs(p - b), pc = std::abs(p - c);
          predicted = pa <= pb && pa <= pc ? a : pb <= pc ? b : c;
          break;
        }
        default:
          break;
      }
      row[i] = static_cast<unsigned char>(in[i] + predicted);
    }
    for (std::size_t x = 0; x < width; ++x) {
      std::memcpy(&image.rgb[(y * width + x) * 3], &row[x * bpp], 3);
    }
    previous = row;
  }
  return image;
}

std::string find_chromium() {
  if (const char* explicit_path = std::getenv("CHROMIUM"); explicit_path && *explicit_path) {
    return explicit_path;
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path ? path : "/usr/bin:/bin";
  for (const char* name :
       {"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"}) {
    std::size_t begin = 0;
    while (begin <= dirs.size()) {
      std::size_t end = dirs.find(':', begin);
      if (end == std::string::npos) end = dirs.size();
      const std::string candidate = dirs.substr(begin, end - begin) + "/" + name;
      if (access(candidate.c_str(), X_OK) == 0) return candidate;
      begin = end + 1;
    }
  }
  return {};
}

// Runs `argv` in a process group of its own with stdout and stderr to files; kills the whole
// group (Chromium's helpers included) if it has not exited after `timeout`. Returns the exit
// status, or -1 on timeout.
int run_with_timeout(const std::vector<std::string>& argv, const std::string& out_path,
                     const std::string& err_path, std::chrono::seconds timeout) {
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return 127;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (waitpid(pid, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() > deadline) {
      kill(-pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(-pid, SIGKILL);  // helpers left behind, if any
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Headless Chromium, offline, with the profile `profile` and `args` after its own flags; stdout
// and stderr to files, killed after 90 s (-1).
int run_chromium(const std::string& chromium, const std::string& profile,
                 const std::vector<std::string>& args, const std::string& out_path,
                 const std::string& err_path) {
  std::vector<std::string> argv{chromium,
                                "--headless",
                                "--no-sandbox",
                                "--disable-gpu",
                                "--disable-background-networking",
                                "--disable-component-update",
                                "--disable-sync",
                                "--no-first-run",
                                "--user-data-dir=" + profile};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_with_timeout(argv, out_path, err_path, std::chrono::seconds(90));
}

// The dl.* metrics of a job as lens exports them: per rank, a gauge (dl.loss) and a cumulative
// histogram (dl.step.duration, seconds), `points` exports 100 ms apart from `t0`.
std::string metric_lines(int rank, int points, std::uint64_t t0, double loss_scale) {
  std::string out;
  for (int i = 0; i < points; ++i) {
    const std::string at = "\"" + std::to_string(t0 + std::uint64_t(i) * 100'000'000) + "\"";
    const std::string loss = std::to_string(loss_scale * (3.0 - 0.5 * i));
    const std::string n = std::to_string(4 * (i + 1));
    out += report_test::metrics_line(
               report_test::rank_resource(rank),
               {report_test::gauge_metric(
                    "dl.loss", "1", "{\"timeUnixNano\":" + at + ",\"asDouble\":" + loss + "}"),
                "{\"name\":\"dl.step.duration\",\"unit\":\"s\",\"histogram\":{"
                "\"aggregationTemporality\":2,\"dataPoints\":[{\"timeUnixNano\":" +
                    at + ",\"count\":\"" + n + "\",\"sum\":" + std::to_string(0.1 * (i + 1) * 4) +
                    ",\"bucketCounts\":[\"0\",\"" + n +
                    "\",\"0\"],\"explicitBounds\":[0.05,0.2]}]}}"}) +
           "\n";
  }
  return out;
}

// The value of attribute `name` of the first element that has `marker` in its tag.
std::string attribute_after(const std::string& dom, const std::string& marker,
                            const std::string& name) {
  const std::size_t at = dom.find(marker);
  if (at == std::string::npos) return {};
  const std::size_t tag_start = dom.rfind('<', at);
  const std::size_t tag_end = dom.find('>', at);
  const std::string tag = dom.substr(tag_start, tag_end - tag_start);
  const std::size_t a = tag.find(" " + name + "=\"");
  if (a == std::string::npos) return {};
  const std::size_t v = a + name.size() + 3;
  return tag.substr(v, tag.find('"', v) - v);
}

std::size_t count(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (std::size_t at = 0; (at = text.find(needle, at)) != std::string::npos; at += needle.size())
    ++n;
  return n;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: report_html_chromium LENS_BINARY SYNC_JOB WORK_DIR\n");
    return 2;
  }
  const std::string chromium = find_chromium();
  if (chromium.empty()) {
    std::printf(
        "SKIP: no Chromium found (looked for chromium, chromium-browser, google-chrome on "
        "PATH; install the distribution's chromium package or set CHROMIUM=/path)\n");
    return 77;
  }
  const std::string lens = argv[1];
  const std::string sync_job = argv[2];
  const std::string dir = argv[3];
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const report_test::Fixture fixture = report_test::write_fixture(dir);
  const std::string html = dir + "/report.html";
  // Each rank's metrics: 4 exports, the first at the first step's start (the timeline's origin).
  std::string metrics;
  for (int rank = 0; rank < 3; ++rank) {
    metrics += metric_lines(rank, 4, report_test::kT0, 1.0 + 0.1 * rank);
  }
  // A warning of rank 1 at +50 ms: a marker on its timeline row.
  std::string warning = report_test::logs_line(report_test::rank_resource(1), "loss scale halved");
  const std::string info = "\"severityNumber\":9,\"severityText\":\"INFO\"";
  warning.replace(warning.find(info), info.size(),
                  "\"severityNumber\":13,\"severityText\":\"WARN\"");
  warning.replace(warning.find(std::to_string(report_test::kT0)), 19,
                  std::to_string(report_test::kT0 + 50'000'000));
  report_test::write_file(dir + "/metrics.jsonl", metrics + warning + "\n");

  std::vector<std::string> report = {lens, "report", "--html", html, dir + "/metrics.jsonl"};
  report.insert(report.end(), fixture.files.begin(), fixture.files.end());
  if (const int status = run_with_timeout(report, dir + "/report.txt", dir + "/report.err",
                                          std::chrono::seconds(60));
      status != 0) {
    std::printf("FAIL: lens report --html exited with %d: %s\n", status,
                report_test::read_file(dir + "/report.err").c_str());
    return 1;
  }

  std::printf("rendering %s with %s\n", html.c_str(), chromium.c_str());
  const int status = run_chromium(chromium, dir + "/profile", {"--dump-dom", "file://" + html},
                                  dir + "/dom.html", dir + "/chromium.err");
  const std::string dom = report_test::read_file(dir + "/dom.html");
  if (status != 0 || dom.empty()) {
    std::printf(
        "FAIL: chromium exited with %d (-1: killed after 90 s) and printed %zu bytes; its "
        "stderr:\n%s\n",
        status, dom.size(), report_test::read_file(dir + "/chromium.err").c_str());
    return 1;
  }

  int failures = 0;
  auto expect = [&](bool ok, const std::string& what) {
    std::printf("%s: %s\n", ok ? "ok" : "FAIL", what.c_str());
    if (!ok) ++failures;
  };
  expect(dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the script ran to its end (data-lens-rendered=\"ok\")");
  expect(dom.find("id=\"lens-error\"") == std::string::npos, "no rendering error shown");
  expect(dom.find("<div id=\"lens-rendered\" hidden=\"\" data-ranks=\"3\" data-stragglers=\"1\" "
                  "data-names=\"8\" data-steps=\"9\" data-charts=\"2\" "
                  "data-chart-points=\"24\">") != std::string::npos,
         "the marker counts 3 ranks, 1 straggler, 8 names, 9 steps, 2 charts of 24 points");
  expect(count(dom, "class=\"rank-row\"") == 3, "3 timeline rows");
  for (int rank = 0; rank < 3; ++rank) {
    const std::string row = "class=\"rank-row\" data-rank=\"" + std::to_string(rank) +
                            "\" data-straggler=\"" + (rank == 2 ? "true" : "false") + "\"";
    expect(dom.find(row) != std::string::npos, "timeline row: " + row);
  }
  expect(count(dom, "class=\"step-bar\"") == 9, "9 step bars on the timeline");
  expect(count(dom, "<tr class=\"straggler-row\" data-rank=\"2\" data-flagged-by=\"step_time\">") ==
                 1 &&
             count(dom, "class=\"straggler-row\"") == 1,
         "one straggler row, rank 2");
  expect(count(dom, "class=\"name-row\"") == 8, "8 rows in the per-name table");
  expect(count(dom, "class=\"group-share\"") == 4, "4 groups in the step breakdown");
  expect(count(dom, "class=\"rank-step-row") == 3, "3 rows in the per-rank step table");
  expect(dom.find(">150.0ms<") != std::string::npos, "durations formatted (150.0ms)");
  expect(count(dom, "class=\"log-marker\"") == 1 &&
             dom.find("class=\"log-marker\" data-severity=\"13\" data-rank=\"1\"") !=
                 std::string::npos &&
             dom.find("rank 1 \u00b7 WARN at +50.00ms: loss scale halved</title>") !=
                 std::string::npos,
         "the warning of rank 1 is a marker on its row, with its message");
  // The metric charts: one per metric, a line per rank of 4 points; the histogram's p50-p95 band.
  expect(count(dom, "class=\"metric-chart\"") == 2, "2 metric charts");
  for (const char* name : {"dl.loss", "dl.step.duration"}) {
    const std::string chart = "data-metric=\"" + std::string(name) + "\"";
    expect(attribute_after(dom, chart, "data-mode") == "lines" &&
               attribute_after(dom, chart, "data-lines") == "3" &&
               attribute_after(dom, chart, "data-points") == "12",
           std::string(name) + ": a chart of 3 lines, 12 points");
  }
  expect(count(dom, "class=\"metric-line\"") == 6 &&
             count(dom, "class=\"metric-line\" data-rank=\"2\"") == 2,
         "6 lines, one per rank and metric");
  expect(count(dom, "class=\"metric-band\"") == 3, "3 p50-p95 bands (the histogram's ranks)");
  expect(count(dom, "data-points=\"4\"") == 6, "every line has its 4 points");
  // The first step bar (rank 0's, at the origin) and rank 0's first loss point share an x.
  const std::string bar_x = attribute_after(dom, "class=\"step-bar\"", "x");
  const std::string line = attribute_after(dom, "class=\"metric-line\" data-rank=\"0\"", "points");
  const double first_x = line.empty() ? -1 : std::atof(line.substr(0, line.find(',')).c_str());
  expect(!bar_x.empty() && std::abs(first_x - std::atof(bar_x.c_str())) < 0.1,
         "the first point is drawn at the first step's x (" + bar_x + "): " + line.substr(0, 20));
  if (failures > 0) std::printf("the DOM Chromium produced is in %s/dom.html\n", dir.c_str());

  // A second rendering: a screenshot, with the page's console sent to Chromium's log.
  const std::string png = dir + "/report.png";
  const int shot = run_chromium(chromium, dir + "/profile2",
                                {"--enable-logging=stderr", "--v=1", "--window-size=1200,900",
                                 "--screenshot=" + png, "file://" + html},
                                dir + "/shot.out", dir + "/shot.err");
  expect(shot == 0, "chromium --screenshot exited 0");
  const std::string log = report_test::read_file(dir + "/shot.err");
  // With --v=1, console messages (console.log/error, uncaught exceptions) appear in Chromium's
  // log as ":INFO:CONSOLE:<line>] ..." entries.
  expect(log.find(":CONSOLE") == std::string::npos, "the page logged nothing to the console");
  const int distinct = distinct_pixel_bytes(report_test::read_file(png));
  expect(distinct >= 32, "the screenshot is not blank (" + std::to_string(distinct) +
                             " distinct bytes in its decoded rows; a blank page has a handful)");
  if (failures > 0) std::printf("Chromium's log is in %s/shot.err\n", dir.c_str());

  // 40 ranks' metrics, rank 39's loss twice the others': the aggregate view.
  std::string many;
  for (int rank = 0; rank < 40; ++rank) {
    many += metric_lines(rank, 3, report_test::kT0, rank == 39 ? 2.0 : 1.0 + 0.001 * rank);
  }
  report_test::write_file(dir + "/many.jsonl", many);
  const std::string many_html = dir + "/many.html";
  if (run_with_timeout({lens, "report", "--html", many_html, dir + "/many.jsonl"},
                       dir + "/many.txt", dir + "/many.err", std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: lens report --html of 40 ranks: %s\n",
                report_test::read_file(dir + "/many.err").c_str());
    return 1;
  }
  const int many_status =
      run_chromium(chromium, dir + "/profile3", {"--dump-dom", "file://" + many_html},
                   dir + "/many-dom.html", dir + "/many-chromium.err");
  const std::string many_dom = report_test::read_file(dir + "/many-dom.html");
  expect(many_status == 0 && many_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the page of 40 ranks rendered");
  const std::string loss = "data-metric=\"dl.loss\"";
  expect(attribute_after(many_dom, loss, "data-mode") == "aggregate" &&
             attribute_after(many_dom, loss, "data-lines") == "40",
         "40 lines of dl.loss drawn as an aggregate");
  expect(count(many_dom, "class=\"metric-median\"") == 2, "a median line per chart");
  expect(count(many_dom, "class=\"metric-line metric-outlier\"") == 3,
         "the 3 lines furthest from the median drawn (dl.loss; dl.step.duration has none)");
  expect(
      many_dom.find("every line's mean within 1% of the median of the means") != std::string::npos,
      "dl.step.duration: no rank named, all alike");
  expect(many_dom.find("furthest from the median: rank 39 (") != std::string::npos,
         "rank 39 named first as furthest from the median");
  if (failures > 0) std::printf("the DOM of 40 ranks is in %s/many-dom.html\n", dir.c_str());

  // Spans beside the steps (issue 40): rank 0's steps of 100 ms have two all-reduces on another
  // thread, [30,60) and [60,85) ms, exposed in [70,80) (forward_backward [0,70), optimizer
  // [80,95) on the step's thread); rank 1 runs everything on its step's thread, the all-reduces
  // inside forward_backward.
  std::string ddp;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<report_test::SpanSpec> spans;
    for (std::uint64_t step = 0; step < 2; ++step) {
      using report_test::kMs;
      const std::uint64_t t = report_test::kT0 + step * 110 * kMs, id = 10 * (step + 1);
      spans.push_back(report_test::make_span(id, 0, "train_step", "step", t, t + 100 * kMs, 5));
      spans.push_back(report_test::make_span(id + 1, id, "forward_backward", "forward_backward", t,
                                             t + 70 * kMs, 5));
      spans.push_back(report_test::make_span(id + 2, id, "optimizer", "optimizer", t + 80 * kMs,
                                             t + 95 * kMs, 5));
      for (const auto& [from, to] : {std::pair{30, 60}, std::pair{60, 85}}) {
        // Rank 1 waits for each inside forward_backward, on the step's thread.
        spans.push_back(report_test::make_span(
            id + 3 + (from > 30 ? 1 : 0), rank == 0 ? id : id + 1, "all_reduce", "communication",
            t + from * kMs, t + (rank == 0 ? to : std::min(to, 70)) * kMs, rank == 0 ? 6 : 5));
      }
    }
    ddp += report_test::request_line(report_test::rank_resource(rank), spans) + "\n";
  }
  report_test::write_file(dir + "/ddp.jsonl", ddp);
  const std::string ddp_html = dir + "/ddp.html";
  if (run_with_timeout({lens, "report", "--html", ddp_html, dir + "/ddp.jsonl"}, dir + "/ddp.txt",
                       dir + "/ddp.err", std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: lens report --html of the DDP-like job: %s\n",
                report_test::read_file(dir + "/ddp.err").c_str());
    return 1;
  }
  const int ddp_status =
      run_chromium(chromium, dir + "/profile4", {"--dump-dom", "file://" + ddp_html},
                   dir + "/ddp-dom.html", dir + "/ddp-chromium.err");
  const std::string ddp_dom = report_test::read_file(dir + "/ddp-dom.html");
  expect(ddp_status == 0 && ddp_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the DDP-like page rendered");
  expect(count(ddp_dom, "class=\"beside-row\"") == 1 &&
             ddp_dom.find("class=\"beside-row\" data-rank=\"0\"") != std::string::npos,
         "one row beside the steps, under rank 0's");
  expect(count(ddp_dom, "class=\"overlap-bar\"") == 2, "2 overlapped intervals (one per step)");
  expect(count(ddp_dom, "class=\"exposed-bar\"") == 2, "2 exposed intervals (one per step)");
  const double step_w = std::atof(attribute_after(ddp_dom, "class=\"step-bar\"", "width").c_str());
  const double overlap_w =
      std::atof(attribute_after(ddp_dom, "class=\"overlap-bar\"", "width").c_str());
  const double exposed_w =
      std::atof(attribute_after(ddp_dom, "class=\"exposed-bar\"", "width").c_str());
  expect(step_w > 0 && std::abs(overlap_w / step_w - 0.55) < 0.01 &&
             std::abs(exposed_w / step_w - 0.10) < 0.01,
         "overlapped 55 % and exposed 10 % of a step's width (" + std::to_string(overlap_w) + ", " +
             std::to_string(exposed_w) + " of " + std::to_string(step_w) + ")");
  expect(count(ddp_dom, "class=\"overlap-row\"") == 1, "one all_reduce row in the table beside");
  if (failures > 0) std::printf("the DDP-like DOM is in %s/ddp-dom.html\n", dir.c_str());

  // GPU time: rank 0's two steps of 100 ms (110 ms apart) carry gpu.* attributes, the step's
  // and its three leaves': forward_backward [5,60] ms, an all-reduce on another thread [40,80],
  // the optimizer [82,90]; rank 1's spans have none, so it gets no GPU row.
  std::string gpu;
  for (int rank = 0; rank < 2; ++rank) {
    std::vector<report_test::SpanSpec> spans;
    for (std::uint64_t step = 0; step < 2; ++step) {
      using report_test::kMs;
      const std::uint64_t t = report_test::kT0 + step * 110 * kMs, id = 10 * (step + 1);
      auto timed = [&](std::uint64_t from, std::uint64_t to, std::int64_t busy_ms) {
        if (rank != 0) return std::vector<report_test::Attr>{};
        return std::vector<report_test::Attr>{
            {"gpu.busy", busy_ms * static_cast<std::int64_t>(kMs)},
            {"gpu.kernels", std::int64_t{10}},
            {"gpu.start", static_cast<std::int64_t>(t + from * kMs)},
            {"gpu.end", static_cast<std::int64_t>(t + to * kMs)}};
      };
      spans.push_back(report_test::make_span(id, 0, "train_step", "step", t, t + 100 * kMs, 5,
                                             timed(5, 90, 75)));
      spans.push_back(report_test::make_span(id + 1, id, "forward_backward", "forward_backward", t,
                                             t + 70 * kMs, 5, timed(5, 60, 50)));
      spans.push_back(report_test::make_span(id + 2, id, "all_reduce", "communication",
                                             t + 30 * kMs, t + 85 * kMs, 6, timed(40, 80, 30)));
      spans.push_back(report_test::make_span(id + 3, id, "optimizer", "optimizer", t + 80 * kMs,
                                             t + 95 * kMs, 5, timed(82, 90, 5)));
    }
    gpu += report_test::request_line(report_test::rank_resource(rank), spans) + "\n";
  }
  report_test::write_file(dir + "/gpu.jsonl", gpu);
  const std::string gpu_html = dir + "/gpu.html";
  if (run_with_timeout({lens, "report", "--html", gpu_html, dir + "/gpu.jsonl"}, dir + "/gpu.txt",
                       dir + "/gpu.err", std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: lens report --html of the GPU-timed job: %s\n",
                report_test::read_file(dir + "/gpu.err").c_str());
    return 1;
  }
  const int gpu_status =
      run_chromium(chromium, dir + "/profile5", {"--dump-dom", "file://" + gpu_html},
                   dir + "/gpu-dom.html", dir + "/gpu-chromium.err");
  const std::string gpu_dom = report_test::read_file(dir + "/gpu-dom.html");
  expect(gpu_status == 0 && gpu_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the GPU-timed page rendered");
  expect(count(gpu_dom, "class=\"gpu-row\"") == 1 &&
             gpu_dom.find("class=\"gpu-row\" data-rank=\"0\"") != std::string::npos,
         "one GPU row, under rank 0's steps (rank 1 has no GPU times)");
  expect(count(gpu_dom, "class=\"gpu-bar\"") == 6 &&
             attribute_after(gpu_dom, "class=\"gpu-row\"", "data-boxes") == "6" &&
             attribute_after(gpu_dom, "id=\"lens-rendered\"", "data-gpu-rows") == "1" &&
             attribute_after(gpu_dom, "id=\"lens-rendered\"", "data-gpu-boxes") == "6",
         "6 GPU boxes: 3 leaves (forward_backward, all_reduce, optimizer) in each of 2 steps");
  for (const char* group : {"forward_backward", "communication", "optimizer"}) {
    expect(count(gpu_dom, "class=\"gpu-bar\" data-group=\"" + std::string(group) + "\"") == 2,
           std::string("2 GPU boxes of ") + group);
  }
  const std::string fb_box = "class=\"gpu-bar\" data-group=\"forward_backward\"";
  const double gpu_step_x = std::atof(attribute_after(gpu_dom, "class=\"step-bar\"", "x").c_str());
  const double gpu_step_w =
      std::atof(attribute_after(gpu_dom, "class=\"step-bar\"", "width").c_str());
  const double fb_x = std::atof(attribute_after(gpu_dom, fb_box, "x").c_str());
  const double fb_w = std::atof(attribute_after(gpu_dom, fb_box, "width").c_str());
  expect(gpu_step_w > 0 && std::abs((fb_x - gpu_step_x) / gpu_step_w - 0.05) < 0.01 &&
             std::abs(fb_w / gpu_step_w - 0.55) < 0.01,
         "forward_backward's GPU box starts 5 % into its step and is 55 % of its width (" +
             std::to_string(fb_x - gpu_step_x) + ", " + std::to_string(fb_w) + " of " +
             std::to_string(gpu_step_w) + ")");
  const std::string fb_fill = attribute_after(gpu_dom, fb_box, "fill");
  expect(
      !fb_fill.empty() &&
          fb_fill == attribute_after(
                         gpu_dom, "class=\"group-share\" data-group=\"forward_backward\"", "fill"),
      "a GPU box has its group's colour in the step breakdown (" + fb_fill + ")");
  expect(count(gpu_dom, "class=\"gpu-step-row") == 1, "one row of GPU time per step (rank 0)");
  if (failures > 0) std::printf("the GPU-timed DOM is in %s/gpu-dom.html\n", dir.c_str());

  // 1,024 ranks of a synchronous job whose rank 17 computes 10 % longer (report_sync_job): a
  // heat map of ranks x steps instead of a timeline row per rank, rank 17 named beside its row,
  // and, in a screenshot, its row of pixels the reddest of the map (it arrives late at every
  // step's all-reduce).
  const std::string sync = dir + "/sync.jsonl", sync_html = dir + "/sync.html";
  if (run_with_timeout({sync_job, "--ranks", "1024", "--steps", "20", "--slow", "17:1.1"}, sync,
                       dir + "/sync.err", std::chrono::seconds(60)) != 0 ||
      run_with_timeout({lens, "report", "--html", sync_html, sync}, dir + "/sync.txt",
                       dir + "/sync-report.err", std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: the job of 1,024 ranks or its report: %s%s\n",
                report_test::read_file(dir + "/sync.err").c_str(),
                report_test::read_file(dir + "/sync-report.err").c_str());
    return 1;
  }
  const int sync_status = run_chromium(
      chromium, dir + "/profile6", {"--window-size=1200,1400", "--dump-dom", "file://" + sync_html},
      dir + "/sync-dom.html", dir + "/sync-chromium.err");
  const std::string sync_dom = report_test::read_file(dir + "/sync-dom.html");
  expect(sync_status == 0 && sync_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the page of 1,024 ranks rendered");
  expect(count(sync_dom, "class=\"rank-row\"") == 0 &&
             attribute_after(sync_dom, "id=\"lens-rendered\"", "data-heatmaps") == "1",
         "a heat map, no timeline row per rank");
  const std::string canvas = "class=\"heatmap-canvas\"";
  expect(attribute_after(sync_dom, canvas, "data-rows") == "1024" &&
             attribute_after(sync_dom, canvas, "data-columns") == "20" &&
             attribute_after(sync_dom, canvas, "data-mode") == "late",
         "1,024 rows of 20 steps, coloured by lateness");
  expect(count(sync_dom, "class=\"heatmap-flag\"") == 1 &&
             attribute_after(sync_dom, "class=\"heatmap-flag\"", "data-rank") == "17" &&
             attribute_after(sync_dom, "class=\"heatmap-flag\"", "data-row") == "17",
         "rank 17 named beside row 17");
  expect(count(sync_dom, "<tr class=\"straggler-row\" data-rank=\"17\"") == 1,
         "rank 17 is the one straggler in the table");
  // The screenshot, in a window of the same size as the DOM's (so that the page lays out the
  // same): the canvas is drawn at 1 px per rank; the page writes where, and its reddest row of
  // pixels must be rank 17's.
  const std::string shot_png = dir + "/sync.png";
  const int sync_shot =
      run_chromium(chromium, dir + "/profile7",
                   {"--window-size=1200,1400", "--screenshot=" + shot_png, "file://" + sync_html},
                   dir + "/sync-shot.out", dir + "/sync-shot.err");
  const Image image = decode_png(report_test::read_file(shot_png));
  expect(sync_shot == 0 && image.width > 0, "a screenshot of the heat map, decoded (" +
                                                std::to_string(image.width) + " x " +
                                                std::to_string(image.height) + ")");
  const std::string box = attribute_after(sync_dom, canvas, "data-box");
  int bx = 0, by = 0, bw = 0, bh = 0;
  expect(std::sscanf(box.c_str(), "%d,%d,%d,%d", &bx, &by, &bw, &bh) == 4 && bw > 0 && bh > 0,
         "the page says where the heat map is (" + box + ")");
  if (image.width > 0 && bw > 0 && by + bh <= static_cast<int>(image.height) &&
      bx + bw <= static_cast<int>(image.width)) {
    int reddest = -1;
    double best = -1;
    for (int y = by; y < by + bh; ++y) {
      double heat = 0;
      for (int x = bx; x < bx + bw; ++x) {
        const unsigned char* p = image.at(static_cast<std::size_t>(x), static_cast<std::size_t>(y));
        heat += 2 * p[0] - p[1] - p[2];
      }
      if (heat > best) {
        best = heat;
        reddest = y - by;
      }
    }
    const int row_height = bh / 1024 > 0 ? bh / 1024 : 1;
    expect(reddest / row_height == 17,
           "the reddest row of pixels is rank 17's (row " + std::to_string(reddest) + ")");
  } else {
    expect(false, "the heat map lies inside the screenshot (" + box + ")");
  }
  if (failures > 0) std::printf("the DOM of 1,024 ranks is in %s/sync-dom.html\n", dir.c_str());

  // Captured steps (the flight recorder): a job of 4 ranks whose rank 2 stalls 80 ms in step 8,
  // every rank's step 8 carrying the captured detail. The step is marked on each rank's timeline
  // row, and the captured-steps section draws the 4 ranks' spans, rank 2 first, whose widest
  // span is the stalled layer_forward, captured; the others' widest is the all-reduce they
  // waited in, exported as it ended.
  const std::string caught = dir + "/captured.jsonl", caught_html = dir + "/captured.html";
  if (run_with_timeout(
          {sync_job, "--ranks", "4", "--steps", "12", "--stall", "2:8:80", "--captured", "8"},
          caught, dir + "/captured.err", std::chrono::seconds(60)) != 0 ||
      run_with_timeout({lens, "report", "--html", caught_html, caught}, dir + "/captured.txt",
                       dir + "/captured-report.err", std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: the job with a captured step or its report: %s%s\n",
                report_test::read_file(dir + "/captured.err").c_str(),
                report_test::read_file(dir + "/captured-report.err").c_str());
    return 1;
  }
  const int caught_status =
      run_chromium(chromium, dir + "/profile9", {"--dump-dom", "file://" + caught_html},
                   dir + "/captured-dom.html", dir + "/captured-chromium.err");
  const std::string caught_dom = report_test::read_file(dir + "/captured-dom.html");
  expect(caught_status == 0 && caught_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the page with captured steps rendered");
  expect(attribute_after(caught_dom, "id=\"lens-rendered\"", "data-captured-steps") == "4" &&
             count(caught_dom, "class=\"captured-marker\"") == 4,
         "4 captured steps, each marked on its rank's timeline row");
  // 21 spans a rank: the step, get_batch, forward_backward, 4 microbatches of 3 layers, the
  // all-reduce and the optimizer.
  expect(count(caught_dom, "class=\"captured-rank\"") == 4 &&
             attribute_after(caught_dom, "class=\"captured-rank\"", "data-rank") == "2" &&
             attribute_after(caught_dom, "class=\"captured-rank\"", "data-boxes") == "21" &&
             attribute_after(caught_dom, "id=\"lens-rendered\"", "data-captured-boxes") == "84",
         "4 ranks' spans drawn, rank 2's first, 21 each");
  // The widest box of a rank's row below the step (depth > 0), of the name `only` when given: its
  // name, whether it was captured, and its width.
  struct Widest {
    std::string what;
    double width = -1;
  };
  auto widest = [&](const std::string& rank, const std::string& only) {
    Widest out{"(no row)"};
    const std::string row_marker = "class=\"captured-rank\" data-rank=\"" + rank + "\"";
    const std::size_t from = caught_dom.find(row_marker);
    const std::size_t to = caught_dom.find("</g>", from);
    if (from == std::string::npos || to == std::string::npos) return out;
    const std::string row = caught_dom.substr(from, to - from);
    const std::string step_y = attribute_after(row, "class=\"captured-box\"", "y");
    for (std::size_t at = row.find("<rect class=\"captured-box\""); at != std::string::npos;
         at = row.find("<rect class=\"captured-box\"", at + 1)) {
      const std::string tag = row.substr(at, row.find('>', at) - at);
      const std::string name = attribute_after(tag, "captured-box", "data-name");
      if (attribute_after(tag, "captured-box", "y") == step_y) continue;  // the step itself
      if (!only.empty() && name != only) continue;
      const double w = std::atof(attribute_after(tag, "captured-box", "width").c_str());
      if (w > out.width) {
        out.width = w;
        out.what = name + "/" + attribute_after(tag, "captured-box", "data-captured");
      }
    }
    return out;
  };
  expect(widest("2", "").what == "forward_backward/false",
         "rank 2's widest span is its forward_backward (" + widest("2", "").what + ")");
  const Widest stalled = widest("2", "layer_forward");
  expect(stalled.what == "layer_forward/true", "rank 2's layer spans were captured");
  for (const char* rank : {"0", "1", "3"}) {
    expect(
        widest(rank, "").what == "allreduce_gradients/false",
        std::string("rank ") + rank + " waited in its all-reduce (" + widest(rank, "").what + ")");
    const Widest layer = widest(rank, "layer_forward");
    expect(layer.width > 0 && stalled.width > 5 * layer.width,
           std::string("rank 2's stalled layer is drawn over 5 times as wide as rank ") + rank +
               "'s widest layer (" + std::to_string(stalled.width) + ", " +
               std::to_string(layer.width) + ")");
  }
  expect(count(caught_dom,
               "data-captured=\"true\" data-group=\"layer\" data-name=\"layer_forward\"") == 48,
         "12 captured layer_forward spans per rank");
  expect(count(caught_dom, "class=\"captured-row\"") == 4, "a table row per rank");
  if (failures > 0) std::printf("the captured-steps DOM is in %s/captured-dom.html\n", dir.c_str());

  // Two runs in one input (the fixture's run-42 and a small synchronous job's sync-run): a
  // section each, in run id order, whose ids do not clash.
  const std::string small = dir + "/small.jsonl", runs_html = dir + "/runs.html";
  std::vector<std::string> runs_report = {lens, "report", "--html", runs_html, small};
  runs_report.insert(runs_report.end(), fixture.files.begin(), fixture.files.end());
  if (run_with_timeout({sync_job, "--ranks", "4", "--steps", "5"}, small, dir + "/small.err",
                       std::chrono::seconds(60)) != 0 ||
      run_with_timeout(runs_report, dir + "/runs.txt", dir + "/runs.err",
                       std::chrono::seconds(60)) != 0) {
    std::printf("FAIL: the report of two runs: %s\n",
                report_test::read_file(dir + "/runs.err").c_str());
    return 1;
  }
  const int runs_status =
      run_chromium(chromium, dir + "/profile8", {"--dump-dom", "file://" + runs_html},
                   dir + "/runs-dom.html", dir + "/runs-chromium.err");
  const std::string runs_dom = report_test::read_file(dir + "/runs-dom.html");
  expect(runs_status == 0 && runs_dom.find("data-lens-rendered=\"ok\"") != std::string::npos,
         "the page of two runs rendered");
  expect(attribute_after(runs_dom, "id=\"lens-rendered\"", "data-runs") == "2" &&
             attribute_after(runs_dom, "id=\"lens-rendered\"", "data-ranks") == "7",
         "two runs, 3 + 4 ranks");
  const std::size_t first = runs_dom.find("class=\"run-title\">Run run-42<");
  const std::size_t second = runs_dom.find("class=\"run-title\">Run sync-run<");
  expect(first != std::string::npos && second != std::string::npos && first < second,
         "a section per run, run-42 first");
  expect(count(runs_dom, "id=\"timeline\"") == 1 && count(runs_dom, "id=\"timeline-run1\"") == 1,
         "each run's timeline has an id of its own");
  expect(count(runs_dom, "class=\"rank-row\"") == 7, "7 timeline rows");
  if (failures > 0) std::printf("the DOM of two runs is in %s/runs-dom.html\n", dir.c_str());
  return failures == 0 ? 0 : 1;
}
