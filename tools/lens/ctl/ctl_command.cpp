// lens ctl: talks to the control endpoints of the lens processes on this machine
// (docs/control.md): lists them, changes their span groups, shows what every thread is inside of.
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "commands.hpp"
#include "common/cli.hpp"
#include "common/input_args.hpp"
#include "ctl/ctl_client.hpp"
#include "ctl/ctl_output.hpp"

namespace nemo::lens::cli {
namespace {

using ctl::Exchange;
using ctl::ExchangeStatus;
using ctl::Json;

constexpr std::string_view kHelp =
    R"help(usage: lens ctl list [--run RUN_ID] [--rank R]... [--pid P] [--dir DIR] [--timeout S] [--json]
       lens ctl groups (SPEC | --reset) [--run RUN_ID] [--rank R]... [--pid P] [--dir DIR]
                       [--timeout S] [--json]
       lens ctl dump [--run RUN_ID] [--rank R]... [--pid P] [--dir DIR] [--timeout S] [--json]
       lens ctl capture [REASON] [--run RUN_ID] [--rank R]... [--pid P] [--dir DIR]
                        [--timeout S] [--json]

Talks to the lens processes running on this machine as you. Every process that set up telemetry
listens on a control endpoint, a Unix socket in the control directory (docs/control.md); lens
ctl asks all of them at once and waits at most --timeout for each.

sub-commands:
  list            one row per process, sorted by run, rank and pid: RUN, RANK, PID, SERVICE,
                  GROUPS (the span groups it follows now), UPTIME, EXPORTING
  groups SPEC     switches the matching processes to the span groups of SPEC (comma-separated
                  group and preset names, as in <PREFIX>_SPAN_GROUPS), now, and prints one line
                  per process with its groups before and after, or why it refused:
                    run 4711 rank 3 pid 12345: job,step -> checkpoint,job,step,...
                    run 4711 rank 4 pid 12346: refused: <why>
  groups --reset  switches them back to the spec each one started with
  dump            what every thread is inside of, now: one row per thread with open spans, the
                  one whose innermost span has been open longest first (a rank stuck in a
                  collective is on top): OPEN (seconds), RANK, PID, TID, then GROUP, NAME and
                  EXPORTED of the innermost span, STACK (outermost > ... > innermost) and the
                  innermost span's ATTRIBUTES; then each process's span counters
  capture         the flight recorder's spans, exported now by every matching process that
                  records (<PREFIX>_RECORD_GROUPS, docs/flight-recorder.md): what its rings hold
                  and its recorded spans open now, marked lens.capture.reason = REASON (default
                  manual); one line per process with how many spans it captured, or why not

options:
  --run RUN_ID  only the processes of this run (the run_id they report)
  --rank R      only this rank; repeat it or give a list (--rank 0,2) for several
  --pid P       only this process
  --dir DIR     the control directory (default: $NEMO_LENS_CONTROL_DIR, else
                $XDG_RUNTIME_DIR/lens, else /tmp/lens-<uid>)
  --timeout S   how long to wait for each process, in seconds (default 5)
  --json        print JSON Lines instead, one line per process as the process sent it: its
                "process" object (list) or its whole reply (groups, dump)
  -h, --help    show this help and exit

groups refuses to change processes of more than one run at once: give --run when the matching
processes belong to several runs. A process that does not answer in time or sends an unusable
reply is named on standard error; the others are still shown. The socket a dead process left
behind is deleted (when it is yours) and named on standard error.

lens ctl trusts only what is yours: it refuses a control directory that is a symbolic link,
belongs to another user or is open to other users (not mode 0700), and an endpoint whose process
runs as another user (it gets no request), saying which and why.

Jobs on several machines: lens ctl sees the processes of its own machine only. Run it on every
machine of the job and concatenate the JSON Lines, e.g. with SLURM (--overlap lets the step run
next to the job's own, which holds the CPUs):
  srun --jobid "$JOB_ID" --overlap --ntasks-per-node=1 lens ctl dump --json > dump.jsonl
  srun --jobid "$JOB_ID" --overlap --ntasks-per-node=1 lens ctl groups all --run "$JOB_ID"

exit status: 0 on success; 1 when a process refused the request or could not be reached; 2 for
a bad command line, an unreadable or untrusted control directory, or groups matching several
runs without --run; 3 (groups, dump, capture) when no process matched.
)help";

constexpr std::string_view kSubCommands = "expected one of list, groups, dump, capture";

/// What every sub-command takes besides its own flags.
struct Options {
  std::string dir;
  std::chrono::milliseconds timeout{5000};
  bool json = false;
  ctl::ProcessFilter filter;
  std::vector<std::string> positionals;  // arguments that are not flags
  bool reset = false;                    // groups --reset
};

/// The largest --timeout, in seconds.
constexpr double kMaxTimeoutSeconds = 3600;

std::chrono::milliseconds parse_timeout(const std::string& text) {
  double seconds = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, seconds);
  if (text.empty() || ec != std::errc() || ptr != end || !std::isfinite(seconds) || seconds <= 0 ||
      seconds > kMaxTimeoutSeconds) {
    throw UsageError("invalid value '" + text +
                     "' for --timeout: expected a number of seconds > 0 and <= 3600, e.g. 5 "
                     "or 0.5");
  }
  return std::chrono::milliseconds(static_cast<long long>(std::ceil(seconds * 1000)));
}

/// `text` as a whole decimal number >= `min` for `flag`, or UsageError saying `expected`.
std::int64_t parse_integer(std::string_view text, std::string_view flag, std::int64_t min,
                           std::string_view expected) {
  std::int64_t v = 0;
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, v);
  if (text.empty() || ec != std::errc() || ptr != end || v < min) {
    throw UsageError("invalid value '" + std::string(text) + "' for " + std::string(flag) +
                     ": expected " + std::string(expected));
  }
  return v;
}

