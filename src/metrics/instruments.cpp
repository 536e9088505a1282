// Meters, instruments, attribute sets and their collection (see instruments.hpp).
#include "metrics/instruments.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>

#include "env.hpp"
#include "nemo/lens/errors.hpp"
#include "strings.hpp"
#include "tracing/engine.hpp"

namespace nemo::lens {

namespace detail {

constinit std::atomic<bool> g_metrics_recording{false};

namespace {

constexpr std::size_t kCardinalityLimit = 2000;  // OpenTelemetry's default per instrument
constexpr std::size_t kTableSize = 4096;         // power of two, at most half full
constexpr std::size_t kMaxSortedAttributes = 16;

constexpr double kDefaultBoundaries[] = {0,   5,   10,   25,   50,   75,   100,  250,
                                         500, 750, 1000, 2500, 5000, 7500, 10000};

std::atomic<std::uint64_t> g_dropped{0};

// One attribute set of one instrument and its aggregate. Written by any recording thread with
// atomic read-modify-writes; read by the reader.
struct AttributeSet {
  std::uint64_t hash = 0;
  std::vector<KeyValue> attributes;  // sorted by key, keys unique
  std::atomic<std::int64_t> int_value{0};
  std::atomic<double> double_value{0};
  std::atomic<bool> has_value{false};  // gauges: set at least once
  std::atomic<double> min{std::numeric_limits<double>::infinity()};
  std::atomic<double> max{-std::numeric_limits<double>::infinity()};
  std::unique_ptr<std::atomic<std::uint64_t>[]> buckets;  // histograms: bounds + 1
  // The reader's bookkeeping for delta temporality (reader thread only).
  std::int64_t reported_int = 0;
  double reported_double = 0;
  std::vector<std::uint64_t> reported_buckets;
};

}  // namespace

struct Instrument {
  std::string meter;
  std::string name, unit, description;
  InstrumentKind kind;
  bool is_double;
  std::vector<double> bounds;                           // histograms
  std::unique_ptr<std::atomic<AttributeSet*>[]> table;  // kTableSize slots, allocated up front
  std::mutex mu;                                        // inserting sets
  std::vector<AttributeSet*> sets;                      // guarded by mu; never shrinks
  AttributeSet* overflow = nullptr;                     // guarded by mu
};

struct ObservableRegistration {
  Instrument* instrument;
  std::function<void(void*)> callback;  // takes an ObserverResult<T>*
  std::mutex mu;                        // held while the callback runs
  bool active = true;                   // guarded by mu
};

struct MeterState {
  template <class T>
  static ObserverResult<T> observer(Instrument* i) noexcept {
    return ObserverResult<T>(i);
  }
  static ObservableInstrument observable(std::shared_ptr<ObservableRegistration> r) noexcept {
    return ObservableInstrument(std::move(r));
  }

