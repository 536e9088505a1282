// An spdlog sink that turns an spdlog logger's records into lens log records: the current span's
// trace and span ids, the logger's name as the instrumentation scope, the source location as
// code.* attributes. Header-only; include it where spdlog is available.
//
//   #include <nemo/lens/spdlog_sink.hpp>
//   auto logger = std::make_shared<spdlog::logger>("trainer",
//                                                 std::make_shared<nemo::lens::spdlog_sink_mt>());
//   SPDLOG_LOGGER_WARN(logger, "loss spike at {}", it);   // inside a span: carries its ids
#pragma once

#include <spdlog/details/null_mutex.h>
#include <spdlog/sinks/base_sink.h>

#include <mutex>
#include <string_view>

#include "nemo/lens/logs.hpp"
#include "nemo/lens/semconv.hpp"

namespace nemo::lens {

/// Forwards each record to lens (see log()) when logs are exported; otherwise drops it at the cost
/// of one relaxed load. Levels map to trace, debug, info, warn, error (err) and fatal (critical).
/// The span context is the calling thread's, so use it on a synchronous logger: an asynchronous
/// logger's worker thread has no span.
template <class Mutex>
class SpdlogSink : public spdlog::sinks::base_sink<Mutex> {
 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!detail::g_logs_recording.load(std::memory_order_relaxed)) return;
    Severity severity = Severity::kInfo;
    switch (msg.level) {
      case spdlog::level::trace:
        severity = Severity::kTrace;
        break;
      case spdlog::level::debug:
        severity = Severity::kDebug;
        break;
      case spdlog::level::info:
        severity = Severity::kInfo;
        break;
      case spdlog::level::warn:
        severity = Severity::kWarn;
        break;
      case spdlog::level::err:
        severity = Severity::kError;
        break;
      case spdlog::level::critical:
        severity = Severity::kFatal;
        break;
      default:
        return;  // off
    }
    const std::string_view body(msg.payload.data(), msg.payload.size());
    const std::string_view logger(msg.logger_name.data(), msg.logger_name.size());
    const std::string_view scope = logger.empty() ? std::string_view("nemo.lens") : logger;
    if (msg.source.filename != nullptr) {
      detail::emit_log(
          severity, body,
          {{semconv::kCodeFilepath, std::string_view(msg.source.filename)},
           {semconv::kCodeLineno, static_cast<std::int64_t>(msg.source.line)},
           {semconv::kCodeFunction,
            std::string_view(msg.source.funcname != nullptr ? msg.source.funcname : "")}},
          scope);
    } else {
      detail::emit_log(severity, body, {}, scope);
    }
  }
  void flush_() override {}
};

/// The thread-safe sink (one mutex per sink, as spdlog's _mt sinks).
using spdlog_sink_mt = SpdlogSink<std::mutex>;
/// The sink for single-threaded loggers.
using spdlog_sink_st = SpdlogSink<spdlog::details::null_mutex>;

}  // namespace nemo::lens
