// A stand-in libcupti.so.13 for the CUPTI source's tests (gpu_cupti_test.cpp): the functions of
// CUPTI's callback and activity APIs that lens calls, with CUPTI's own types and record structs
// (the CUDA toolkit's headers), driven by the test instead of a GPU. The test loads it before
// set-up, so lens finds it as "the libcupti already in the process", and then plays what CUPTI
// would do: API callbacks on the launching thread (enter and exit, with the functions' parameter
// structs and return values), records written into the buffers lens hands out, buffers completed
// when full or flushed (not by a flush with flag 0 while one of their records is incomplete),
// dropped records, and another client taking the activity API. Not part of the library.
#include <cupti.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

namespace {

struct State {
  std::mutex mu;
  std::condition_variable changed;
  bool subscribed = false;
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  std::set<std::pair<int, unsigned>> callbacks;  // (domain, id) enabled
  std::set<int> kinds;                           // activity kinds enabled
  CUpti_BuffersCallbackRequestFunc request = nullptr;
  CUpti_BuffersCallbackCompleteFunc complete = nullptr;
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  int timestamp_registrations = 0;
  bool taken = false;  // another client registered its buffer callbacks
  // The buffer being filled.
  std::uint8_t* buffer = nullptr;
  std::size_t size = 0, max_records = 0, used = 0, records = 0;
  std::size_t last_size = 0, last_max_records = 0;
  bool incomplete = false;  // it holds a record whose work has not finished
  std::size_t dropped = 0;  // reported with the next completed buffer
  int flushes = 0, forced_flushes = 0, completed = 0;
};

State& state() {
  static State s;
  return s;
}

std::size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
      return sizeof(CUpti_ActivityKernel10);
    case CUPTI_ACTIVITY_KIND_MEMCPY:
      return sizeof(CUpti_ActivityMemcpy6);
    case CUPTI_ACTIVITY_KIND_MEMCPY2:
      return sizeof(CUpti_ActivityMemcpyPtoP4);
    case CUPTI_ACTIVITY_KIND_MEMSET:
      return sizeof(CUpti_ActivityMemset4);
    case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
      return sizeof(CUpti_ActivityGraphTrace2);
    default:
      return 0;
  }
}

constexpr std::size_t aligned(std::size_t n) { return (n + 7) & ~std::size_t{7}; }

// Hands the buffer being filled back to its owner (outside the lock, as CUPTI calls from its
// own thread or the flushing one). Requires the lock, which it releases and takes again.
void complete_locked(std::unique_lock<std::mutex>& lock) {
  State& s = state();
  if (s.buffer == nullptr) return;
  std::uint8_t* buffer = std::exchange(s.buffer, nullptr);
  const std::size_t size = s.size, used = s.used;
  s.used = s.records = 0;
  s.incomplete = false;
  auto complete = s.complete;
  ++s.completed;
  lock.unlock();
  // The completion callback reads the dropped count (cuptiActivityGetNumDroppedRecords).
  if (complete != nullptr) complete(nullptr, 0, buffer, size, used);
  lock.lock();
  s.dropped = 0;
  s.changed.notify_all();
}

}  // namespace