  std::string name;
  Meter meter{this};
  std::mutex mu;  // guards instruments and observables
  std::vector<std::unique_ptr<Instrument>> instruments;
  std::vector<std::shared_ptr<ObservableRegistration>> observables;
};

namespace {

std::mutex& meters_mu() {
  static auto* mu = new std::mutex();
  return *mu;
}
// Never destroyed: instruments are used from static destructors and other threads at exit.
std::vector<std::unique_ptr<MeterState>>& meters() {
  static auto* v = new std::vector<std::unique_ptr<MeterState>>();
  return *v;
}

// ----- attribute sets

std::uint64_t mix(std::uint64_t h, std::uint64_t v) noexcept {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 31);
}

std::uint64_t hash_double(double d) noexcept {
  if (d == 0) d = 0;  // -0.0 and 0.0 are the same value
  std::uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  return bits;
}

std::uint64_t hash_arg(const AttributeArg& a) noexcept {
  using T = AttributeArg::Type;
  std::uint64_t h = static_cast<std::uint64_t>(a.type()) * 0x2545F4914F6CDD1Dull;
  switch (a.type()) {
    case T::kBool:
      return mix(h, a.as_bool() ? 1 : 2);
    case T::kInt:
      return mix(h, static_cast<std::uint64_t>(a.as_int()));
    case T::kDouble:
      return mix(h, hash_double(a.as_double()));
    case T::kString:
      return mix(h, hash_short_string(a.as_string()));
    case T::kBoolArray:
      for (bool b : a.as_bool_array()) h = mix(h, b ? 1 : 2);
      return h;
    case T::kIntArray:
      for (auto v : a.as_int_array()) h = mix(h, static_cast<std::uint64_t>(v));
      return h;
    case T::kDoubleArray:
      for (auto v : a.as_double_array()) h = mix(h, hash_double(v));
      return h;
    case T::kStringArray:
      for (const auto& v : a.as_string_array()) h = mix(h, hash_short_string(v));
      return h;
    case T::kStringViewArray:
      for (auto v : a.as_string_view_array()) h = mix(h, hash_short_string(v));
      return h;
  }
  return h;
}

// Arrays of strings are stored as vector<string>, from either argument type: they hash alike.
std::uint64_t hash_value_type(const AttributeArg& a) noexcept {
  return a.type() == AttributeArg::Type::kStringViewArray
             ? static_cast<std::uint64_t>(AttributeArg::Type::kStringArray)
             : static_cast<std::uint64_t>(a.type());
}

bool same_value(const AttributeValue& v, const AttributeArg& a) noexcept {
  using T = AttributeArg::Type;
  switch (a.type()) {
    case T::kBool:
      return std::holds_alternative<bool>(v) && std::get<bool>(v) == a.as_bool();
    case T::kInt:
      return std::holds_alternative<std::int64_t>(v) && std::get<std::int64_t>(v) == a.as_int();
    case T::kDouble:
      return std::holds_alternative<double>(v) && std::get<double>(v) == a.as_double();
    case T::kString:
      return std::holds_alternative<std::string>(v) &&
             equal_short(std::get<std::string>(v), a.as_string());
    case T::kBoolArray: {
      const auto* p = std::get_if<std::vector<bool>>(&v);
      return p != nullptr &&
             std::equal(p->begin(), p->end(), a.as_bool_array().begin(), a.as_bool_array().end());
    }
    case T::kIntArray: {
      const auto* p = std::get_if<std::vector<std::int64_t>>(&v);
      return p != nullptr &&
             std::equal(p->begin(), p->end(), a.as_int_array().begin(), a.as_int_array().end());
    }
    case T::kDoubleArray: {
      const auto* p = std::get_if<std::vector<double>>(&v);
      return p != nullptr && std::equal(p->begin(), p->end(), a.as_double_array().begin(),
                                        a.as_double_array().end());
    }
    case T::kStringArray: {
      const auto* p = std::get_if<std::vector<std::string>>(&v);
      return p != nullptr && std::equal(p->begin(), p->end(), a.as_string_array().begin(),
                                        a.as_string_array().end());
    }
    case T::kStringViewArray: {
      const auto* p = std::get_if<std::vector<std::string>>(&v);
      return p != nullptr &&
             std::equal(p->begin(), p->end(), a.as_string_view_array().begin(),
                        a.as_string_view_array().end(),
                        [](const std::string& x, std::string_view y) { return x == y; });
    }
  }
  return false;
}

// The arguments sorted by key, a repeated key keeping its last value: on the stack for up to
// kMaxSortedAttributes attributes (more are cut off, rarely worth an allocation on this path).
struct SortedArgs {
  const Attribute* items[kMaxSortedAttributes];
  std::size_t size = 0;

  explicit SortedArgs(std::initializer_list<Attribute> attributes) noexcept {
    for (const Attribute& a : attributes) {
      // Insertion sort; an equal key replaces the earlier one (the last one wins).
      std::size_t i = 0;
      while (i < size && items[i]->key < a.key) ++i;
      if (i < size && equal_short(items[i]->key, a.key)) {
        items[i] = &a;
        continue;
      }
      if (size == kMaxSortedAttributes) continue;
      for (std::size_t j = size; j > i; --j) items[j] = items[j - 1];
      items[i] = &a;
      ++size;
    }
  }

  std::uint64_t hash() const noexcept {
    std::uint64_t h = 0x84222325cbf29ce4ull ^ size;
    for (std::size_t i = 0; i < size; ++i) {
      h = mix(h, hash_short_string(items[i]->key));
      h = mix(h, hash_value_type(items[i]->value));
      h = mix(h, hash_arg(items[i]->value));
    }
    return h;
  }

