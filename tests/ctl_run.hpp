// Test helper: runs `lens ctl` (LENS_BINARY) and returns what it printed.
#pragma once

#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "child_process.hpp"

namespace lens_test {

struct CtlOutput {
  int status = -1;
  std::string out, err;
};

/// Runs `lens ctl ARGS`, its stdout kept in a file under `scratch_dir`; waits at most 30 s.
inline CtlOutput run_lens_ctl(const std::filesystem::path& scratch_dir,
                              std::vector<std::string> args) {
  static int counter = 0;
  const std::string out_path = (scratch_dir / ("ctl_out_" + std::to_string(counter++))).string();
  args.insert(args.begin(), {LENS_BINARY, "ctl"});
  ChildProcess p(args, out_path);
  CtlOutput o;
  o.status = p.wait(std::chrono::seconds(30));
  o.err = p.stderr_text();
  std::ifstream in(out_path);
  o.out.assign(std::istreambuf_iterator<char>(in), {});
  return o;
}

/// The whitespace-separated words of `line` (a table row).
inline std::vector<std::string> words(const std::string& line) {
  std::istringstream in(line);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

}  // namespace lens_test
