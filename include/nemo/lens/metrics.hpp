// Metrics: counters, up-down counters, histograms and gauges a job can leave on in production.
// Instruments are created once (usually at start-up) from a Meter and recorded on the hot path;
// setup_telemetry() decides whether anything is recorded and exported (metrics_enabled, the rank
// strategy), and a periodic reader exports the aggregates (OTLP, console or file).
//
//   auto& meter = nemo::lens::get_meter();
//   static auto tokens = meter.create_counter<std::int64_t>("train.tokens", "{token}");
//   static auto step_time = meter.create_histogram<double>("train.step.duration", "s");
//   tokens.add(batch_tokens, {{"dataset", "web"}});
//   step_time.record(seconds);
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "nemo/lens/attributes.hpp"
#include "nemo/lens/detail/export.hpp"

namespace nemo::lens {

namespace detail {
struct Instrument;
struct MeterState;
struct ObservableRegistration;

/// Whether instruments record now: set-up turned metrics on and this rank exports them. Read with
/// one relaxed load by every record call.
extern NEMO_LENS_API std::atomic<bool> g_metrics_recording;

/// The out-of-line part of add() and record(); `value` is an int64 or a double per `T`.
template <class T>
NEMO_LENS_API void instrument_add(Instrument* instrument, T value,
                                  std::initializer_list<Attribute> attributes) noexcept;
template <class T>
NEMO_LENS_API void instrument_record(Instrument* instrument, T value,
                                     std::initializer_list<Attribute> attributes) noexcept;
template <class T>
NEMO_LENS_API void instrument_set(Instrument* instrument, T value,
                                  std::initializer_list<Attribute> attributes) noexcept;
template <class T>
NEMO_LENS_API void instrument_observe(Instrument* instrument, T value,
                                      std::initializer_list<Attribute> attributes) noexcept;

template <class T>
inline constexpr bool kMetricValue = std::is_same_v<T, std::int64_t> || std::is_same_v<T, double>;
}  // namespace detail

/// A monotonic sum: add() takes values >= 0 (a negative value is dropped and counted). Cheap to
/// copy; a default-constructed counter records nothing. Thread-safe; never throws or blocks.
template <class T>
class Counter {
  static_assert(detail::kMetricValue<T>, "T is std::int64_t or double");

 public:
  Counter() = default;
  /// Adds `value` to the sum of the attribute set. Costs one relaxed load when metrics are off.
  void add(T value, std::initializer_list<Attribute> attributes = {}) const noexcept {
    if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
    detail::instrument_add<T>(instrument_, value, attributes);
  }

 private:
  friend class Meter;
  explicit Counter(detail::Instrument* i) noexcept : instrument_(i) {}
  detail::Instrument* instrument_ = nullptr;
};

/// A sum that goes up and down (queue depth, bytes in flight). Same costs as Counter.
template <class T>
class UpDownCounter {
  static_assert(detail::kMetricValue<T>, "T is std::int64_t or double");

 public:
  UpDownCounter() = default;
  /// Adds `value` (of either sign) to the sum of the attribute set.
  void add(T value, std::initializer_list<Attribute> attributes = {}) const noexcept {
    if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
    detail::instrument_add<T>(instrument_, value, attributes);
  }

 private:
  friend class Meter;
  explicit UpDownCounter(detail::Instrument* i) noexcept : instrument_(i) {}
  detail::Instrument* instrument_ = nullptr;
};

/// A distribution over explicit buckets, with count, sum, min and max.
template <class T>
class Histogram {
  static_assert(detail::kMetricValue<T>, "T is std::int64_t or double");

 public:
  Histogram() = default;
  /// Records one value into the attribute set's buckets (NaN is dropped and counted).
  void record(T value, std::initializer_list<Attribute> attributes = {}) const noexcept {
    if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
    detail::instrument_record<T>(instrument_, value, attributes);
  }

 private:
  friend class Meter;
  explicit Histogram(detail::Instrument* i) noexcept : instrument_(i) {}
  detail::Instrument* instrument_ = nullptr;
};

/// A synchronous gauge: the last value set for each attribute set.
template <class T>
class Gauge {
  static_assert(detail::kMetricValue<T>, "T is std::int64_t or double");