  bool same(const AttributeSet& s) const noexcept {
    if (s.attributes.size() != size) return false;
    for (std::size_t i = 0; i < size; ++i) {
      if (!equal_short(s.attributes[i].key, items[i]->key) ||
          !same_value(s.attributes[i].value, items[i]->value)) {
        return false;
      }
    }
    return true;
  }
};

AttributeSet* new_set(const Instrument& inst, std::uint64_t hash) {
  auto* s = new AttributeSet();
  s->hash = hash;
  if (inst.kind == InstrumentKind::kHistogram) {
    const std::size_t n = inst.bounds.size() + 1;
    s->buckets = std::make_unique<std::atomic<std::uint64_t>[]>(n);
    for (std::size_t i = 0; i < n; ++i) s->buckets[i].store(0, std::memory_order_relaxed);
  }
  return s;
}

// The attribute set of `args`, inserted when new (under the instrument's lock), or the overflow
// set past the cardinality limit; null when memory ran out.
AttributeSet* find_set(Instrument& inst, std::initializer_list<Attribute> attributes) noexcept {
  const SortedArgs args(attributes);
  const std::uint64_t h = args.hash();
  // Lock-free lookup: slots are published once (release) and never change.
  for (std::size_t i = h & (kTableSize - 1), n = 0; n < kTableSize;
       i = (i + 1) & (kTableSize - 1), ++n) {
    AttributeSet* s = inst.table[i].load(std::memory_order_acquire);
    if (s == nullptr) break;
    if (s->hash == h && args.same(*s)) return s;
  }
  try {
    std::lock_guard lock(inst.mu);
    std::size_t i = h & (kTableSize - 1);
    for (AttributeSet* s; (s = inst.table[i].load(std::memory_order_relaxed)) != nullptr;
         i = (i + 1) & (kTableSize - 1)) {
      if (s->hash == h && args.same(*s)) return s;  // inserted meanwhile
    }
    if (inst.sets.size() >= kCardinalityLimit) {
      if (inst.overflow == nullptr) {
        inst.overflow = new_set(inst, 0);
        inst.overflow->attributes.push_back(KeyValue{"otel.metric.overflow", true});
        inst.sets.push_back(inst.overflow);
      }
      return inst.overflow;
    }
    std::unique_ptr<AttributeSet> s(new_set(inst, h));
    s->attributes.reserve(args.size);
    for (std::size_t k = 0; k < args.size; ++k) {
      KeyValue& kv = s->attributes.emplace_back();
      kv.key = std::string(args.items[k]->key);
      assign_attribute_value(kv.value, args.items[k]->value, SIZE_MAX, false);
    }
    inst.sets.reserve(inst.sets.size() + 1);
    AttributeSet* raw = s.release();
    inst.sets.push_back(raw);
    inst.table[i].store(raw, std::memory_order_release);
    return raw;
  } catch (...) {
    return nullptr;
  }
}

void drop() noexcept { g_dropped.fetch_add(1, std::memory_order_relaxed); }

template <class T>
void add_to(AttributeSet& s, T value) noexcept {
  if constexpr (std::is_same_v<T, double>) {
    s.double_value.fetch_add(value, std::memory_order_relaxed);
  } else {
    s.int_value.fetch_add(value, std::memory_order_relaxed);
  }
}

template <class T>
void set_to(AttributeSet& s, T value) noexcept {
  if constexpr (std::is_same_v<T, double>) {
    s.double_value.store(value, std::memory_order_relaxed);
  } else {
    s.int_value.store(value, std::memory_order_relaxed);
  }
  // Release: a reader that sees has_value sees a value stored before it.
  s.has_value.store(true, std::memory_order_release);
}

// ----- names

bool valid_name(std::string_view name) noexcept {
  if (name.empty() || name.size() > 255) return false;
  const auto alpha = [](char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  if (!alpha(name[0])) return false;
  for (char c : name) {
    const bool ok =
        alpha(c) || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' || c == '/';
    if (!ok) return false;
  }
  return true;
}

bool valid_unit(std::string_view unit) noexcept {
  if (unit.size() > 63) return false;
  for (char c : unit) {
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) > 0x7e) return false;
  }
  return true;
}

std::string_view kind_name(InstrumentKind kind) noexcept {
  switch (kind) {
    case InstrumentKind::kCounter:
      return "counter";
    case InstrumentKind::kUpDownCounter:
      return "up-down counter";
    case InstrumentKind::kHistogram:
      return "histogram";
    case InstrumentKind::kGauge:
      return "gauge";
    case InstrumentKind::kObservableGauge:
      return "observable gauge";
    case InstrumentKind::kObservableCounter:
      return "observable counter";
  }
  return "instrument";
}

}  // namespace

