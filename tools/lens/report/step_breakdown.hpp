// Where each top-level step's time went, computed from all the spans of the step's trace at once
// (so that no figure depends on the order the spans arrived in):
//
// - on the step's own thread (the thread that ran the step span, and its spans nested by
//   parentage on that thread, each cut to its parent's interval; not a span inside which
//   another span of that thread, not its descendant, started: that one was not the thread's
//   current span, it ran beside, as a DDP hook's all-reduce does), every instant of the step
//   belongs to the innermost span open on that thread (the deepest; of two at one depth, the one
//   that started later, then the larger span id): these "own" times add up to the step's
//   duration exactly;
// - spans of the step on other threads or processes ran beside it: per group and name, the time
//   they overlapped the step (the union of their intervals within it) and the part of that time
//   that was exposed, where the step's own thread was in a span of the same group or in no span
//   but the step (it waited, or did nothing else);
// - per name and group, the union of their spans' intervals within the step ("within");
// - the step's collectives: its outermost spans of the communication group, on any thread, by
//   start, which stragglers.hpp matches across ranks (who arrived last, who waited for whom);
//   not those the flight recorder captured: only some steps have them, so they would not match;
// - for a step with spans the flight recorder captured, its captures and its spans to draw.
//
// docs/report.md has the rules with the demo's figures.
//
//   StepAnalyzer analyzer(kinds);                      // what each name id is
//   analyzer.analyze(spans_of_one_trace, [&](const StepResult& step) { ... });
#pragma once

#include <climits>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <utility>
#include <vector>