 public:
  Gauge() = default;
  /// Sets the attribute set's value.
  void set(T value, std::initializer_list<Attribute> attributes = {}) const noexcept {
    if (!detail::g_metrics_recording.load(std::memory_order_relaxed)) return;
    detail::instrument_set<T>(instrument_, value, attributes);
  }
  /// Same as set(), with OpenTelemetry's name for it.
  void record(T value, std::initializer_list<Attribute> attributes = {}) const noexcept {
    set(value, attributes);
  }

 private:
  friend class Meter;
  explicit Gauge(detail::Instrument* i) noexcept : instrument_(i) {}
  detail::Instrument* instrument_ = nullptr;
};

/// What an observable instrument's callback reports into, at each collection.
template <class T>
class ObserverResult {
 public:
  /// Reports the current value of one attribute set (the last report of a set wins).
  void observe(T value, std::initializer_list<Attribute> attributes = {}) noexcept {
    detail::instrument_observe<T>(instrument_, value, attributes);
  }

 private:
  friend struct detail::MeterState;
  explicit ObserverResult(detail::Instrument* i) noexcept : instrument_(i) {}
  detail::Instrument* instrument_;
};

/// The registration of an observable instrument's callback. The callback runs on the reader's
/// thread at every collection until unregister() (or for the life of the process).
class NEMO_LENS_API ObservableInstrument {
 public:
  ObservableInstrument() = default;
  /// Stops calling the callback; waits for a call in progress to return. Idempotent.
  void unregister() noexcept;

 private:
  friend struct detail::MeterState;
  explicit ObservableInstrument(std::shared_ptr<detail::ObservableRegistration> r) noexcept
      : registration_(std::move(r)) {}
  std::shared_ptr<detail::ObservableRegistration> registration_;
};

/// Creates instruments. Names follow the OpenTelemetry rules — an ASCII letter, then up to 254
/// letters, digits, '_', '.', '-' or '/' — and a unit is at most 63 ASCII characters; anything else
/// throws ConfigError at creation, naming the instrument and the rule. Creating an instrument
/// again (same name, case-insensitive) returns the same one; the same name with another kind or
/// value type throws ConfigError. Creation takes a lock; recording does not. Meters live for the
/// whole process.
class NEMO_LENS_API Meter {
 public:
  /// A monotonic counter.
  template <class T>
  Counter<T> create_counter(std::string_view name, std::string_view unit = "",
                            std::string_view description = "");
  /// A counter that may go down.
  template <class T>
  UpDownCounter<T> create_up_down_counter(std::string_view name, std::string_view unit = "",
                                          std::string_view description = "");
  /// A histogram with `boundaries` (strictly increasing, finite); empty means OpenTelemetry's
  /// default boundaries 0, 5, 10, 25, 50, 75, 100, 250, 500, 750, 1000, 2500, 5000, 7500, 10000.
  template <class T>
  Histogram<T> create_histogram(std::string_view name, std::string_view unit = "",
                                std::string_view description = "",
                                std::span<const double> boundaries = {});
  /// A synchronous gauge (last value).
  template <class T>
  Gauge<T> create_gauge(std::string_view name, std::string_view unit = "",
                        std::string_view description = "");
  /// An asynchronous gauge: `callback` reports current values at each collection.
  template <class T>
  ObservableInstrument create_observable_gauge(std::string_view name,
                                               std::function<void(ObserverResult<T>&)> callback,
                                               std::string_view unit = "",
                                               std::string_view description = "");
  /// An asynchronous monotonic counter: `callback` reports the current totals (not increments).
  template <class T>
  ObservableInstrument create_observable_counter(std::string_view name,
                                                 std::function<void(ObserverResult<T>&)> callback,
                                                 std::string_view unit = "",
                                                 std::string_view description = "");
  /// The meter's name (its instrumentation scope).
  const std::string& name() const noexcept;

 private:
  friend struct detail::MeterState;
  explicit Meter(detail::MeterState* state) noexcept : state_(state) {}
  detail::MeterState* state_;
};

/// The meter named `name`, created on first use. The same object for the same name; valid for the
/// whole process. Instruments may be created before setup_telemetry(): they record once set-up
/// enables metrics.
NEMO_LENS_API Meter& get_meter(std::string_view name = "nemo.lens");

}  // namespace nemo::lens
