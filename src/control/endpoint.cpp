// The control endpoint and the hang watchdog (see endpoint.hpp and docs/control.md).
#include "control/endpoint.hpp"

#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>
#include <utility>

#include "export/json_writer.hpp"
#include "logs/log_processor.hpp"
#include "nemo/lens/errors.hpp"
#include "nemo/lens/semconv.hpp"
#include "nemo/lens/state.hpp"
#include "private_dir.hpp"
#include "record/recorder.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens::detail {

namespace {

constexpr std::size_t kMaxRequest = 4096;
constexpr auto kRequestTimeout = std::chrono::seconds(2);
constexpr std::string_view kProtocolTag = "lens-ctl/1";

using Clock = std::chrono::steady_clock;

std::string join(const GroupSet& groups) {
  std::string out;
  for (const auto& g : groups) {
    if (!out.empty()) out += ',';
    out += g;
  }
  return out;
}

std::string sanitized(std::string_view s) {
  std::string out(s);
  for (char& c : out) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '.' || c == '_' || c == '-';
    if (!ok) c = '_';
  }
  return out;
}

std::string hostname() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0) return {};
  return buf;
}

// Creates `dir` (mode 0700) if needed and checks that it is a directory of this user that no one
// else can enter. An empty string when it is fine, else what is wrong and how to fix it;
// `variable` is the one that chooses the directory.
std::string prepare_dir(const std::string& dir, const std::string& variable) {
  // Another user may have made the directory first (under /tmp, anyone can): then the job must
  // say why lens ctl will not see it and how to get a directory of its own.
  const std::string elsewhere =
      "set " + variable + " to a directory of your own (" +
      (variable == "NEMO_LENS_CONTROL_DIR" ? std::string("lens ctl reads the same variable")
                                           : "and give lens ctl the same with "
                                             "NEMO_LENS_CONTROL_DIR or --dir") +
      ")";
  const PrivateDir checked = make_private_dir(dir);
  switch (checked.problem) {
    case PrivateDir::Problem::kNone:
      return {};
    case PrivateDir::Problem::kCannotCreate:
      return checked.why + "; " + elsewhere;
    case PrivateDir::Problem::kNotADirectory:
      return checked.why + "; remove it, or " + elsewhere;
    case PrivateDir::Problem::kForeign:
      return checked.why + ", so it may not be trusted; have it removed, or " + elsewhere;
    case PrivateDir::Problem::kOpen:
      break;
  }
  return checked.why + "; it must be 0700: chmod 700 " + dir + ", or " + elsewhere;
}

// Writes all of `data` to a non-blocking socket before `deadline`.
bool write_all(int fd, std::string_view data, Clock::time_point deadline) {
  while (!data.empty()) {
    const ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
    if (n > 0) {
      data.remove_prefix(static_cast<std::size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return false;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(left.count())) < 0 && errno != EINTR) return false;
  }
  return true;
}

// Ends a connection after its reply: no more writes, then whatever the client still sends is read
// and discarded (for at most 100 ms and 64 KiB), so that closing with unread data does not reset
// the connection before the client has read the reply.
void finish_connection(int fd) {
  ::shutdown(fd, SHUT_WR);
  const auto deadline = Clock::now() + std::chrono::milliseconds(100);
  char buf[4096];
  for (std::size_t total = 0; total < (64u << 10);) {
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      total += static_cast<std::size_t>(n);
      continue;
    }
    if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return;
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    pollfd p{fd, POLLIN, 0};
    if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) <= 0) return;
  }
}

