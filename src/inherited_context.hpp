// The trace context a process inherits through OpenTelemetry's environment carriers
// (TRACEPARENT, TRACESTATE, BAGGAGE), read at set-up. Internal; child_environment() is the public
// side (propagation.hpp).
#pragma once

#include "nemo/lens/propagation.hpp"

namespace nemo::lens::detail {

/// What this process inherited.
struct InheritedContext {
  SpanContext context;  // invalid when none
  Baggage baggage;
};

/// Reads the three variables as extract_context() reads a carrier. A set variable that yields
/// nothing is ignored with one warning on stderr naming it; never throws but std::bad_alloc.
InheritedContext read_inherited_context();
/// The process's inherited context, as set-up last set it (thread-safe).
void set_inherited_context(InheritedContext context);
InheritedContext inherited_context();

}  // namespace nemo::lens::detail