/// Every value given to --rank (repeated, comma lists) in `flag_args`, checked.
std::vector<std::int64_t> parse_ranks(std::span<const std::string_view> flag_args) {
  std::vector<std::string_view> values;
  for (std::size_t i = 0; i < flag_args.size(); ++i) {
    if (flag_args[i] == "--rank" && i + 1 < flag_args.size()) {
      values.push_back(flag_args[++i]);
    } else if (flag_args[i].starts_with("--rank=")) {
      values.push_back(flag_args[i].substr(7));
    }
  }
  std::vector<std::int64_t> ranks;
  for (std::string_view value : values) {
    std::size_t begin = 0;
    for (;;) {
      const std::size_t comma = value.find(',', begin);
      const std::string_view item = value.substr(begin, comma - begin);
      if (item.empty()) {
        throw UsageError("invalid value '" + std::string(value) +
                         "' for --rank: expected a rank >= 0 or a comma-separated list of them, "
                         "e.g. 3 or 0,2");
      }
      const std::int64_t rank = parse_integer(
          item, "--rank", 0, "a rank >= 0 or a comma-separated list of them, e.g. 3 or 0,2");
      if (std::find(ranks.begin(), ranks.end(), rank) == ranks.end()) ranks.push_back(rank);
      if (comma == std::string_view::npos) break;
      begin = comma + 1;
    }
  }
  return ranks;
}

/// Parses the arguments after the sub-command; `with_reset` adds groups' --reset.
Options parse_options(std::span<const std::string_view> args, bool with_reset) {
  static constexpr FlagSpec kCommon[] = {{"--run", true}, {"--rank", true},    {"--pid", true},
                                         {"--dir", true}, {"--timeout", true}, {"--json", false}};
  static constexpr FlagSpec kGroups[] = {{"--run", true},   {"--rank", true},    {"--pid", true},
                                         {"--dir", true},   {"--timeout", true}, {"--json", false},
                                         {"--reset", false}};
  const std::span<const FlagSpec> specs =
      with_reset ? std::span<const FlagSpec>(kGroups) : std::span<const FlagSpec>(kCommon);
  InputArgs in = split_input_args(args, specs);
  const ParsedFlags flags = parse_flags(in.flag_args, specs);

  Options o;
  o.positionals = std::move(in.files);
  o.json = flags.has("--json");
  o.reset = flags.has("--reset");
  if (auto dir = flags.value("--dir")) {
    if (dir->empty()) throw UsageError("--dir requires a directory");
    o.dir = *dir;
  } else {
    o.dir = ctl::default_control_dir();
  }
  if (auto timeout = flags.value("--timeout")) o.timeout = parse_timeout(*timeout);
  if (auto run = flags.value("--run")) {
    if (run->empty()) throw UsageError("--run requires a run id");
    o.filter.run = *run;
  }
  if (auto pid = flags.value("--pid")) {
    o.filter.pid = parse_integer(*pid, "--pid", 1, "a process id >= 1, e.g. 12345");
  }
  o.filter.ranks = parse_ranks(in.flag_args);
  return o;
}