// The pipeline's counters; the GPU ones only when `gpu` (GPU time of spans runs).
void append_stats(std::string& out, const TelemetryStats& s, bool gpu) {
  const std::pair<std::string_view, std::uint64_t> fields[] = {
      {"spans_started", s.spans_started},
      {"spans_ended", s.spans_ended},
      {"spans_exported", s.spans_exported},
      {"spans_buffered", s.spans_buffered},
      {"spans_dropped_queue_full", s.spans_dropped_queue_full},
      {"spans_dropped_export_failed", s.spans_dropped_export_failed},
      {"spans_dropped_shutdown", s.spans_dropped_shutdown},
      {"spans_rejected", s.spans_rejected},
      {"spans_truncated", s.spans_truncated},
      {"spans_end_clamped", s.spans_end_clamped},
      {"metric_points_buffered", s.metric_points_buffered},
      {"metric_points_dropped", s.metric_points_dropped},
      {"log_records_buffered", s.log_records_buffered},
      {"log_records_dropped", s.log_records_dropped},
  };
  const std::pair<std::string_view, std::uint64_t> gpu_fields[] = {
      {"gpu_spans_timed", s.gpu_spans_timed},
      {"gpu_spans_incomplete", s.gpu_spans_incomplete},
      {"gpu_spans_waiting", s.gpu_spans_waiting},
      {"gpu_launches_dropped", s.gpu_launches_dropped},
      {"gpu_activities_dropped", s.gpu_activities_dropped},
      {"gpu_activities_late", s.gpu_activities_late},
      {"gpu_activities_unattributed", s.gpu_activities_unattributed},
      {"gpu_activities_invalid", s.gpu_activities_invalid},
      {"gpu_kernel_spans", s.gpu_kernel_spans},
      {"gpu_kernel_spans_dropped", s.gpu_kernel_spans_dropped},
  };
  const std::pair<std::string_view, std::uint64_t> record_fields[] = {
      {"spans_recorded", s.spans_recorded},
      {"spans_record_overwritten", s.spans_record_overwritten},
      {"spans_captured", s.spans_captured},
      {"record_captures", s.record_captures},
      {"record_spans_held", s.record_spans_held},
      {"record_memory_bytes", s.record_memory_bytes},
  };
  json::JsonObject o(out);
  for (const auto& [key, value] : fields) json::append_uint(o.key(key), value);
  if (gpu) {
    for (const auto& [key, value] : gpu_fields) json::append_uint(o.key(key), value);
  }
  if (flight_recorder_on() || s.spans_recorded != 0) {  // where the flight recorder runs
    for (const auto& [key, value] : record_fields) json::append_uint(o.key(key), value);
  }
  o.close();
}

void append_groups(std::string& out, const GroupSet& groups) {
  json::JsonArray a(out);
  for (const auto& g : groups) json::append_string(a.element(), g);
  a.close();
}

double seconds_between(std::int64_t from_ns, std::int64_t to_ns) {
  return static_cast<double>(std::max<std::int64_t>(0, to_ns - from_ns)) / 1e9;
}

// One open span of `lens ctl dump`; its ids and attributes when it records.
void append_open_span(std::string& out, const OpenSpanView& s, std::int64_t now) {
  json::JsonObject o(out);
  json::append_string(o.key("group"), s.group);
  json::append_string(o.key("name"), s.name);
  json::append_int(o.key("start_unix_nano"), s.start_unix_nano);
  json::append_double(o.key("open_s"), seconds_between(s.start_unix_nano, now));
  json::append_raw(o.key("exported"), s.exported ? "true" : "false");
  if (s.record != nullptr && s.context.is_valid()) {
    json::append_string(o.key("trace_id"), s.context.trace_id.to_hex());
    json::append_string(o.key("span_id"), s.context.span_id.to_hex());
    json::JsonObject attributes(o.key("attributes"));
    for (const KeyValue& kv : s.attributes) {
      json::append_plain_value(attributes.key(kv.key), kv.value);
    }
    attributes.close();
  }
  o.close();
}

// One thread of `lens ctl dump`: its id, its untracked span count and its open spans.
void append_open_thread(std::string& out, const ThreadOpenSpans& t, std::int64_t now) {
  json::JsonObject o(out);
  json::append_int(o.key("tid"), t.tid);
  json::append_uint(o.key("untracked"), t.untracked);
  if (t.owner_busy) json::append_raw(o.key("owner_busy"), "true");  // light entries only
  json::JsonArray spans(o.key("spans"));
  for (const OpenSpanView& s : t.spans) append_open_span(spans.element(), s, now);
  spans.close();
  o.close();
}