extern "C" {

// ---- CUPTI's functions ---------------------------------------------------------------------

CUptiResult CUPTIAPI cuptiSubscribe(CUpti_SubscriberHandle* subscriber, CUpti_CallbackFunc callback,
                                    void* userdata) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (s.subscribed) return CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED;
  s.subscribed = true;
  s.callback = callback;
  s.userdata = userdata;
  *subscriber = reinterpret_cast<CUpti_SubscriberHandle>(&s);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiUnsubscribe(CUpti_SubscriberHandle) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.subscribed = false;
  s.callback = nullptr;
  s.callbacks.clear();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiEnableCallback(uint32_t enable, CUpti_SubscriberHandle,
                                         CUpti_CallbackDomain domain, CUpti_CallbackId id) {
  State& s = state();
  std::lock_guard lock(s.mu);
  if (enable != 0) {
    s.callbacks.insert({domain, id});
  } else {
    s.callbacks.erase({domain, id});
  }
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityEnable(CUpti_ActivityKind kind) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.kinds.insert(kind);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityDisable(CUpti_ActivityKind kind) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.kinds.erase(kind);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterCallbacks(CUpti_BuffersCallbackRequestFunc request,
                                                    CUpti_BuffersCallbackCompleteFunc complete) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.request = request;
  s.complete = complete;
  s.taken = false;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityRegisterTimestampCallback(CUpti_TimestampCallbackFunc callback) {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.timestamp = callback;
  ++s.timestamp_registrations;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityFlushAll(uint32_t flag) {
  State& s = state();
  std::unique_lock lock(s.mu);
  ++s.flushes;
  const bool forced = (flag & CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) != 0;
  if (forced) ++s.forced_flushes;
  if (s.buffer != nullptr && s.records > 0 && (forced || !s.incomplete)) complete_locked(lock);
  s.changed.notify_all();
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNextRecord(uint8_t* buffer, size_t valid,
                                                CUpti_Activity** record) {
  std::size_t at = 0;
  if (*record != nullptr) {
    const auto* current = *record;
    at = static_cast<std::size_t>(reinterpret_cast<const std::uint8_t*>(current) - buffer) +
         aligned(record_size(current->kind));
  }
  if (at >= valid) return CUPTI_ERROR_MAX_LIMIT_REACHED;
  *record = reinterpret_cast<CUpti_Activity*>(buffer + at);
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiActivityGetNumDroppedRecords(CUcontext, uint32_t, size_t* dropped) {
  State& s = state();
  std::lock_guard lock(s.mu);
  *dropped = s.dropped;
  return CUPTI_SUCCESS;
}

CUptiResult CUPTIAPI cuptiGetResultString(CUptiResult result, const char** text) {
  *text = result == CUPTI_SUCCESS ? "CUPTI_SUCCESS" : "CUPTI_ERROR (stand-in)";
  return CUPTI_SUCCESS;
}

// ---- What the test drives ------------------------------------------------------------------

// An API call's callback at `site` (enter or exit), with the function's parameters and, at exit,
// its return value, on the calling thread, when the subscriber enabled it.
void lens_stand_in_api(int domain, unsigned id, int site, std::uint32_t correlation,
                       const void* params, int result) {
  State& s = state();
  CUpti_CallbackFunc callback = nullptr;
  void* userdata = nullptr;
  {
    std::lock_guard lock(s.mu);
    if (!s.subscribed || !s.callbacks.contains({domain, id})) return;
    callback = s.callback;
    userdata = s.userdata;
  }
  CUpti_CallbackData data{};
  data.callbackSite = static_cast<CUpti_ApiCallbackSite>(site);
  data.functionName = "stand-in";
  data.functionParams = params;
  data.functionReturnValue = site == CUPTI_API_EXIT ? &result : nullptr;
  data.correlationId = correlation;
  callback(userdata, static_cast<CUpti_CallbackDomain>(domain), id, &data);
}

// CUPTI's clock, as lens registered it (0 without).
std::uint64_t lens_stand_in_now() {
  CUpti_TimestampCallbackFunc timestamp = nullptr;
  {
    std::lock_guard lock(state().mu);
    timestamp = state().timestamp;
  }
  return timestamp != nullptr ? timestamp() : 0;
}

// Writes `record` (a CUPTI record struct of `size` bytes) into the buffer being filled, asking
// for one first; a full buffer (its size or its record cap) is completed first. False when its
// kind is not enabled or another client holds the activity API (the record is lost).
bool lens_stand_in_record(const void* record, std::size_t size) {
  State& s = state();
  std::unique_lock lock(s.mu);
  const auto kind = static_cast<const CUpti_Activity*>(record)->kind;
  if (!s.kinds.contains(kind) || s.taken || size != record_size(kind)) return false;
  if (s.buffer != nullptr &&
      (s.used + aligned(size) > s.size || (s.max_records != 0 && s.records >= s.max_records))) {
    complete_locked(lock);
  }
  if (s.buffer == nullptr) {
    auto request = s.request;
    lock.unlock();
    std::uint8_t* buffer = nullptr;
    std::size_t buffer_size = 0, max_records = 0;
    if (request != nullptr) request(&buffer, &buffer_size, &max_records);
    lock.lock();
    if (buffer == nullptr) return false;
    s.buffer = buffer;
    s.size = s.last_size = buffer_size;
    s.max_records = s.last_max_records = max_records;
  }
  std::memcpy(s.buffer + s.used, record, size);
  s.used += aligned(size);
  ++s.records;
  return true;
}

// From now on the buffer being filled holds a record whose work is still running (true): a
// flush with flag 0 does not return it. False: that work finished.
void lens_stand_in_incomplete(bool incomplete) {
  std::lock_guard lock(state().mu);
  state().incomplete = incomplete;
}

// CUPTI dropped `n` records (its buffers were full): reported with the next completed buffer.
void lens_stand_in_drop(std::size_t n) {
  std::lock_guard lock(state().mu);
  state().dropped += n;
}

// Another CUPTI client registers its own buffer callbacks (as torch.profiler does): lens' are
// called no more, and the records of the buffer being filled go to that client.
void lens_stand_in_take_over() {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.taken = true;
  s.request = nullptr;
  s.complete = nullptr;
  std::free(s.buffer);  // lens never gets it back: its records went to the other client
  s.buffer = nullptr;
  s.used = s.records = 0;
}

// Waits (at most `timeout_ms`) until at least `n` flushes were asked for in all.
bool lens_stand_in_wait_flushes(int n, int timeout_ms) {
  State& s = state();
  std::unique_lock lock(s.mu);
  return s.changed.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                            [&] { return s.flushes >= n; });
}

int lens_stand_in_flushes() {
  std::lock_guard lock(state().mu);
  return state().flushes;
}

bool lens_stand_in_subscribed() {
  std::lock_guard lock(state().mu);
  return state().subscribed;
}

bool lens_stand_in_kind_enabled(int kind) {
  std::lock_guard lock(state().mu);
  return state().kinds.contains(kind);
}

bool lens_stand_in_callback_enabled(int domain, unsigned id) {
  std::lock_guard lock(state().mu);
  return state().callbacks.contains({domain, id});
}

int lens_stand_in_timestamp_registrations() {
  std::lock_guard lock(state().mu);
  return state().timestamp_registrations;
}

// The size and record cap of the last buffer lens handed out.
std::size_t lens_stand_in_buffer_size() {
  std::lock_guard lock(state().mu);
  return state().last_size;
}
std::size_t lens_stand_in_buffer_records() {
  std::lock_guard lock(state().mu);
  return state().last_max_records;
}

// Forgets everything but the subscriber (between tests).
void lens_stand_in_reset() {
  State& s = state();
  std::lock_guard lock(s.mu);
  s.incomplete = false;
  s.dropped = 0;
  s.taken = false;
  s.timestamp_registrations = 0;
  s.flushes = s.forced_flushes = s.completed = 0;
}

}  // extern "C"
