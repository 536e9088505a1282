// The receiver of `lens collect`. See collector.hpp.
#include "collect/collector.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "common/cli.hpp"
#include "common/otlp_transcode.hpp"
#include "common/span_reader.hpp"
#include "export/json_writer.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"

namespace nemo::lens::cli {

namespace {

// Inflates a gzip (or zlib) body into `out`, every member of a multi-member gzip body (as gzip
// -d reads one); false with `too_large` when it would exceed `cap`, or with `trailing` when bytes
// that are not another gzip member follow the body.
bool gunzip(std::string_view in, std::size_t cap, std::string& out, bool& too_large,
            bool& trailing) {
  too_large = trailing = false;
  z_stream zs{};
  if (inflateInit2(&zs, 15 + 32) != Z_OK) return false;  // 32: detect gzip or zlib headers
  zs.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  zs.avail_in = static_cast<uInt>(in.size());
  out.clear();
  char chunk[64 * 1024];
  int rc = Z_OK;
  for (;;) {
    zs.next_out = reinterpret_cast<Bytef*>(chunk);
    zs.avail_out = sizeof chunk;
    rc = inflate(&zs, Z_NO_FLUSH);
    if (rc != Z_OK && rc != Z_STREAM_END) break;
    const std::size_t produced = sizeof chunk - zs.avail_out;
    if (out.size() + produced > cap) {  // a gzip bomb stops here, after at most one chunk
      too_large = true;
      rc = Z_DATA_ERROR;
      break;
    }
    out.append(chunk, produced);
    if (rc == Z_STREAM_END) {
      if (zs.avail_in == 0) break;  // the whole body
      const auto* next = zs.next_in;
      if (zs.avail_in < 2 || next[0] != 0x1f || next[1] != 0x8b) {
        trailing = true;  // not another member: the body is malformed
        rc = Z_DATA_ERROR;
        break;
      }
      if (inflateReset(&zs) != Z_OK) {
        rc = Z_DATA_ERROR;
        break;
      }
      rc = Z_OK;
      continue;
    }
    if (zs.avail_in == 0 && produced == 0) break;  // truncated stream
  }
  inflateEnd(&zs);
  return rc == Z_STREAM_END;
}

// Cuts the regular file `path`, open as `fd` for appending, back to just after its last newline
// when its last byte is not one: the fragment a crash left mid-write. Returns the bytes removed;
// throws ConfigError naming `option` when the file cannot be read or cut.
std::uint64_t cut_torn_tail(int fd, const std::string& path, std::string_view option) {
  auto fail = [&](const char* what) {
    return ConfigError("Cannot " + std::string(what) + " " + std::string(option) + " file '" +
                       path + "' to remove a torn last line: " + std::strerror(errno) + ".");
  };
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw fail("inspect");
  if (!S_ISREG(st.st_mode) || st.st_size == 0) return 0;  // a pipe or a device: nothing to mend
  const int in = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0) throw fail("read");
  // Backwards in chunks from the end, to the last newline (a torn line may be megabytes long).
  off_t end = st.st_size;
  off_t keep = 0;
  bool last = true;
  char chunk[64 * 1024];
  while (end > 0) {
    const off_t start =
        end > static_cast<off_t>(sizeof chunk) ? end - static_cast<off_t>(sizeof chunk) : 0;
    const ssize_t n = ::pread(in, chunk, static_cast<std::size_t>(end - start), start);
    if (n != end - start) {
      ::close(in);
      throw fail("read");
    }
    if (last && chunk[n - 1] == '\n') {
      ::close(in);
      return 0;  // whole lines
    }
    last = false;
    if (const void* nl = ::memrchr(chunk, '\n', static_cast<std::size_t>(n))) {
      keep = start + (static_cast<const char*>(nl) - chunk) + 1;
      break;
    }
    end = start;
  }
  ::close(in);
  if (::ftruncate(fd, keep) != 0) throw fail("cut");
  return static_cast<std::uint64_t>(st.st_size - keep);
}

// Whether the peer of `fd` is still there to read an answer: false once it closed its side (or
// the connection broke). A request read whole from a client that then gave up is still queued in
// the socket; this tells it apart from one whose client waits.
bool peer_connected(int fd) {
  pollfd p{fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) == 0 || (p.revents & (POLLRDHUP | POLLHUP | POLLERR)) == 0;
}

}  // namespace