// "step/train_step" or "train_step" for an ungated span.
std::string qualified(const OpenSpanView& s) {
  return s.group.empty() ? s.name : s.group + "/" + s.name;
}

}  // namespace

struct ControlEndpoint::Impl {
  ControlTarget target;
  std::string path;
  int listen_fd = -1;
  int wake_fd = -1;
  pid_t owner_pid = 0;
  Clock::time_point started = Clock::now();
  std::thread thread;
  bool stopped = false;

  // Only the endpoint thread touches these after start.
  GroupSet current;
  std::set<std::pair<const void*, std::uint64_t>> reported;  // stuck spans already reported

  ~Impl() { close_fds(); }

  void close_fds() noexcept {
    if (listen_fd >= 0) ::close(listen_fd);
    if (wake_fd >= 0) ::close(wake_fd);
    listen_fd = wake_fd = -1;
  }

  bool tracing() const noexcept { return target.pipeline != nullptr; }

  // ----- replies

  void append_process(std::string& out) const {
    json::JsonObject o(out);
    json::append_string(o.key("run_id"), target.config.run_id);
    json::append_int(o.key("rank"), target.rank);
    json::append_int(o.key("world_size"), target.world_size);
    json::append_int(o.key("pid"), owner_pid);
    json::append_string(o.key("host"), hostname());
    json::append_string(o.key("service"), target.config.service_name);
    json::append_raw(o.key("exporting"), tracing() ? "true" : "false");
    json::append_string(o.key("startup_spec"), target.config.span_groups);
    append_groups(o.key("groups"), current);
    json::append_string(o.key("track_open"), track_open_name(target.settings.track_open));
    json::append_double(o.key("hang_timeout_s"), target.settings.hang_timeout_s);
    json::append_double(o.key("uptime_s"),
                        std::chrono::duration<double>(Clock::now() - started).count());
    o.close();
  }

  // One reply line: {"protocol":1,"ok":...,"process":{...}, then what `members` adds to it}.
  template <class Members>
  std::string reply(bool ok, Members&& members) const {
    std::string out;
    json::JsonObject o(out);
    json::append_int(o.key("protocol"), 1);
    json::append_raw(o.key("ok"), ok ? "true" : "false");
    append_process(o.key("process"));
    members(o);
    o.close();
    out += '\n';
    return out;
  }

  std::string info_reply() const {
    return reply(true, [](json::JsonObject&) {});
  }

  std::string error_reply(std::string_view message) const {
    return reply(false, [&](json::JsonObject& o) { json::append_string(o.key("error"), message); });
  }

  TelemetryStats stats() const noexcept {
    return tracing() ? target.pipeline->current()->stats() : TelemetryStats{};
  }

  // Whether GPU time of spans runs in this process's pipeline (set before the endpoint started;
  // a forked child's pipeline has none).
  bool gpu_timed() const noexcept {
    return tracing() && target.pipeline->current()->gpu != nullptr;
  }

  std::string dump_reply() const {
    const auto threads = snapshot_open_spans();
    const std::int64_t now = now_unix_nano();
    return reply(true, [&](json::JsonObject& o) {
      json::append_int(o.key("now_unix_nano"), now);
      json::JsonArray thread_list(o.key("threads"));
      for (const ThreadOpenSpans& t : threads) append_open_thread(thread_list.element(), t, now);
      thread_list.close();
      append_stats(o.key("stats"), stats(), gpu_timed());
    });
  }

  // ----- group switches

  // On a rank that does not export, nothing is enabled: the switch changes what this process
  // reports (and what its watchdog follows) and which groups open NVTX ranges.
  void apply_groups(const GroupSet& groups) {
    if (tracing()) {
      set_enabled_span_groups(groups);
    } else {
      set_nvtx_span_groups(groups);
    }
  }

