// GPU time of spans in a pipeline (docs/gpu.md): a source reports kernel launches on the
// launching thread and the activity records that come back later; GpuTiming attributes each
// launch to the innermost open span of a GPU-timed group on that thread (else the process's
// innermost one), holds ended spans of those groups until their activity is known (bounded) and
// gives them gpu.busy, gpu.kernels, gpu.start and gpu.end. Internal.
//
// Threads: on_launch() runs on the launching thread (in CUDA's launch call, through CUPTI's
// callback), on_activities() on whatever thread the source delivers on; sort() and release() on
// the pipeline's exporter thread; a poller thread of its own flushes the source while spans wait.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "gpu/attribution.hpp"
#include "nemo/lens/detail/export.hpp"
#include "nemo/lens/groups.hpp"

namespace nemo::lens::detail {

struct Pipeline;
struct SpanRecord;
struct ThreadState;
class GpuTiming;

/// Where launches and GPU activity come from: CUPTI (cupti_source.cpp), or a test's.
class GpuSource {
 public:
  virtual ~GpuSource() = default;
  /// Starts reporting to `timing`: launches through on_launch() on the launching thread, activity
  /// through on_activities(). Returns "" when it runs, else the reason it cannot, in one line.
  virtual std::string start(GpuTiming& timing) noexcept = 0;
  /// Hands the activity records complete so far to on_activities() before it returns. Any thread.
  virtual void flush() noexcept = 0;
  /// Stops reporting: nothing calls into the timing after it returns. Idempotent.
  virtual void stop() noexcept = 0;
  /// A span left without all its activity records (it waited GpuTiming::wait()): the source may
  /// say why, once. On the exporter thread, with the timing's lock held: must not call into it.
  virtual void incomplete() noexcept {}
};

/// Makes the source set-up uses; empty (the default): CUPTI's.
using GpuSourceFactory = std::function<std::unique_ptr<GpuSource>()>;
/// Replaces the source factory for later set-ups (tests: a synthetic source). Not thread-safe
/// against a set-up running at the same time.
NEMO_LENS_API void set_gpu_source_factory(GpuSourceFactory factory);
/// The source for a set-up: the factory's, else make_cupti_source().
std::unique_ptr<GpuSource> make_gpu_source();
/// CUPTI's source (cupti_source.cpp): libcupti loaded with dlopen when start() runs.
std::unique_ptr<GpuSource> make_cupti_source();

/// Counts of one pipeline's GPU timing (TelemetryStats' gpu_* fields, which say what each is).
struct GpuCounts {
  std::uint64_t spans_timed = 0;
  std::uint64_t spans_incomplete = 0;
  std::uint64_t spans_waiting = 0;
  std::uint64_t launches_dropped = 0;
  std::uint64_t activities_dropped = 0;
  std::uint64_t activities_late = 0;
  std::uint64_t activities_unattributed = 0;
  std::uint64_t activities_invalid = 0;
  std::uint64_t kernel_spans = 0;
  std::uint64_t kernel_spans_dropped = 0;
};

/// Launches (per launching thread), and activity records, queued for the exporter thread at most
/// by default; beyond, they are dropped and counted. A launch costs microseconds, so this is
/// seconds of launches.
inline constexpr std::size_t kMaxQueuedGpuInputs = std::size_t{1} << 20;

/// What a launching thread reports, in its order.
struct GpuInput {
  enum class Op : std::uint8_t { kLaunch, kAlias, kCancel };
  std::uint64_t correlation = 0;
  GpuChain chain;             // kLaunch
  std::uint64_t aliased = 0;  // kAlias: the launch `correlation` is another id of
  std::uint32_t records = 1;  // kLaunch
  Op op = Op::kLaunch;
  /// The GpuTiming it is for (its id_, set when queued); a consumer drops another's (stale).
  std::uint32_t timing = 0;
};

/// A thread's reports for the exporter thread (ThreadState::gpu): a queue of one producer, the
/// thread itself, and one consumer at a time (`consumer_mu`), which takes no lock of the
/// thread: a guest's lock
/// costs the owner (owner_lock.hpp), and a thread that launches kernels would have its lock
/// taken at nearly every take, then turn symmetric and fence at every span. Blocks of
/// kBlockInputs, linked: the producer needs one every kBlockInputs inputs, and takes the one the
/// consumer emptied last (a spare) before it allocates; the consumer frees the others.
class NEMO_LENS_API GpuInputs {
 public:
  static constexpr std::size_t kBlockInputs = 256;