// Creates or finds an instrument. Throws ConfigError for a bad name, unit or boundaries, or a
// name taken by another kind.
Instrument* create_instrument(MeterState& meter, std::string_view name, std::string_view unit,
                              std::string_view description, InstrumentKind kind, bool is_double,
                              std::span<const double> boundaries) {
  const std::string type = is_double ? "double" : "int64";
  if (!valid_name(name)) {
    throw ConfigError("Invalid instrument name '" + std::string(name) + "' (meter '" + meter.name +
                      "'): a name starts with an ASCII letter, followed by up to 254 letters, "
                      "digits, '_', '.', '-' or '/'.");
  }
  if (!valid_unit(unit)) {
    throw ConfigError("Invalid unit '" + std::string(unit) + "' for instrument '" +
                      std::string(name) + "': at most 63 printable ASCII characters.");
  }
  std::vector<double> bounds;
  if (kind == InstrumentKind::kHistogram) {
    if (boundaries.empty()) {
      bounds.assign(std::begin(kDefaultBoundaries), std::end(kDefaultBoundaries));
    } else {
      bounds.assign(boundaries.begin(), boundaries.end());
      for (std::size_t i = 0; i < bounds.size(); ++i) {
        if (!std::isfinite(bounds[i]) || (i > 0 && !(bounds[i] > bounds[i - 1]))) {
          throw ConfigError("Invalid bucket boundaries for histogram '" + std::string(name) +
                            "': they must be finite and strictly increasing.");
        }
      }
    }
  }
  std::lock_guard lock(meter.mu);
  const std::string lower = to_lower(name);
  for (const auto& inst : meter.instruments) {
    if (to_lower(inst->name) != lower) continue;
    if (inst->kind != kind || inst->is_double != is_double) {
      throw ConfigError("Instrument '" + std::string(name) + "' of meter '" + meter.name +
                        "' already exists as a " + std::string(kind_name(inst->kind)) + " of " +
                        (inst->is_double ? "double" : "int64") + "; it cannot also be a " +
                        std::string(kind_name(kind)) + " of " + type + ".");
    }
    if (kind == InstrumentKind::kHistogram && inst->bounds != bounds) {
      throw ConfigError("Histogram '" + std::string(name) + "' of meter '" + meter.name +
                        "' already exists with other bucket boundaries.");
    }
    return inst.get();
  }
  auto inst = std::make_unique<Instrument>();
  inst->meter = meter.name;
  inst->name = std::string(name);
  inst->unit = std::string(unit);
  inst->description = std::string(description);
  inst->kind = kind;
  inst->is_double = is_double;
  inst->bounds = std::move(bounds);
  inst->table = std::make_unique<std::atomic<AttributeSet*>[]>(kTableSize);
  for (std::size_t i = 0; i < kTableSize; ++i)
    inst->table[i].store(nullptr, std::memory_order_relaxed);
  meter.instruments.reserve(meter.instruments.size() + 1);
  meter.instruments.push_back(std::move(inst));
  return meter.instruments.back().get();
}

template <class T>
void instrument_add(Instrument* inst, T value,
                    std::initializer_list<Attribute> attributes) noexcept {
  if (inst == nullptr) return;
  if constexpr (std::is_same_v<T, double>) {
    if (std::isnan(value)) return drop();
  }
  if (inst->kind == InstrumentKind::kCounter && value < 0) return drop();
  AttributeSet* s = find_set(*inst, attributes);
  if (s == nullptr) return drop();
  add_to(*s, value);
}

