// lens: inspect span-group catalogs and the lens configuration a process would read.
//
//   lens groups --catalog megatron --spec per_step
//   NEMO_LENS_ENABLED=1 lens config --rank 3 --world-size 4 --json
#include <array>
#include <exception>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "nemo/lens/errors.hpp"
#include "nemo/lens/version.hpp"

namespace nemo::lens::cli {
namespace {

std::array<const Command*, 6> commands() {
  return {&groups_command(), &config_command(),  &collect_command(),
          &report_command(), &convert_command(), &ctl_command()};
}

const Command* find_command(std::string_view name) {
  for (const Command* c : commands()) {
    if (c->name == name) return c;
  }
  return nullptr;
}

std::string usage() {
  std::string out =
      "usage: lens <command> [options]\n"
      "\n"
      "Inspects lens span-group catalogs and the configuration a process reads from its\n"
      "environment, receives spans over OTLP, turns them into reports and traces, and talks to\n"
      "running lens processes.\n"
      "\n"
      "commands:\n";
  for (const Command* c : commands()) {
    out += "  " + std::string(c->name) + std::string(8 - c->name.size(), ' ') +
           std::string(c->summary) + "\n";
  }
  out +=
      "\n"
      "options:\n"
      "  -h, --help  show this help and exit\n"
      "  --version   show the version and exit\n"
      "\n"
      "Run 'lens <command> --help' (or 'lens help <command>') for a command's options.\n";
  return out;
}

bool is_help(std::string_view arg) { return arg == "--help" || arg == "-h"; }

int run_command(const Command& command, std::span<const std::string_view> args) {
  for (std::string_view arg : args) {
    if (is_help(arg)) {
      std::cout << command.help;
      return 0;
    }
  }
  const std::string prefix = "lens " + std::string(command.name) + ": ";
  try {
    return command.run(args);
  } catch (const UsageError& e) {
    std::cerr << prefix << e.what() << "\nRun 'lens " << command.name << " --help' for usage.\n";
    return 2;
  } catch (const ConfigError& e) {  // SpanGroupError included
    std::cerr << prefix << e.what() << '\n';
    return 2;
  }
}

int run(std::span<const std::string_view> args) {
  if (args.empty()) {
    std::cerr << "lens: no command given\n\n" << usage();
    return 2;
  }
  const std::string_view first = args.front();
  if (is_help(first) || first == "help") {
    if (first == "help" && args.size() > 1) {
      if (const Command* c = find_command(args[1])) {
        std::cout << c->help;
        return 0;
      }
      std::cerr << "lens: unknown command '" << args[1] << "'\n\n" << usage();
      return 2;
    }
    std::cout << usage();
    return 0;
  }
  if (first == "--version") {
    std::cout << "lens " NEMO_LENS_VERSION_STRING "\n";
    return 0;
  }
  if (const Command* c = find_command(first)) return run_command(*c, args.subspan(1));
  std::cerr << "lens: unknown " << (first.starts_with("-") ? "option" : "command") << " '" << first
            << "'\n\n"
            << usage();
  return 2;
}

}  // namespace
}  // namespace nemo::lens::cli

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  int status = 0;
  try {
    status = nemo::lens::cli::run(args);
  } catch (const std::exception& e) {
    std::cerr << "lens: internal error: " << e.what() << '\n';
    return 1;
  }
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "lens: cannot write to standard output\n";
    return 1;
  }
  return status;
}