const std::string& CollectorOutputs::path(Signal signal) const {
  switch (signal) {
    case Signal::kMetrics:
      return metrics;
    case Signal::kLogs:
      return logs;
    case Signal::kTraces:
      break;
  }
  return traces;
}

std::string_view output_option(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return "--metrics-out";
    case Signal::kLogs:
      return "--logs-out";
    case Signal::kTraces:
      break;
  }
  return "--out";
}

std::string_view http_path(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return "/v1/metrics";
    case Signal::kLogs:
      return "/v1/logs";
    case Signal::kTraces:
      break;
  }
  return "/v1/traces";
}

std::string_view grpc_method(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export";
    case Signal::kLogs:
      return "/opentelemetry.proto.collector.logs.v1.LogsService/Export";
    case Signal::kTraces:
      break;
  }
  return "/opentelemetry.proto.collector.trace.v1.TraceService/Export";
}

std::string not_collected_message(Signal signal) {
  return std::string("lens collect is not collecting ") + lens_cli::signal_name(signal) +
         ": start it with " + std::string(output_option(signal)) + " FILE";
}

CollectorSink::Output::~Output() {
  if (fd >= 0) ::close(fd);
}

CollectorSink::CollectorSink(const CollectorOutputs& outputs, std::size_t max_body)
    : max_body_(max_body) {
  for (const Signal signal : {Signal::kTraces, Signal::kMetrics, Signal::kLogs}) {
    Output& o = out_[index(signal)];
    o.path = outputs.path(signal);
    if (o.path.empty()) continue;
    o.fd = ::open(o.path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (o.fd < 0) {  // the outputs opened so far are closed by their destructors
      throw ConfigError("Cannot open " + std::string(output_option(signal)) + " file '" + o.path +
                        "' for appending: " + std::strerror(errno) + ".");
    }
    if (const std::uint64_t cut = cut_torn_tail(o.fd, o.path, output_option(signal)); cut != 0) {
      notices_.push_back(std::string(output_option(signal)) + " '" + o.path + "': removed the " +
                         std::to_string(cut) +
                         " bytes of a torn last line (a crash during a write left it without its "
                         "newline), so that new lines do not append onto it");
    }
  }
}

CollectorSink::~CollectorSink() = default;

Acceptance CollectorSink::accept(Signal signal, std::string_view body, bool json, bool gzip,
                                 const std::function<bool()>& still_wanted) {
  Acceptance a;
  Output& output = out_[index(signal)];
  if (output.fd < 0) {
    a.status = 404;
    a.error = not_collected_message(signal);
    rejected_.fetch_add(1);
    return a;
  }
  // Buffers kept per server thread: a fresh multi-megabyte string per request costs page faults.
  thread_local std::string inflated;
  thread_local std::string line;
  if (gzip) {
    bool too_large = false, trailing = false;
    if (!gunzip(body, max_body_, inflated, too_large, trailing)) {
      a.status = too_large ? 413 : 400;
      a.error = too_large ? "the decompressed body exceeds " + std::to_string(max_body_) +
                                " bytes (--max-body)"
                : trailing ? "the body is not valid gzip: data after its end"
                           : "the body is not valid gzip";
      rejected_.fetch_add(1);
      return a;
    }
    body = inflated;
  }
  line.clear();
  const lens_cli::TranscodeResult r = json ? lens_cli::json_to_json(body, line, signal)
                                           : lens_cli::protobuf_to_json(body, line, signal);
  if (!r.ok) {
    a.status = 400;
    a.error = (json ? "undecodable OTLP/JSON: " : "undecodable OTLP protobuf: ") + r.error;
    rejected_.fetch_add(1);
    return a;
  }
  // Nothing accepted is unreadable: the line must read as lens report and lens convert read it.
  // A protobuf trace request (the hot path) is decoded into JSON that reads but for what the
  // decoder reports (r.unreadable; fuzz_otlp_receiver checks that this is all); a logs line is
  // JSON that the reader skips; the rest (JSON bodies, metrics) is read with the reader itself,
  // in its stricter configuration (details and metrics).
  std::string unreadable = r.unreadable;
  if (unreadable.empty() && line.size() > SpanLineReader::kMaxLineBytes) {
    a.status = 413;
    a.error = "the request's OTLP/JSON line exceeds " +
              std::to_string(SpanLineReader::kMaxLineBytes >> 20) +
              " MiB, the longest line lens report reads";
    rejected_.fetch_add(1);
    return a;
  }
  if (unreadable.empty() && (json || signal == Signal::kMetrics)) {
    static const SpanLineReader kReadable({.details = true, .threads = 1, .metrics = true});
    thread_local ParsedRequest parsed;
    unreadable = kReadable.parse_line(line, parsed);
  }
  if (!unreadable.empty()) {
    a.status = 400;
    a.error =
        (json ? "invalid OTLP/JSON request: " : "invalid OTLP protobuf request: ") + unreadable;
    rejected_.fetch_add(1);
    return a;
  }
  line.push_back('\n');
  {
    // One write() per request on an O_APPEND descriptor: a reader sees whole lines (a crash
    // mid-write may leave a torn last one, which the next start cuts off).
    std::lock_guard lock(write_mu_);
    // Last: whatever came before took time, in which the client may have given up.
    if (still_wanted && !still_wanted()) {
      a.status = 499;
      a.error = "the client closed the connection before the answer: the request was not written";
      rejected_.fetch_add(1);
      return a;
    }
    std::string_view rest = line;
    const off_t before = ::lseek(output.fd, 0, SEEK_END);  // -1 for a pipe
    while (!rest.empty()) {
      const ssize_t n = ::write(output.fd, rest.data(), rest.size());
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        a.status = 500;
        a.error = std::string("cannot write the output file: ") + std::strerror(errno);
        // A part written (the disk filled up): take it back, so the next line starts whole.
        if (before >= 0 && rest.size() != line.size()) (void)::ftruncate(output.fd, before);
        rejected_.fetch_add(1);
        return a;
      }
      rest.remove_prefix(static_cast<std::size_t>(n));
    }
  }
  a.items = r.spans + r.points + r.records;  // the one of the signal
  output.requests.fetch_add(1);
  output.items.fetch_add(a.items);
  return a;
}

