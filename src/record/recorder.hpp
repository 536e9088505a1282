// The flight recorder (<PREFIX>_RECORD_GROUPS, docs/flight-recorder.md). Spans of the recorded
// groups that are not exported start as records like exported ones, and when they end go to a
// bounded ring of their thread (the oldest overwritten, and counted) instead of the export queue.
// Triggers move the recorded spans of a window from every thread's ring to the export pipeline,
// each marked with lens.capture.reason and lens.capture.id: a top-level step span that lasted
// more than RECORD_SLOW_FACTOR times the median of the recent steps (slow_step: its spans), a
// step or job span ending with an error status (error), the hang watchdog (hang: what was
// recorded since the stuck step began, and the recorded spans open then, as truncated copies),
// and capture() (manual: everything the rings hold). Captured spans keep their ids and parents:
// they join the trace as if they had been exported. Exported spans never take a recorded one as
// their parent (current_record() in tracing/span.cpp, exported_of() in the Python package): the
// exported trace is the same with the recorder as without it. Internal.
//
// Threading: a ring is guarded by its thread state's lock (ThreadState::mu), which the owner
// takes on its side at a span's end anyway; a capture takes each state's lock in turn (as a
// guest) to move what it wants out, then hands the records to the pipeline in one batch. Nothing
// here allocates per span: a thread's ring is allocated once, at its first recorded span.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include "nemo/lens/context.hpp"
#include "record/settings.hpp"

namespace nemo::lens::detail {

struct SpanRecord;
struct ThreadState;

/// A thread's recorded spans, oldest first from `head`. Guarded by the thread state's lock.
struct FlightRing {
  explicit FlightRing(std::size_t capacity) : slots(capacity, nullptr) {}
  std::vector<SpanRecord*> slots;  // fixed size: the ring's capacity
  std::size_t head = 0;            // the oldest span (when full, the next to be overwritten)
  std::size_t size = 0;
};

/// What lens.capture.reason says for each trigger.
inline constexpr std::string_view kCaptureSlowStep = "slow_step";
inline constexpr std::string_view kCaptureHang = "hang";
inline constexpr std::string_view kCaptureError = "error";
inline constexpr std::string_view kCaptureManual = "manual";

/// The slow_step trigger's rule: a top-level step is slow when, after kWarmupSteps steps (the
/// first ones warm up, compile, fill caches), it lasted more than `factor` times the median of the
/// last kRecentSteps steps before it (the mean of the two middle ones for an even count). A
/// sustained slowdown so raises the median within a few steps and stops triggering.
class SlowStepRule {
 public:
  static constexpr std::size_t kWarmupSteps = 5;
  static constexpr std::size_t kRecentSteps = 32;
  /// Whether a step of `duration` (ns) is slow against the steps before it; then remembers it.
  bool add(std::int64_t duration, double factor) noexcept {
    const bool slow = count_ >= kWarmupSteps &&
                      static_cast<double>(duration) > factor * static_cast<double>(median());
    durations_[next_] = duration;
    next_ = (next_ + 1) % kRecentSteps;
    count_ = std::min(count_ + 1, kRecentSteps);
    return slow;
  }
  /// The median of the steps remembered (0 for none).
  std::int64_t median() const noexcept {
    if (count_ == 0) return 0;
    std::int64_t sorted[kRecentSteps];
    std::copy(durations_, durations_ + count_, sorted);
    std::sort(sorted, sorted + count_);
    const std::size_t n = count_;
    return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2;
  }

 private:
  std::int64_t durations_[kRecentSteps] = {};
  std::size_t count_ = 0;  // remembered, at most kRecentSteps
  std::size_t next_ = 0;   // where the next one goes
};

/// The recorded spans a capture takes: those that started at or after `from_unix_nano` and ended
/// by `to_unix_nano`, of trace `trace` when it is valid.
struct CaptureWindow {
  std::int64_t from_unix_nano = INT64_MIN;
  std::int64_t to_unix_nano = INT64_MAX;
  TraceId trace;
  /// Also the recorded spans open now (started in the window), as truncated copies: the open
  /// span is then not recorded again when it ends.
  bool include_open = false;
};

/// The recorder's figures since it started (process-wide).
struct FlightStats {
  bool on = false;
  std::uint64_t recorded = 0;     // spans that went to a ring
  std::uint64_t overwritten = 0;  // of them, overwritten by newer ones before any capture
  std::uint64_t captured = 0;     // spans a capture handed to the pipeline
  std::uint64_t captures = 0;     // captures made (each has its lens.capture.id)
  std::uint64_t rings = 0;        // threads with a ring
  std::uint64_t held = 0;         // spans in the rings now
  std::uint64_t ring_spans = 0;   // each ring's capacity
  std::uint64_t bytes = 0;        // what the rings and the records they hold take
};

/// Starts recording `settings.groups` (those not exported): ring capacity, the slow_step factor;
/// with no groups, only resets the figures. Set-up, on a rank that exports, after its pipeline is
/// active. May throw std::bad_alloc.
void start_flight_recorder(const RecordSettings& settings);
/// Stops recording (shutdown, or a set-up that replaces this one): no span is recorded any more,
/// and the rings' spans are given back.
void stop_flight_recorder() noexcept;
/// Whether the recorder records now.
bool flight_recorder_on() noexcept;

/// The end of a span with mode bits (SpanRecord::mode), its end time set and off its thread's
/// stack, no lock held: a flight span goes to its owner's ring, any other to `rec->pipeline`'s
/// queue (as Pipeline::enqueue() from `current`, the calling thread's state or null); then, for
/// a watched one (step and job spans), the triggers run.
void end_span_with_mode(SpanRecord* rec, ThreadState* current) noexcept;

/// What a capture exported.
struct Capture {
  std::uint64_t spans = 0;
  std::int64_t id = 0;  // its lens.capture.id; 0: none made (the recorder is off)
};

/// Exports the recorded spans of `window` from every thread's ring to the active pipeline, each
/// marked with lens.capture.reason = `reason` and a new lens.capture.id. Any thread; never throws.
Capture capture_window(std::string_view reason, const CaptureWindow& window) noexcept;

/// The recorder's figures.
FlightStats flight_stats() noexcept;

}  // namespace nemo::lens::detail