  // Logs a change and records it on the job's root span (the oldest open recording root span).
  void announce_change(const GroupSet& before, const GroupSet& after, int peer_pid) {
    std::fprintf(stderr,
                 "lens: rank %d (pid %d): span groups switched by lens ctl (pid %d): %s -> %s\n",
                 target.rank, static_cast<int>(owner_pid), peer_pid, join(before).c_str(),
                 join(after).c_str());
    const OpenSpanView* root = nullptr;
    std::vector<ThreadOpenSpans> threads;
    try {
      threads = snapshot_open_spans();
    } catch (...) {
      return;
    }
    for (const auto& t : threads) {
      for (const auto& s : t.spans) {
        if (s.record == nullptr || !s.root || !s.exported) continue;
        if (root == nullptr || s.start_unix_nano < root->start_unix_nano) root = &s;
      }
    }
    if (root == nullptr) return;
    const std::string b = join(before), a = join(after);
    add_event_to_open_record(root->record, semconv::kSpanGroupsChangedEvent,
                             {{semconv::kSpanGroupsPrevious, std::string_view(b)},
                              {semconv::kSpanGroupsCurrent, std::string_view(a)}});
  }

  std::string groups_reply(const GroupSet& before) const {
    return reply(true, [&](json::JsonObject& o) {
      append_groups(o.key("previous"), before);
      append_groups(o.key("groups"), current);
    });
  }

  // The flight recorder's rings, exported now (docs/flight-recorder.md).
  std::string capture_reply(std::string_view reason) const {
    if (!flight_recorder_on()) {
      return error_reply(
          "the flight recorder is off in this process (set <PREFIX>_RECORD_GROUPS, on a rank "
          "that exports spans)");
    }
    CaptureWindow everything;
    everything.include_open = true;
    const Capture captured = capture_window(reason, everything);
    return reply(true, [&](json::JsonObject& o) {
      json::append_uint(o.key("captured"), captured.spans);
      json::append_string(o.key("reason"), reason);
      json::append_int(o.key("capture_id"), captured.id);
    });
  }

  std::string switch_groups(const GroupSet& groups, int peer_pid) {
    const GroupSet before = current;
    apply_groups(groups);
    current = groups;
    announce_change(before, current, peer_pid);
    return groups_reply(before);
  }

  std::string answer(std::string_view line, int peer_pid) {
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const auto space = line.find(' ');
    const std::string_view tag = line.substr(0, space);
    if (tag != kProtocolTag) {
      return error_reply(
          "not a lens-ctl/1 request: a request is 'lens-ctl/1 <verb> [argument]' "
          "with verb info, dump, groups <spec>, groups-reset or capture [reason]");
    }
    std::string_view rest =
        space == std::string_view::npos ? std::string_view() : line.substr(space + 1);
    const auto verb_end = rest.find(' ');
    const std::string_view verb = rest.substr(0, verb_end);
    const std::string_view arg =
        verb_end == std::string_view::npos ? std::string_view() : trim(rest.substr(verb_end + 1));
    if (verb == "info" && arg.empty()) return info_reply();
    if (verb == "dump" && arg.empty()) return dump_reply();
    if (verb == "groups-reset" && arg.empty())
      return switch_groups(target.startup_groups, peer_pid);
    if (verb == "groups") {
      if (arg.empty()) return error_reply("groups needs a span-group spec, e.g. 'groups all'");
      GroupSet groups;
      try {
        groups = target.config.catalog().resolve(arg);
      } catch (const SpanGroupError& e) {
        return error_reply(e.what());  // the same message as at start-up; nothing changes
      }
      return switch_groups(groups, peer_pid);
    }
    if (verb == "capture") return capture_reply(arg.empty() ? kCaptureManual : arg);
    return error_reply("unknown request '" + std::string(rest.substr(0, 64)) +
                       "': expected info, dump, groups <spec>, groups-reset or capture [reason]");
  }

  // ----- connections