  GpuInputs() : head_(new Block()), tail_(head_) {}
  ~GpuInputs();
  GpuInputs(const GpuInputs&) = delete;
  GpuInputs& operator=(const GpuInputs&) = delete;

  /// Producer: appends `input` unless `bound` inputs are queued already (false). May throw
  /// std::bad_alloc (nothing appended).
  bool push(const GpuInput& input, std::size_t bound);
  /// Consumer: appends every queued input of timing `timing` to `out` and drops the others. May
  /// throw std::bad_alloc from `out` (what was not appended stays queued).
  void take(std::uint32_t timing, std::vector<GpuInput>& out);
  /// Consumer: whether something is queued (a read of the producer's count).
  bool pending() const noexcept {
    return produced_.load(std::memory_order_acquire) != consumed_.load(std::memory_order_relaxed);
  }

  /// Consumers take it around take() (two timings, one being destroyed, may meet here).
  std::mutex consumer_mu;

 private:
  struct Block {
    GpuInput inputs[kBlockInputs];
    std::atomic<Block*> next{nullptr};
  };
  // An emptied block for the producer's next, or null: the consumer stores one, the producer
  // takes it (acquire pairs with the consumer's release: the consumer read it before).
  std::atomic<Block*> spare_{nullptr};
  // The consumer's side.
  Block* head_;
  std::size_t head_index_ = 0;
  alignas(64) std::atomic<std::uint64_t> consumed_{0};
  // The producer's side, on lines of its own.
  alignas(64) Block* tail_;
  std::size_t tail_index_ = 0;
  std::uint64_t consumed_seen_ = 0;  // consumed_ when the producer last read it
  std::atomic<std::uint64_t> produced_{0};
};

class GpuTiming {
 public:
  /// For the recorded spans of `groups` of `pipeline`, which wait at most `wait` for their
  /// activity once ended; the spans of `kernel_spans` (of `groups`) also export each piece of
  /// their activity as a child span.
  GpuTiming(Pipeline& pipeline, GroupSet groups, std::chrono::milliseconds wait,
            GroupSet kernel_spans = {});
  ~GpuTiming();
  GpuTiming(const GpuTiming&) = delete;
  GpuTiming& operator=(const GpuTiming&) = delete;

  /// Starts `source` and the poller: "" when it runs, else why not (then this does nothing).
  std::string start(std::unique_ptr<GpuSource> source) noexcept;
  /// Stops the source and the poller (idempotent); what is held stays for release().
  void stop() noexcept;

  /// A launch with correlation id `correlation` on the calling thread, now, that brings `records`
  /// activity records (a kernel or a copy 1; a graph its kernel, copy and memset nodes). The
  /// source calls it inside the launch, before the launch returns.
  NEMO_LENS_API void on_launch(std::uint64_t correlation, std::uint32_t records = 1) noexcept;
  /// The launch `correlation`, reported by on_launch() on this thread, brings no record after
  /// all (it failed, or went into a stream being captured into a graph): its spans stop waiting
  /// for it. On the launching thread, after on_launch().
  NEMO_LENS_API void on_cancel(std::uint64_t correlation) noexcept;
  /// A synchronising call returned (the device, a stream or an event): work is complete, so the
  /// source is flushed soon when spans wait for their records. Any thread; cheap when none waits.
  NEMO_LENS_API void on_synchronized() noexcept;
  /// Activity records the source lost (CUPTI's buffers were full): counted as dropped.
  NEMO_LENS_API void on_source_dropped(std::uint64_t records) noexcept;
  /// How long an ended span waits for its activity records at most.
  std::chrono::milliseconds wait() const noexcept { return wait_; }
  /// `alias` is another correlation id of the launch `correlation` (the driver call a runtime
  /// launch makes), on the launching thread after on_launch(correlation).
  NEMO_LENS_API void on_alias(std::uint64_t alias, std::uint64_t correlation) noexcept;
  /// Activity records, from any thread.
  NEMO_LENS_API void on_activities(std::span<const GpuActivity> activities) noexcept;
  /// Makes `bound` the most launches (and, apart, activity records) queued for the exporter
  /// thread, instead of kMaxQueuedGpuInputs; what is queued already stays. Tests lower it to see
  /// what is dropped beyond it. Any thread.
  NEMO_LENS_API void set_queue_bound(std::size_t bound) noexcept;