/// Rejects positional arguments, for the sub-commands that take none.
void no_positionals(const Options& o) {
  if (!o.positionals.empty()) {
    throw UsageError("unexpected argument '" + o.positionals.front() + "'");
  }
}

/// A process that answered, and its endpoint.
struct Live {
  Json process;
  Exchange exchange;
};

/// The endpoints of a control directory and how they answered one request.
struct Gathered {
  std::vector<Live> live;       // answered with a "process" object
  std::size_t unreachable = 0;  // no usable reply (named on stderr)
};

/// Reports on stderr what is wrong with `e` (nothing for a process that just exited); returns
/// whether it counts as unreachable. `removed_reported` keeps "removed stale endpoint" to once a
/// path.
bool report_problem(const Exchange& e, std::set<std::string>& removed_reported) {
  switch (e.status) {
    case ExchangeStatus::ok:
      return false;
    case ExchangeStatus::gone:
      return false;
    case ExchangeStatus::stale:
      if (e.removed) {
        if (removed_reported.insert(e.socket).second) {
          std::cerr << "lens ctl: removed stale endpoint " << e.socket << '\n';
        }
      } else {
        std::cerr << "lens ctl: " << e.socket << ": " << e.problem << '\n';
      }
      return false;
    case ExchangeStatus::unreachable:
      std::cerr << "lens ctl: " << e.socket << ": " << e.problem << '\n';
      return true;
  }
  return true;
}

/// Sends `request` to every endpoint in `o.dir` and sorts out the answers; problems are reported
/// on stderr. Throws DirectoryError for an unreadable directory.
Gathered gather(const Options& o, std::string_view request,
                std::set<std::string>& removed_reported) {
  const ctl::Endpoints found = ctl::find_endpoints(o.dir);
  Gathered out;
  for (Exchange& e : ctl::exchange_all(found.sockets, request, o.timeout)) {
    if (e.status == ExchangeStatus::ok && !e.reply.contains("process")) {
      // Refused before saying who it is (e.g. a peer-credential check).
      std::cerr << "lens ctl: " << e.socket << ": refused: " << ctl::error_text(e.reply) << '\n';
      ++out.unreachable;
      continue;
    }
    if (report_problem(e, removed_reported)) {
      ++out.unreachable;
      continue;
    }
    if (e.status == ExchangeStatus::ok) {
      Json process = e.reply.at("process");
      out.live.push_back({std::move(process), std::move(e)});
    }
  }
  std::stable_sort(out.live.begin(), out.live.end(), [](const Live& a, const Live& b) {
    return ctl::process_less(a.process, b.process);
  });
  return out;
}

/// The processes of `g` that `filter` matches.
std::vector<Live> matching(const Gathered& g, const ctl::ProcessFilter& filter) {
  std::vector<Live> out;
  for (const Live& l : g.live) {
    if (filter.matches(l.process)) out.push_back(l);
  }
  return out;
}

/// Says on stderr that nothing in `dir` matched, with what was found.
void report_no_match(const Options& o, const Gathered& g) {
  if (g.live.empty()) {
    std::cerr << "lens ctl: no " << (g.unreachable > 0 ? "reachable " : "")
              << "lens processes found in " << o.dir << '\n';
    return;
  }
  std::vector<Json> processes;
  for (const Live& l : g.live) processes.push_back(l.process);
  std::cerr << "lens ctl: no lens process in " << o.dir << " matches " << o.filter.describe()
            << " (found runs: " << ctl::runs_summary(processes) << ")\n";
}

/// The exit status when no process matched: 3, or 1 when some could not be asked who they are.
int no_match_status(const Gathered& g) { return g.unreachable > 0 ? 1 : 3; }