  void serve(int fd) {
    const auto deadline = Clock::now() + kRequestTimeout;
    ucred cred{};
    socklen_t len = sizeof cred;
    if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0 || cred.uid != ::geteuid()) {
      // Nothing about the process for a stranger: no "process" object.
      std::string reply = "{\"protocol\":1,\"ok\":false,";
      json::append_key(reply, "error");
      json::append_string(reply, "permission denied: this endpoint answers only uid " +
                                     std::to_string(::geteuid()) + ", not uid " +
                                     std::to_string(cred.uid));
      reply += "}\n";
      write_all(fd, reply, deadline);
      return;
    }
    std::string request;
    char buf[1024];
    for (;;) {
      const auto nl = request.find('\n');
      if (nl != std::string::npos) {
        request.resize(nl);
        break;
      }
      if (request.size() > kMaxRequest) {
        write_all(fd, error_reply("request longer than 4096 bytes"), deadline);
        return;
      }
      const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
      if (n > 0) {
        request.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      if (n == 0) {
        write_all(fd, error_reply("connection closed before a complete request line"), deadline);
        return;
      }
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return;
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
      pollfd p{fd, POLLIN, 0};
      if (left.count() <= 0 || ::poll(&p, 1, static_cast<int>(left.count())) == 0) {
        write_all(fd, error_reply("no complete request line within 2 s"),
                  deadline + kRequestTimeout);
        return;
      }
    }
    if (request.size() > kMaxRequest) {
      write_all(fd, error_reply("request longer than 4096 bytes"), deadline);
      return;
    }
    write_all(fd, answer(request, static_cast<int>(cred.pid)), Clock::now() + kRequestTimeout);
  }