std::string CollectorSink::summary(std::uint64_t connections_shed) const {
  std::string counts;
  std::string files;
  for (const Signal signal : {Signal::kTraces, Signal::kMetrics, Signal::kLogs}) {
    const Output& o = out_[index(signal)];
    if (o.fd < 0) continue;
    const char* what = signal == Signal::kTraces    ? " requests, "
                       : signal == Signal::kMetrics ? " metrics requests, "
                                                    : " logs requests, ";
    const char* items = signal == Signal::kTraces    ? " spans, "
                        : signal == Signal::kMetrics ? " data points, "
                                                     : " log records, ";
    counts += std::to_string(o.requests.load()) + what + std::to_string(o.items.load()) + items;
    files += (files.empty() ? "" : ", ") + o.path;
  }
  std::string shed;
  if (connections_shed > 0) {
    shed = ", " + std::to_string(connections_shed) + " idle connection" +
           (connections_shed == 1 ? "" : "s") + " shed";
  }
  return "lens collect: " + counts + std::to_string(rejected_.load()) + " rejected" + shed +
         "; written to " + files;
}

std::string ListenAddress::to_string() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

bool ListenAddress::is_loopback() const {
  return host == "localhost" || host == "::1" || host.starts_with("127.");
}

ListenAddress parse_listen_address(std::string_view value, std::string_view flag) {
  auto bad = [&](const std::string& why) {
    return UsageError("invalid " + std::string(flag) + " '" + std::string(value) + "': " + why +
                      " (expected HOST:PORT, e.g. 127.0.0.1:4318 or [::1]:4318)");
  };
  ListenAddress a;
  std::string_view port;
  if (value.starts_with('[')) {
    const auto close = value.find("]:");
    if (close == std::string_view::npos) throw bad("no ']:' after an IPv6 address");
    a.host = std::string(value.substr(1, close - 1));
    port = value.substr(close + 2);
  } else {
    const auto colon = value.rfind(':');
    if (colon == std::string_view::npos) throw bad("no port");
    a.host = std::string(value.substr(0, colon));
    port = value.substr(colon + 1);
  }
  if (a.host.empty()) throw bad("no host");
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535) {
    throw bad("the port must be a number from 0 to 65535");
  }
  a.port = static_cast<std::uint16_t>(std::stoi(std::string(port)));
  if (a.host == "localhost") a.host = "127.0.0.1";
  return a;
}

// ---------------------------------------------------------------------------------------------
// HTTP

