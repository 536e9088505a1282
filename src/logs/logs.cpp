// log(): records with the current span's context, queued on the set-up's LogProcessor.
#include "nemo/lens/logs.hpp"

#include <new>

#include "logs/log_processor.hpp"
#include "nemo/lens/span.hpp"
#include "tracing/clock.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens {

std::string_view severity_text(Severity severity) noexcept {
  switch (severity) {
    case Severity::kTrace:
      return "TRACE";
    case Severity::kDebug:
      return "DEBUG";
    case Severity::kInfo:
      return "INFO";
    case Severity::kWarn:
      return "WARN";
    case Severity::kError:
      return "ERROR";
    case Severity::kFatal:
      return "FATAL";
  }
  return "INFO";
}

namespace detail {

constinit std::atomic<bool> g_logs_recording{false};

void emit_log(Severity severity, std::string_view message,
              std::initializer_list<Attribute> attributes, std::string_view scope) noexcept {
  emit_log_for(severity, message, attributes, scope, current_span_context());
}

void emit_log_for(Severity severity, std::string_view message,
                  std::initializer_list<Attribute> attributes, std::string_view scope,
                  const SpanContext& context) noexcept {
  LogProcessor* processor = g_log_processor.load(std::memory_order_acquire);
  if (processor == nullptr) return;
  auto* r = new (std::nothrow) LogRecordData();
  if (r == nullptr) return;
  try {
    r->scope_name.assign(scope);
    r->time_unix_nano = now_unix_nano();
    r->observed_time_unix_nano = r->time_unix_nano;
    r->severity_number = static_cast<std::int32_t>(severity);
    r->severity_text.assign(severity_text(severity));
    r->body.assign(message);
    const LogLimits& limits = processor->limits();
    for (const Attribute& a : attributes) {
      if (r->attributes.size() >= limits.attribute_count) {
        ++r->dropped_attributes_count;
        continue;
      }
      KeyValue& kv = r->attributes.emplace_back();
      kv.key.assign(a.key);
      assign_attribute_value(kv.value, a.value, limits.attribute_value_length,
                             is_string_attribute(a.value.type()) && processor->redacted(a.key));
    }
    if (context.is_valid()) {
      r->trace_id = context.trace_id;
      r->span_id = context.span_id;
      r->trace_flags = context.trace_flags;
    }
  } catch (...) {
    delete r;
    return;
  }
  processor->enqueue(r);
}

}  // namespace detail
}  // namespace nemo::lens
