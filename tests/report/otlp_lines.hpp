// Test helper: writes OTLP JSON Lines as the lens file exporter and `lens collect` write them
// (docs/tracing.md#file), for the `lens report` and `lens convert` tests, and runs the lens
// command capturing its output.
//
//   report_test::SpanSpec s = report_test::make_span(1, 0, "train_step", "step", t, t +
//   100'000'000); out << report_test::request_line(report_test::rank_resource(0), {s}) << '\n';
#pragma once

#include <fcntl.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

extern char** environ;

namespace report_test {

/// An AnyValue written as given, e.g. {"arrayValue":{"values":[{"intValue":"1"}]}}.
struct RawAnyValue {
  std::string json;
};

using AttrValue = std::variant<std::string, std::int64_t, bool, double, RawAnyValue>;

struct Attr {
  std::string key;
  AttrValue value;
};

struct EventSpec {
  std::string name;
  std::uint64_t time = 0;
  std::vector<Attr> attributes;
};

struct SpanSpec {
  std::string trace_id = "4bf92f3577b34da6a3ce929d0e0e4736";
  std::uint64_t span_id = 0;
  std::uint64_t parent_span_id = 0;  // 0: none
  std::string name;
  std::string group;  // empty: no nemo.span.group attribute
  std::uint64_t start = 0;
  std::uint64_t end = 0;
  std::int64_t thread_id = 0;  // 0: no thread.id attribute
  bool truncated = false;
  std::vector<Attr> attributes;  // before nemo.span.group and thread.id, as the exporter does
  std::vector<EventSpec> events;
  int status_code = 0;
  std::string status_message;
};

/// A span with the fields most tests set; the others keep their defaults.
inline SpanSpec make_span(std::uint64_t span_id, std::uint64_t parent_span_id, std::string name,
                          std::string group, std::uint64_t start, std::uint64_t end,
                          std::int64_t thread_id = 0, std::vector<Attr> attributes = {}) {
  SpanSpec s;
  s.span_id = span_id;
  s.parent_span_id = parent_span_id;
  s.name = std::move(name);
  s.group = std::move(group);
  s.start = start;
  s.end = end;
  s.thread_id = thread_id;
  s.attributes = std::move(attributes);
  return s;
}

inline std::string json_escape(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

inline std::string hex16(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

inline void append_value(std::string& out, const AttrValue& v) {
  if (const auto* s = std::get_if<std::string>(&v)) {
    out += "{\"stringValue\":" + json_escape(*s) + "}";
  } else if (const auto* i = std::get_if<std::int64_t>(&v)) {
    out += "{\"intValue\":\"" + std::to_string(*i) + "\"}";
  } else if (const auto* b = std::get_if<bool>(&v)) {
    out += std::string("{\"boolValue\":") + (*b ? "true" : "false") + "}";
  } else if (const auto* raw = std::get_if<RawAnyValue>(&v)) {
    out += raw->json;
  } else {
    std::ostringstream d;
    d.precision(17);
    d << std::get<double>(v);
    out += "{\"doubleValue\":" + d.str() + "}";
  }
}

inline void append_attributes(std::string& out, const std::vector<Attr>& attributes) {
  out += '[';
  for (std::size_t i = 0; i < attributes.size(); ++i) {
    if (i) out += ',';
    out += "{\"key\":" + json_escape(attributes[i].key) + ",\"value\":";
    append_value(out, attributes[i].value);
    out += '}';
  }
  out += ']';
}

inline void append_span(std::string& out, const SpanSpec& s) {
  out += "{\"traceId\":\"" + s.trace_id + "\",\"spanId\":\"" + hex16(s.span_id) + "\"";
  if (s.parent_span_id != 0) out += ",\"parentSpanId\":\"" + hex16(s.parent_span_id) + "\"";
  out += ",\"flags\":257,\"name\":" + json_escape(s.name) + ",\"kind\":1,\"startTimeUnixNano\":\"" +
         std::to_string(s.start) + "\",\"endTimeUnixNano\":\"" + std::to_string(s.end) +
         "\",\"attributes\":";
  std::vector<Attr> attributes = s.attributes;
  if (s.truncated) attributes.push_back({"nemo.span.truncated", true});
  if (!s.group.empty()) attributes.push_back({"nemo.span.group", s.group});
  if (s.thread_id != 0) attributes.push_back({"thread.id", s.thread_id});
  append_attributes(out, attributes);
  if (!s.events.empty()) {
    out += ",\"events\":[";
    for (std::size_t i = 0; i < s.events.size(); ++i) {
      if (i) out += ',';
      out += "{\"timeUnixNano\":\"" + std::to_string(s.events[i].time) +
             "\",\"name\":" + json_escape(s.events[i].name) + ",\"attributes\":";
      append_attributes(out, s.events[i].attributes);
      out += '}';
    }
    out += ']';
  }
  out += ",\"status\":{";
  if (!s.status_message.empty()) out += "\"message\":" + json_escape(s.status_message) + ",";
  out += "\"code\":" + std::to_string(s.status_code) + "}}";
}

/// The resource attributes of rank `rank` as set-up detects them (shortened).
inline std::vector<Attr> rank_resource(int rank, const std::string& run_id = "run-42") {
  return {{"service.name", std::string("nemo")},
          {"service.version", std::string("0.1.0")},
          {"dl.rank", std::int64_t{rank}},
          {"dl.world_size", std::int64_t{4}},
          {"nemo.run.id", run_id},
          {"service.instance.id", run_id + "-rank" + std::to_string(rank)},
          {"host.name", std::string("node-1")},
          {"process.pid", std::int64_t{4000 + rank}}};
}

/// One ExportTraceServiceRequest line (without the newline).
inline std::string request_line(const std::vector<Attr>& resource,
                                const std::vector<SpanSpec>& spans) {
  std::string out = "{\"resourceSpans\":[{\"resource\":{\"attributes\":";
  append_attributes(out, resource);
  out += "},\"scopeSpans\":[{\"scope\":{\"name\":\"nemo.lens\",\"version\":\"0.1.0\"},\"spans\":[";
  for (std::size_t i = 0; i < spans.size(); ++i) {
    if (i) out += ',';
    append_span(out, spans[i]);
  }
  out += "]}]}]}";
  return out;
}

inline void write_file(const std::string& path, const std::string& text) {
  std::ofstream f(path, std::ios::binary);
  f << text;
  if (!f) throw std::runtime_error("cannot write " + path);
}

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct RunResult {
  int status = -1;
  std::string out;
  std::string err;
  double seconds = 0;
  long max_rss_kib = 0;  // the child's peak resident set
};

/// Runs `argv` with stdout and stderr captured in files under `scratch_dir` (and stdin from
/// `stdin_path`, in directory `cwd`, when given).
inline RunResult run(const std::vector<std::string>& argv, const std::string& scratch_dir,
                     const std::string& stdin_path = {}, const std::string& cwd = {}) {
  const std::string out_path = scratch_dir + "/stdout.txt";
  const std::string err_path = scratch_dir + "/stderr.txt";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (!stdin_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, stdin_path.c_str(), O_RDONLY, 0);
  }
  if (!cwd.empty()) posix_spawn_file_actions_addchdir_np(&actions, cwd.c_str());
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto start = std::chrono::steady_clock::now();
  pid_t pid = 0;
  const int rc = posix_spawn(&pid, args[0], &actions, nullptr, args.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  if (rc != 0) throw std::runtime_error("cannot start " + argv[0]);
  int status = 0;
  rusage usage{};
  wait4(pid, &status, 0, &usage);
  RunResult r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  r.max_rss_kib = usage.ru_maxrss;
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

}  // namespace report_test