namespace {

// The state of one request across libmicrohttpd's calls of the access handler.
struct Request {
  std::string body;
  int refuse_status = 0;  // set when the request is refused before its body is read
  std::string refuse_reason;
  Signal signal = Signal::kTraces;
  bool json = false;
  bool gzip = false;
};

// The signal whose OTLP/HTTP path `url` is.
std::optional<Signal> signal_at(std::string_view url) {
  for (const Signal s : {Signal::kTraces, Signal::kMetrics, Signal::kLogs}) {
    if (url == http_path(s)) return s;
  }
  return std::nullopt;
}

// google.rpc.Status {code = 1, message = 2}, the body OTLP/HTTP gives refused protobuf requests.
std::string rpc_status_proto(int code, const std::string& message) {
  std::string out;
  {
    nemo::lens::detail::pb::Writer w(out);
    w.reserve(32 + message.size());
    w.varint_field(1, static_cast<std::uint64_t>(code));
    w.bytes_field(2, message);
  }
  return out;
}

MHD_Result respond(MHD_Connection* connection, int status, const std::string& body,
                   const char* content_type) {
  MHD_Response* response = MHD_create_response_from_buffer(
      body.size(), const_cast<char*>(body.data()), MHD_RESPMEM_MUST_COPY);
  if (response == nullptr) return MHD_NO;
  if (content_type != nullptr) MHD_add_response_header(response, "Content-Type", content_type);
  if (status == 401)
    MHD_add_response_header(response, "WWW-Authenticate", "Bearer realm=\"lens collect\"");
  const MHD_Result r = MHD_queue_response(connection, static_cast<unsigned>(status), response);
  MHD_destroy_response(response);
  return r;
}

// An error answer in the encoding the client used (OTLP/HTTP: a google.rpc.Status).
MHD_Result respond_error(MHD_Connection* connection, int status, const std::string& message,
                         bool json) {
  const int grpc_code = status == 413   ? 8  /* RESOURCE_EXHAUSTED */
                        : status == 401 ? 16 /* UNAUTHENTICATED */
                        : status == 404 ? 12 /* UNIMPLEMENTED */
                        : status >= 500 ? 13 /* INTERNAL */
                                        : 3 /* INVALID_ARGUMENT */;
  if (json) {
    std::string body = "{\"code\":" + std::to_string(grpc_code) + ",\"message\":";
    nemo::lens::detail::json::append_string(body, message);
    body.push_back('}');
    return respond(connection, status, body, "application/json");
  }
  return respond(connection, status, rpc_status_proto(grpc_code, message),
                 "application/x-protobuf");
}

}  // namespace

struct HttpReceiver::Impl {
  using Clock = std::chrono::steady_clock;

  // One TCP connection, from MHD's STARTED notification to its CLOSED one (its socket context).
  struct Connection {
    int fd = -1;
    std::string address;           // the peer's, without the port
    Clock::time_point deadline;    // for the next request's headers
    Clock::time_point idle_since;  // awaiting headers since (opened, or its last answer)
    bool awaiting_headers = true;
    bool proven = false;  // sent a request with the token (without a token: any request)
    bool shut = false;    // shut down (past its deadline, or shed): no longer counted
  };

  CollectorSink& sink;
  const ReceiverAccess access;
  const HttpLimits limits;
  MHD_Daemon* daemon = nullptr;
  std::mutex mu;
  std::condition_variable idle;
  int in_flight = 0;
  std::atomic<bool> stopping{false};  // stop() began: new connections are closed at once

  // The connections and the unproven ones' counts. The watchdog shuts a socket down only under
  // conn_mu and only while it is in `connections`; MHD notifies CLOSED (which takes conn_mu and
  // removes it) before it closes the descriptor, so a descriptor number reused by a new
  // connection is never shut by mistake.
  std::mutex conn_mu;
  std::unordered_set<Connection*> connections;
  std::unordered_map<std::string, unsigned> unproven_by_address;
  unsigned unproven = 0;  // of the connections not shut down
  unsigned live = 0;      // connections not shut down
  // Connections shed so far; relaxed: a counter read only for the summary.
  std::atomic<std::uint64_t> shed{0};
  bool watchdog_stop = false;
  std::condition_variable watchdog_wake;
  std::thread watchdog;

  Impl(CollectorSink& s, ReceiverAccess a, const HttpLimits& l)
      : sink(s), access(std::move(a)), limits(l) {}

  static std::string address_of(const sockaddr* addr) {
    char text[INET6_ADDRSTRLEN] = "";
    if (addr == nullptr) return text;
    if (addr->sa_family == AF_INET) {
      inet_ntop(AF_INET, &reinterpret_cast<const sockaddr_in*>(addr)->sin_addr, text, sizeof text);
    } else if (addr->sa_family == AF_INET6) {
      inet_ntop(AF_INET6, &reinterpret_cast<const sockaddr_in6*>(addr)->sin6_addr, text,
                sizeof text);
    }
    return text;
  }

