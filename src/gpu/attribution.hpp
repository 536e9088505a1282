// GPU time of spans: which span each piece of GPU activity belongs to, and what that adds up to
// for a span (docs/gpu.md). The bookkeeping alone: no threads, no CUDA; GpuTiming (gpu_timing.hpp)
// feeds it on the exporter thread, from the launches its source saw and the activity records
// that came back. Internal.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

namespace nemo::lens::detail {

/// What ran on the GPU.
enum class GpuActivityKind : std::uint8_t { kKernel, kMemcpy, kMemset };

/// One piece of GPU activity, as the source (CUPTI's activity records, or a test's) reports it.
struct GpuActivity {
  /// The launch it came from (CUPTI's correlation id): what ties it to a span.
  std::uint64_t correlation = 0;
  GpuActivityKind kind = GpuActivityKind::kKernel;
  std::uint32_t device = 0;
  std::uint32_t stream = 0;
  /// When it ran, in Unix nanoseconds on lens' clock (the spans' axis).
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  /// Its name (a kernel's, demangled and shortened; "memcpy", "memset"), interned by the source
  /// for its lifetime; null when unknown.
  const char* name = nullptr;
};

/// The spans a launch counts for: the span it is attributed to and the GPU-timed spans enclosing
/// it on the same thread, innermost first, as span ids. At most kMaxSpans (deeper ones left out).
struct GpuChain {
  static constexpr std::size_t kMaxSpans = 8;
  std::uint8_t size = 0;
  /// spans[0] exports each piece of this launch's activity as a child span
  /// (<PREFIX>_GPU_KERNEL_SPANS).
  bool kernel_spans = false;
  std::uint64_t spans[kMaxSpans] = {};
};

/// What a span's GPU activity adds up to.
struct GpuTime {
  /// The length of the union of its activities' intervals (streams and devices overlap once).
  std::int64_t busy_ns = 0;
  /// Kernels among them.
  std::uint64_t kernels = 0;
  /// The first activity's start and the last one's end; meaningful when `activities` > 0.
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
  /// Activities of any kind.
  std::uint64_t activities = 0;
  /// False when a launch of it had no activity record yet when the span was taken.
  bool complete = true;
  /// The activity of launches attributed to it directly (not to a span nested in it) whose
  /// chain asked for kernel spans, in arrival order, at most GpuAttribution::kMaxKernelSpans;
  /// the rest counted in `children_dropped`.
  std::vector<GpuActivity> children;
  std::uint64_t children_dropped = 0;
};

/// The attribution's bookkeeping. Not thread-safe: one owner (the exporter thread).
class GpuAttribution {
 public:
  /// Intervals a span keeps apart at most; beyond, its oldest half is folded into one figure (its
  /// busy time is then exact only for activity that starts after the folded part ends).
  static constexpr std::size_t kMaxIntervals = 65536;
  /// Launches waiting for their activity at most, by default; later ones are not attributed
  /// (counted).
  static constexpr std::size_t kMaxLaunches = 1u << 22;
  /// Kernel spans a span keeps at most (<PREFIX>_GPU_KERNEL_SPANS); later ones are counted.
  static constexpr std::size_t kMaxKernelSpans = 1024;

  /// Keeps at most `max_launches` launches waiting for their activity (tests lower it).
  explicit GpuAttribution(std::size_t max_launches = kMaxLaunches) : max_launches_(max_launches) {}

