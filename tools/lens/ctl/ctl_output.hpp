// What `lens ctl` prints: the replies of control endpoints (docs/control.md), parsed with
// nlohmann::ordered_json, as tables and lines for people, or as JSON Lines; and the choice of
// processes (--run, --rank, --pid).
//
//   std::cout << list_text(processes);           // RUN RANK PID SERVICE GROUPS UPTIME EXPORTING
//   std::cout << dump_text(dump_replies);        // the longest-open innermost span first
//   std::cout << groups_line(groups_reply) << '\n';
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace nemo::lens::cli::ctl {

/// A reply, or a member of one, with its members in the order the endpoint sent them.
using Json = nlohmann::ordered_json;

/// The processes a sub-verb addresses; an empty criterion matches every process.
struct ProcessFilter {
  std::optional<std::string> run;   // --run: the process's run_id
  std::vector<std::int64_t> ranks;  // --rank, all occurrences: any of these ranks
  std::optional<std::int64_t> pid;  // --pid

  /// Whether `process` (a reply's "process" object) meets every criterion given.
  bool matches(const Json& process) const;

  /// The criteria as options, e.g. "--run 4711 --rank 0,2"; empty when none is given.
  std::string describe() const;
};

/// The run_id of a "process" object: the string, a number's JSON text, "" when missing.
std::string run_id_of(const Json& process);

/// Orders "process" objects by run id (numerically when both are decimal numbers), rank, pid;
/// a missing rank or pid sorts last.
bool process_less(const Json& a, const Json& b);

/// "run 4711 rank 3 pid 12345" for a "process" object ("?" for a missing member).
std::string process_label(const Json& process);

/// A refused reply's "error" message: the string, another value as JSON, "(no error message)"
/// when missing.
std::string error_text(const Json& reply);

/// Seconds with one decimal and a unit, e.g. "73.2s", "0.0s".
std::string seconds_one_decimal(double seconds);

/// `j` on one line, as JSON Lines wants it (invalid UTF-8 would become U+FFFD).
std::string json_line(const Json& j);

/// `lens ctl list`: a table of "process" objects, one row per process sorted with
/// process_less(): RUN, RANK, PID, SERVICE, GROUPS (comma-joined, "-" when none), UPTIME,
/// EXPORTING (yes/no). Just the header when `processes` is empty.
std::string list_text(std::vector<Json> processes);

/// `lens ctl groups`: "run 4711 rank 3 pid 12345: job,step -> job,step,microbatch" for an
/// accepted `groups`/`groups-reset` reply ("(none)" for no group), or
/// "run 4711 rank 3 pid 12345: refused: <error>" for a refused one. No newline.
std::string groups_line(const Json& reply);

/// `lens ctl capture`: "run 4711 rank 3 pid 12345: captured 120 spans, reason manual,
/// lens.capture.id 2" for an accepted `capture` reply, or "run 4711 rank 3 pid 12345: refused:
/// <error>" (the flight recorder is off there). No newline.
std::string capture_line(const Json& reply);

/// `lens ctl dump`: one table of every thread with open spans in the `dump` replies (ok ones),
/// sorted by its innermost span's start time, earliest (longest open) first, else by open_s (then
/// run, rank, pid, tid): OPEN, RANK,
/// PID, TID, GROUP, NAME and EXPORTED of the innermost span, STACK (outermost to innermost names
/// joined with " > ", then "(+N untracked)" when spans were too deep to keep) and ATTRIBUTES (the
/// innermost span's, as k=v). A RUN column comes first when the replies are from several runs.
/// "no thread has an open span" replaces the table when there is none. Then a blank line and one
/// line of pipeline counters per process (from "stats"), sorted with process_less():
/// "rank 3 pid 12345: started 120 ended 118 exported 100 dropped 0/0/0 rejected 0 truncated 0"
/// (dropped: queue full / export failed / shutdown), then the metrics' and logs' outage buffer
/// counts and, where GPU time of spans runs (the gpu_* counters are in "stats"), "; gpu spans
/// timed T incomplete I waiting W; gpu launches dropped L; gpu activities dropped D late A
/// unattributed U"; prefixed with "run <id> " when several runs.
std::string dump_text(std::vector<Json> replies);

/// An attribute value for the k=v form: a string as is, unless it is empty or has spaces,
/// quotes, '=' or control characters, which get it JSON-quoted; anything else as JSON.
std::string attribute_value_text(const Json& value);

/// The distinct runs of `processes` with their number of processes, in run order, e.g.
/// "4711 (4 processes), 4712 (1 process)"; "(no run id)" stands for an empty one.
std::string runs_summary(std::span<const Json> processes);

/// `lens ctl groups` must not change several runs at once by accident: when the matching
/// "process" objects belong to more than one run and --run was not given (`run_given`), the
/// message refusing it, naming the runs found and how many processes each has; else nullopt.
std::optional<std::string> multiple_runs_refusal(std::span<const Json> processes, bool run_given);

}  // namespace nemo::lens::cli::ctl