  // MHD's accept policy: none after stop(). At a limit (the connections in all, the unproven
  // ones in all: half of it, or those of the new connection's address), the connection of that
  // scope that has waited longest without sending a byte of a request is shut down to make room,
  // so that idle or slow clients never keep out one that writes; only when every connection of
  // the scope is busy with a request is the new one refused.
  static MHD_Result admit(void* cls, const sockaddr* addr, socklen_t) {
    auto* self = static_cast<Impl*>(cls);
    if (self->stopping.load(std::memory_order_relaxed)) return MHD_NO;
    const std::string address = address_of(addr);
    std::lock_guard lock(self->conn_mu);
    if (self->live >= self->limits.max_connections &&
        !self->shed_longest_idle([](const Connection&) { return true; })) {
      return MHD_NO;
    }
    if (self->unproven >= self->limits.max_connections / 2 &&
        !self->shed_longest_idle([](const Connection& c) { return !c.proven; })) {
      return MHD_NO;
    }
    const auto it = self->unproven_by_address.find(address);
    if (it != self->unproven_by_address.end() &&
        it->second >= self->limits.max_unproven_per_address &&
        !self->shed_longest_idle(
            [&](const Connection& c) { return !c.proven && c.address == address; })) {
      return MHD_NO;
    }
    return MHD_YES;
  }

  // Under conn_mu: shuts down the connection that `in_scope` accepts and that has awaited
  // request headers longest; false when there is none.
  template <class Scope>
  bool shed_longest_idle(const Scope& in_scope) {
    Connection* longest = nullptr;
    for (Connection* c : connections) {
      if (c->shut || !c->awaiting_headers || !in_scope(*c)) continue;
      if (longest == nullptr || c->idle_since < longest->idle_since) longest = c;
    }
    if (longest == nullptr) return false;
    shut_down(*longest);
    shed.fetch_add(1, std::memory_order_relaxed);
    return true;
  }

  // Under conn_mu: shutdown(), never close(): MHD owns the descriptor, sees the end of the
  // connection and closes it itself. From then on `c` counts toward no limit.
  void shut_down(Connection& c) {
    if (c.shut) return;
    if (c.fd >= 0) ::shutdown(c.fd, SHUT_RDWR);
    c.shut = true;
    forget_unproven(c);
    --live;
  }

  // Under conn_mu: `c` has proven itself, or is gone unproven.
  void forget_unproven(Connection& c) {
    if (c.proven) return;
    c.proven = true;
    --unproven;
    const auto it = unproven_by_address.find(c.address);
    if (it != unproven_by_address.end() && --it->second == 0) unproven_by_address.erase(it);
  }