namespace nemo::lens::cli {

/// SpanFacts::thread_id of a span without a thread.id attribute.
inline constexpr std::int64_t kNoThread = INT64_MIN;
/// The thread of a kernel span (SpanRecord::gpu_kernel): the GPU, never a step's own thread, so
/// that its time is beside the step's CPU spans, not theirs; and never a collective.
inline constexpr std::int64_t kGpuKernelThread = INT64_MIN + 1;

/// SpanFacts::kind: a span, or the GPU times, the iteration attribute or the flight recorder's
/// capture marks of the span of the same rank, trace and span id.
enum class FactsKind : std::uint32_t { kSpan = 0, kGpu = 1, kIteration = 2, kCapture = 3 };

/// One span as the step analysis needs it: 64 bytes, spilled as they are to a temporary file. A
/// GPU-timed span adds a second record of kind kGpu (gpu_facts()), a step span with an
/// `iteration` attribute one of kind kIteration (iteration_facts()), and a span the flight
/// recorder captured one of kind kCapture (capture_facts()), so that other spans cost nothing
/// more.
struct SpanFacts {
  std::int64_t rank = 0;  // the report's rank key (dl.rank, or a value for none)
  std::uint64_t trace_key = 0;
  std::uint64_t span_id = 0;
  std::uint64_t parent_span_id = 0;  // 0: a root
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;  // >= start_ns
  std::int64_t thread_id = kNoThread;
  std::uint32_t name_id = 0;  // the report's (group, name) index
  FactsKind kind = FactsKind::kSpan;
};
static_assert(sizeof(SpanFacts) == 64);

/// The GPU times of a GPU-timed span (its gpu.* attributes, span_reader.hpp's SpanGpu).
struct GpuFacts {
  bool has_busy = false;
  bool has_kernels = false;
  bool has_interval = false;  // gpu.start and gpu.end, the end not before the start
  std::uint64_t busy_ns = 0;
  std::uint64_t kernels = 0;
  std::uint64_t start_ns = 0;  // the GPU interval [start_ns, end_ns], Unix ns
  std::uint64_t end_ns = 0;
  bool operator==(const GpuFacts&) const = default;
};

/// The kGpu record that carries `gpu` for `span` (same rank, trace and span id).
SpanFacts gpu_facts(const SpanFacts& span, const GpuFacts& gpu);
/// The GPU times a kGpu record carries.
GpuFacts gpu_of(const SpanFacts& record);

/// The kIteration record that carries the `iteration` attribute of `span`.
SpanFacts iteration_facts(const SpanFacts& span, std::int64_t iteration);

/// A capture of the flight recorder (docs/flight-recorder.md): its lens.capture.id, and its
/// lens.capture.reason as the caller's index of the reason strings.
struct CaptureMark {
  std::int64_t capture_id = 0;
  std::uint32_t reason_id = 0;
  auto operator<=>(const CaptureMark&) const = default;
};

/// The kCapture record that says the flight recorder captured `span` with `mark`.
SpanFacts capture_facts(const SpanFacts& span, const CaptureMark& mark);

/// A half-open time interval [start_ns, end_ns), Unix ns.
struct Interval {
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  bool operator==(const Interval&) const = default;
};

/// What a name id stands for, as far as the analysis cares.
struct NameKind {
  std::uint32_t group_id = 0;
  bool is_step = false;           // of the step group
  bool is_communication = false;  // of the communication group (GPU time: exposed communication)
};

/// A GPU interval on the timeline's GPU row: the union of the GPU intervals of a step's leaf
/// GPU-timed spans of one group.
struct GpuBox {
  Interval interval;
  std::uint32_t group_id = 0;
  bool operator==(const GpuBox&) const = default;
};

/// The GPU time of one step (docs/report.md#gpu-time), when it or one of its spans was GPU-timed.
/// A span's GPU interval is [gpu.start, gpu.end], cut to start no earlier than the step; a leaf
/// is a GPU-timed span of the step (the step included) with no GPU-timed descendant.
struct StepGpu {
  bool timed = false;  // the step or one of its spans carried gpu.* attributes
  /// The step's gpu.busy, else the union of the GPU intervals of its GPU-timed spans.
  std::uint64_t busy_ns = 0;
  /// [step start, max(step end, the last GPU interval's end)] less busy_ns, at least 0.
  std::uint64_t idle_ns = 0;
  /// The union of the communication leaves' GPU intervals less the union of the other leaves'.
  std::uint64_t exposed_comm_ns = 0;
  std::vector<GpuBox> boxes;  // the leaves' GPU intervals, their union per group, by start
};

/// Time per name or group id, in ns.
using IdTimes = std::vector<std::pair<std::uint32_t, std::uint64_t>>;

/// A span of a step the flight recorder captured detail of, as the report draws it: its interval
/// (cut as for the step's own time: to its parent on the step's thread, to the step beside it),
/// its name id, its depth below the step (the step 0, its children 1, ...) and whether it was
/// captured (else exported as it ended).
struct StepBox {
  Interval interval;
  std::uint32_t name_id = 0;
  std::uint32_t depth = 0;
  bool captured = false;
  bool operator==(const StepBox&) const = default;
};

/// The spans of a captured step kept for drawing: the longest, when it had more.
inline constexpr std::size_t kMaxStepBoxes = 2000;

/// A collective of a step: one of its outermost spans of the communication group (no ancestor
/// of that group below the step), on any thread, cut to the step. Its start is the rank's
/// arrival.
struct Collective {
  std::uint32_t name_id = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  bool operator==(const Collective&) const = default;
};

/// Spans of other threads or processes beside one step, per name or group id.
struct OverlapTimes {
  std::uint32_t id = 0;
  std::uint64_t spans = 0;          // spans of that id overlapping the step
  std::uint64_t overlapped_ns = 0;  // the union of their intervals within the step
  std::uint64_t exposed_ns = 0;     // of which the step's own thread was not busy elsewhere
};

/// The breakdown of one top-level step span.
struct StepResult {
  std::int64_t rank = 0;
  std::uint64_t span_id = 0;
  std::uint32_t name_id = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t duration_ns = 0;
  std::optional<std::int64_t> iteration;  // the step span's `iteration` attribute
  IdTimes own_by_name;                    // on the step's thread; sums to duration_ns
  IdTimes within_by_name;                 // every span of the step, per name: union within the step
  IdTimes within_by_group;                // the same per group
  std::vector<OverlapTimes> overlap_by_name;
  std::vector<OverlapTimes> overlap_by_group;
  std::vector<Interval> overlapped;     // the union of every overlapping span's interval, in order
  std::vector<Interval> exposed;        // its exposed parts, in order
  std::vector<Collective> collectives;  // by start (then end, name id)
  StepGpu gpu;
  /// Per group, the gpu.busy of the step's leaf GPU-timed spans of that group (their GPU
  /// interval's length when they have no gpu.busy).
  IdTimes gpu_busy_by_group;
  /// Per name, the GPU time of its spans within the step: their gpu.busy added up (the outermost
  /// span of the name on each path only), at most the union of their GPU intervals cut to the
  /// step, so never more than the step.
  IdTimes gpu_in_step_by_name;
  /// The step's spans (the step included) the flight recorder captured; 0 for nearly every step.
  std::uint64_t captured_spans = 0;
  /// Only when captured_spans > 0: their captures (distinct, sorted); the step's spans per name
  /// id, counted, and the longest of each (cut as the boxes are); and its spans to draw (at most
  /// kMaxStepBoxes, the longest; by start, then depth).
  std::vector<CaptureMark> captures;
  IdTimes spans_by_name;
  IdTimes longest_by_name;
  std::vector<StepBox> boxes;
  std::uint64_t boxes_dropped = 0;  // spans beyond kMaxStepBoxes
};

/// Counters of the parent links of the traces analysed.
struct TraceCounts {
  std::uint64_t missing_parents = 0;  // distinct parent ids not among the trace's spans
  std::uint64_t duplicates = 0;       // spans whose id another span of the trace had (one kept)
  std::uint64_t cycles = 0;           // spans in a parent cycle, so under no root (not analysed)
};

/// |a ∩ b| of two sorted lists of disjoint intervals.
std::uint64_t intersection_ns(const std::vector<Interval>& a, const std::vector<Interval>& b);

/// Sorts `intervals` and merges those that overlap or touch.
void merge_intervals(std::vector<Interval>& intervals);

/// Calls `fn` for each leaf GPU-timed span of one rank's trace (`spans`: its span and GPU
/// records, as StepAnalyzer::analyze takes them; sorted in place), in span id order: a span with
/// GPU times none of whose descendants (by parent ids within the trace) has any. Of two spans
/// with one id, the one analyze() keeps.
void for_each_gpu_leaf(std::span<SpanFacts> spans,
                       const std::function<void(const SpanFacts&, const GpuFacts&)>& fn);

/// Finds the top-level steps of one rank's trace and breaks each down. Not thread-safe.
class StepAnalyzer {
 public:
  /// `kinds[name_id]` for every name id the spans carry (kept by reference).
  explicit StepAnalyzer(const std::vector<NameKind>& kinds) : kinds_(kinds) {}