  void accept_all() {
    for (;;) {
      const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) return;  // EAGAIN: nothing more; other errors: try again at the next poll
      try {
        serve(fd);
      } catch (...) {
        // Out of memory while answering: the client sees the connection close.
      }
      finish_connection(fd);
      ::close(fd);
    }
  }

  // ----- the watchdog

  // Reports each thread's innermost open span of a followed group that has been open longer than
  // the timeout, once per span.
  void check_hangs() {
    const double timeout = target.settings.hang_timeout_s;
    const auto threads = snapshot_open_spans();
    const std::int64_t now = now_unix_nano();
    std::set<std::pair<const void*, std::uint64_t>> still_open;
    std::vector<std::pair<const ThreadOpenSpans*, const OpenSpanView*>> stuck;
    for (const auto& t : threads) {
      const OpenSpanView* innermost = nullptr;
      for (const auto& s : t.spans) {
        if (s.group.empty() || current.contains(s.group)) innermost = &s;
      }
      if (innermost == nullptr) continue;
      const auto key = innermost->record != nullptr
                           ? std::pair<const void*, std::uint64_t>{nullptr, span_key(*innermost)}
                           : std::pair<const void*, std::uint64_t>{t.state, innermost->token};
      if (seconds_between(innermost->start_unix_nano, now) <= timeout) continue;
      still_open.insert(key);
      if (reported.contains(key)) continue;
      stuck.emplace_back(&t, innermost);
    }
    reported = std::move(still_open);  // forget spans that ended: their keys never come back
    for (const auto& [t, s] : stuck) report_hang(threads, *t, *s, now);
  }

  static std::uint64_t span_key(const OpenSpanView& s) {
    std::uint64_t k = 0;
    for (auto b : s.context.span_id.bytes) k = (k << 8) | b;
    return k;
  }

  void report_hang(const std::vector<ThreadOpenSpans>& threads, const ThreadOpenSpans& t,
                   const OpenSpanView& s, std::int64_t now) {
    const double open_s = seconds_between(s.start_unix_nano, now);
    std::string text = "lens: hang watchdog: rank " + std::to_string(target.rank) + " pid " +
                       std::to_string(owner_pid) + " thread " + std::to_string(t.tid) + ": '" +
                       qualified(s) + "' open for " + format_seconds(open_s) + " (timeout " +
                       format_seconds(target.settings.hang_timeout_s) + "). Open spans now:\n";
    for (const auto& th : threads) {
      text += "lens:   thread " + std::to_string(th.tid) + ": ";
      bool first = true;
      for (const auto& o : th.spans) {
        if (!first) text += " > ";
        first = false;
        text += qualified(o) + " (" + format_seconds(seconds_between(o.start_unix_nano, now)) + ")";
      }
      if (th.untracked != 0) text += " > " + std::to_string(th.untracked) + " untracked";
      text += '\n';
    }
    if (s.record != nullptr) {  // before the stderr line: whoever reads that finds the event
      add_event_to_open_record(s.record, semconv::kHangEvent,
                               {{semconv::kHangOpenSeconds, open_s},
                                {semconv::kHangTimeoutSeconds, target.settings.hang_timeout_s},
                                {semconv::kThreadId, t.tid}});
    }
    if (g_logs_recording.load(std::memory_order_relaxed)) {  // and as a log record
      const std::string message =
          "hang watchdog: '" + qualified(s) + "' open for " + format_seconds(open_s);
      emit_log_for(Severity::kWarn, message,
                   {{semconv::kHangSpan, std::string_view(qualified(s))},
                    {semconv::kHangOpenSeconds, open_s},
                    {semconv::kHangTimeoutSeconds, target.settings.hang_timeout_s},
                    {semconv::kThreadId, t.tid}},
                   "nemo.lens", s.context);
    }
    // The flight recorder: what it recorded since the stuck step (the thread's outermost open
    // step span) began, and its spans open now.
    if (flight_recorder_on()) {
      CaptureWindow window;
      window.from_unix_nano = s.start_unix_nano;
      window.include_open = true;
      for (const auto& o : t.spans) {
        if (o.group == SpanGroup::STEP) {
          window.from_unix_nano = o.start_unix_nano;
          break;
        }
      }
      const Capture captured = capture_window(kCaptureHang, window);
      if (captured.spans != 0) {
        const std::string line = "lens:   the flight recorder captured " +
                                 std::to_string(captured.spans) +
                                 " spans since the stuck step began (lens.capture.id " +
                                 std::to_string(captured.id) + ")\n";
        text += line;
      }
    }
    std::fwrite(text.data(), 1, text.size(), stderr);
    if (tracing()) target.pipeline->current()->flush(Clock::now() + std::chrono::seconds(5));
    if (LogProcessor* logs = g_log_processor.load(std::memory_order_acquire)) {
      logs->flush(Clock::now() + std::chrono::seconds(5));
    }
  }

  static std::string format_seconds(double s) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1fs", s);
    return buf;
  }

  // ----- the thread

  std::chrono::milliseconds watchdog_period() const {
    const double t = target.settings.hang_timeout_s;
    if (t <= 0) return std::chrono::milliseconds(-1);
    return std::chrono::milliseconds(
        std::clamp<std::int64_t>(static_cast<std::int64_t>(t * 1000 / 4), 20, 1000));
  }

  void run() noexcept {
    const auto period = watchdog_period();
    auto next_check = Clock::now() + period;
    for (;;) {
      pollfd fds[2] = {{wake_fd, POLLIN, 0}, {listen_fd, POLLIN, 0}};
      int timeout = -1;
      if (period.count() > 0) {
        timeout = static_cast<int>(std::max<std::int64_t>(
            0, std::chrono::duration_cast<std::chrono::milliseconds>(next_check - Clock::now())
                   .count()));
      }
      const int n = ::poll(fds, listen_fd >= 0 ? 2 : 1, timeout);
      if (n < 0 && errno != EINTR) return;
      if ((fds[0].revents & POLLIN) != 0) return;  // stop()
      if (listen_fd >= 0 && (fds[1].revents & POLLIN) != 0) accept_all();
      if (period.count() > 0 && Clock::now() >= next_check) {
        try {
          check_hangs();
        } catch (...) {
          // Out of memory: try again at the next period.
        }
        next_check = Clock::now() + period;
      }
    }
  }
};

namespace {

// The running endpoint, for the fork handler.
std::mutex g_endpoint_mu;
ControlEndpoint::Impl* g_endpoint = nullptr;  // guarded by g_endpoint_mu

void prepare_fork() noexcept { g_endpoint_mu.lock(); }
void parent_after_fork() noexcept { g_endpoint_mu.unlock(); }
// In the child the endpoint thread does not exist; its descriptors are the parent's socket.
void child_after_fork() noexcept {
  if (g_endpoint != nullptr) g_endpoint->close_fds();
  g_endpoint = nullptr;
  g_endpoint_mu.unlock();
}

}  // namespace