  static void notify_connection(void* cls, MHD_Connection* connection, void** socket_context,
                                MHD_ConnectionNotificationCode code) {
    auto* self = static_cast<Impl*>(cls);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      auto* c = new Connection();
      const MHD_ConnectionInfo* fd =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
      const MHD_ConnectionInfo* addr =
          MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
      c->fd = fd == nullptr ? -1 : fd->connect_fd;
      c->address = address_of(addr == nullptr ? nullptr : addr->client_addr);
      c->idle_since = Clock::now();
      c->deadline = c->idle_since + std::chrono::seconds(self->limits.header_timeout_s);
      *socket_context = c;
      std::lock_guard lock(self->conn_mu);
      self->connections.insert(c);
      ++self->live;
      ++self->unproven;
      ++self->unproven_by_address[c->address];
      return;
    }
    auto* c = static_cast<Connection*>(*socket_context);
    if (c == nullptr) return;
    {
      std::lock_guard lock(self->conn_mu);
      if (!c->shut) {
        self->forget_unproven(*c);
        --self->live;
      }
      self->connections.erase(c);
    }
    delete c;
    *socket_context = nullptr;
  }

  static Connection* connection_of(MHD_Connection* connection) {
    const MHD_ConnectionInfo* info =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return info == nullptr ? nullptr : static_cast<Connection*>(info->socket_context);
  }

  // Shuts down every connection past its deadline for headers, until stop().
  void watch() {
    std::unique_lock lock(conn_mu);
    while (!watchdog_stop) {
      watchdog_wake.wait_for(lock, std::chrono::milliseconds(200));
      const Clock::time_point now = Clock::now();
      for (Connection* c : connections) {
        if (!c->awaiting_headers || c->shut || now < c->deadline || c->fd < 0) continue;
        shut_down(*c);
      }
    }
  }

  static MHD_Result handle(void* cls, MHD_Connection* connection, const char* url,
                           const char* method, const char*, const char* upload_data,
                           size_t* upload_data_size, void** con_cls) {
    auto* self = static_cast<Impl*>(cls);
    auto* request = static_cast<Request*>(*con_cls);
    if (request == nullptr) {  // first call: headers only
      request = new Request();
      *con_cls = request;
      {
        std::lock_guard lock(self->mu);
        ++self->in_flight;
      }
      Connection* c = connection_of(connection);
      const char* type = MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Type");
      const std::string content_type = nemo::lens::detail::to_lower(type == nullptr ? "" : type);
      const std::string media = content_type.substr(0, content_type.find(';'));
      request->json = media == "application/json";
      const char* encoding =
          MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Encoding");
      const std::string enc = nemo::lens::detail::to_lower(encoding == nullptr ? "" : encoding);
      request->gzip = enc == "gzip";
      const char* length_header =
          MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Content-Length");
      const bool has_length = length_header != nullptr;
      const std::uint64_t length = has_length ? std::strtoull(length_header, nullptr, 10) : 0;
      const std::optional<Signal> signal = signal_at(url);
      const bool authenticated =
          self->access.token.empty() ||
          bearer_matches(MHD_lookup_connection_value(connection, MHD_HEADER_KIND, "Authorization"),
                         self->access.token);
      if (c != nullptr) {
        std::lock_guard lock(self->conn_mu);
        c->awaiting_headers = false;
        if (authenticated) self->forget_unproven(*c);
      }
      if (!authenticated) {
        // First: a writer without the token learns nothing about what is served here.
        request->refuse_status = 401;
        request->refuse_reason = std::string(kUnauthenticatedMessage);
      } else if (!signal) {
        request->refuse_status = 404;
        std::string paths;
        for (const Signal s : {Signal::kTraces, Signal::kMetrics, Signal::kLogs}) {
          if (!self->sink.collects(s)) continue;
          paths += (paths.empty() ? "" : ", ") + std::string(http_path(s));
        }
        request->refuse_reason = "not found: lens collect serves POST " + paths;
      } else if (!self->sink.collects(*signal)) {
        request->refuse_status = 404;
        request->refuse_reason = not_collected_message(*signal);
      } else if (std::string_view(method) != "POST") {
        request->refuse_status = 405;
        request->refuse_reason = "method not allowed: use POST";
      } else if (media != "application/x-protobuf" && media != "application/json") {
        request->refuse_status = 415;
        request->refuse_reason = "unsupported Content-Type '" + content_type +
                                 "': use application/x-protobuf or application/json";
      } else if (!enc.empty() && enc != "gzip" && enc != "identity") {
        request->refuse_status = 415;
        request->refuse_reason = "unsupported Content-Encoding '" + enc + "': use gzip or none";
      } else if (has_length && length > self->sink.max_body()) {
        request->refuse_status = 413;
        request->refuse_reason = "the body (" + std::to_string(length) +
                                 " bytes) exceeds the limit of " +
                                 std::to_string(self->sink.max_body()) + " bytes (--max-body)";
      } else if (has_length) {
        request->body.reserve(length);  // at most max_body, checked above
      }
      if (signal) request->signal = *signal;
      if (request->refuse_status != 0) {  // answer now, without reading the body
        self->sink.count_rejected();
        return respond_error(connection, request->refuse_status, request->refuse_reason,
                             request->json);
      }
      return MHD_YES;
    }
    if (*upload_data_size != 0) {  // a piece of the body
      if (request->refuse_status == 0) {
        if (request->body.size() + *upload_data_size > self->sink.max_body()) {
          request->refuse_status = 413;
          request->refuse_reason = "the body exceeds the limit of " +
                                   std::to_string(self->sink.max_body()) + " bytes (--max-body)";
          request->body.clear();
          request->body.shrink_to_fit();
        } else {
          request->body.append(upload_data, *upload_data_size);
        }
      }
      *upload_data_size = 0;  // consumed (or discarded)
      return MHD_YES;
    }
    // The whole body has arrived (or went over the limit on the way).
    if (request->refuse_status != 0) {
      self->sink.count_rejected();
      return respond_error(connection, request->refuse_status, request->refuse_reason,
                           request->json);
    }
    const MHD_ConnectionInfo* fd =
        MHD_get_connection_info(connection, MHD_CONNECTION_INFO_CONNECTION_FD);
    const int socket = fd == nullptr ? -1 : fd->connect_fd;
    const Acceptance a =
        self->sink.accept(request->signal, request->body, request->json, request->gzip,
                          [socket] { return socket < 0 || peer_connected(socket); });
    if (a.status != 200) return respond_error(connection, a.status, a.error, request->json);
    // The OTLP success answer: an empty Export<Signal>ServiceResponse in the request's encoding.
    return request->json ? respond(connection, 200, "{}", "application/json")
                         : respond(connection, 200, "", "application/x-protobuf");
  }

  static void completed(void* cls, MHD_Connection* connection, void** con_cls,
                        MHD_RequestTerminationCode) {
    auto* self = static_cast<Impl*>(cls);
    if (Connection* c = connection_of(connection)) {
      // Kept alive, it has the idle timeout for the next request's headers (an unproven one, the
      // header timeout: a client without the token cannot hold a connection by repeating 401s).
      std::lock_guard lock(self->conn_mu);
      c->awaiting_headers = true;
      c->idle_since = Clock::now();
      c->deadline = c->idle_since + std::chrono::seconds(c->proven ? self->limits.idle_timeout_s
                                                                   : self->limits.header_timeout_s);
    }
    auto* request = static_cast<Request*>(*con_cls);
    if (request == nullptr) return;
    delete request;
    *con_cls = nullptr;
    std::lock_guard lock(self->mu);
    if (--self->in_flight == 0) self->idle.notify_all();
  }
};