  /// `spans`: all the spans of one rank and trace, with the GPU records of the GPU-timed ones,
  /// in any order (sorted in place). Calls
  /// `on_step` once for each span of the step group with no ancestor of that group, in an order
  /// that depends only on the spans.
  void analyze(std::span<SpanFacts> spans, const std::function<void(const StepResult&)>& on_step);

  const TraceCounts& counts() const { return counts_; }

 private:
  struct Node {
    std::uint64_t start_ns;  // clipped: to the on-thread parent, or to the step
    std::uint64_t end_ns;
    std::int64_t thread;   // the thread it ran on (its parent's when it has no thread.id)
    std::uint32_t index;   // into the sorted spans
    std::uint32_t parent;  // into nodes_
    std::uint32_t depth;   // below the step, on its thread
    bool own;              // on the step's thread
  };
  void analyze_step(std::span<const SpanFacts> spans, std::uint32_t step);
  void analyze_gpu(std::span<const SpanFacts> spans, StepResult& r);
  void boxes_of_step(std::span<const SpanFacts> spans, StepResult& r);
  std::uint32_t group_of(const SpanFacts& s) const { return kinds_[s.name_id].group_id; }

  const std::vector<NameKind>& kinds_;
  TraceCounts counts_;
  // Per trace, reused: parent index of each span, children in CSR form.
  std::vector<std::uint32_t> parent_;
  std::vector<std::uint32_t> child_begin_;
  std::vector<std::uint32_t> children_;
  std::vector<std::uint32_t> stack_;
  std::vector<Node> nodes_;
  std::vector<bool> captured_;             // per node: the flight recorder captured it
  std::vector<GpuFacts> gpu_;              // per trace: the GPU records, deduplicated
  std::vector<std::uint32_t> gpu_index_;   // per span: into gpu_, or none (empty: no GPU record)
  std::span<const SpanFacts> iterations_;  // per trace: the kIteration records, by span id
  std::span<const SpanFacts> captures_;    // per trace: the kCapture records, by span id
  StepResult result_;
  const std::function<void(const StepResult&)>* on_step_ = nullptr;
};

}  // namespace nemo::lens::cli