ControlEndpoint::ControlEndpoint(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

ControlEndpoint::~ControlEndpoint() { stop(); }

const std::string& ControlEndpoint::socket_path() const noexcept { return impl_->path; }

std::unique_ptr<ControlEndpoint> ControlEndpoint::start(ControlTarget target) noexcept {
  try {
    static const bool fork_handlers =
        pthread_atfork(prepare_fork, parent_after_fork, child_after_fork) == 0;
    (void)fork_handlers;
    auto impl = std::make_unique<Impl>();
    impl->owner_pid = ::getpid();
    impl->current = target.startup_groups;
    impl->target = std::move(target);
    const ControlSettings& settings = impl->target.settings;
    if (settings.endpoint) {
      const NemoLensConfig& config = impl->target.config;
      std::string problem = prepare_dir(
          settings.dir,
          config.env_variable("CONTROL_DIR")
              .value_or((config.env_prefix.empty() ? std::string("NEMO_LENS") : config.env_prefix) +
                        "_CONTROL_DIR"));
      if (problem.empty()) {
        impl->path = settings.dir + "/" + sanitized(impl->target.config.run_id) + "." +
                     std::to_string(impl->target.rank) + "." + std::to_string(impl->owner_pid) +
                     ".sock";
        sockaddr_un addr{};
        addr.sun_family = AF_UNIX;
        if (impl->path.size() >= sizeof addr.sun_path) {
          problem = "socket path " + impl->path + " is longer than " +
                    std::to_string(sizeof addr.sun_path - 1) + " bytes";
        } else {
          std::memcpy(addr.sun_path, impl->path.c_str(), impl->path.size() + 1);
          impl->listen_fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
          ::unlink(impl->path.c_str());  // a dead process with our pid left it
          if (impl->listen_fd < 0 ||
              ::bind(impl->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
              ::chmod(impl->path.c_str(), 0600) != 0 || ::listen(impl->listen_fd, 16) != 0) {
            problem = "cannot listen on " + impl->path + ": " + std::strerror(errno);
            if (impl->listen_fd >= 0) ::close(impl->listen_fd);
            impl->listen_fd = -1;
            ::unlink(impl->path.c_str());
          }
        }
      }
      if (!problem.empty()) {
        std::fprintf(stderr,
                     "lens: rank %d: no control endpoint (lens ctl will not see this "
                     "process): %s\n",
                     impl->target.rank, problem.c_str());
        impl->path.clear();
      }
    }
    if (impl->listen_fd < 0 && settings.hang_timeout_s <= 0) return nullptr;
    impl->wake_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (impl->wake_fd < 0) {
      if (!impl->path.empty()) ::unlink(impl->path.c_str());
      return nullptr;
    }
    // The thread takes no signals: they stay with the program's threads.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    try {
      Impl* raw = impl.get();
      impl->thread = std::thread([raw] { raw->run(); });
    } catch (...) {
      pthread_sigmask(SIG_SETMASK, &old, nullptr);
      if (!impl->path.empty()) ::unlink(impl->path.c_str());
      return nullptr;
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    {
      std::lock_guard lock(g_endpoint_mu);
      g_endpoint = impl.get();
    }
    return std::unique_ptr<ControlEndpoint>(new ControlEndpoint(std::move(impl)));
  } catch (...) {
    return nullptr;
  }
}

void ControlEndpoint::stop() noexcept {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  if (impl_->owner_pid != ::getpid()) {
    // A forked child: the thread and the socket are the parent's (the fork handler closed the
    // descriptors). The thread object refers to a thread that does not exist here: leak it.
    (void)impl_.release();
    return;
  }
  {
    std::lock_guard lock(g_endpoint_mu);
    if (g_endpoint == impl_.get()) g_endpoint = nullptr;
  }
  const std::uint64_t one = 1;
  (void)!::write(impl_->wake_fd, &one, sizeof one);
  if (impl_->thread.joinable()) impl_->thread.join();
  if (!impl_->path.empty()) ::unlink(impl_->path.c_str());
  impl_->close_fds();
}

}  // namespace nemo::lens::detail