namespace {

// The default connection limit: half the descriptors this process may open (the other half for
// gRPC, the output files and libraries), less a reserve, at most 4096.
unsigned default_connection_limit() {
  rlimit nofile{};
  if (::getrlimit(RLIMIT_NOFILE, &nofile) != 0 || nofile.rlim_cur == RLIM_INFINITY) return 4096;
  const rlim_t half = nofile.rlim_cur > 128 ? (nofile.rlim_cur - 128) / 2 : 32;
  return static_cast<unsigned>(std::clamp<rlim_t>(half, 32, 4096));
}

// Whether something else listens on `storage` already: a bind there fails with EADDRINUSE.
bool address_in_use(const sockaddr_storage& storage) {
  const int fd = ::socket(storage.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);  // as MHD binds
  const socklen_t size = storage.ss_family == AF_INET6 ? sizeof(sockaddr_in6) : sizeof(sockaddr_in);
  const bool in_use =
      ::bind(fd, reinterpret_cast<const sockaddr*>(&storage), size) != 0 && errno == EADDRINUSE;
  ::close(fd);
  return in_use;
}

}  // namespace

HttpReceiver::HttpReceiver(const ListenAddress& address, CollectorSink& sink,
                           const ReceiverAccess& access, const HttpLimits& limits)
    : impl_(std::make_unique<Impl>(sink, access, [&] {
        HttpLimits l = limits;
        if (l.max_connections == 0) l.max_connections = default_connection_limit();
        l.header_timeout_s = std::max(l.header_timeout_s, 1u);
        l.idle_timeout_s = std::max(l.idle_timeout_s, 1u);
        return l;
      }())) {
  sockaddr_storage storage{};
  // poll(), not epoll: with MHD 0.9.75's edge-triggered epoll and a pool of threads, keep-alive
  // requests were now and then left unanswered until the 30 s idle timeout (about 1 run in 20 of
  // 250 clients; gdb: both workers in epoll_wait, the requests' bytes unread), which poll() has
  // not done in 60 runs.
  unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
  if (access.tls()) {
    if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
      throw ConfigError(
          "This libmicrohttpd has no TLS support: lens collect cannot serve HTTPS "
          "(--tls-cert, --tls-key).");
    }
    flags |= MHD_USE_TLS;
  }
  if (address.host.find(':') != std::string::npos) {
    auto* v6 = reinterpret_cast<sockaddr_in6*>(&storage);
    v6->sin6_family = AF_INET6;
    v6->sin6_port = htons(address.port);
    if (inet_pton(AF_INET6, address.host.c_str(), &v6->sin6_addr) != 1) {
      throw ConfigError("Cannot listen on '" + address.to_string() + "': not an IPv6 address.");
    }
    flags |= MHD_USE_IPv6;
  } else {
    auto* v4 = reinterpret_cast<sockaddr_in*>(&storage);
    v4->sin_family = AF_INET;
    v4->sin_port = htons(address.port);
    if (inet_pton(AF_INET, address.host.c_str(), &v4->sin_addr) != 1) {
      throw ConfigError("Cannot listen on '" + address.to_string() +
                        "': not an IPv4 address (use an address such as 127.0.0.1 or 0.0.0.0).");
    }
  }
  // The certificate and key options end the list for plain HTTP (MHD_OPTION_END in their place).
  const MHD_OPTION cert_option = access.tls() ? MHD_OPTION_HTTPS_MEM_CERT : MHD_OPTION_END;
  // With a pool, MHD splits its connection limit between its threads, and it refuses a
  // connection beyond it before admit() can make room: twice the limit (and what is being
  // closed) leaves every decision to admit(), which holds the connections to the limit.
  const HttpLimits& l = impl_->limits;
  impl_->daemon = MHD_start_daemon(
      flags, address.port, &Impl::admit, impl_.get(), &Impl::handle, impl_.get(),
      MHD_OPTION_SOCK_ADDR, reinterpret_cast<sockaddr*>(&storage), MHD_OPTION_NOTIFY_COMPLETED,
      &Impl::completed, impl_.get(), MHD_OPTION_NOTIFY_CONNECTION, &Impl::notify_connection,
      impl_.get(), MHD_OPTION_THREAD_POOL_SIZE, 2U, MHD_OPTION_CONNECTION_TIMEOUT, l.idle_timeout_s,
      MHD_OPTION_CONNECTION_LIMIT, 2 * l.max_connections + 64,
      // Bodies arrive in pieces of at most this buffer: 1 MiB keeps a batch to a few pieces.
      MHD_OPTION_CONNECTION_MEMORY_LIMIT, static_cast<size_t>(1u << 20), cert_option,
      impl_->access.cert_pem.c_str(), MHD_OPTION_HTTPS_MEM_KEY, impl_->access.key_pem.c_str(),
      MHD_OPTION_END);
  if (impl_->daemon == nullptr) {
    const int error = errno;
    if (address.port != 0 && address_in_use(storage)) {
      throw ConfigError("Cannot listen for OTLP/HTTP on " + address.to_string() +
                        ": the port is in use (pick another with --listen).");
    }
    if (access.tls()) {
      // The pair was checked with OpenSSL before (check_key_pair); GnuTLS refused it anyway.
      throw ConfigError("Cannot serve OTLP/HTTPS on " + address.to_string() +
                        ": libmicrohttpd's TLS (GnuTLS) does not accept --tls-cert and --tls-key "
                        "(a key type or certificate format it cannot use?).");
    }
    throw ConfigError("Cannot listen for OTLP/HTTP on " + address.to_string() + ": " +
                      std::strerror(error) + ".");
  }
  impl_->watchdog = std::thread([impl = impl_.get()] { impl->watch(); });
}