template <class T>
void instrument_record(Instrument* inst, T value,
                       std::initializer_list<Attribute> attributes) noexcept {
  if (inst == nullptr) return;
  const double v = static_cast<double>(value);
  if (std::isnan(v)) return drop();
  AttributeSet* s = find_set(*inst, attributes);
  if (s == nullptr) return drop();
  // Bucket i holds (bounds[i-1], bounds[i]]; the last one everything above the last bound.
  const auto it = std::lower_bound(inst->bounds.begin(), inst->bounds.end(), v);
  s->buckets[static_cast<std::size_t>(it - inst->bounds.begin())].fetch_add(
      1, std::memory_order_relaxed);
  s->double_value.fetch_add(v, std::memory_order_relaxed);
  for (double m = s->min.load(std::memory_order_relaxed);
       v < m && !s->min.compare_exchange_weak(m, v, std::memory_order_relaxed);) {
  }
  for (double m = s->max.load(std::memory_order_relaxed);
       v > m && !s->max.compare_exchange_weak(m, v, std::memory_order_relaxed);) {
  }
}

template <class T>
void instrument_set(Instrument* inst, T value,
                    std::initializer_list<Attribute> attributes) noexcept {
  if (inst == nullptr) return;
  AttributeSet* s = find_set(*inst, attributes);
  if (s == nullptr) return drop();
  set_to(*s, value);
}

template <class T>
void instrument_observe(Instrument* inst, T value,
                        std::initializer_list<Attribute> attributes) noexcept {
  instrument_set(inst, value, attributes);
}

template void instrument_add<std::int64_t>(Instrument*, std::int64_t,
                                           std::initializer_list<Attribute>) noexcept;
template void instrument_add<double>(Instrument*, double,
                                     std::initializer_list<Attribute>) noexcept;
template void instrument_record<std::int64_t>(Instrument*, std::int64_t,
                                              std::initializer_list<Attribute>) noexcept;
template void instrument_record<double>(Instrument*, double,
                                        std::initializer_list<Attribute>) noexcept;
template void instrument_set<std::int64_t>(Instrument*, std::int64_t,
                                           std::initializer_list<Attribute>) noexcept;
template void instrument_set<double>(Instrument*, double,
                                     std::initializer_list<Attribute>) noexcept;
template void instrument_observe<std::int64_t>(Instrument*, std::int64_t,
                                               std::initializer_list<Attribute>) noexcept;
template void instrument_observe<double>(Instrument*, double,
                                         std::initializer_list<Attribute>) noexcept;

// ----- collection

TemporalityPreference temporality_preference_from_env() {
  TemporalityPreference p;
  const auto v = env_trimmed("OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE");
  if (!v) return p;
  const std::string lower = to_lower(*v);
  if (lower == "cumulative") return p;
  if (lower == "delta") {
    p.counter = p.histogram = p.observable_counter = Temporality::kDelta;
    return p;
  }
  if (lower == "lowmemory") {
    p.counter = p.histogram = Temporality::kDelta;
    return p;
  }
  throw ConfigError("Invalid value for OTEL_EXPORTER_OTLP_METRICS_TEMPORALITY_PREFERENCE: '" + *v +
                    "'. Valid values: " + quoted_list({"cumulative", "delta", "lowmemory"}) + ".");
}

namespace {

struct Collector {
  const TemporalityPreference& preference;
  std::int64_t start, now, previous;

  Temporality temporality_of(InstrumentKind kind) const {
    switch (kind) {
      case InstrumentKind::kCounter:
        return preference.counter;
      case InstrumentKind::kHistogram:
        return preference.histogram;
      case InstrumentKind::kObservableCounter:
        return preference.observable_counter;
      case InstrumentKind::kUpDownCounter:
        return preference.up_down_counter;
      default:
        return Temporality::kCumulative;
    }
  }

  NumberPoint number(const AttributeSet& s, Temporality t, bool is_double, bool gauge) const {
    NumberPoint p;
    p.attributes = s.attributes;
    p.start_time_unix_nano = gauge ? 0 : (t == Temporality::kDelta ? previous : start);
    p.time_unix_nano = now;
    if (is_double) {
      p.value = s.double_value.load(std::memory_order_relaxed);
    } else {
      p.value = s.int_value.load(std::memory_order_relaxed);
    }
    return p;
  }

