// Logs: records that carry the trace and span ids of the span they were written in, exported
// through OTLP logs, console or file when the set-up has logs_enabled (<PREFIX>_LOGS_ENABLED) and
// this rank exports. nemo/lens/spdlog_sink.hpp forwards an spdlog logger's records here.
//
//   nemo::lens::log(nemo::lens::Severity::kWarn, "loss spike", {{"iteration", it}, {"loss", l}});
//   {
//     LENS_SPAN(span, "checkpoint", "save");
//     nemo::lens::log(nemo::lens::Severity::kInfo, "saved");   // carries span's trace and span id
//   }
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include "nemo/lens/attributes.hpp"
#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

/// OpenTelemetry's SeverityNumber of each level (the first number of its range).
enum class Severity : std::uint8_t {
  kTrace = 1,
  kDebug = 5,
  kInfo = 9,
  kWarn = 13,
  kError = 17,
  kFatal = 21,
};

/// "TRACE", "DEBUG", "INFO", "WARN", "ERROR" or "FATAL".
NEMO_LENS_API std::string_view severity_text(Severity severity) noexcept;

namespace detail {
/// Whether log records are exported now (logs enabled and this rank exports). One relaxed load.
extern NEMO_LENS_API std::atomic<bool> g_logs_recording;

/// The out-of-line part of log(): a record with the current span's context, queued for export.
NEMO_LENS_API void emit_log(Severity severity, std::string_view message,
                            std::initializer_list<Attribute> attributes,
                            std::string_view scope) noexcept;
}  // namespace detail

/// Emits a log record: `message` as its body, the current span's trace and span ids (none outside
/// a span), `attributes` (limits and redaction as for spans). Never blocks: a full queue drops the
/// record and counts it. Costs one relaxed load when logs are off.
inline void log(Severity severity, std::string_view message,
                std::initializer_list<Attribute> attributes = {}) noexcept {
  if (!detail::g_logs_recording.load(std::memory_order_relaxed)) return;
  detail::emit_log(severity, message, attributes, "nemo.lens");
}

}  // namespace nemo::lens
