// The client side of the lens control endpoint (docs/control.md) for `lens ctl`: where the
// endpoints are, and one request/reply exchange with each of them, all at once, each bounded by a
// timeout.
//
//   const Endpoints found = find_endpoints(default_control_dir());
//   for (const Exchange& e : exchange_all(found.sockets, "info", std::chrono::seconds(5))) {
//     if (e.status == ExchangeStatus::ok) use(e.reply["process"]);
//   }
#pragma once

#include <sys/types.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens::cli::ctl {

/// The protocol version lens ctl speaks: requests start with "lens-ctl/1 ", replies carry
/// "protocol": 1.
inline constexpr int kProtocolVersion = 1;

/// The longest request line the endpoint accepts, newline included.
inline constexpr std::size_t kMaxRequestLine = 4096;

/// The largest reply lens ctl reads; a longer one is reported as unparseable.
inline constexpr std::size_t kMaxReplyBytes = 64u << 20;

/// The control directory when --dir is not given: NEMO_LENS_CONTROL_DIR when set and not blank,
/// else the library's default (`$XDG_RUNTIME_DIR/lens`, else /tmp/lens-<euid>).
std::string default_control_dir();

/// What a control directory holds.
struct Endpoints {
  bool dir_found = false;            // false when the directory does not exist
  std::vector<std::string> sockets;  // the paths of its *.sock entries, sorted
};

/// An error reading a control directory that exists (not a directory, no permission, ...), or a
/// directory lens ctl refuses to trust (see find_endpoints).
class DirectoryError : public std::runtime_error {
 public:
  explicit DirectoryError(const std::string& message) : std::runtime_error(message) {}
};

/// The *.sock entries of `dir` (of any file type: a non-socket is reported when connected to).
/// A missing directory gives dir_found false; any other failure throws DirectoryError naming
/// `dir`. So does a directory that is a symbolic link, belongs to another user or is open to
/// other users (mode not 0700 or stricter), with why and how to fix it: anyone who could put a
/// socket there could pose as one of this user's processes.
Endpoints find_endpoints(const std::string& dir);

/// How an exchange with one endpoint ended.
enum class ExchangeStatus {
  ok,           // a reply that is a protocol-1 JSON object with "ok" and a "process" object
  stale,        // nobody listens (ECONNREFUSED): a dead process's leftover; see `removed`
  gone,         // the socket vanished before the connect (ENOENT): its process just exited
  unreachable,  // no usable reply: timeout, connect or I/O error, unparseable reply (`problem`)
};

/// One request sent to one endpoint and what came back.
struct Exchange {
  std::string socket;  // the endpoint's path
  ExchangeStatus status = ExchangeStatus::unreachable;
  nlohmann::ordered_json reply;  // the parsed reply (status ok), members in the order sent
  std::string reply_text;        // the reply as received, without the trailing newline
  std::string problem;           // what went wrong (status unreachable or stale), for people
  bool removed = false;          // stale: the leftover socket file was deleted
};

/// Sends `request` ("info", "dump", "groups all", "groups-reset": the verb and its argument,
/// without the "lens-ctl/1 " prefix and the newline) to every endpoint in `sockets`
/// concurrently and reads each reply until the endpoint closes the connection, waiting at most
/// `timeout` for each. Returns one Exchange per socket, in the order of `sockets`. A stale
/// endpoint (connection refused) that is a socket owned by this user is unlinked (`removed`). An
/// endpoint whose listening process runs as another user (SO_PEERCRED) gets no request: it is
/// unreachable, its `problem` saying "refused: served by uid ...". Never throws for a problem
/// with one endpoint.
std::vector<Exchange> exchange_all(std::span<const std::string> sockets, std::string_view request,
                                   std::chrono::milliseconds timeout);

/// Checks a reply's text: a JSON object with "protocol": 1, a boolean "ok" and a "process"
/// object. Returns the parsed object, or throws std::runtime_error saying what is wrong.
nlohmann::ordered_json parse_reply(std::string_view text);

/// `timeout` in seconds for messages, e.g. "5s", "0.25s".
std::string seconds_text(std::chrono::milliseconds timeout);

}  // namespace nemo::lens::cli::ctl
