#include "ctl/ctl_output.hpp"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <map>
#include <tuple>
#include <utility>

#include "common/text_table.hpp"

namespace nemo::lens::cli::ctl {
namespace {

/// The member `key` of the object `j`, or nullptr when `j` is not an object or has no such member.
const Json* member(const Json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  const auto it = j.find(key);
  return it == j.end() ? nullptr : &*it;
}

/// The integer member `key` of `j`, or nullopt.
std::optional<std::int64_t> integer(const Json& j, const char* key) {
  const Json* v = member(j, key);
  if (v == nullptr || !v->is_number_integer()) return std::nullopt;
  return v->get<std::int64_t>();
}

/// The number member `key` of `j`, or nullopt.
std::optional<double> number(const Json& j, const char* key) {
  const Json* v = member(j, key);
  if (v == nullptr || !v->is_number()) return std::nullopt;
  return v->get<double>();
}

/// The member `key` of `j` as text: a string as is, another value as JSON, "?" when missing.
std::string text(const Json& j, const char* key) {
  const Json* v = member(j, key);
  if (v == nullptr || v->is_null()) return "?";
  return v->is_string() ? v->get<std::string>() : json_line(*v);
}

/// The integer member `key` of `j` in decimal, "?" when missing.
std::string integer_text(const Json& j, const char* key) {
  const auto v = integer(j, key);
  return v ? std::to_string(*v) : std::string("?");
}

/// The boolean member `key` of `j` as yes/no, "?" when missing.
std::string yes_no(const Json& j, const char* key) {
  const Json* v = member(j, key);
  if (v == nullptr || !v->is_boolean()) return "?";
  return v->get<bool>() ? "yes" : "no";
}

/// The strings of the array member `key` of `j` joined with ",", `none` when there are none.
std::string joined(const Json& j, const char* key, const std::string& none) {
  const Json* v = member(j, key);
  if (v == nullptr || !v->is_array()) return "?";
  std::string out;
  for (const Json& item : *v) {
    if (!out.empty()) out += ',';
    out += item.is_string() ? item.get<std::string>() : json_line(item);
  }
  return out.empty() ? none : out;
}

bool all_digits(const std::string& s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

/// Orders run ids: decimal ones numerically (before the others), the rest as text.
bool run_less(const std::string& a, const std::string& b) {
  const bool a_num = all_digits(a);
  const bool b_num = all_digits(b);
  if (a_num != b_num) return a_num;
  if (a_num && a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

/// A missing number as the largest, so that it sorts last.
std::int64_t or_last(std::optional<std::int64_t> v) {
  return v.value_or(std::numeric_limits<std::int64_t>::max());
}

/// The distinct run ids of `processes` with how many processes each has, in run order.
std::vector<std::pair<std::string, std::size_t>> runs_of(std::span<const Json> processes) {
  std::map<std::string, std::size_t, decltype(&run_less)> counts(&run_less);
  for (const Json& p : processes) ++counts[run_id_of(p)];
  return {counts.begin(), counts.end()};
}

/// One row of the dump table: a thread with open spans.
struct DumpRow {
  const Json* process;
  const Json* thread;
  const Json* innermost;  // the thread's last span
  double open_s;          // the innermost span's, -1 when missing
};

}  // namespace

bool ProcessFilter::matches(const Json& process) const {
  if (run && run_id_of(process) != *run) return false;
  if (!ranks.empty()) {
    const auto rank = integer(process, "rank");
    if (!rank || std::find(ranks.begin(), ranks.end(), *rank) == ranks.end()) return false;
  }
  if (pid && integer(process, "pid") != pid) return false;
  return true;
}

std::string ProcessFilter::describe() const {
  std::string out;
  auto add = [&](const std::string& option) {
    if (!out.empty()) out += ' ';
    out += option;
  };
  if (run) add("--run " + *run);
  if (!ranks.empty()) {
    std::string list;
    for (std::int64_t r : ranks) {
      if (!list.empty()) list += ',';
      list += std::to_string(r);
    }
    add("--rank " + list);
  }
  if (pid) add("--pid " + std::to_string(*pid));
  return out;
}

std::string run_id_of(const Json& process) {
  const Json* v = member(process, "run_id");
  if (v == nullptr || v->is_null()) return "";
  return v->is_string() ? v->get<std::string>() : json_line(*v);
}

bool process_less(const Json& a, const Json& b) {
  const std::string run_a = run_id_of(a);
  const std::string run_b = run_id_of(b);
  if (run_a != run_b) return run_less(run_a, run_b);
  return std::make_tuple(or_last(integer(a, "rank")), or_last(integer(a, "pid"))) <
         std::make_tuple(or_last(integer(b, "rank")), or_last(integer(b, "pid")));
}

std::string process_label(const Json& process) {
  const std::string run = run_id_of(process);
  return "run " + (run.empty() ? std::string("?") : run) + " rank " +
         integer_text(process, "rank") + " pid " + integer_text(process, "pid");
}

std::string error_text(const Json& reply) {
  const Json* error = member(reply, "error");
  if (error == nullptr || error->is_null()) return "(no error message)";
  return error->is_string() ? error->get<std::string>() : json_line(*error);
}

std::string seconds_one_decimal(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1fs", seconds);
  return buf;
}

std::string json_line(const Json& j) {
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string list_text(std::vector<Json> processes) {
  std::stable_sort(processes.begin(), processes.end(), process_less);
  TextTable table({{"RUN", false},
                   {"RANK", true},
                   {"PID", true},
                   {"SERVICE", false},
                   {"GROUPS", false},
                   {"UPTIME", true},
                   {"EXPORTING", false}});
  for (const Json& p : processes) {
    const auto uptime = number(p, "uptime_s");
    const std::string run = run_id_of(p);
    table.add({run.empty() ? "?" : run, integer_text(p, "rank"), integer_text(p, "pid"),
               text(p, "service"), joined(p, "groups", "-"),
               uptime ? seconds_one_decimal(*uptime) : "?", yes_no(p, "exporting")});
  }
  return table.str();
}

std::string groups_line(const Json& reply) {
  static const Json kNoProcess = Json::object();
  const Json* process = member(reply, "process");
  std::string out = process_label(process != nullptr ? *process : kNoProcess) + ": ";
  const Json* ok = member(reply, "ok");
  if (ok == nullptr || !ok->is_boolean() || !ok->get<bool>()) {
    return out + "refused: " + error_text(reply);
  }
  return out + joined(reply, "previous", "(none)") + " -> " + joined(reply, "groups", "(none)");
}

std::string capture_line(const Json& reply) {
  static const Json kNoProcess = Json::object();
  const Json* process = member(reply, "process");
  std::string out = process_label(process != nullptr ? *process : kNoProcess) + ": ";
  const Json* ok = member(reply, "ok");
  if (ok == nullptr || !ok->is_boolean() || !ok->get<bool>()) {
    return out + "refused: " + error_text(reply);
  }
  return out + "captured " + integer_text(reply, "captured") + " spans, reason " +
         escape_control(reply.value("reason", std::string())) + ", lens.capture.id " +
         integer_text(reply, "capture_id");
}

std::string attribute_value_text(const Json& value) {
  if (!value.is_string()) return json_line(value);
  const std::string& s = value.get_ref<const std::string&>();
  const bool plain = !s.empty() && std::none_of(s.begin(), s.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte <= 0x20 || byte == 0x7f || c == '"' || c == '=' || c == '\\';
  });
  return plain ? s : json_line(value);
}

std::string dump_text(std::vector<Json> replies) {
  std::erase_if(replies, [](const Json& r) {
    const Json* ok = member(r, "ok");
    return ok == nullptr || !ok->is_boolean() || !ok->get<bool>() ||
           member(r, "process") == nullptr;
  });
  std::vector<Json> processes;
  for (const Json& r : replies) processes.push_back(r.at("process"));
  const bool several_runs = runs_of(processes).size() > 1;

  std::vector<DumpRow> rows;
  for (const Json& r : replies) {
    const Json* threads = member(r, "threads");
    if (threads == nullptr || !threads->is_array()) continue;
    for (const Json& thread : *threads) {
      const Json* spans = member(thread, "spans");
      if (spans == nullptr || !spans->is_array() || spans->empty()) continue;
      const Json& innermost = spans->back();
      rows.push_back(
          {&r.at("process"), &thread, &innermost, number(innermost, "open_s").value_or(-1)});
    }
  }
  // Longest open first: by the innermost span's start time, which the processes of one machine
  // share, rather than by open_s, which each process measures at a slightly different moment.
  std::stable_sort(rows.begin(), rows.end(), [](const DumpRow& a, const DumpRow& b) {
    const auto start_a = integer(*a.innermost, "start_unix_nano");
    const auto start_b = integer(*b.innermost, "start_unix_nano");
    if (start_a && start_b && *start_a != *start_b) return *start_a < *start_b;
    if (a.open_s != b.open_s) return a.open_s > b.open_s;
    if (process_less(*a.process, *b.process)) return true;
    if (process_less(*b.process, *a.process)) return false;
    return or_last(integer(*a.thread, "tid")) < or_last(integer(*b.thread, "tid"));
  });

  std::string out;
  if (rows.empty()) {
    out += "no thread has an open span\n";
  } else {
    std::vector<TextTable::Column> columns = {
        {"OPEN", true},      {"RANK", true},   {"PID", true},
        {"TID", true},       {"GROUP", false}, {"NAME", false},
        {"EXPORTED", false}, {"STACK", false}, {"ATTRIBUTES", false}};
    if (several_runs) columns.insert(columns.begin(), {"RUN", false});
    TextTable table(std::move(columns));
    for (const DumpRow& row : rows) {
      std::string stack;
      for (const Json& span : row.thread->at("spans")) {
        if (!stack.empty()) stack += " > ";
        stack += text(span, "name");
      }
      if (const auto untracked = integer(*row.thread, "untracked"); untracked && *untracked > 0) {
        stack += " > (+" + std::to_string(*untracked) + " untracked)";
      }
      std::string attributes;
      if (const Json* attrs = member(*row.innermost, "attributes"); attrs && attrs->is_object()) {
        for (const auto& [key, value] : attrs->items()) {
          if (!attributes.empty()) attributes += ' ';
          attributes += key + "=" + attribute_value_text(value);
        }
      }
      std::vector<std::string> cells;
      if (several_runs) {
        const std::string run = run_id_of(*row.process);
        cells.push_back(run.empty() ? "?" : run);
      }
      cells.push_back(row.open_s >= 0 ? seconds_one_decimal(row.open_s) : "?");
      cells.push_back(integer_text(*row.process, "rank"));
      cells.push_back(integer_text(*row.process, "pid"));
      cells.push_back(integer_text(*row.thread, "tid"));
      cells.push_back(text(*row.innermost, "group"));
      cells.push_back(text(*row.innermost, "name"));
      cells.push_back(yes_no(*row.innermost, "exported"));
      cells.push_back(std::move(stack));
      cells.push_back(std::move(attributes));
      table.add(std::move(cells));
    }
    out += table.str();
  }

  // `rows` points into `replies`: it is not used from here on.
  std::stable_sort(replies.begin(), replies.end(), [](const Json& a, const Json& b) {
    return process_less(a.at("process"), b.at("process"));
  });
  out += '\n';
  for (const Json& r : replies) {
    const Json& p = r.at("process");
    static const Json kNoStats = Json::object();
    const Json* found = member(r, "stats");
    const Json& stats = found != nullptr ? *found : kNoStats;
    if (several_runs) {
      const std::string run = run_id_of(p);
      out += "run " + (run.empty() ? std::string("?") : run) + " ";
    }
    out += "rank " + integer_text(p, "rank") + " pid " + integer_text(p, "pid") + ": started " +
           integer_text(stats, "spans_started") + " ended " + integer_text(stats, "spans_ended") +
           " exported " + integer_text(stats, "spans_exported") + " buffered " +
           integer_text(stats, "spans_buffered") + " dropped " +
           integer_text(stats, "spans_dropped_queue_full") + "/" +
           integer_text(stats, "spans_dropped_export_failed") + "/" +
           integer_text(stats, "spans_dropped_shutdown") + " rejected " +
           integer_text(stats, "spans_rejected") + " truncated " +
           integer_text(stats, "spans_truncated") + "; metric points buffered " +
           integer_text(stats, "metric_points_buffered") + " dropped " +
           integer_text(stats, "metric_points_dropped") + "; log records buffered " +
           integer_text(stats, "log_records_buffered") + " dropped " +
           integer_text(stats, "log_records_dropped");
    // GPU time of spans: its counters are there only where it runs.
    if (member(stats, "gpu_spans_timed") != nullptr) {
      out += "; gpu spans timed " + integer_text(stats, "gpu_spans_timed") + " incomplete " +
             integer_text(stats, "gpu_spans_incomplete") + " waiting " +
             integer_text(stats, "gpu_spans_waiting") + "; gpu launches dropped " +
             integer_text(stats, "gpu_launches_dropped") + "; gpu activities dropped " +
             integer_text(stats, "gpu_activities_dropped") + " late " +
             integer_text(stats, "gpu_activities_late") + " unattributed " +
             integer_text(stats, "gpu_activities_unattributed") + " invalid " +
             integer_text(stats, "gpu_activities_invalid") + "; gpu kernel spans " +
             integer_text(stats, "gpu_kernel_spans") + " dropped " +
             integer_text(stats, "gpu_kernel_spans_dropped");
    }
    // The flight recorder: its counters are there only where it records.
    if (member(stats, "spans_recorded") != nullptr) {
      out += "; recorded " + integer_text(stats, "spans_recorded") + " overwritten " +
             integer_text(stats, "spans_record_overwritten") + " held " +
             integer_text(stats, "record_spans_held") + " (" +
             integer_text(stats, "record_memory_bytes") + " bytes) captured " +
             integer_text(stats, "spans_captured") + " in " +
             integer_text(stats, "record_captures") + " captures";
    }
    out += '\n';
  }
  return out;
}

std::optional<std::string> multiple_runs_refusal(std::span<const Json> processes, bool run_given) {
  if (run_given) return std::nullopt;
  const std::size_t runs = runs_of(processes).size();
  if (runs <= 1) return std::nullopt;
  return "the matching processes belong to " + std::to_string(runs) +
         " runs: " + runs_summary(processes) + "; give --run RUN_ID to choose one";
}

std::string runs_summary(std::span<const Json> processes) {
  std::string list;
  for (const auto& [run, count] : runs_of(processes)) {
    if (!list.empty()) list += ", ";
    list += (run.empty() ? std::string("(no run id)") : run) + " (" + std::to_string(count) +
            (count == 1 ? " process)" : " processes)");
  }
  return list;
}

}  // namespace nemo::lens::cli::ctl
