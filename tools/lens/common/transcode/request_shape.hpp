// What the three OTLP export requests (traces, metrics, logs) share above their own items: the
// names of their levels, for the protobuf decoder's errors and for both transcoders' JSON keys.
#pragma once

#include <string_view>

#include "common/otlp_transcode.hpp"

namespace lens_cli::transcode {

// The trace request's message names, as errors spell them.
constexpr const char* kRequestName = "ExportTraceServiceRequest";
constexpr const char* kResourceSpansName = "ResourceSpans";
constexpr const char* kScopeSpansName = "ScopeSpans";

// What differs between the three requests above the signal's own items.
struct SignalShape {
  const char* request;          // message names, as errors spell them
  const char* resource_group;   // ResourceSpans
  const char* scope_group;      // ScopeSpans
  std::string_view root_key;    // "resourceSpans"
  std::string_view scopes_key;  // "scopeSpans"
  std::string_view items_key;   // "spans"
};

constexpr SignalShape kTraceShape{kRequestName,    kResourceSpansName, kScopeSpansName,
                                  "resourceSpans", "scopeSpans",       "spans"};
constexpr SignalShape kMetricShape{"ExportMetricsServiceRequest",
                                   "ResourceMetrics",
                                   "ScopeMetrics",
                                   "resourceMetrics",
                                   "scopeMetrics",
                                   "metrics"};
constexpr SignalShape kLogShape{"ExportLogsServiceRequest",
                                "ResourceLogs",
                                "ScopeLogs",
                                "resourceLogs",
                                "scopeLogs",
                                "logRecords"};

inline const SignalShape& shape_of(Signal signal) {
  switch (signal) {
    case Signal::kMetrics:
      return kMetricShape;
    case Signal::kLogs:
      return kLogShape;
    case Signal::kTraces:
      break;
  }
  return kTraceShape;
}

}  // namespace lens_cli::transcode
