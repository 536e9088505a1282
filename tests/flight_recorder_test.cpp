// The flight recorder (<PREFIX>_RECORD_GROUPS, src/record/recorder.hpp, docs/flight-recorder.md):
// recorded spans are exported only by a capture, with their ids, parents, attributes and the
// capture's marks; the triggers (slow_step against an independent model of its rule, error, the
// API), and what random schedules export against a model of them; the ring's bound (the oldest
// overwritten, counted); a thread that exits; fork; a group switched live; and threads recording
// while others capture (under TSan).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "nemo/lens/lens.hpp"
#include "quiet_fork.hpp"
#include "record/recorder.hpp"
#include "tracing_fixture.hpp"

namespace {

using namespace nemo::lens;
using std::chrono::milliseconds;

// The value of attribute `key` of `s`, or a default AttributeValue when it has none.
const AttributeValue* attribute(const SpanData& s, std::string_view key) {
  for (const auto& kv : s.attributes) {
    if (kv.key == key) return &kv.value;
  }
  return nullptr;
}

std::string reason_of(const SpanData& s) {
  const AttributeValue* v = attribute(s, semconv::kLensCaptureReason);
  return v != nullptr ? std::get<std::string>(*v) : std::string();
}

std::int64_t capture_id_of(const SpanData& s) {
  const AttributeValue* v = attribute(s, semconv::kLensCaptureId);
  return v != nullptr ? std::get<std::int64_t>(*v) : 0;
}

std::map<std::string, int> count_by_name(const std::vector<SpanData>& spans) {
  std::map<std::string, int> n;
  for (const auto& s : spans) ++n[s.name];
  return n;
}

// Spans whose group is `step` exported, forward_backward and optimizer recorded (base catalog).
class FlightRecorder : public lens_test::Tracing {
 protected:
  void SetUp() override {}
  void record(const std::string& exported, const std::string& recorded,
              const std::string& spans = "", const std::string& factor = "") {
    env_.set("NEMO_LENS_RECORD_GROUPS", recorded);
    if (!spans.empty()) env_.set("NEMO_LENS_RECORD_SPANS", spans);
    if (!factor.empty()) env_.set("NEMO_LENS_RECORD_SLOW_FACTOR", factor);
    start(exported);
  }
};

TEST_F(FlightRecorder, RecordedSpansLeaveOnlyWithACaptureWithTheirIdsAndParents) {
  record("step", "all");
  std::vector<SpanContext> steps;
  for (int i = 0; i < 3; ++i) {
    LENS_SPAN(step, SpanGroup::STEP, "train_step", {"iteration", i});
    steps.push_back(step.context());
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward", {"iteration", i});
    fb.set_attribute("loss", 0.5);
    { LENS_SPAN(opt, SpanGroup::OPTIMIZER, "optimizer_step"); }
  }
  // Only the exported group left so far.
  EXPECT_EQ(count_by_name(spans()), (std::map<std::string, int>{{"train_step", 3}}));
  TelemetryStats st = handle_.stats();
  EXPECT_EQ(st.spans_recorded, 6u);
  EXPECT_EQ(st.record_spans_held, 6u);
  EXPECT_GT(st.record_memory_bytes, 6 * sizeof(void*));

  EXPECT_EQ(capture("manual"), 6u);
  const std::vector<SpanData> all = spans();
  EXPECT_EQ(count_by_name(all),
            (std::map<std::string, int>{
                {"train_step", 3}, {"forward_backward", 3}, {"optimizer_step", 3}}));
  std::set<std::int64_t> ids;
  for (const SpanData& s : all) {
    if (s.name == "train_step") {
      EXPECT_EQ(attribute(s, semconv::kLensCaptureReason), nullptr) << "exported, not captured";
      continue;
    }
    EXPECT_EQ(reason_of(s), "manual");
    ids.insert(capture_id_of(s));
    if (s.name == "forward_backward") {
      // Its parent is its step, exported on its own: the trace holds together.
      const std::int64_t i = std::get<std::int64_t>(*attribute(s, "iteration"));
      EXPECT_EQ(s.context.trace_id, steps[static_cast<std::size_t>(i)].trace_id);
      EXPECT_EQ(s.parent_span_id, steps[static_cast<std::size_t>(i)].span_id);
      EXPECT_EQ(std::get<double>(*attribute(s, "loss")), 0.5);
    }
  }
  EXPECT_EQ(ids.size(), 1u) << "one capture, one id";
  EXPECT_GT(*ids.begin(), 0);
  st = handle_.stats();
  EXPECT_EQ(st.spans_captured, 6u);
  EXPECT_EQ(st.record_captures, 1u);
  EXPECT_EQ(st.record_spans_held, 0u);
  EXPECT_EQ(capture(), 0u) << "nothing left";
}

// The demo's PyTorch job (2026-12-07): its all-reduces (communication, exported) ran inside
// microbatch spans (recorded only) and named them as parents, which outside the captured steps
// never left: 86 of each rank's 96 all-reduces had no parent in the trace, and `lens report`
// could not place them in their steps. An exported span now takes its nearest exported ancestor,
// by the fast start (LENS_SPAN) and the general one (by name), as without the recorder; a
// recorded span keeps its nearest ancestor, exported or not. (Base groups here: step and
// optimizer exported, forward_backward and checkpoint recorded.)
TEST_F(FlightRecorder, AnExportedSpanInsideARecordedOneTakesTheNearestExportedParent) {
  record("step,optimizer", "all");
  SpanContext step_context, fast_context;
  {
    LENS_SPAN(step, SpanGroup::STEP, "train_step");
    step_context = step.context();
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward");
    {
      LENS_SPAN(fast, SpanGroup::OPTIMIZER, "exported_fast");
      fast_context = fast.context();
      LENS_SPAN(inner, SpanGroup::CHECKPOINT, "recorded_inside");  // under an exported one
    }
    {
      Span by_name = managed_span("optimizer", "exported_by_name");
      EXPECT_TRUE(by_name.is_recording());
    }
  }
  std::map<std::string, SpanData> exported;
  for (const SpanData& s : spans()) exported[s.name] = s;
  ASSERT_EQ(exported.size(), 3u) << "train_step and the two exported inside forward_backward";
  EXPECT_EQ(exported["exported_fast"].parent_span_id, step_context.span_id);
  EXPECT_EQ(exported["exported_by_name"].parent_span_id, step_context.span_id);
  EXPECT_EQ(exported["exported_fast"].context.trace_id, step_context.trace_id);

  // Captured, the recorded spans join the trace under their own parents.
  EXPECT_EQ(capture(), 2u);
  std::map<std::string, SpanData> all;
  for (const SpanData& s : spans()) all[s.name] = s;
  EXPECT_EQ(all["forward_backward"].parent_span_id, step_context.span_id);
  EXPECT_EQ(all["recorded_inside"].parent_span_id, fast_context.span_id);
}

// What the program sees of its current span, inside recorded-only spans: their nearest exported
// ancestor, as without the recorder, so that what it sends to other processes (carriers) names a
// span the trace holds. Before, current_span_context() and the carriers named the recorded span,
// which outside the captured steps never left.
TEST_F(FlightRecorder, InsideARecordedSpanTheCurrentSpanIsItsNearestExportedAncestor) {
  record("step,optimizer", "all");
  // The span every way the program can ask names: the context, the W3C carrier, the binary and
  // JSON forms, a child process's environment.
  const auto expect_current = [](const SpanContext& want, const char* where) {
    EXPECT_EQ(current_span_context().span_id, want.span_id) << where;
    Carrier carrier;
    inject_context(carrier);
    EXPECT_EQ(extract_context(carrier).context.span_id, want.span_id) << where;
    EXPECT_EQ(deserialize_context(serialize_context()).span_id, want.span_id) << where;
    EXPECT_EQ(deserialize_context(serialize_context_json()).span_id, want.span_id) << where;
    const Carrier env = child_environment();
    const auto traceparent = env.find("TRACEPARENT");
    ASSERT_NE(traceparent, env.end()) << where;
    EXPECT_NE(traceparent->second.find(want.span_id.to_hex()), std::string::npos) << where;
  };
  {
    LENS_SPAN(step, SpanGroup::STEP, "train_step");
    const SpanContext step_context = step.context();
    expect_current(step_context, "in the step");
    {
      LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward");  // recorded only
      ASSERT_TRUE(fb);
      expect_current(step_context, "in a recorded span");
      {
        LENS_SPAN(opt, SpanGroup::OPTIMIZER, "exported_inside");
        expect_current(opt.context(), "in an exported span inside it");
        LENS_SPAN(inner, SpanGroup::CHECKPOINT, "recorded_inside");
        expect_current(opt.context(), "in a recorded span inside that");
      }
      Span by_name = managed_span("checkpoint", "recorded_by_name");
      ASSERT_TRUE(by_name.is_recording());
      expect_current(step_context, "in a recorded span started by name");
    }
  }
  EXPECT_FALSE(current_span_context().is_valid()) << "outside every span";
}

TEST_F(FlightRecorder, WithoutTheVariableNothingChanges) {
  start("step");
  {
    LENS_SPAN(step, SpanGroup::STEP, "train_step");
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward");
    EXPECT_FALSE(fb) << "a group neither exported nor recorded starts nothing";
  }
  EXPECT_EQ(capture(), 0u);
  EXPECT_EQ(count_by_name(spans()), (std::map<std::string, int>{{"train_step", 1}}));
  EXPECT_EQ(handle_.stats().spans_recorded, 0u);
}

TEST_F(FlightRecorder, ABadVariableIsAConfigErrorNamingIt) {
  env_.set("NEMO_LENS_RECORD_GROUPS", "all,layr");
  EXPECT_THROW(
      {
        try {
          start("step");
        } catch (const ConfigError& e) {
          EXPECT_NE(std::string(e.what()).find("NEMO_LENS_RECORD_GROUPS"), std::string::npos);
          EXPECT_NE(std::string(e.what()).find("layr"), std::string::npos);
          throw;
        }
      },
      ConfigError);
  env_.set("NEMO_LENS_RECORD_GROUPS", "all");
  for (const char* bad : {"0", "15", "lots", "99999999999"}) {
    env_.set("NEMO_LENS_RECORD_SPANS", bad);
    EXPECT_THROW(start("step"), ConfigError) << bad;
  }
  env_.set("NEMO_LENS_RECORD_SPANS", "64");
  for (const char* bad : {"1", "0.5", "x", "nan", "1e9"}) {
    env_.set("NEMO_LENS_RECORD_SLOW_FACTOR", bad);
    EXPECT_THROW(start("step"), ConfigError) << bad;
  }
}

TEST_F(FlightRecorder, TheRingKeepsTheNewestAndCountsTheOverwritten) {
  record("step", "all", "16");
  for (int i = 0; i < 100; ++i) {
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward", {"i", i});
  }
  TelemetryStats st = handle_.stats();
  EXPECT_EQ(st.spans_recorded, 100u);
  EXPECT_EQ(st.spans_record_overwritten, 84u);
  EXPECT_EQ(st.record_spans_held, 16u);
  EXPECT_EQ(capture(), 16u);
  std::vector<std::int64_t> kept;
  for (const SpanData& s : spans()) kept.push_back(std::get<std::int64_t>(*attribute(s, "i")));
  std::sort(kept.begin(), kept.end());
  std::vector<std::int64_t> newest(16);
  for (int i = 0; i < 16; ++i) newest[static_cast<std::size_t>(i)] = 84 + i;
  EXPECT_EQ(kept, newest);
}

// A span's end overwrites the oldest in place (src/record/recorder.cpp, try_push_own_flight()),
// and the next span reuses the overwritten one's record: the ring wraps around its end, also after
// a capture emptied it part-way through, and no span carries what the record's previous span left
// (its ids, read while it was open, or its attributes).
TEST_F(FlightRecorder, TheRingWrapsAroundAndEverySpanKeepsItsOwnIdsAndAttributes) {
  record("step", "all", "16");
  std::map<std::int64_t, SpanContext> read;        // i: the context read while span i was open
  std::map<std::string, std::int64_t> read_by_id;  // span id: i
  int next = 0;
  auto run = [&](int n) {
    for (int k = 0; k < n; ++k, ++next) {
      LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward", {"i", next});
      if (next % 2 == 0) {
        read[next] = fb.context();  // its ids made, in the record
        EXPECT_TRUE(read_by_id.emplace(read[next].span_id.to_hex(), next).second)
            << "span " << next << " has the ids of span "
            << read_by_id[read[next].span_id.to_hex()];
      }
    }
  };
  auto captured = [&](const std::string& reason) {
    std::vector<std::int64_t> is;
    for (const SpanData& s : spans()) {
      if (reason_of(s) != reason) continue;
      const std::int64_t i = std::get<std::int64_t>(*attribute(s, "i"));
      is.push_back(i);
      EXPECT_EQ(s.parent_span_id.is_valid(), false) << "span " << i << " is a root";
      if (const auto it = read.find(i); it != read.end()) {
        EXPECT_EQ(s.context.span_id, it->second.span_id) << "span " << i;
        EXPECT_EQ(s.context.trace_id, it->second.trace_id) << "span " << i;
      } else if (const auto other = read_by_id.find(s.context.span_id.to_hex());
                 other != read_by_id.end()) {
        ADD_FAILURE() << "span " << i << " has the ids of span " << other->second;
      }
    }
    std::sort(is.begin(), is.end());
    return is;
  };
  auto range = [](std::int64_t from, std::int64_t to) {
    std::vector<std::int64_t> v;
    for (std::int64_t i = from; i < to; ++i) v.push_back(i);
    return v;
  };
  run(20);  // full after 16: the head now at 4
  EXPECT_EQ(capture("first"), 16u);
  EXPECT_EQ(captured("first"), range(4, 20));
  run(14);  // from slot 4 on, around the end to slot 1
  EXPECT_EQ(capture("second"), 14u);
  EXPECT_EQ(captured("second"), range(20, 34));
  run(40);  // full again, overwritten two times around
  EXPECT_EQ(capture("third"), 16u);
  EXPECT_EQ(captured("third"), range(58, 74));
  const TelemetryStats st = handle_.stats();
  EXPECT_EQ(st.spans_recorded, 74u);
  EXPECT_EQ(st.spans_record_overwritten, 4u + 24u);
  EXPECT_EQ(st.record_spans_held, 0u);
}

TEST_F(FlightRecorder, AThreadThatExitedLeavesItsRecordedSpansToCapture) {
  record("step", "all");
  std::thread([] {
    for (int i = 0; i < 5; ++i) {
      LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "worker_span");
    }
  }).join();
  EXPECT_EQ(capture("after the worker"), 5u);
  const auto all = spans();
  ASSERT_EQ(all.size(), 5u);
  for (const auto& s : all) EXPECT_EQ(reason_of(s), "after the worker");
}