  // Turns a cumulative value into the change since the last collection, remembering it. False
  // when nothing changed (delta points without measurements are left out).
  static bool to_delta(NumberPoint& p, AttributeSet& s) {
    if (auto* d = std::get_if<double>(&p.value)) {
      const double total = *d;
      *d = total - s.reported_double;
      const bool changed = total != s.reported_double;
      s.reported_double = total;
      return changed;
    }
    auto& i = std::get<std::int64_t>(p.value);
    const std::int64_t total = i;
    i = total - s.reported_int;
    s.reported_int = total;
    return i != 0;
  }

  void collect(Instrument& inst, std::vector<MetricData>& out) const {
    std::vector<AttributeSet*> sets;
    {
      std::lock_guard lock(inst.mu);
      sets = inst.sets;
    }
    MetricData m;
    m.scope_name = inst.meter;
    m.name = inst.name;
    m.unit = inst.unit;
    m.description = inst.description;
    m.temporality = temporality_of(inst.kind);
    switch (inst.kind) {
      case InstrumentKind::kCounter:
      case InstrumentKind::kObservableCounter:
      case InstrumentKind::kUpDownCounter: {
        m.kind = MetricKind::kSum;
        m.monotonic = inst.kind != InstrumentKind::kUpDownCounter;
        const bool observable = inst.kind == InstrumentKind::kObservableCounter;
        for (AttributeSet* s : sets) {
          if (observable && !s->has_value.load(std::memory_order_acquire)) continue;
          NumberPoint p = number(*s, m.temporality, inst.is_double, false);
          if (m.temporality == Temporality::kDelta && !to_delta(p, *s)) continue;
          m.number_points.push_back(std::move(p));
        }
        break;
      }
      case InstrumentKind::kGauge:
      case InstrumentKind::kObservableGauge:
        m.kind = MetricKind::kGauge;
        for (AttributeSet* s : sets) {
          if (!s->has_value.load(std::memory_order_acquire)) continue;
          m.number_points.push_back(number(*s, Temporality::kCumulative, inst.is_double, true));
        }
        break;
      case InstrumentKind::kHistogram: {
        m.kind = MetricKind::kHistogram;
        const std::size_t n = inst.bounds.size() + 1;
        for (AttributeSet* s : sets) {
          HistogramPoint p;
          p.attributes = s->attributes;
          p.time_unix_nano = now;
          p.explicit_bounds = inst.bounds;
          p.bucket_counts.resize(n);
          for (std::size_t i = 0; i < n; ++i) {
            p.bucket_counts[i] = s->buckets[i].load(std::memory_order_relaxed);
          }
          p.sum = s->double_value.load(std::memory_order_relaxed);
          if (m.temporality == Temporality::kDelta) {
            p.start_time_unix_nano = previous;
            s->reported_buckets.resize(n);
            for (std::size_t i = 0; i < n; ++i) {
              const std::uint64_t total = p.bucket_counts[i];
              p.bucket_counts[i] = total - s->reported_buckets[i];
              s->reported_buckets[i] = total;
            }
            const double total_sum = p.sum;
            p.sum = total_sum - s->reported_double;
            s->reported_double = total_sum;
            // The interval's extremes: taken and reset; a concurrent record lands in this or the
            // next interval, never in none.
            const double mn =
                s->min.exchange(std::numeric_limits<double>::infinity(), std::memory_order_relaxed);
            const double mx = s->max.exchange(-std::numeric_limits<double>::infinity(),
                                              std::memory_order_relaxed);
            if (std::isfinite(mn)) p.min = mn;
            if (std::isfinite(mx)) p.max = mx;
          } else {
            p.start_time_unix_nano = start;
            const double mn = s->min.load(std::memory_order_relaxed);
            const double mx = s->max.load(std::memory_order_relaxed);
            if (std::isfinite(mn)) p.min = mn;
            if (std::isfinite(mx)) p.max = mx;
          }
          for (auto c : p.bucket_counts) p.count += c;
          if (p.count == 0) {
            p.min.reset();
            p.max.reset();
            if (m.temporality == Temporality::kDelta) continue;
          }
          m.histogram_points.push_back(std::move(p));
        }
        break;
      }
    }
    if (!m.number_points.empty() || !m.histogram_points.empty()) out.push_back(std::move(m));
  }
};

std::int64_t g_previous_collection = 0;  // reader thread only

// Every meter, after their observable callbacks ran, each under its registration's lock
// (unregister waits for it).
std::vector<MeterState*> observed_meters() {
  std::vector<MeterState*> all;
  {
    std::lock_guard lock(meters_mu());
    for (const auto& m : meters()) all.push_back(m.get());
  }
  for (MeterState* meter : all) {
    std::vector<std::shared_ptr<ObservableRegistration>> observables;
    {
      std::lock_guard lock(meter->mu);
      observables = meter->observables;
    }
    for (const auto& r : observables) {
      std::lock_guard lock(r->mu);
      if (!r->active) continue;
      try {
        if (r->instrument->is_double) {
          ObserverResult<double> result = MeterState::observer<double>(r->instrument);
          r->callback(&result);
        } else {
          ObserverResult<std::int64_t> result = MeterState::observer<std::int64_t>(r->instrument);
          r->callback(&result);
        }
      } catch (...) {
        // A throwing callback loses its observations of this collection only.
      }
    }
  }
  return all;
}

std::vector<MetricData> collect_with(const Collector& collector,
                                     const std::vector<MeterState*>& meters) {
  std::vector<MetricData> out;
  for (MeterState* meter : meters) {
    std::vector<Instrument*> instruments;
    {
      std::lock_guard lock(meter->mu);
      for (const auto& i : meter->instruments) instruments.push_back(i.get());
    }
    for (Instrument* inst : instruments) collector.collect(*inst, out);
  }
  return out;
}

}  // namespace