HttpReceiver::~HttpReceiver() { stop(0); }

std::uint64_t HttpReceiver::shed() const { return impl_->shed.load(std::memory_order_relaxed); }

std::uint16_t HttpReceiver::port() const {
  if (impl_->daemon == nullptr) return 0;
  const MHD_DaemonInfo* info = MHD_get_daemon_info(impl_->daemon, MHD_DAEMON_INFO_BIND_PORT);
  return info == nullptr ? 0 : info->port;
}

void HttpReceiver::stop(int timeout_ms) {
  if (impl_->daemon == nullptr) return;
  // New connections are closed at once; the requests in flight finish. Not MHD_quiesce_daemon():
  // with epoll (used until issue 39) and a pool of threads it takes the listening socket out of
  // each thread's epoll set from this thread while those threads may do the same, and MHD aborts
  // the process when it loses that race (seen now and then when a stop came mid-request).
  impl_->stopping.store(true, std::memory_order_relaxed);
  {
    std::unique_lock lock(impl_->mu);
    impl_->idle.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                         [&] { return impl_->in_flight == 0; });
  }
  MHD_stop_daemon(impl_->daemon);
  impl_->daemon = nullptr;
  {
    std::lock_guard lock(impl_->conn_mu);
    impl_->watchdog_stop = true;
  }
  impl_->watchdog_wake.notify_all();
  impl_->watchdog.join();
}

}  // namespace nemo::lens::cli