TEST_F(FlightRecorder, ACapturedOpenSpanIsATruncatedCopyAndIsNotRecordedAgain) {
  record("step", "all");
  {
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "still_open");
    EXPECT_EQ(capture(), 1u);
  }
  const auto all = spans();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(std::get<bool>(*attribute(all[0], semconv::kNemoSpanTruncated)), true);
  EXPECT_EQ(handle_.stats().record_spans_held, 0u) << "its end went nowhere";
}

TEST_F(FlightRecorder, AStepEndingInErrorCapturesItsRecordedSpans) {
  record("step", "all");
  for (int i = 0; i < 2; ++i) {
    LENS_SPAN(step, SpanGroup::STEP, "train_step", {"iteration", i});
    { LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward", {"iteration", i}); }
    if (i == 1) step.set_status(StatusCode::kError, "nan loss");
  }
  std::map<std::string, int> captured;
  for (const SpanData& s : spans()) {
    if (s.name != "forward_backward") continue;
    EXPECT_EQ(reason_of(s), "error");
    EXPECT_EQ(std::get<std::int64_t>(*attribute(s, "iteration")), 1) << "the failed step's only";
    ++captured[reason_of(s)];
  }
  EXPECT_EQ(captured, (std::map<std::string, int>{{"error", 1}}));
  EXPECT_EQ(handle_.stats().record_spans_held, 1u) << "step 0's stays recorded";
}

TEST_F(FlightRecorder, ASlowStepCapturesItsSpansAndNoOtherStepsOnes) {
  // Steps of ~2 ms and one of 200 ms, against a factor of 10: margins a loaded machine keeps.
  record("step", "all", "", "10");
  const auto busy = [](milliseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  for (int i = 0; i < 12; ++i) {
    LENS_SPAN(step, SpanGroup::STEP, "train_step", {"iteration", i});
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "forward_backward", {"iteration", i});
    for (int m = 0; m < 3; ++m) {
      LENS_SPAN(opt, SpanGroup::OPTIMIZER, "layer", {"iteration", i});
      if (i == 9 && m == 1) {
        std::this_thread::sleep_for(milliseconds(200));  // the slow step's cause
      } else {
        busy(milliseconds(1));
      }
    }
  }
  std::map<std::int64_t, std::set<std::string>> captured;  // iteration -> names
  for (const SpanData& s : spans()) {
    if (s.name == "train_step") continue;
    EXPECT_EQ(reason_of(s), "slow_step") << s.name;
    captured[std::get<std::int64_t>(*attribute(s, "iteration"))].insert(s.name);
  }
  EXPECT_EQ(captured,
            (std::map<std::int64_t, std::set<std::string>>{{9, {"forward_backward", "layer"}}}));
  EXPECT_EQ(handle_.stats().spans_captured, 4u);  // forward_backward and its 3 layers
}

// The rule against an independent model: after 5 steps, slow when above factor x the median of
// the (at most) 32 steps before.
TEST(SlowStepRule, MatchesAModelOnRandomSchedules) {
  std::mt19937_64 rng(48);
  for (int trial = 0; trial < 200; ++trial) {
    detail::SlowStepRule rule;
    std::deque<std::int64_t> recent;
    const double factor = 1.5 + static_cast<double>(rng() % 30) / 10;
    for (int step = 0; step < 100; ++step) {
      std::int64_t d = 1'000'000 + static_cast<std::int64_t>(rng() % 200'000);
      if (rng() % 10 == 0) d *= static_cast<std::int64_t>(2 + rng() % 5);  // a slow one
      bool expected = false;
      if (recent.size() >= 5) {
        std::vector<std::int64_t> v(recent.begin(), recent.end());
        std::sort(v.begin(), v.end());
        const std::size_t n = v.size();
        const std::int64_t median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
        expected = static_cast<double>(d) > factor * static_cast<double>(median);
      }
      ASSERT_EQ(rule.add(d, factor), expected) << "trial " << trial << " step " << step;
      recent.push_back(d);
      if (recent.size() > 32) recent.pop_front();
    }
  }
}

// What a random schedule did, in the order it happened on its (only) thread.
struct ScheduleEvent {
  enum Kind { kRecorded, kStepEnd, kInnerStepEnd, kManual, kJobEnd } kind;
  int seq = -1;    // kRecorded: the span's "seq" attribute
  int step = -1;   // kRecorded: the top-level step it ran in (-1: between steps); kStepEnd: which
  int inner = -1;  // kRecorded: the inner step it ran in; kInnerStepEnd: which
  int epoch = -1;  // kRecorded: the latest top-level step started before it (-1: none)
  bool error = false;  // the step or job span ended with an error status
};

// What the model says left: seq -> (reason, capture ordinal); and its counts.
struct ModelResult {
  std::map<int, std::pair<std::string, int>> captured;
  std::uint64_t recorded = 0, overwritten = 0, captures = 0;
  bool ambiguous = false;  // a step within a microsecond of the threshold: either answer is right
};

// The documented rule, replayed over a schedule: a ring of `capacity` recorded spans; a top-level
// step slower than factor x the median of the recent ones (after 5), or one ending in error,
// exports its recorded spans; an inner step in error its own; the job in error what was recorded
// since the latest step began; a manual capture everything held. `durations`: each top-level
// step's exported duration (the rule saw the same nanoseconds).
ModelResult model_of(const std::vector<ScheduleEvent>& events, std::size_t capacity, double factor,
                     const std::vector<std::int64_t>& durations) {
  ModelResult out;
  std::deque<ScheduleEvent> ring;
  std::deque<std::int64_t> recent;
  int ordinal = 0;
  const auto take = [&](const std::string& reason, auto&& wanted) {
    ++ordinal;
    ++out.captures;
    std::deque<ScheduleEvent> kept;
    for (const ScheduleEvent& r : ring) {
      if (wanted(r)) {
        out.captured[r.seq] = {reason, ordinal};
      } else {
        kept.push_back(r);
      }
    }
    ring = std::move(kept);
  };
  int last_step = -1;  // the latest top-level step that ended
  for (const ScheduleEvent& e : events) {
    switch (e.kind) {
      case ScheduleEvent::kRecorded:
        ++out.recorded;
        if (ring.size() == capacity) {
          ring.pop_front();
          ++out.overwritten;
        }
        ring.push_back(e);
        break;
      case ScheduleEvent::kStepEnd: {
        const std::int64_t d = durations[static_cast<std::size_t>(e.step)];
        bool slow = false;
        if (recent.size() >= 5) {
          std::vector<std::int64_t> v(recent.begin(), recent.end());
          std::sort(v.begin(), v.end());
          const std::size_t n = v.size();
          const std::int64_t median = n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
          const double threshold = factor * static_cast<double>(median);
          slow = static_cast<double>(d) > threshold;
          if (std::abs(static_cast<double>(d) - threshold) < 1000) out.ambiguous = true;
        }
        recent.push_back(d);
        if (recent.size() > 32) recent.pop_front();
        last_step = e.step;
        if (e.error || slow) {
          take(e.error ? "error" : "slow_step",
               [&](const ScheduleEvent& r) { return r.step == e.step; });
        }
        break;
      }
      case ScheduleEvent::kInnerStepEnd:
        if (e.error) take("error", [&](const ScheduleEvent& r) { return r.inner == e.inner; });
        break;
      case ScheduleEvent::kManual:
        take("manual", [](const ScheduleEvent&) { return true; });
        break;
      case ScheduleEvent::kJobEnd:
        if (e.error) {
          take("error", [&](const ScheduleEvent& r) { return r.epoch >= last_step; });
        }
        break;
    }
  }
  return out;
}

// For random schedules (steps of random detail, some slow, nested steps, errors, manual captures,
// spans between steps, rings small enough to overwrite), what is exported equals the model.
TEST_F(FlightRecorder, WhatIsExportedEqualsAModelOfTheTriggersOnRandomSchedules) {
  std::mt19937_64 rng(4848);
  const auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  const auto busy = [](std::chrono::microseconds d) {
    const auto until = std::chrono::steady_clock::now() + d;
    while (std::chrono::steady_clock::now() < until) {
    }
  };
  int checked = 0;
  for (int schedule = 0; schedule < 12; ++schedule) {
    const std::size_t capacity = chance(50) ? 16 : 256;
    const double factor = 1.5 + static_cast<double>(rng() % 20) / 10;
    memory_->clear();
    record("job,step", "all", std::to_string(capacity), std::to_string(factor));
    std::vector<ScheduleEvent> events;
    int seq = 0, inner_steps = 0, epoch = -1;
    // A recorded span (with a recorded child, sometimes) in top-level step `step`.
    const auto recorded = [&](int step, int inner) {
      const int parent = seq++;
      {
        LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "detail", {"seq", parent});
        if (chance(30)) {
          const int child = seq++;
          {
            LENS_SPAN(layer, SpanGroup::OPTIMIZER, "detail", {"seq", child});
            busy(std::chrono::microseconds(20));
          }
          events.push_back({ScheduleEvent::kRecorded, child, step, inner, epoch});
        }
        busy(std::chrono::microseconds(30));
      }
      events.push_back({ScheduleEvent::kRecorded, parent, step, inner, epoch});
    };
    const int steps = 30;
    {
      LENS_SPAN(job, SpanGroup::JOB, "job");
      for (int t = 0; t < steps; ++t) {
        if (chance(30)) recorded(-1, -1);  // between steps
        if (chance(10)) {
          capture();
          events.push_back({ScheduleEvent::kManual});
        }
        epoch = t;
        ScheduleEvent end{ScheduleEvent::kStepEnd, -1, t};
        {
          LENS_SPAN(step, SpanGroup::STEP, "train_step", {"t", t});
          const int n = static_cast<int>(rng() % 6);
          for (int i = 0; i < n; ++i) {
            recorded(t, -1);
            if (chance(5)) {
              capture();
              events.push_back({ScheduleEvent::kManual});
            }
          }
          if (chance(15)) {
            const int u = inner_steps++;
            ScheduleEvent inner_end{ScheduleEvent::kInnerStepEnd, -1, -1, u};
            {
              LENS_SPAN(inner, SpanGroup::STEP, "inner_step");
              recorded(t, u);
              if (chance(50)) {
                inner.set_status(StatusCode::kError, "inner failure");
                inner_end.error = true;
              }
            }
            events.push_back(inner_end);
          }
          if (chance(15)) busy(std::chrono::microseconds(1500));  // a slow step
          if (chance(10)) {
            step.set_status(StatusCode::kError, "step failure");
            end.error = true;
          }
        }
        events.push_back(end);
      }
      ScheduleEvent job_end{ScheduleEvent::kJobEnd};
      if (chance(50)) {
        job.set_status(StatusCode::kError, "job failure");
        job_end.error = true;
      }
      events.push_back(job_end);
    }
    const std::vector<SpanData> all = spans();
    std::vector<std::int64_t> durations(steps, -1);
    std::map<int, std::pair<std::string, std::int64_t>> exported;  // seq -> (reason, id)
    for (const SpanData& s : all) {
      if (s.name == "train_step") {
        durations[static_cast<std::size_t>(std::get<std::int64_t>(*attribute(s, "t")))] =
            s.end_time_unix_nano - s.start_time_unix_nano;
      } else if (s.name == "detail") {
        const int k = static_cast<int>(std::get<std::int64_t>(*attribute(s, "seq")));
        EXPECT_TRUE(exported.emplace(k, std::make_pair(reason_of(s), capture_id_of(s))).second)
            << "span " << k << " exported twice";
      }
    }
    ASSERT_EQ(std::count(durations.begin(), durations.end(), -1), 0);
    const ModelResult want = model_of(events, capacity, factor, durations);
    if (want.ambiguous) continue;
    ++checked;
    // The same spans with the same reasons, and the same captures: the ids differ from the
    // model's ordinals by one offset.
    ASSERT_EQ(exported.size(), want.captured.size()) << "schedule " << schedule;
    std::optional<std::int64_t> offset;
    for (const auto& [k, got] : exported) {
      const auto it = want.captured.find(k);
      ASSERT_NE(it, want.captured.end()) << "schedule " << schedule << " span " << k;
      EXPECT_EQ(got.first, it->second.first) << "schedule " << schedule << " span " << k;
      if (!offset) offset = got.second - it->second.second;
      EXPECT_EQ(got.second - it->second.second, *offset)
          << "schedule " << schedule << " span " << k;
    }
    const TelemetryStats st = handle_.stats();
    EXPECT_EQ(st.spans_recorded, want.recorded) << "schedule " << schedule;
    EXPECT_EQ(st.spans_record_overwritten, want.overwritten) << "schedule " << schedule;
    EXPECT_EQ(st.spans_captured, exported.size()) << "schedule " << schedule;
    EXPECT_EQ(st.record_captures, want.captures) << "schedule " << schedule;
  }
  EXPECT_GE(checked, 10) << "schedules with a step within a microsecond of the threshold";
}

TEST_F(FlightRecorder, AGroupSwitchedLiveIsExportedThenRecordedAgain) {
  record("step", "all");
  { LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "before"); }
  set_enabled_span_groups({"step", "forward_backward"});
  { LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "exported"); }
  set_enabled_span_groups({"step"});
  { LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "after"); }
  EXPECT_EQ(count_by_name(spans()), (std::map<std::string, int>{{"exported", 1}}));
  EXPECT_EQ(capture(), 2u);
  EXPECT_EQ(count_by_name(spans()),
            (std::map<std::string, int>{{"exported", 1}, {"before", 1}, {"after", 1}}));
}