  /// A launch with correlation id `correlation`, attributed to `chain` (size >= 1). Each span of
  /// the chain waits until `records` activity records of it came (a kernel or a copy: 1; a graph:
  /// its kernel, copy and memset nodes; 0: none will come, the launch is settled now). Spans of
  /// the chain taken already (among the last kMaxRetired) are left out; when that leaves none,
  /// the launch's activity counts late.
  void launch(std::uint64_t correlation, const GpuChain& chain, std::uint32_t records = 1);
  /// The launch `correlation` (or an alias of it) will bring no more records (it failed, or went
  /// into a stream being captured into a graph): its spans wait no longer for it. Nothing when it
  /// is unknown.
  void cancel(std::uint64_t correlation);
  /// `alias` names the same launch as `correlation` (the driver call a runtime launch made): an
  /// activity record with either id is that launch's. Nothing when `correlation` is unknown.
  void alias(std::uint64_t alias, std::uint64_t correlation);
  /// An activity record: counted in every span of its launch's chain that was not taken yet; late
  /// when they all were, unattributed when its launch was never seen. One with a zero start or an
  /// end before its start (CUPTI's records when it could not time the work) settles its launch
  /// and adds nothing else (counted invalid).
  void activity(const GpuActivity& a);
  /// Whether a launch was attributed to `span` (or a span nested in it).
  bool known(std::uint64_t span) const noexcept { return spans_.contains(span); }
  /// Whether none of `span`'s launches waits for an activity record.
  bool settled(std::uint64_t span) const noexcept;
  /// `span`'s GPU time, once; it is forgotten then, and activity for it arriving later is counted
  /// late.
  GpuTime take(std::uint64_t span);

  /// Activity records that came after every span of their launch was taken.
  std::uint64_t late() const noexcept { return late_; }
  /// Activity records of launches never seen (made outside every GPU-timed span, or dropped).
  std::uint64_t unattributed() const noexcept { return unattributed_; }
  /// Activity records with no usable interval (a zero start, an end before the start): they
  /// settle their launch but add no time.
  std::uint64_t invalid() const noexcept { return invalid_; }
  /// Launches not tracked because the most launches allowed were waiting.
  std::uint64_t launches_dropped() const noexcept { return launches_dropped_; }
  /// Spans with launches attributed and not taken yet.
  std::size_t spans() const noexcept { return spans_.size(); }
  /// Launches known and not retired.
  std::size_t launches() const noexcept { return launches_.size(); }

 private:
  struct Launch {
    GpuChain chain;
    std::uint32_t expected = 1;  // records still to come before it is settled
    bool seen = false;           // settled: its records came, or it was cancelled
    std::uint64_t alias = 0;     // another id of it (alias()), 0: none
  };
  // Marks `l` settled: its spans wait no longer for it.
  void settle(Launch& l);
  // The launch `correlation` or an alias names, or launches_.end().
  std::unordered_map<std::uint64_t, Launch>::iterator find_launch(std::uint64_t correlation);
  struct Span {
    std::vector<std::pair<std::int64_t, std::int64_t>> intervals;  // disjoint, sorted by start
    std::int64_t folded_ns = 0;                                    // busy time folded away
    std::int64_t folded_until = INT64_MIN;  // activity before this was folded
    std::int64_t start_ns = INT64_MAX, end_ns = INT64_MIN;
    std::uint64_t kernels = 0, activities = 0;
    std::uint32_t waiting = 0;                // launches without an activity record yet
    std::vector<std::uint64_t> outermost_of;  // launches whose chain ends at this span
    std::vector<GpuActivity> children;        // its kernel spans' activity
    std::uint64_t children_dropped = 0;
  };
  void add(Span& s, const GpuActivity& a);
  void retire(std::uint64_t correlation);

  std::size_t max_launches_;
  std::unordered_map<std::uint64_t, Launch> launches_;
  std::unordered_map<std::uint64_t, Span> spans_;
  std::unordered_map<std::uint64_t, std::uint64_t> aliases_;  // alias -> correlation
  // Launches whose spans were all taken, so that their activity counts as late (bounded, oldest
  // out first).
  static constexpr std::size_t kMaxRetired = 1u << 16;
  std::unordered_set<std::uint64_t> retired_;
  std::deque<std::uint64_t> retired_order_;
  // Spans taken (bounded the same way): a launch that comes for one after does not count for it.
  std::unordered_set<std::uint64_t> taken_;
  std::deque<std::uint64_t> taken_order_;
  std::uint64_t late_ = 0, unattributed_ = 0, launches_dropped_ = 0, invalid_ = 0;
};

}  // namespace nemo::lens::detail
