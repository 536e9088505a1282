// The control endpoint: a Unix domain socket per process that `lens ctl` talks to (list the
// process, switch its span groups, dump its open spans), and the hang watchdog that shares its
// thread. Protocol and security rules: docs/control.md. Internal.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "control/settings.hpp"
#include "nemo/lens/config.hpp"
#include "nemo/lens/groups.hpp"
#include "tracing/open_spans.hpp"

namespace nemo::lens::detail {

struct Pipeline;

/// What the endpoint serves: the process's set-up.
struct ControlTarget {
  NemoLensConfig config;
  int rank = 0;
  int world_size = 1;
  Pipeline* pipeline = nullptr;  // null on a rank that does not trace
  GroupSet startup_groups;
  ControlSettings settings;
};

/// A running endpoint (and watchdog). Every method is noexcept and never throws into the program.
class ControlEndpoint {
 public:
  /// Starts the endpoint thread: the socket when settings.endpoint is on, the watchdog when
  /// settings.hang_timeout_s > 0. Null (after one line on stderr saying why) when neither could
  /// start.
  static std::unique_ptr<ControlEndpoint> start(ControlTarget target) noexcept;
  /// Stops the thread and removes the socket. In a forked child: does nothing to the parent's.
  void stop() noexcept;
  ~ControlEndpoint();

  /// The socket's path; empty when only the watchdog runs.
  const std::string& socket_path() const noexcept;

  ControlEndpoint(const ControlEndpoint&) = delete;
  ControlEndpoint& operator=(const ControlEndpoint&) = delete;

  struct Impl;  // the thread's state; endpoint.cpp only

 private:
  explicit ControlEndpoint(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace nemo::lens::detail