std::vector<MetricData> collect_metrics(const TemporalityPreference& preference,
                                        std::int64_t start_unix_nano, std::int64_t now_unix_nano) {
  const std::vector<MeterState*> meters = observed_meters();
  if (g_previous_collection < start_unix_nano) g_previous_collection = start_unix_nano;
  const Collector collector{preference, start_unix_nano, now_unix_nano, g_previous_collection};
  std::vector<MetricData> out = collect_with(collector, meters);
  g_previous_collection = now_unix_nano;
  return out;
}

std::vector<MetricData> snapshot_metrics(std::int64_t start_unix_nano,
                                         std::int64_t now_unix_nano) {
  // Every kind cumulative: the collector then only reads the cells (delta bookkeeping is the
  // set-up reader's alone).
  const Collector collector{TemporalityPreference{}, start_unix_nano, now_unix_nano,
                            start_unix_nano};
  return collect_with(collector, observed_meters());
}

void reset_metric_values() noexcept {
  std::lock_guard lock(meters_mu());
  for (const auto& meter : meters()) {
    std::lock_guard meter_lock(meter->mu);
    for (const auto& inst : meter->instruments) {
      std::lock_guard inst_lock(inst->mu);
      for (AttributeSet* s : inst->sets) {
        s->int_value.store(0, std::memory_order_relaxed);
        s->double_value.store(0, std::memory_order_relaxed);
        s->has_value.store(false, std::memory_order_relaxed);
        s->min.store(std::numeric_limits<double>::infinity(), std::memory_order_relaxed);
        s->max.store(-std::numeric_limits<double>::infinity(), std::memory_order_relaxed);
        if (s->buckets) {
          for (std::size_t i = 0; i <= inst->bounds.size(); ++i) {
            s->buckets[i].store(0, std::memory_order_relaxed);
          }
        }
        s->reported_int = 0;
        s->reported_double = 0;
        s->reported_buckets.clear();
      }
    }
  }
  g_previous_collection = 0;
}

std::uint64_t dropped_measurements() noexcept { return g_dropped.load(std::memory_order_relaxed); }

}  // namespace detail

// ----- the public API

Meter& get_meter(std::string_view name) {
  std::lock_guard lock(detail::meters_mu());
  for (const auto& m : detail::meters()) {
    if (m->name == name) return m->meter;
  }
  auto state = std::make_unique<detail::MeterState>();
  state->name = std::string(name);
  detail::meters().push_back(std::move(state));
  return detail::meters().back()->meter;
}

const std::string& Meter::name() const noexcept { return state_->name; }

template <class T>
Counter<T> Meter::create_counter(std::string_view name, std::string_view unit,
                                 std::string_view description) {
  return Counter<T>(detail::create_instrument(*state_, name, unit, description,
                                              detail::InstrumentKind::kCounter,
                                              std::is_same_v<T, double>, {}));
}