  /// Whether `r` is a span whose GPU time this pipeline measures: recorded in it, its group
  /// GPU-timed when it started (kModeGpu, which start() sets for the groups and stop() clears).
  bool timed(const SpanRecord& r) const noexcept;
  /// Exporter thread: the records of `batch` that are GPU-timed get their gpu.* attributes when
  /// their activity is all known (or they had none); the others leave `batch` and wait here.
  void sort(std::vector<SpanRecord*>& batch) noexcept;
  /// Exporter thread: appends the waiting records now due to `out`, with their attributes: those
  /// whose activity is all known or that waited `wait`; with `all`, every one, after waiting
  /// until `deadline` (at most, and at most `wait`) for their activity.
  void release(std::vector<SpanRecord*>& out, bool all,
               std::chrono::steady_clock::time_point deadline) noexcept;
  /// The counts so far.
  GpuCounts counts() const noexcept;

 private:
  struct Held {
    SpanRecord* record;
    std::uint64_t span;
    std::chrono::steady_clock::time_point since;
  };
  // Requires mu_. Moves what on_launch() and on_activities() queued into the attribution.
  void absorb_locked();
  // Requires mu_. Whether a held record is due now.
  bool due_locked(const Held& h, std::chrono::steady_clock::time_point now) const;
  // Requires mu_. Takes `span`'s time and writes it into `r`; its kernel spans (records of their
  // own, children of `r`) go to `children`.
  void attach_locked(SpanRecord& r, std::uint64_t span, std::vector<SpanRecord*>& children);
  using Input = GpuInput;
  // Queues an input for absorb_locked(): into the queue of `own`, the calling thread's state,
  // else into the shared one (a thread lens has no state for).
  void queue_input(ThreadState* own, Input input) noexcept;
  // A dropped input: counted when it is a launch.
  void dropped(const Input& input) noexcept;
  // queue_input() into the calling thread's queue.
  void queue_own(const Input& input) noexcept;
  // Appends what the threads' own queues hold for this timing to `out`, and drops the rest,
  // without their locks (GpuInputs) or the registry's. May throw std::bad_alloc (what was not
  // taken stays queued).
  void take_thread_queues(std::vector<Input>& out);
  void poll_loop() noexcept;

  Pipeline& pipeline_;
  const GroupSet groups_;
  const GroupSet kernel_spans_;
  const std::chrono::milliseconds wait_;
  const std::uint64_t generation_;  // g_fork_generation at construction
  const std::uint32_t id_;          // GpuInput::timing of what this timing's launches queue
  std::unique_ptr<GpuSource> source_;

  // What the source reported and the exporter thread has not taken in yet: activity records, and
  // the reports of threads without a lens thread state (the others queue to their own).
  mutable std::mutex in_mu_;  // taken after mu_ where both are held
  std::vector<Input> in_launches_;
  std::vector<GpuActivity> in_activities_;
  std::atomic<std::size_t> max_queued_{kMaxQueuedGpuInputs};  // of each queue
  // Inputs beyond the bound (or out of memory) since absorb_locked() last took these counts.
  std::atomic<std::uint64_t> in_launches_dropped_{0};
  std::uint64_t in_activities_dropped_ = 0;  // in_mu_

  mutable std::mutex mu_;  // the attribution, the held records and the counts
  // What absorb_locked() took from the queues last (under mu_): kept for their capacity.
  std::vector<Input> absorbing_launches_;
  std::vector<GpuActivity> absorbing_activities_;
  std::condition_variable cv_;  // a record waits, activity came, or stop
  GpuAttribution attribution_;
  std::deque<Held> held_;
  GpuCounts counts_;
  bool stopping_ = false;
  std::atomic<std::size_t> held_count_{0};    // held_.size(), read without mu_
  std::atomic<bool> flush_requested_{false};  // on_synchronized() while spans were held
  std::thread poller_;
};

}  // namespace nemo::lens::detail
