// Spans with times of their own (SpanStartOptions::start_time_unix_nano / start_at(), Span::end(
// time)): a span that began before the call that records it (a CUDA event's time, a queue's
// timestamp, a log line) keeps the times it was given, through the in-memory exporter and the
// OTLP/JSON the file exporter writes; an end before the start is clamped and counted; a span given
// only an end keeps the start lens took.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "control_client.hpp"  // TempDir
#include "nemo/lens/lens.hpp"
#include "scoped_env.hpp"
#include "tracing/clock.hpp"
#include "tracing_fixture.hpp"

namespace {

using nemo::lens::Span;
using nemo::lens::SpanStartOptions;

std::int64_t unix_now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

class SpanTimes : public lens_test::Tracing {};

TEST_F(SpanTimes, AStartAndAnEndOfItsOwnAreExportedExactly) {
  const std::int64_t start = unix_now() - 5'000'000'123;  // 5 s ago
  const std::int64_t end = start + 1'234'567;
  SpanStartOptions o;
  o.start_time_unix_nano = start;
  Span s = nemo::lens::start_span("backdated", o);
  s.end(end);
  const auto d = only(spans(), "backdated");
  EXPECT_EQ(d.start_time_unix_nano, start);
  EXPECT_EQ(d.end_time_unix_nano, end);
  EXPECT_EQ(handle_.stats().spans_end_clamped, 0u);
}

TEST_F(SpanTimes, SystemClockTimesWork) {
  const auto start = std::chrono::system_clock::now() - std::chrono::seconds(3);
  const auto end = start + std::chrono::milliseconds(40);
  Span s = nemo::lens::start_span("chrono", SpanStartOptions{}.start_at(start));
  s.end(end);
  const auto d = only(spans(), "chrono");
  EXPECT_EQ(d.start_time_unix_nano,
            std::chrono::duration_cast<std::chrono::nanoseconds>(start.time_since_epoch()).count());
  EXPECT_EQ(d.end_time_unix_nano - d.start_time_unix_nano, 40'000'000);
}

// A start of its own and an end now: the end is read from the system clock, after the start.
TEST_F(SpanTimes, ABackdatedSpanEndedNowEndsNow) {
  const std::int64_t start = unix_now() - 2'000'000'000;
  SpanStartOptions o;
  o.start_time_unix_nano = start;
  const std::int64_t before_end = unix_now();
  { Span s = nemo::lens::start_span("until_now", o); }
  const std::int64_t after_end = unix_now();
  const auto d = only(spans(), "until_now");
  EXPECT_EQ(d.start_time_unix_nano, start);
  EXPECT_GE(d.end_time_unix_nano, before_end);
  EXPECT_LE(d.end_time_unix_nano, after_end);
}

// A span started now (lens' clock) and given an end: the end is exact, the start lens' own.
TEST_F(SpanTimes, AnEndOfItsOwnAfterAStartTakenNow) {
  const std::int64_t before = unix_now();
  Span s = nemo::lens::span_cm("end_given");
  const std::int64_t after = unix_now();
  const std::int64_t end = after + 7'000'000;  // a CUDA event's end, say, in the future
  s.end(end);
  const auto d = only(spans(), "end_given");
  // lens' clock (the TSC where there is one) agrees with the system clock to a few µs.
  EXPECT_GE(d.start_time_unix_nano, before - 1'000'000);
  EXPECT_LE(d.start_time_unix_nano, after + 1'000'000);
  EXPECT_EQ(d.end_time_unix_nano, end);
}

TEST_F(SpanTimes, AnEndBeforeTheStartIsClampedAndCounted) {
  const std::int64_t start = unix_now() - 1'000'000'000;
  SpanStartOptions o;
  o.start_time_unix_nano = start;
  Span s = nemo::lens::start_span("reversed", o);
  s.end(start - 500);
  const auto d = only(spans(), "reversed");
  EXPECT_EQ(d.end_time_unix_nano, start);
  EXPECT_EQ(handle_.stats().spans_end_clamped, 1u);
}

// Children started inside a backdated span are its children as usual, with lens' times.
TEST_F(SpanTimes, ABackdatedSpanIsAParentAsAnyOther) {
  SpanStartOptions o;
  o.start_time_unix_nano = unix_now() - 1'000'000'000;
  {
    Span parent = nemo::lens::start_span("parent", o);
    { Span child = nemo::lens::span_cm("child"); }
  }
  const auto all = spans();
  const auto parent = only(all, "parent");
  const auto child = only(all, "child");
  EXPECT_EQ(child.parent_span_id, parent.context.span_id);
  EXPECT_GE(child.start_time_unix_nano, parent.start_time_unix_nano);
}

// Where the clock does not use the TSC, a span's ticks are Unix nanoseconds. The common end reads
// the TSC without asking the clock, so such a span must leave it to the general end: its start is
// marked as Unix nanoseconds. Stood in for here by turning the TSC off around spans started with
// start_span() (a LENS_SPAN site's common start is off where set-up found no TSC) and their export.
TEST_F(SpanTimes, ASpanStartedWithoutTheTscEndsOnTheSystemClock) {
  const std::int64_t before = unix_now();
  if (!nemo::lens::detail::set_clock_ticks_are_tsc(false)) {
    GTEST_SKIP() << "no TSC here: every span already runs on the system clock";
  }
  {
    Span s = nemo::lens::span_cm("system_clock");
    Span child = nemo::lens::span_cm("system_clock_child");
    const std::int64_t inside = unix_now();
    while (unix_now() < inside + 1'000'000) {
    }  // both spans last at least 1 ms by the system clock
  }
  const bool flushed = handle_.force_flush();  // converted while the TSC is still off
  nemo::lens::detail::set_clock_ticks_are_tsc(true);
  const std::int64_t after = unix_now();
  ASSERT_TRUE(flushed);
  for (const char* name : {"system_clock", "system_clock_child"}) {
    const auto d = only(spans(), name);
    EXPECT_GE(d.start_time_unix_nano, before) << name;
    EXPECT_GE(d.end_time_unix_nano - d.start_time_unix_nano, 1'000'000) << name;
    EXPECT_LE(d.end_time_unix_nano, after) << name;
  }
}

// The OTLP/JSON the file exporter writes from the record itself carries the same times.
TEST(SpanTimesFile, TheFileExporterWritesTheGivenTimes) {
  lens_test::ScopedEnv env;
  lens_test::TempDir dir;
  const std::string path = (dir.path() / "traces.jsonl").string();
  env.set("NEMO_LENS_EXPORT_PATH", path);
  nemo::lens::NemoLensConfig c = lens_test::enabled_config("all");
  c.exporter = "file";
  c.metrics_enabled = false;  // no metrics file in the working directory
  nemo::lens::SetupOptions options;
  options.allow_reinit = true;
  auto handle = nemo::lens::setup_telemetry(c, 0, 1, options);
  const std::int64_t start = unix_now() - 60'000'000'000;  // a minute ago
  SpanStartOptions o;
  o.start_time_unix_nano = start;
  Span s = nemo::lens::start_span("from_a_log", o);
  s.end(start + 42);
  ASSERT_TRUE(handle.shutdown());
  std::ifstream in(path);
  bool found = false;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    for (const auto& span : j.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans")) {
      if (span.at("name") != "from_a_log") continue;
      found = true;
      EXPECT_EQ(span.at("startTimeUnixNano"), std::to_string(start));
      EXPECT_EQ(span.at("endTimeUnixNano"), std::to_string(start + 42));
    }
  }
  EXPECT_TRUE(found);
}

}  // namespace