template <class T>
UpDownCounter<T> Meter::create_up_down_counter(std::string_view name, std::string_view unit,
                                               std::string_view description) {
  return UpDownCounter<T>(detail::create_instrument(*state_, name, unit, description,
                                                    detail::InstrumentKind::kUpDownCounter,
                                                    std::is_same_v<T, double>, {}));
}

template <class T>
Histogram<T> Meter::create_histogram(std::string_view name, std::string_view unit,
                                     std::string_view description,
                                     std::span<const double> boundaries) {
  return Histogram<T>(detail::create_instrument(*state_, name, unit, description,
                                                detail::InstrumentKind::kHistogram,
                                                std::is_same_v<T, double>, boundaries));
}

template <class T>
Gauge<T> Meter::create_gauge(std::string_view name, std::string_view unit,
                             std::string_view description) {
  return Gauge<T>(detail::create_instrument(*state_, name, unit, description,
                                            detail::InstrumentKind::kGauge,
                                            std::is_same_v<T, double>, {}));
}

namespace {
template <class T>
ObservableInstrument register_observable(detail::MeterState& meter, detail::Instrument* inst,
                                         std::function<void(ObserverResult<T>&)> callback) {
  if (!callback) {
    throw ConfigError("Observable instrument '" + inst->name + "' needs a callback.");
  }
  auto r = std::make_shared<detail::ObservableRegistration>();
  r->instrument = inst;
  r->callback = [cb = std::move(callback)](void* result) {
    cb(*static_cast<ObserverResult<T>*>(result));
  };
  std::lock_guard lock(meter.mu);
  meter.observables.push_back(r);
  return detail::MeterState::observable(std::move(r));
}
}  // namespace

template <class T>
ObservableInstrument Meter::create_observable_gauge(
    std::string_view name, std::function<void(ObserverResult<T>&)> callback, std::string_view unit,
    std::string_view description) {
  detail::Instrument* inst = detail::create_instrument(*state_, name, unit, description,
                                                       detail::InstrumentKind::kObservableGauge,
                                                       std::is_same_v<T, double>, {});
  return register_observable<T>(*state_, inst, std::move(callback));
}

template <class T>
ObservableInstrument Meter::create_observable_counter(
    std::string_view name, std::function<void(ObserverResult<T>&)> callback, std::string_view unit,
    std::string_view description) {
  detail::Instrument* inst = detail::create_instrument(*state_, name, unit, description,
                                                       detail::InstrumentKind::kObservableCounter,
                                                       std::is_same_v<T, double>, {});
  return register_observable<T>(*state_, inst, std::move(callback));
}

void ObservableInstrument::unregister() noexcept {
  if (!registration_) return;
  {
    std::lock_guard lock(registration_->mu);  // waits for a call in progress
    registration_->active = false;
  }
  registration_.reset();
}

#define NEMO_LENS_METER_INSTANTIATE(T)                                                           \
  template NEMO_LENS_API Counter<T> Meter::create_counter<T>(std::string_view, std::string_view, \
                                                             std::string_view);                  \
  template NEMO_LENS_API UpDownCounter<T> Meter::create_up_down_counter<T>(                      \
      std::string_view, std::string_view, std::string_view);                                     \
  template NEMO_LENS_API Histogram<T> Meter::create_histogram<T>(                                \
      std::string_view, std::string_view, std::string_view, std::span<const double>);            \
  template NEMO_LENS_API Gauge<T> Meter::create_gauge<T>(std::string_view, std::string_view,     \
                                                         std::string_view);                      \
  template NEMO_LENS_API ObservableInstrument Meter::create_observable_gauge<T>(                 \
      std::string_view, std::function<void(ObserverResult<T>&)>, std::string_view,               \
      std::string_view);                                                                         \
  template NEMO_LENS_API ObservableInstrument Meter::create_observable_counter<T>(               \
      std::string_view, std::function<void(ObserverResult<T>&)>, std::string_view,               \
      std::string_view);
NEMO_LENS_METER_INSTANTIATE(std::int64_t)
NEMO_LENS_METER_INSTANTIATE(double)
#undef NEMO_LENS_METER_INSTANTIATE

}  // namespace nemo::lens