/// The reply text to print for --json: as received, unless it is not on one line.
std::string reply_line(const Exchange& e) {
  return e.reply_text.find('\n') == std::string::npos ? e.reply_text : ctl::json_line(e.reply);
}

/// Runs `body`, turning a DirectoryError into a message and status 2.
template <class Body>
int with_directory(Body body) {
  try {
    return body();
  } catch (const ctl::DirectoryError& e) {
    std::cerr << "lens ctl: " << e.what() << '\n';
    return 2;
  }
}

int run_list(std::span<const std::string_view> args) {
  const Options o = parse_options(args, false);
  no_positionals(o);
  return with_directory([&] {
    std::set<std::string> removed;
    const Gathered g = gather(o, "info", removed);
    std::vector<Live> matched = matching(g, o.filter);
    if (matched.empty()) {
      report_no_match(o, g);
      return g.unreachable > 0 ? 1 : 0;
    }
    std::vector<Json> processes;
    for (const Live& l : matched) processes.push_back(l.process);
    if (o.json) {
      for (const Json& p : processes) std::cout << ctl::json_line(p) << '\n';
    } else {
      std::cout << ctl::list_text(processes);
    }
    return g.unreachable > 0 ? 1 : 0;
  });
}

int run_groups(std::span<const std::string_view> args) {
  const Options o = parse_options(args, true);
  if (o.positionals.size() > 1) {
    throw UsageError("unexpected argument '" + o.positionals[1] +
                     "' (give one SPEC: " + "comma-separated names without spaces, or quote it)");
  }
  if (o.reset && !o.positionals.empty()) {
    throw UsageError("give either SPEC or --reset, not both");
  }
  if (!o.reset && o.positionals.empty()) {
    throw UsageError("no SPEC given: expected a span-group spec (e.g. all) or --reset");
  }
  std::string request = "groups-reset";
  if (!o.reset) {
    const std::string& spec = o.positionals.front();
    if (std::any_of(spec.begin(), spec.end(),
                    [](char c) { return static_cast<unsigned char>(c) < 0x20 || c == 0x7f; })) {
      throw UsageError("invalid SPEC: it must not contain line breaks or control characters");
    }
    request = "groups " + spec;
    const std::size_t line = std::string_view("lens-ctl/1 \n").size() + request.size();
    if (line > ctl::kMaxRequestLine) {
      throw UsageError("SPEC is too long: the request would be " + std::to_string(line) +
                       " bytes, the endpoint takes at most " +
                       std::to_string(ctl::kMaxRequestLine));
    }
  }

  return with_directory([&] {
    std::set<std::string> removed;
    const Gathered g = gather(o, "info", removed);
    std::vector<Live> matched = matching(g, o.filter);
    if (matched.empty()) {
      report_no_match(o, g);
      return no_match_status(g);
    }
    std::vector<Json> processes;
    for (const Live& l : matched) processes.push_back(l.process);
    if (auto refusal = ctl::multiple_runs_refusal(processes, o.filter.run.has_value())) {
      std::cerr << "lens ctl: " << *refusal << '\n';
      return 2;
    }

    std::vector<std::string> sockets;
    for (const Live& l : matched) sockets.push_back(l.exchange.socket);
    const std::vector<Exchange> results = ctl::exchange_all(sockets, request, o.timeout);
    std::size_t failed = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Exchange& e = results[i];
      const std::string label = ctl::process_label(matched[i].process);
      if (e.status != ExchangeStatus::ok) {
        report_problem(e, removed);
        ++failed;
        const std::string why = e.status == ExchangeStatus::unreachable
                                    ? e.problem
                                    : std::string("the process has exited");
        if (!o.json) std::cout << label << ": not reached: " << why << '\n';
        continue;
      }
      if (!e.reply.value("ok", false)) ++failed;
      if (o.json) {
        std::cout << reply_line(e) << '\n';
      } else {
        std::cout << ctl::groups_line(e.reply) << '\n';
      }
    }
    return failed > 0 || g.unreachable > 0 ? 1 : 0;
  });
}