TEST_F(FlightRecorder, AForkedChildLeavesTheParentsRecordedSpansAlone) {
#if defined(__SANITIZE_THREAD__)
  // TSan cannot follow a multi-threaded process's child that starts threads (the child's own
  // pipeline): it dies. The release and ASan builds run this test.
  GTEST_SKIP() << "fork of a multi-threaded process under TSan";
#endif
  record("step", "all");
  for (int i = 0; i < 3; ++i) {
    LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "parent_span");
  }
  ASSERT_EQ(lens_test::wait_for_other_threads_to_sleep(), "");
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Nothing of the parent's to capture here; the child's own spans are recorded.
    const bool none = capture() == 0;
    { LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "child_span"); }
    const bool own = capture() == 1;
    _exit(none && own ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  EXPECT_EQ(capture(), 3u) << "the parent's spans, still in the parent's rings";
}

TEST_F(FlightRecorder, ThreadsRecordWhileOthersCaptureAndNothingIsCountedTwice) {
  record("step", "all", "64");
  constexpr int kThreads = 4, kSpans = 2000;
  std::atomic<bool> done{false};
  std::atomic<std::uint64_t> captured{0};
  std::thread capturer([&] {
    while (!done.load()) captured += capture("concurrent");
  });
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t) {
    workers.emplace_back([] {
      for (int i = 0; i < kSpans; ++i) {
        LENS_SPAN(fb, SpanGroup::FORWARD_BACKWARD, "worker", {"i", i});
        LENS_SPAN(opt, SpanGroup::OPTIMIZER, "inner");
      }
    });
  }
  for (auto& w : workers) w.join();
  done = true;
  capturer.join();
  captured += capture("last");
  const TelemetryStats st = handle_.stats();
  // Every span was overwritten or captured once: from a ring, or while open as a truncated copy
  // (its own end then went nowhere, and was not recorded).
  constexpr auto kStarted = static_cast<std::uint64_t>(2 * kThreads * kSpans);
  EXPECT_LE(st.spans_recorded, kStarted);
  EXPECT_EQ(st.spans_record_overwritten + captured.load(), kStarted);
  EXPECT_EQ(st.record_spans_held, 0u);
  EXPECT_EQ(st.spans_captured, captured.load());
  const auto all = spans();
  EXPECT_EQ(all.size(), captured.load());
  std::set<std::pair<std::string, std::string>> ids;
  for (const auto& s : all) {
    EXPECT_TRUE(ids.insert({s.context.trace_id.to_hex(), s.context.span_id.to_hex()}).second)
        << "a span exported twice";
  }
}

}  // namespace