int run_dump(std::span<const std::string_view> args) {
  const Options o = parse_options(args, false);
  no_positionals(o);
  return with_directory([&] {
    std::set<std::string> removed;
    const Gathered g = gather(o, "dump", removed);
    std::vector<Live> matched = matching(g, o.filter);
    if (matched.empty()) {
      report_no_match(o, g);
      return no_match_status(g);
    }
    std::size_t refused = 0;
    std::vector<Json> replies;
    for (const Live& l : matched) {
      if (!l.exchange.reply.value("ok", false)) {
        std::cerr << "lens ctl: " << ctl::process_label(l.process) << " (" << l.exchange.socket
                  << "): refused: " << ctl::error_text(l.exchange.reply) << '\n';
        ++refused;
        continue;
      }
      if (o.json) {
        std::cout << reply_line(l.exchange) << '\n';
      } else {
        replies.push_back(l.exchange.reply);
      }
    }
    if (!o.json && !replies.empty()) std::cout << ctl::dump_text(std::move(replies));
    return refused > 0 || g.unreachable > 0 ? 1 : 0;
  });
}

int run_capture(std::span<const std::string_view> args) {
  const Options o = parse_options(args, false);
  if (o.positionals.size() > 1) {
    throw UsageError("unexpected argument '" + o.positionals[1] +
                     "' (give one REASON: quote it when it has spaces)");
  }
  const std::string reason = o.positionals.empty() ? "manual" : o.positionals.front();
  if (reason.empty() || std::any_of(reason.begin(), reason.end(), [](char c) {
        return static_cast<unsigned char>(c) < 0x20 || c == 0x7f;
      })) {
    throw UsageError("invalid REASON: it must not be empty or contain control characters");
  }
  const std::string request = "capture " + reason;
  if (std::string_view("lens-ctl/1 \n").size() + request.size() > ctl::kMaxRequestLine) {
    throw UsageError("REASON is too long: the endpoint takes requests of at most " +
                     std::to_string(ctl::kMaxRequestLine) + " bytes");
  }
  return with_directory([&] {
    std::set<std::string> removed;
    const Gathered g = gather(o, "info", removed);
    std::vector<Live> matched = matching(g, o.filter);
    if (matched.empty()) {
      report_no_match(o, g);
      return no_match_status(g);
    }
    std::vector<std::string> sockets;
    for (const Live& l : matched) sockets.push_back(l.exchange.socket);
    const std::vector<Exchange> results = ctl::exchange_all(sockets, request, o.timeout);
    std::size_t failed = 0;
    for (std::size_t i = 0; i < results.size(); ++i) {
      const Exchange& e = results[i];
      if (e.status != ExchangeStatus::ok) {
        report_problem(e, removed);
        ++failed;
        if (!o.json) {
          std::cout << ctl::process_label(matched[i].process) << ": not reached: "
                    << (e.status == ExchangeStatus::unreachable ? e.problem
                                                                : "the process has exited")
                    << '\n';
        }
        continue;
      }
      if (!e.reply.value("ok", false)) ++failed;
      if (o.json) {
        std::cout << reply_line(e) << '\n';
      } else {
        std::cout << ctl::capture_line(e.reply) << '\n';
      }
    }
    return failed > 0 || g.unreachable > 0 ? 1 : 0;
  });
}

int run_ctl(std::span<const std::string_view> args) {
  if (args.empty()) throw UsageError("no sub-command given: " + std::string(kSubCommands));
  const std::string_view sub = args.front();
  const std::span<const std::string_view> rest = args.subspan(1);
  if (sub == "list") return run_list(rest);
  if (sub == "groups") return run_groups(rest);
  if (sub == "dump") return run_dump(rest);
  if (sub == "capture") return run_capture(rest);
  if (sub.starts_with("-")) {
    throw UsageError("no sub-command given before '" + std::string(sub) +
                     "': " + std::string(kSubCommands));
  }
  throw UsageError("unknown sub-command '" + std::string(sub) + "': " + std::string(kSubCommands));
}

}  // namespace

const Command& ctl_command() {
  static constexpr Command kCommand{
      "ctl",
      "talk to running lens processes: list them, switch span groups, dump open spans, capture "
      "the flight recorder's spans",
      kHelp, run_ctl};
  return kCommand;
}

}  // namespace nemo::lens::cli
