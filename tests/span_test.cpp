#include "nemo/lens/span.hpp"

#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <stdexcept>
#include <thread>

#include "nemo/lens/macros.hpp"
#include "nemo/lens/propagation.hpp"
#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

using Tracing = lens_test::Tracing;

// The sampled remote context of the W3C Trace Context examples.
SpanContext w3c_example_context() {
  SpanContext c;
  c.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  c.span_id = *SpanId::from_hex("00f067aa0ba902b7");
  c.trace_flags = 0x01;
  c.is_remote = true;
  return c;
}

const AttributeValue* attr(const SpanData& s, std::string_view key) { return s.attribute(key); }

TEST_F(Tracing, ChildrenNestUnderTheCurrentSpan) {
  {
    auto outer = managed_span("step", "outer", {{"iteration", 3}});
    ASSERT_TRUE(outer);
    EXPECT_EQ(current_span_context(), outer.context());
    {
      auto inner = span_cm("inner");
      EXPECT_EQ(current_span_context(), inner.context());
    }
    EXPECT_EQ(current_span_context(), outer.context());
  }
  EXPECT_FALSE(current_span_context().is_valid());
  auto all = spans();
  ASSERT_EQ(all.size(), 2u);
  auto outer = only(all, "outer");
  auto inner = only(all, "inner");
  EXPECT_EQ(inner.context.trace_id, outer.context.trace_id);
  EXPECT_EQ(inner.parent_span_id, outer.context.span_id);
  EXPECT_FALSE(outer.parent_span_id.is_valid());
  EXPECT_NE(inner.context.span_id, outer.context.span_id);
  EXPECT_EQ(outer.group, "step");
  EXPECT_EQ(inner.group, "");
  EXPECT_LE(outer.start_time_unix_nano, inner.start_time_unix_nano);
  EXPECT_LE(inner.end_time_unix_nano, outer.end_time_unix_nano);
  EXPECT_TRUE(outer.context.is_sampled());
  EXPECT_EQ(std::get<std::int64_t>(*attr(outer, "iteration")), 3);
  EXPECT_EQ(outer.kind, SpanKind::kInternal);
  EXPECT_GT(outer.thread_id, 0);
}

// A span's ids are made when first needed (a child, context(), the export), not at its start: every
// way of reaching them sees the same ids, and spans nobody asked about still get valid, distinct
// ones.
TEST_F(Tracing, IdsMadeWhenFirstNeededAreTheIdsExported) {
  SpanContext read_early, read_late, read_elsewhere;
  {
    auto asked = span_cm("asked");  // read before and after a child
    read_early = asked.context();
    { auto child = span_cm("child_of_asked"); }
    read_late = asked.context();
  }
  {
    auto parent = span_cm("parent");  // first read by its child's start
    { auto child = span_cm("child_of_parent"); }
  }
  {
    auto moved = span_cm("moved");  // first read on another thread
    std::thread([&] { read_elsewhere = moved.context(); }).join();
  }
  for (int i = 0; i < 200; ++i) auto leaf = span_cm("leaf");  // never read before the export
  const auto all = spans();
  EXPECT_TRUE(read_early.is_valid());
  EXPECT_EQ(read_early, read_late);
  EXPECT_EQ(only(all, "asked").context.span_id, read_early.span_id);
  EXPECT_EQ(only(all, "asked").context.trace_id, read_early.trace_id);
  EXPECT_EQ(only(all, "child_of_asked").parent_span_id, read_early.span_id);
  EXPECT_EQ(only(all, "child_of_parent").parent_span_id, only(all, "parent").context.span_id);
  EXPECT_EQ(only(all, "child_of_parent").context.trace_id, only(all, "parent").context.trace_id);
  EXPECT_EQ(only(all, "moved").context.span_id, read_elsewhere.span_id);
  std::set<std::string> span_ids, trace_ids;
  for (const auto& s : all) {
    EXPECT_TRUE(s.context.is_valid()) << s.name;
    span_ids.insert(s.context.span_id.to_hex());
    if (s.name == "leaf") trace_ids.insert(s.context.trace_id.to_hex());
  }
  EXPECT_EQ(span_ids.size(), all.size()) << "every span has its own id";
  EXPECT_EQ(trace_ids.size(), 200u) << "every root has its own trace";
}

TEST_F(Tracing, OutOfOrderEndsKeepTheStackConsistent) {
  auto a = span_cm("a");
  auto b = span_cm("b");
  a.end();  // ends below the top: b stays current
  EXPECT_EQ(current_span_context(), b.context());
  auto c = span_cm("c");
  const auto c_parent = b.context().span_id;
  c.end();
  b.end();
  EXPECT_FALSE(current_span_context().is_valid());
  auto d = span_cm("d");
  d.end();
  auto all = spans();
  EXPECT_EQ(only(all, "c").parent_span_id, c_parent);
  EXPECT_FALSE(only(all, "d").parent_span_id.is_valid()) << "d is a new root";
  EXPECT_NE(only(all, "d").context.trace_id, only(all, "a").context.trace_id);
}

Span open_job() { return span_cm("job_root"); }

TEST_F(Tracing, MovedSpanOutlivesItsScopeAndStaysCurrent) {
  Span job = open_job();
  ASSERT_TRUE(job);
  { auto step = managed_span("step", "step"); }
  Span moved = std::move(job);
  EXPECT_FALSE(job);  // NOLINT(bugprone-use-after-move): the moved-from handle is empty
  job.end();          // no-op on an empty handle
  moved.set_attribute("steps", 1);
  moved.end();
  moved.end();  // idempotent
  auto all = spans();
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(only(all, "step").parent_span_id, only(all, "job_root").context.span_id);
  EXPECT_EQ(std::get<std::int64_t>(*attr(only(all, "job_root"), "steps")), 1);
}

TEST_F(Tracing, MoveAssignmentEndsTheOverwrittenSpan) {
  Span s = span_cm("first");
  s = span_cm("second");
  EXPECT_EQ(spans().size(), 1u);  // "first" ended by the assignment
  s.end();
  auto all = spans();
  EXPECT_EQ(only(all, "second").parent_span_id, only(all, "first").context.span_id)
      << "second started while first was still current";
}

TEST_F(Tracing, DisabledGroupCreatesNothingAndEvaluatesNoArgument) {
  start("default");
  int evaluations = 0;
  auto expensive = [&] { return ++evaluations; };
  {
    LENS_SPAN(off, SpanGroup::STEP, "step_span", {"value", expensive()});
    EXPECT_FALSE(off);
    EXPECT_FALSE(off.context().is_valid());
    off.set_attribute("x", 1).add_event("e").set_status(StatusCode::kError, "no-op");
    auto off2 = managed_span("optimizer", "opt");
    EXPECT_FALSE(off2);
    LENS_SPAN(on, SpanGroup::JOB, "job_span", {"value", expensive()});
    EXPECT_TRUE(on);
  }
  EXPECT_EQ(evaluations, 1);
  auto all = spans();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].name, "job_span");
  EXPECT_EQ(all[0].group, "job");
  EXPECT_EQ(std::get<std::int64_t>(*attr(all[0], "value")), 1);
  EXPECT_EQ(handle_.stats().spans_started, 1u);
}

TEST_F(Tracing, LensSpanSeesLaterGroupSwitches) {
  auto site = [] {
    LENS_SPAN(s, "layer", "layer_fwd");
    return static_cast<bool>(s);
  };
  start("default");
  EXPECT_FALSE(site());
  set_enabled_span_groups({"layer"});
  EXPECT_TRUE(site());
  set_enabled_span_groups({});
  EXPECT_FALSE(site());
  EXPECT_EQ(spans().size(), 1u);
}

TEST(NotSetUp, EverySpanIsEmpty) {
  set_enabled_span_groups({"step"});  // groups on, but no pipeline
  auto a = span_cm("x");
  auto b = managed_span("step", "y");
  LENS_SPAN(c, "step", "z");
  EXPECT_FALSE(a);
  EXPECT_FALSE(b);
  EXPECT_FALSE(c);
  EXPECT_FALSE(current_span_context().is_valid());
  set_enabled_span_groups({});
}

TEST_F(Tracing, ScopeLeftByAnExceptionGetsErrorAndAnEvent) {
  try {
    auto s = managed_span("step", "failing");
    throw std::runtime_error("disk full");
  } catch (const std::exception&) {
  }
  auto f = only(spans(), "failing");
  EXPECT_EQ(f.status_code, StatusCode::kError);
  EXPECT_EQ(f.status_message, "disk full");
  ASSERT_EQ(f.events.size(), 1u);
  EXPECT_EQ(f.events[0].name, "exception");
  ASSERT_EQ(f.events[0].attributes.size(), 2u);
  EXPECT_EQ(f.events[0].attributes[0].key, "exception.type");
  EXPECT_EQ(std::get<std::string>(f.events[0].attributes[0].value), "std::runtime_error");
  EXPECT_EQ(std::get<std::string>(f.events[0].attributes[1].value), "disk full");
}

struct CustomError : std::logic_error {
  using std::logic_error::logic_error;
};

TEST_F(Tracing, ExceptionTypeIsDemangledForUserTypesAndNonStdTypes) {
  try {
    LENS_SPAN(s, "step", "custom");
    throw CustomError("bad shape");
  } catch (const CustomError&) {
  }
  try {
    auto s = span_cm("int_thrown");
    throw 42;
  } catch (int) {
  }
  auto all = spans();
  auto custom = only(all, "custom");
  ASSERT_EQ(custom.events.size(), 1u);
  EXPECT_EQ(std::get<std::string>(custom.events[0].attributes[0].value),
            "nemo::lens::(anonymous namespace)::CustomError");
  EXPECT_EQ(custom.status_message, "bad shape");
  auto thrown_int = only(all, "int_thrown");
  EXPECT_EQ(thrown_int.status_code, StatusCode::kError);
  EXPECT_EQ(std::get<std::string>(thrown_int.events[0].attributes[0].value), "int");
}

TEST_F(Tracing, ExceptionCaughtInsideTheScopeLeavesTheSpanAlone) {
  {
    auto s = span_cm("recovered");
    try {
      throw std::runtime_error("retry");
    } catch (const std::exception&) {
    }
  }
  auto r = only(spans(), "recovered");
  EXPECT_EQ(r.status_code, StatusCode::kUnset);
  EXPECT_TRUE(r.events.empty());
}

TEST_F(Tracing, RethrowOfAStoredExceptionIsNotMistakenForTheLastThrow) {
  std::exception_ptr stored;
  try {
    throw std::runtime_error("original");
  } catch (...) {
    stored = std::current_exception();
  }
  try {
    throw std::logic_error("unrelated");
  } catch (const std::exception&) {
  }
  try {
    auto s = span_cm("rethrown");
    std::rethrow_exception(stored);
  } catch (const std::exception&) {
  }
  auto r = only(spans(), "rethrown");
  EXPECT_EQ(r.status_code, StatusCode::kError);
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(std::get<std::string>(r.events[0].attributes[0].value), "unknown")
      << "the hook never saw this throw, and must not report the unrelated one";
}

TEST_F(Tracing, RecordExceptionAndTraceFnRecordOnce) {
  {
    auto s = span_cm("explicit");
    s.record_exception(std::out_of_range("index 7"));
  }
  auto failing = trace_fn("checkpoint", "save", [](int x) -> int {
    if (x > 0) throw std::invalid_argument("negative space");
    return x;
  });
  EXPECT_EQ(failing(0), 0);
  EXPECT_THROW(failing(1), std::invalid_argument);
  auto all = spans();
  auto e = only(all, "explicit");
  ASSERT_EQ(e.events.size(), 1u);
  EXPECT_EQ(std::get<std::string>(e.events[0].attributes[0].value), "std::out_of_range");
  EXPECT_EQ(e.status_code, StatusCode::kError);
  int saves = 0;
  for (const auto& s : all) {
    if (s.name != "save") continue;
    ++saves;
    if (s.status_code == StatusCode::kError) {
      ASSERT_EQ(s.events.size(), 1u) << "the wrapper and the scope must not both record";
      EXPECT_EQ(std::get<std::string>(s.events[0].attributes[1].value), "negative space");
      EXPECT_EQ(s.group, "checkpoint");
    } else {
      EXPECT_TRUE(s.events.empty());
    }
  }
  EXPECT_EQ(saves, 2);
}

TEST_F(Tracing, TraceFnWithGroupOffCallsThroughWithoutSpans) {
  start("default");
  auto add = trace_fn("optimizer", "add", [](int a, int b) { return a + b; });
  EXPECT_EQ(add(2, 3), 5);
  EXPECT_TRUE(spans().empty());
}

TEST_F(Tracing, StringsUnderRedactedKeysAreReplaced) {
  {
    auto s = span_cm("llm", {{"prompt", "tell me a secret"}, {"tokens", 12}});
    s.set_attribute("password", std::string("hunter2"));
    s.set_attribute("token", 5);  // not a string: kept
    s.set_attribute("secret", std::vector<std::string>{"a", "b"});
    s.set_attribute("model", "llama");
    s.add_event("reply", {{"output_text", "42"}});
  }
  auto s = only(spans(), "llm");
  EXPECT_EQ(std::get<std::string>(*attr(s, "prompt")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(s, "password")), "[REDACTED]");
  EXPECT_EQ(std::get<std::int64_t>(*attr(s, "token")), 5);
  EXPECT_EQ(std::get<std::vector<std::string>>(*attr(s, "secret")),
            (std::vector<std::string>{"[REDACTED]", "[REDACTED]"}));
  EXPECT_EQ(std::get<std::string>(*attr(s, "model")), "llama");
  EXPECT_EQ(std::get<std::string>(s.events[0].attributes[0].value), "[REDACTED]");
}

// Redaction compares a key only with redacted keys of the same length (keys of 63 bytes and more
// share one bucket): keys of equal length, and long keys, must still be told apart.
TEST_F(Tracing, RedactionTellsApartKeysOfEqualLengthAndLongKeys) {
  const std::string long_secret(70, 's'), long_other = std::string(69, 's') + "t";
  const std::string longer_other(90, 's');
  SetupOptions options;
  options.redacted_keys = std::vector<std::string>{"api_key", "api_kez", long_secret, ""};
  start("all", options);
  {
    auto s = span_cm("r", {{"api_kez", "a"}, {"api_kex", "b"}, {"api_key", "c"}, {"", "empty"}});
    s.set_attribute(long_secret, "d");
    s.set_attribute(long_other, "e");
    s.set_attribute(longer_other, "f");
    s.set_attribute("api_kew",
                    "g");  // in a redacted key's (length, first byte) class, not redacted
    s.set_attribute("api_key", "h");  // replaces a redacted value
  }
  auto r = only(spans(), "r");
  EXPECT_EQ(std::get<std::string>(*attr(r, "api_kez")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(r, "api_kex")), "b");
  EXPECT_EQ(std::get<std::string>(*attr(r, "api_key")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(r, long_secret)), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(r, long_other)), "e");
  EXPECT_EQ(std::get<std::string>(*attr(r, longer_other)), "f");
  EXPECT_EQ(std::get<std::string>(*attr(r, "")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(r, "api_kew")), "g");
}

// managed_span finds a pair's site by where the caller keeps the names: a buffer that held other
// names before must still give each span its own names.
TEST_F(Tracing, ManagedSpanNamesFromAReusedBufferStayCorrect) {
  std::string group = "checkpoint", name = "forward";
  { auto s = managed_span(group, name); }
  name.replace(0, name.size(), "backwar");  // the same buffer and length, other contents
  { auto s = managed_span(group, name); }
  group.replace(0, group.size(), "model_init");  // the same for the group
  name.replace(0, name.size(), "forward");
  { auto s = managed_span(group, name); }
  const auto all = spans();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "forward");
  EXPECT_EQ(all[0].group, "checkpoint");
  EXPECT_EQ(all[1].name, "backwar");
  EXPECT_EQ(all[1].group, "checkpoint");
  EXPECT_EQ(all[2].name, "forward");
  EXPECT_EQ(all[2].group, "model_init");
}

// A thread remembers a pair whose group was off by where the caller keeps the names, and reads the
// group's flag again at every start: a switch, another group in the same buffer, tracking and
// start_span() with options all see the state of the moment.
TEST_F(Tracing, APairRememberedOffSeesSwitchesAndBufferContents) {
  start("per_step");  // step on, layer off
  std::string group = "layer", name = "layer_fwd";
  auto started = [&] { return static_cast<bool>(managed_span(group, name)); };
  EXPECT_FALSE(started());
  EXPECT_FALSE(started());  // from the thread's memory
  set_enabled_span_groups({"step", "layer"});
  EXPECT_TRUE(started()) << "the group was switched on";
  set_enabled_span_groups({"step"});
  EXPECT_FALSE(started());
  group.replace(0, group.size(), "steps");  // the same buffer and length: a group that is off
  EXPECT_FALSE(started());
  group.assign("step");  // still the buffer's storage, a shorter group that is on
  EXPECT_TRUE(started());
  group.assign("layer");
  EXPECT_FALSE(started());
  SpanStartOptions options;
  options.group = group;
  options.root = true;
  EXPECT_FALSE(start_span(name, options)) << "start_span() reads the same memory";
  set_enabled_span_groups({"layer"});
  EXPECT_TRUE(start_span(name, options));
  const auto all = spans();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].group, "layer");
  EXPECT_EQ(all[1].group, "step");
  EXPECT_EQ(all[2].group, "layer");
}

// A span site's attribute keys are checked on its first recorded span in each pipeline; its later
// spans store their attributes without the checks while the keys and value types are the ones
// checked. Each test below runs its site several times, so that later spans take that path.

// The value of `key` in `s` as an int, or -1.
std::int64_t int_attr(const SpanData& s, std::string_view key) {
  const AttributeValue* v = s.attribute(key);
  return v != nullptr && std::holds_alternative<std::int64_t>(*v) ? std::get<std::int64_t>(*v) : -1;
}

TEST_F(Tracing, SiteKeysFromAReusedBufferStayCorrect) {
  char key[] = "alpha";  // the same address and length each time, other contents
  auto site = [&](int i) { LENS_SPAN(s, "step", "buffer", {std::string_view(key), i}, {"n", i}); };
  site(0);
  key[0] = 'b';
  site(1);
  std::memcpy(key, "gamma", 5);
  site(2);
  site(3);
  const auto all = spans();
  ASSERT_EQ(all.size(), 4u);
  const char* keys[] = {"alpha", "blpha", "gamma", "gamma"};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(all[i].attributes.size(), 2u) << i;
    EXPECT_EQ(int_attr(all[i], keys[i]), i);
    EXPECT_EQ(int_attr(all[i], "n"), i);
  }
}

TEST_F(Tracing, SiteKeysAndTypesThatChangeBetweenSpansOfASite) {
  auto site = [&](int i) {
    LENS_SPAN(s, "step", "changing", {i % 2 == 0 ? "even" : "odd!", i},
              {"v", i % 3 == 0 ? AttributeArg("text") : AttributeArg(i)});
  };
  for (int i = 0; i < 6; ++i) site(i);
  const auto all = spans();
  ASSERT_EQ(all.size(), 6u);
  for (int i = 0; i < 6; ++i) {
    const SpanData& s = all[i];
    ASSERT_EQ(s.attributes.size(), 2u) << i;
    EXPECT_EQ(s.attributes[0].key, i % 2 == 0 ? "even" : "odd!");
    EXPECT_EQ(std::get<std::int64_t>(s.attributes[0].value), i);
    EXPECT_EQ(s.attributes[1].key, "v");
    if (i % 3 == 0) {
      EXPECT_EQ(std::get<std::string>(s.attributes[1].value), "text") << i;
    } else {
      EXPECT_EQ(std::get<std::int64_t>(s.attributes[1].value), i);
    }
  }
}

// Long strings, more attributes than slots, repeated keys and redacted keys at a site: every span
// of it has what the first had, in the order given.
TEST_F(Tracing, SiteKeysKeepOrderReplacementAndRedaction) {
  const std::string long_value(40, 'x');
  auto site = [&](int i) {
    LENS_SPAN(s, "step", "mixed", {"a", i}, {"b", i == 1 ? std::string_view(long_value) : "short"},
              {"c", i}, {"d", 1.5}, {"e", true}, {"a", i + 100}, {"password", "hunter2"});
  };
  for (int i = 0; i < 3; ++i) site(i);
  const auto all = spans();
  ASSERT_EQ(all.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const SpanData& s = all[i];
    ASSERT_EQ(s.attributes.size(), 6u) << i;
    const char* order[] = {"a", "b", "c", "d", "e", "password"};
    for (int k = 0; k < 6; ++k) EXPECT_EQ(s.attributes[k].key, order[k]) << i;
    EXPECT_EQ(int_attr(s, "a"), i + 100) << "the repeated key replaces";
    EXPECT_EQ(std::get<std::string>(*attr(s, "b")), i == 1 ? long_value : "short");
    EXPECT_EQ(int_attr(s, "c"), i);
    EXPECT_EQ(std::get<std::string>(*attr(s, "password")), "[REDACTED]");
  }
}

// The checks belong to a pipeline: a set-up with other redacted keys or limits checks again.
TEST_F(Tracing, SiteKeysAreCheckedAgainInEachPipeline) {
  auto site = [&](int i) { LENS_SPAN(s, "step", "piped", {"stage", "forward"}, {"n", i}); };
  auto run = [&] {
    memory_->clear();
    for (int i = 0; i < 3; ++i) site(i);
    return spans();
  };
  for (const auto& s : run()) EXPECT_EQ(std::get<std::string>(*attr(s, "stage")), "forward");
  SetupOptions options;
  options.redacted_keys = std::vector<std::string>{"stage"};
  start("all", options);
  for (const auto& s : run()) EXPECT_EQ(std::get<std::string>(*attr(s, "stage")), "[REDACTED]");
  env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4");
  start("all");
  for (const auto& s : run()) EXPECT_EQ(std::get<std::string>(*attr(s, "stage")), "forw");
  env_.set("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "1");
  start("all");
  for (const auto& s : run()) {
    EXPECT_EQ(s.attributes.size(), 1u);
    EXPECT_EQ(s.dropped_attributes_count, 1u);
  }
  env_.unset("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT");
  env_.unset("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT");
  start("all");
  const auto last = run();
  ASSERT_EQ(last.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(std::get<std::string>(*attr(last[i], "stage")), "forward");
    EXPECT_EQ(int_attr(last[i], "n"), i);
  }
}

// managed_span's sites are shared by name; their keys are compared by content, never by address.
TEST_F(Tracing, ManagedSpanAttributeKeysFromAReusedBufferStayCorrect) {
  std::string key = "first";
  for (int i = 0; i < 4; ++i) {
    if (i == 2) key.replace(0, 5, "other");
    auto s = managed_span("step", "managed_keys", {{key, i}, {"n", i}});
  }
  const auto all = spans();
  ASSERT_EQ(all.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(all[i].attributes.size(), 2u);
    EXPECT_EQ(int_attr(all[i], i < 2 ? "first" : "other"), i);
    EXPECT_EQ(int_attr(all[i], "n"), i);
  }
}

TEST_F(Tracing, RedactionSetIsConfigurable) {
  SetupOptions options;
  options.redacted_keys = std::vector<std::string>{"api_key"};
  start("all", options);
  { auto s = span_cm("r", {{"api_key", "abc"}, {"prompt", "visible"}}); }
  auto r = only(spans(), "r");
  EXPECT_EQ(std::get<std::string>(*attr(r, "api_key")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(r, "prompt")), "visible");

  env_.set("NEMO_LENS_REDACTED_KEYS", " ssn , dob ");
  memory_->clear();
  start("all");
  { auto s = span_cm("e", {{"ssn", "123"}, {"password", "pw"}}); }
  auto e = only(spans(), "e");
  EXPECT_EQ(std::get<std::string>(*attr(e, "ssn")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*attr(e, "password")), "pw");
}

TEST_F(Tracing, EveryAttributeTypeAndReplacement) {
  const std::vector<std::int64_t> ints{1, 2, 3};
  const std::vector<double> doubles{0.5, 1.5};
  const std::vector<bool> bools{true, false};
  const std::vector<std::string> strings{"x", "y"};
  const std::string_view views_data[] = {"p", "q"};
  {
    auto s = span_cm("types", {{"b", true},
                               {"i", -7},
                               {"u", 7u},
                               {"d", 2.5},
                               {"f", 1.5f},
                               {"s", "text"},
                               {"sv", std::string_view("view")}});
    s.set_attribute("ia", ints).set_attribute("da", doubles).set_attribute("ba", bools);
    s.set_attribute("sa", strings)
        .set_attribute("sva", std::span<const std::string_view>(views_data));
    s.set_attribute("i", 8);  // replaces
    s.set_attributes({{"extra", 1}, {"b", false}});
  }
  auto s = only(spans(), "types");
  EXPECT_EQ(s.attributes.size(), 13u);
  EXPECT_EQ(std::get<bool>(*attr(s, "b")), false);
  EXPECT_EQ(std::get<std::int64_t>(*attr(s, "extra")), 1);
  EXPECT_EQ(std::get<std::int64_t>(*attr(s, "i")), 8);
  EXPECT_EQ(std::get<std::int64_t>(*attr(s, "u")), 7);
  EXPECT_EQ(std::get<double>(*attr(s, "d")), 2.5);
  EXPECT_EQ(std::get<double>(*attr(s, "f")), 1.5);
  EXPECT_EQ(std::get<std::string>(*attr(s, "s")), "text");
  EXPECT_EQ(std::get<std::string>(*attr(s, "sv")), "view");
  EXPECT_EQ(std::get<std::vector<std::int64_t>>(*attr(s, "ia")), ints);
  EXPECT_EQ(std::get<std::vector<double>>(*attr(s, "da")), doubles);
  EXPECT_EQ(std::get<std::vector<bool>>(*attr(s, "ba")), bools);
  EXPECT_EQ(std::get<std::vector<std::string>>(*attr(s, "sa")), strings);
  EXPECT_EQ(std::get<std::vector<std::string>>(*attr(s, "sva")),
            (std::vector<std::string>{"p", "q"}));
  EXPECT_EQ(s.attribute("missing"), nullptr);
}

TEST_F(Tracing, RecycledRecordsCarryNoAttributesOfEarlierSpans) {
  // Records are reused with their attribute storage; a span must export only its own attributes.
  for (int round = 0; round < 20; ++round) {
    { auto wide = span_cm("wide", {{"a", 1}, {"b", "two"}, {"c", 3.0}}); }
    { auto narrow = span_cm("narrow", {{"x", round}}); }
    { auto bare = span_cm("bare"); }
    ASSERT_TRUE(handle_.force_flush());
  }
  for (const auto& s : memory_->spans()) {
    if (s.name == "wide") {
      ASSERT_EQ(s.attributes.size(), 3u);
    } else if (s.name == "narrow") {
      ASSERT_EQ(s.attributes.size(), 1u);
      EXPECT_EQ(s.attributes[0].key, "x");
    } else {
      EXPECT_TRUE(s.attributes.empty()) << s.name;
    }
  }
}

TEST_F(Tracing, RecycledRecordsCarryNothingColdOfEarlierSpans) {
  // What few spans have (events, links, a status message, attributes past the inline slots or too
  // long for them) lives in a record's cold part, which the record's next span clears.
  SpanContext target;
  {
    auto t = span_cm("target");
    target = t.context();
  }
  for (int round = 0; round < 20; ++round) {
    {
      auto s = span_cm(round % 2 == 0 ? "cold_0" : "cold_1",
                       {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}, {"f", 6}});
      s.set_attribute("path", std::string(100, 'p'));
      s.add_event("e", {{"x", 1}});
      s.add_link(target);
      s.set_status(StatusCode::kError, "broke");
    }
    { auto bare = span_cm("bare"); }
    { LENS_SPAN(site, SpanGroup::STEP, "site", {"i", round}); }
    ASSERT_TRUE(handle_.force_flush());
  }
  int cold = 0, bare = 0;
  for (const auto& s : memory_->spans()) {
    if (s.name.starts_with("cold_")) {
      ++cold;
      EXPECT_EQ(s.attributes.size(), 7u);
      EXPECT_EQ(s.events.size(), 1u);
      EXPECT_EQ(s.links.size(), 1u);
      EXPECT_EQ(s.status_message, "broke");
      continue;
    }
    if (s.name == "target") continue;
    ++bare;
    EXPECT_TRUE(s.name == "bare" || s.name == "site") << s.name;
    EXPECT_EQ(s.attributes.size(), s.name == "site" ? 1u : 0u) << s.name;
    EXPECT_TRUE(s.events.empty()) << s.name;
    EXPECT_TRUE(s.links.empty()) << s.name;
    EXPECT_EQ(s.status_code, StatusCode::kUnset) << s.name;
    EXPECT_EQ(s.status_message, "") << s.name;
    EXPECT_EQ(s.dropped_attributes_count + s.dropped_events_count + s.dropped_links_count, 0u);
  }
  EXPECT_EQ(cold, 20);
  EXPECT_EQ(bare, 40);
}

// A LENS_SPAN site's common start writes only what differs between spans: the rest of a free
// record is clean. A span that is not exported (sampled out here, with a remote parent, a kind
// and a status of its own) goes back to its thread's cache at once, to be the next start's record.
TEST_F(Tracing, ARecordASpanDidNotExportComesBackCleanForTheNextSite) {
  SpanContext remote = w3c_example_context();
  remote.trace_flags = 0;  // not sampled
  for (int round = 0; round < 3; ++round) {
    {
      SpanStartOptions o;
      o.parent = &remote;
      o.kind = SpanKind::kServer;
      auto out = start_span("sampled_out", o);
      out.set_status(StatusCode::kError, "ignored");
      out.set_attribute("k", 1);
      EXPECT_FALSE(out);
    }
    { LENS_SPAN(site, SpanGroup::STEP, "after_sampled_out", {"round", round}); }
  }
  ASSERT_TRUE(handle_.force_flush());
  int seen = 0;
  for (const auto& s : memory_->spans()) {
    ASSERT_EQ(s.name, "after_sampled_out");
    ++seen;
    EXPECT_TRUE(s.context.is_sampled());
    EXPECT_FALSE(s.context.is_remote);
    EXPECT_FALSE(s.parent_span_id.is_valid());
    EXPECT_NE(s.context.trace_id, remote.trace_id);
    EXPECT_EQ(s.kind, SpanKind::kInternal);
    EXPECT_EQ(s.status_code, StatusCode::kUnset);
    ASSERT_EQ(s.attributes.size(), 1u);
    EXPECT_EQ(s.attributes[0].key, "round");
    EXPECT_EQ(s.dropped_attributes_count, 0u);
    EXPECT_FALSE(s.truncated);
    EXPECT_LE(s.start_time_unix_nano, s.end_time_unix_nano);
  }
  EXPECT_EQ(seen, 3);
}

TEST_F(Tracing, LimitsDropAndCount) {
  env_.set("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2");
  env_.set("OTEL_SPAN_EVENT_COUNT_LIMIT", "1");
  env_.set("OTEL_SPAN_LINK_COUNT_LIMIT", "1");
  env_.set("OTEL_EVENT_ATTRIBUTE_COUNT_LIMIT", "1");
  env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4");
  start("all");
  SpanContext target;
  {
    auto t = span_cm("target");
    target = t.context();
  }
  {
    auto s = span_cm("limited", {{"a", 1}, {"b", "abcdefgh"}, {"c", 3}});
    s.set_attribute("a", 10);  // replacing an existing key is not a drop
    s.set_attribute("d", 4);
    s.add_event("e1", {{"x", 1}, {"y", 2}});
    s.add_event("e2");
    s.add_link(target, {{"why", "lateral"}});
    s.add_link(target);
  }
  auto s = only(spans(), "limited");
  EXPECT_EQ(s.attributes.size(), 2u);
  EXPECT_EQ(s.dropped_attributes_count, 2u);
  EXPECT_EQ(std::get<std::int64_t>(*attr(s, "a")), 10);
  EXPECT_EQ(std::get<std::string>(*attr(s, "b")), "abcd");
  ASSERT_EQ(s.events.size(), 1u);
  EXPECT_EQ(s.dropped_events_count, 1u);
  EXPECT_EQ(s.events[0].attributes.size(), 1u);
  EXPECT_EQ(s.events[0].dropped_attributes_count, 1u);
  ASSERT_EQ(s.links.size(), 1u);
  EXPECT_EQ(s.dropped_links_count, 1u);
  EXPECT_EQ(s.links[0].context.span_id, target.span_id);
  EXPECT_EQ(std::get<std::string>(s.links[0].attributes[0].value), "late");  // length limit
}

TEST_F(Tracing, LengthLimitCutsAtACharacterBoundary) {
  env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "3");
  start("all");
  { auto s = span_cm("utf8", {{"word", "a\xc3\xa9\xc3\xa9"}}); }  // "aéé": 5 bytes
  EXPECT_EQ(std::get<std::string>(*attr(only(spans(), "utf8"), "word")), "a\xc3\xa9");
}

TEST_F(Tracing, BadLimitVariablesAreSetupErrors) {
  env_.set("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "lots");
  try {
    start("all");
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT: 'lots'"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(Tracing, StatusKindEventsAndLinks) {
  SpanContext invalid;
  {
    auto s = span_cm("status");
    s.set_status(StatusCode::kError, "first");
    s.set_status(StatusCode::kUnset);  // never replaces
    s.set_kind(SpanKind::kClient);
    s.add_link(invalid);  // ignored
    s.add_event("checkpoint_written", {{"bytes", 1024}});
  }
  {
    auto s = span_cm("ok_final");
    s.set_status(StatusCode::kOk, "ignored description");
    s.set_status(StatusCode::kError, "too late");
  }
  auto all = spans();
  auto st = only(all, "status");
  EXPECT_EQ(st.status_code, StatusCode::kError);
  EXPECT_EQ(st.status_message, "first");
  EXPECT_EQ(st.kind, SpanKind::kClient);
  EXPECT_TRUE(st.links.empty());
  EXPECT_EQ(st.dropped_links_count, 0u);
  ASSERT_EQ(st.events.size(), 1u);
  EXPECT_EQ(st.events[0].name, "checkpoint_written");
  EXPECT_GE(st.events[0].time_unix_nano, st.start_time_unix_nano);
  EXPECT_LE(st.events[0].time_unix_nano, st.end_time_unix_nano);
  auto ok = only(all, "ok_final");
  EXPECT_EQ(ok.status_code, StatusCode::kOk);
  EXPECT_EQ(ok.status_message, "");
}

TEST_F(Tracing, EventAttributesKnownAtRunTimeAndExceptionsByName) {
  {
    auto s = span_cm("runtime");
    std::vector<std::string> keys = {"bytes", "file"};
    const std::vector<Attribute> attributes = {{keys[0], 4096}, {keys[1], "ckpt-7.pt"}};
    s.add_event("written", std::span<const Attribute>(attributes));
    s.record_exception("ValueError", "loss is NaN");
  }
  const SpanData s = only(spans(), "runtime");
  ASSERT_EQ(s.events.size(), 2u);
  EXPECT_EQ(s.events[0].name, "written");
  ASSERT_EQ(s.events[0].attributes.size(), 2u);
  EXPECT_EQ(std::get<std::int64_t>(s.events[0].attributes[0].value), 4096);
  EXPECT_EQ(std::get<std::string>(s.events[0].attributes[1].value), "ckpt-7.pt");
  EXPECT_EQ(s.events[1].name, "exception");
  EXPECT_EQ(std::get<std::string>(*[&] {
              for (const auto& kv : s.events[1].attributes) {
                if (kv.key == "exception.type") return &kv.value;
              }
              return static_cast<const AttributeValue*>(nullptr);
            }()),
            "ValueError");
  EXPECT_EQ(s.status_code, StatusCode::kError);
  EXPECT_EQ(s.status_message, "loss is NaN");
}

TEST_F(Tracing, AnAttachedContextParentsTheThreadsSpansAndIsNeverExported) {
  const SpanContext remote = w3c_example_context();
  EXPECT_FALSE(attach_context(SpanContext{}));  // invalid: an empty handle, no parent
  {
    Span attached = attach_context(remote);
    EXPECT_FALSE(attached);  // records nothing
    EXPECT_EQ(attached.context(), remote);
    EXPECT_EQ(current_span_context(), remote);
    { auto child = span_cm("child"); }
    std::thread([] { auto other = span_cm("other thread"); }).join();
  }
  { auto after = span_cm("after"); }
  const auto all = spans();
  ASSERT_EQ(all.size(), 3u);  // the attached context itself is not exported
  const SpanData child = only(all, "child");
  EXPECT_EQ(child.context.trace_id, remote.trace_id);
  EXPECT_EQ(child.parent_span_id, remote.span_id);
  EXPECT_TRUE(child.parent_is_remote);
  EXPECT_NE(only(all, "other thread").context.trace_id, remote.trace_id);  // this thread's only
  EXPECT_FALSE(only(all, "after").parent_span_id.is_valid());
  const TelemetryStats st = handle_.stats();
  EXPECT_EQ(st.spans_started, 3u);  // nor counted
  EXPECT_EQ(st.spans_ended, 3u);
}

// Fills this thread's record cache as in steady state, so that LENS_SPAN's common start (which
// takes only cached records) runs: exported records come back through the free pool, and the
// second flush's batch is exported after the first one's records are back (one exporter thread).
void warm_record_cache(TelemetryHandle& handle) {
  for (int round = 0; round < 2; ++round) {
    for (int i = 0; i < 64; ++i) span_cm("warm_up");
    ASSERT_TRUE(handle.force_flush(std::chrono::seconds(10)));
  }
}

// LENS_SPAN starts its common spans without the general start (try_start_site_record()) and
// leaves the rest to it: both must give the same spans. Roots, children of LENS_SPANs (the first
// before its parent has ids, the next after), of a managed span, of an attached remote context
// with a trace state, and of an unsampled one.
TEST_F(Tracing, LensSpansNestLikeEveryOtherSpan) {
  warm_record_cache(handle_);
  const SpanContext remote = w3c_example_context();
  for (int i = 0; i < 3; ++i) {
    LENS_SPAN(outer, SpanGroup::STEP, "outer", {"i", i}, {"phase", "train"});
    for (int j = 0; j < 3; ++j) {
      LENS_SPAN(inner, SpanGroup::STEP, "inner", {"j", j});
    }
  }
  {
    auto managed = managed_span("step", "managed");
    for (int j = 0; j < 2; ++j) {
      LENS_SPAN(under_managed, SpanGroup::STEP, "under_managed");
    }
  }
  {
    SpanContext with_state = remote;
    with_state.trace_state = "rojo=00f067aa0ba902b7";
    Span attached = attach_context(with_state);
    for (int j = 0; j < 2; ++j) {
      LENS_SPAN(under_remote, SpanGroup::STEP, "under_remote", {"j", j});
    }
  }
  {
    SpanContext unsampled = remote;
    unsampled.trace_flags = 0;
    Span attached = attach_context(unsampled);
    LENS_SPAN(sampled_out, SpanGroup::STEP, "sampled_out", {"j", 0});
    EXPECT_FALSE(sampled_out);
    EXPECT_EQ(sampled_out.context().trace_id, remote.trace_id);
    EXPECT_FALSE(sampled_out.context().is_sampled());
  }
  const auto all = spans();
  std::map<std::string, std::vector<SpanData>> by_name;
  for (const auto& s : all) by_name[s.name].push_back(s);
  ASSERT_EQ(by_name["outer"].size(), 3u);
  ASSERT_EQ(by_name["inner"].size(), 9u);
  ASSERT_EQ(by_name["under_managed"].size(), 2u);
  ASSERT_EQ(by_name["under_remote"].size(), 2u);
  EXPECT_EQ(by_name.count("sampled_out"), 0u);
  std::map<std::string, const SpanData*> outer_of_trace;
  std::set<std::int64_t> is;
  for (const auto& o : by_name["outer"]) {
    EXPECT_FALSE(o.parent_span_id.is_valid());
    EXPECT_TRUE(o.context.is_sampled());
    EXPECT_EQ(o.group, "step");
    EXPECT_EQ(std::get<std::string>(*attr(o, "phase")), "train");
    is.insert(std::get<std::int64_t>(*attr(o, "i")));
    outer_of_trace[o.context.trace_id.to_hex()] = &o;
  }
  EXPECT_EQ(is, (std::set<std::int64_t>{0, 1, 2}));
  ASSERT_EQ(outer_of_trace.size(), 3u) << "each root its own trace";
  std::map<std::string, std::multiset<std::int64_t>> js;
  for (const auto& in : by_name["inner"]) {
    const SpanData* o = outer_of_trace[in.context.trace_id.to_hex()];
    ASSERT_NE(o, nullptr);
    EXPECT_EQ(in.parent_span_id, o->context.span_id);
    EXPECT_FALSE(in.parent_is_remote);
    EXPECT_EQ(in.context.trace_flags, o->context.trace_flags);
    ASSERT_EQ(in.attributes.size(), 1u);
    js[o->context.trace_id.to_hex()].insert(std::get<std::int64_t>(*attr(in, "j")));
  }
  for (const auto& [trace, j] : js) EXPECT_EQ(j, (std::multiset<std::int64_t>{0, 1, 2})) << trace;
  const SpanData managed = only(all, "managed");
  for (const auto& u : by_name["under_managed"]) {
    EXPECT_EQ(u.parent_span_id, managed.context.span_id);
    EXPECT_EQ(u.context.trace_id, managed.context.trace_id);
    EXPECT_TRUE(u.attributes.empty());
  }
  for (const auto& u : by_name["under_remote"]) {
    EXPECT_EQ(u.context.trace_id, remote.trace_id);
    EXPECT_EQ(u.parent_span_id, remote.span_id);
    EXPECT_TRUE(u.parent_is_remote);
    EXPECT_EQ(u.context.trace_state, "rojo=00f067aa0ba902b7");
    EXPECT_EQ(u.context.trace_flags, 0x01) << "the remote parent's flags, not a root's random one";
  }
  std::set<std::string> ids;
  for (const auto& s : all) ids.insert(s.context.span_id.to_hex());
  EXPECT_EQ(ids.size(), all.size());
  const TelemetryStats st = handle_.stats();
  EXPECT_EQ(st.spans_started, 128u + 18u);  // the sampled-out span is started and ended too
  EXPECT_EQ(st.spans_ended, 128u + 18u);
}

// A managed span of a pair this thread started before takes LENS_SPAN's common start (the pair's
// site, found by the names' addresses): roots and children of it export as the general start's
// do, with the attributes set_attribute() gave them.
TEST_F(Tracing, AManagedSpanOfAPairStartedBeforeNestsAndExportsAsTheFirst) {
  warm_record_cache(handle_);
  for (int i = 0; i < 3; ++i) {
    auto root = managed_span("step", "again_root");
    root.set_attribute("iteration", i).set_attribute("stage", "forward");
    for (int j = 0; j < 2; ++j) {
      auto child = managed_span("step", "again_child");
      child.set_attribute("j", 10 * i + j);
    }
  }
  const auto all = spans();
  std::vector<SpanData> roots;
  for (const auto& s : all) {
    if (s.name == "again_root") roots.push_back(s);
  }
  ASSERT_EQ(roots.size(), 3u);
  std::set<std::string> traces;
  for (const auto& root : roots) {
    EXPECT_FALSE(root.parent_span_id.is_valid());
    EXPECT_TRUE(root.context.is_sampled());
    EXPECT_EQ(root.group, "step");
    EXPECT_EQ(root.kind, SpanKind::kInternal);
    EXPECT_EQ(root.status_code, StatusCode::kUnset);
    EXPECT_LE(root.start_time_unix_nano, root.end_time_unix_nano);
    ASSERT_EQ(root.attributes.size(), 2u);
    const std::int64_t i = std::get<std::int64_t>(*attr(root, "iteration"));
    EXPECT_EQ(std::get<std::string>(*attr(root, "stage")), "forward");
    traces.insert(root.context.trace_id.to_hex());
    std::vector<std::int64_t> js;
    for (const auto& s : all) {
      if (s.name != "again_child" || s.parent_span_id != root.context.span_id) continue;
      EXPECT_EQ(s.context.trace_id, root.context.trace_id);
      EXPECT_TRUE(s.context.is_sampled());
      EXPECT_GE(s.start_time_unix_nano, root.start_time_unix_nano);
      EXPECT_LE(s.end_time_unix_nano, root.end_time_unix_nano);
      ASSERT_EQ(s.attributes.size(), 1u);
      js.push_back(std::get<std::int64_t>(*attr(s, "j")));
    }
    std::sort(js.begin(), js.end());
    EXPECT_EQ(js, (std::vector<std::int64_t>{10 * i, 10 * i + 1})) << "children of root " << i;
  }
  EXPECT_EQ(traces.size(), 3u);  // a root's trace is new each time
}

// A free record offers a span every inline slot; under a count limit below that number,
// LENS_SPAN's spans take the general start, which gives the record the room the limit allows.
TEST_F(Tracing, ALensSpanUnderALowCountLimitKeepsToIt) {
  env_.set("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "2");
  start("all");
  warm_record_cache(handle_);
  for (int i = 0; i < 3; ++i) {
    LENS_SPAN(s, SpanGroup::STEP, "low_limit", {"a", i});
    s.set_attribute("b", 2).set_attribute("c", 3).set_attribute("d", 4);
  }
  int seen = 0;
  for (const auto& s : spans()) {
    if (s.name != "low_limit") continue;
    ++seen;
    EXPECT_EQ(s.attributes.size(), 2u);
    EXPECT_EQ(s.dropped_attributes_count, 2u);
    EXPECT_NE(attr(s, "a"), nullptr);
    EXPECT_NE(attr(s, "b"), nullptr);
  }
  EXPECT_EQ(seen, 3);
}

// set_attribute()'s common case copies a short key and a short string with one 16-byte move each:
// keys up to a slot's 21 bytes and strings up to its 16 arrive whole, and a string that the length
// limit cuts is cut as in every other path.
TEST_F(Tracing, SetAttributeKeysAndStringsAtTheSlotSizesArriveWhole) {
  // Keys whose bytes past the 16th differ from their first 16.
  const std::string k16(16, 'k'), k17 = std::string(16, 'l') + "X", k21 = std::string(16, 'm') + "WXYZ!";
  {
    auto s = managed_span("step", "slot_sizes");
    s.set_attribute(k16, "sixteen bytes!!!").set_attribute(k17, 17).set_attribute(k21, "x");
  }
  const auto whole = only(spans(), "slot_sizes");
  env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "4");
  start("all");
  {
    auto s = managed_span("step", "slot_cut");
    s.set_attribute(k21, "abcdefgh").set_attribute("short", "abcd");
  }
  for (const std::string& k : {k16, k17, k21}) ASSERT_NE(attr(whole, k), nullptr) << k;
  EXPECT_EQ(std::get<std::string>(*attr(whole, k16)), "sixteen bytes!!!");
  EXPECT_EQ(std::get<std::int64_t>(*attr(whole, k17)), 17);
  EXPECT_EQ(std::get<std::string>(*attr(whole, k21)), "x");
  const auto cut = only(spans(), "slot_cut");
  EXPECT_EQ(std::get<std::string>(*attr(cut, k21)), "abcd");
  EXPECT_EQ(std::get<std::string>(*attr(cut, "short")), "abcd");
}

// A string attribute of a LENS_SPAN is copied with one 16-byte read when that read stays in the
// string's page; strings that end at a page whose next page is unmapped must arrive whole, and
// the read must not fault.
TEST_F(Tracing, LensSpanStringsEndingAtAnUnmappedPageArriveWhole) {
  const auto page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  void* map = ::mmap(nullptr, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(map, MAP_FAILED);
  char* base = static_cast<char*>(map);
  for (std::size_t i = 0; i < page; ++i) base[i] = static_cast<char>('a' + i % 26);
  ASSERT_EQ(::mprotect(base + page, page, PROT_NONE), 0);
  warm_record_cache(handle_);
  for (int back = 1; back <= 40; ++back) {
    const std::size_t n = std::min<std::size_t>(static_cast<std::size_t>(back), 16);
    const std::string_view value(base + page - back, n);
    LENS_SPAN(s, SpanGroup::STEP, "near_page_end", {"value", value}, {"back", back});
  }
  auto all = spans();
  std::erase_if(all, [](const SpanData& s) { return s.name == "warm_up"; });
  ASSERT_EQ(all.size(), 40u);
  for (const auto& s : all) {
    const auto back = static_cast<std::size_t>(std::get<std::int64_t>(*attr(s, "back")));
    const std::string want(base + page - back, std::min<std::size_t>(back, 16));
    EXPECT_EQ(std::get<std::string>(*attr(s, "value")), want) << back;
  }
  ::munmap(map, 2 * page);
}

TEST_F(Tracing, TheEnvironmentsTraceParentParentsEveryNewTraceAndPassesToChildren) {
  env_.set("TRACEPARENT", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  env_.set("TRACESTATE", "rojo=00f067aa0ba902b7");
  env_.set("BAGGAGE", "user=ann,bad=%zz");
  start("all");
  const Carrier outside = child_environment();
  EXPECT_EQ(outside.at("TRACEPARENT"), "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
  EXPECT_EQ(outside.at("TRACESTATE"), "rojo=00f067aa0ba902b7");
  EXPECT_EQ(outside.at("BAGGAGE"), "user=ann");
  SpanContext job_ctx;
  Carrier inside;
  {
    auto job = span_cm("job");
    job_ctx = job.context();
    inside = child_environment();
    { auto step = managed_span("step", "step"); }
    SpanStartOptions root;
    root.root = true;  // ignores the current span, not the process's parent
    { Span r = start_span("root option", root); }
    std::thread([] { auto t = span_cm("other thread"); }).join();
  }
  EXPECT_EQ(inside.at("TRACEPARENT"),
            "00-4bf92f3577b34da6a3ce929d0e0e4736-" + job_ctx.span_id.to_hex() + "-01");
  EXPECT_EQ(inside.at("BAGGAGE"), "user=ann");
  const auto all = spans();
  const auto remote_span = SpanId::from_hex("00f067aa0ba902b7");
  for (const char* name : {"job", "root option", "other thread"}) {
    const SpanData s = only(all, name);
    EXPECT_EQ(s.context.trace_id.to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736") << name;
    EXPECT_EQ(s.parent_span_id, *remote_span) << name;
    EXPECT_TRUE(s.parent_is_remote) << name;
    EXPECT_EQ(s.context.trace_state, "rojo=00f067aa0ba902b7") << name;
  }
  EXPECT_EQ(only(all, "step").parent_span_id, job_ctx.span_id);
}

TEST_F(Tracing, AnInvalidTraceParentIsIgnoredWithOneWarningNamingIt) {
  env_.set("TRACEPARENT", "00-not-a-traceparent");
  env_.set("BAGGAGE", "=,=");
  testing::internal::CaptureStderr();
  start("all");
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ignoring TRACEPARENT='00-not-a-traceparent'"), std::string::npos) << err;
  EXPECT_NE(err.find("ignoring BAGGAGE='=,='"), std::string::npos) << err;
  { auto s = span_cm("fresh"); }
  EXPECT_FALSE(only(spans(), "fresh").parent_span_id.is_valid());
  EXPECT_TRUE(child_environment().empty());
}

TEST_F(Tracing, StartSpanWithExplicitParentRootKindAndLink) {
  const SpanContext remote = w3c_example_context();
  auto local = span_cm("local");
  SpanStartOptions o;
  o.parent = &remote;
  o.kind = SpanKind::kServer;
  o.link = &remote;
  auto child = start_span("from_remote", o);
  SpanStartOptions r;
  r.root = true;
  auto root = start_span("fresh_root", r);
  root.end();
  child.end();
  local.end();
  auto all = spans();
  auto c = only(all, "from_remote");
  EXPECT_EQ(c.context.trace_id, remote.trace_id);
  EXPECT_EQ(c.parent_span_id, remote.span_id);
  EXPECT_TRUE(c.parent_is_remote);
  EXPECT_EQ(c.kind, SpanKind::kServer);
  ASSERT_EQ(c.links.size(), 1u);
  auto fr = only(all, "fresh_root");
  EXPECT_FALSE(fr.parent_span_id.is_valid());
  EXPECT_NE(fr.context.trace_id, only(all, "local").context.trace_id);
}

// SpanStartOptions::current = false (OpenTelemetry's tracer.start_span): spans started meanwhile
// take the thread's current span as parent, not it; shutdown still ends it as truncated.
TEST_F(Tracing, ASpanStartedNotCurrentIsNobodysParentAndStillOpen) {
  auto outer = span_cm("outer");
  SpanStartOptions o;
  o.current = false;
  Span side = start_span("not current", o);
  EXPECT_EQ(current_span_context().span_id, outer.context().span_id);
  {
    auto child = span_cm("child");  // of outer, not of the side span
    EXPECT_EQ(current_span_context().span_id, child.context().span_id);
  }
  Span open = start_span("never ended", o);
  side.end();
  outer.end();
  EXPECT_FALSE(current_span_context().is_valid());
  ASSERT_TRUE(handle_.shutdown(std::chrono::seconds(10)));
  auto all = memory_->spans();
  EXPECT_EQ(only(all, "child").parent_span_id, only(all, "outer").context.span_id);
  EXPECT_EQ(only(all, "not current").parent_span_id, only(all, "outer").context.span_id);
  EXPECT_TRUE(only(all, "never ended").truncated);
}

TEST_F(Tracing, SamplerAlwaysOffRecordsNothing) {
  env_.set("OTEL_TRACES_SAMPLER", "always_off");
  start("all");
  auto s = span_cm("never");
  EXPECT_FALSE(s);
  s.end();
  EXPECT_TRUE(spans().empty());
}

TEST_F(Tracing, RatioSamplerDecidesAtTheRootAndChildrenFollow) {
  env_.set("OTEL_TRACES_SAMPLER", "parentbased_traceidratio");
  env_.set("OTEL_TRACES_SAMPLER_ARG", "0.5");
  start("all");
  int sampled_roots = 0;
  for (int i = 0; i < 400; ++i) {
    auto root = span_cm("root");
    auto child = span_cm("child");
    EXPECT_EQ(static_cast<bool>(child), static_cast<bool>(root));
    EXPECT_EQ(child.context().trace_id, root.context().trace_id);
    EXPECT_EQ(child.context().is_sampled(), root.context().is_sampled());
    // The decision was made from the trace id the span carries: its low 64 bits below half.
    EXPECT_EQ(static_cast<bool>(root), root.context().trace_id.bytes[8] < 0x80);
    if (root) ++sampled_roots;
  }
  EXPECT_GT(sampled_roots, 120);  // binomial(400, 0.5): outside [120, 280] has p < 1e-15
  EXPECT_LT(sampled_roots, 280);
  EXPECT_EQ(spans().size(), static_cast<std::size_t>(2 * sampled_roots));
}

TEST_F(Tracing, ParentBasedFollowsAnUnsampledRemoteParent) {
  SpanContext remote = w3c_example_context();
  remote.trace_flags = 0;  // not sampled
  SpanStartOptions o;
  o.parent = &remote;
  auto s = start_span("unsampled_child", o);
  EXPECT_FALSE(s);
  EXPECT_TRUE(s.context().is_valid()) << "a sampled-out span still carries its context";
  EXPECT_FALSE(s.context().is_sampled());
  EXPECT_EQ(current_span_context(), s.context());
  s.end();
  EXPECT_TRUE(spans().empty());
}

TEST_F(Tracing, BadSamplerIsASetupError) {
  env_.set("OTEL_TRACES_SAMPLER", "jaeger_remote");
  EXPECT_THROW(start("all"), ConfigError);
  env_.set("OTEL_TRACES_SAMPLER", "traceidratio");
  env_.set("OTEL_TRACES_SAMPLER_ARG", "1.5");
  EXPECT_THROW(start("all"), ConfigError);
}

TEST_F(Tracing, RankAwareSamplerKeepsAllOrNothing) {
  // md5("0") mod 10000 = 7850: rank 0 is kept at 0.79 and not at 0.78.
  NemoLensConfig c;
  c.enabled = true;
  c.export_strategy = "all_ranks";
  c.span_groups = "all";
  c.sampler_enabled = true;
  c.export_sample_rate = 0.78;
  SetupOptions o;
  o.exporter = memory_;
  o.allow_reinit = true;
  handle_ = setup_telemetry(c, 0, 4, o);
  EXPECT_TRUE(handle_.is_exporting());
  EXPECT_FALSE(span_cm("dropped"));
  EXPECT_TRUE(spans().empty());
  c.export_sample_rate = 0.79;
  handle_ = setup_telemetry(c, 0, 4, o);
  EXPECT_TRUE(span_cm("kept"));
  EXPECT_EQ(spans().size(), 1u);
}

TEST_F(Tracing, ShutdownTruncatesOpenSpansInnermostFirstWithoutDuplicates) {
  Span outer = span_cm("open_outer");
  { auto done = span_cm("closed"); }
  Span inner = managed_span("step", "open_inner");  // no child: nothing makes its ids before
  ASSERT_TRUE(handle_.shutdown(std::chrono::seconds(10)));
  const SpanContext inner_after = inner.context();  // still open here, and still the same span
  inner.end();  // already exported as truncated: not exported again
  outer.end();
  auto all = memory_->spans();
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].name, "closed");
  EXPECT_EQ(all[1].name, "open_inner");
  EXPECT_EQ(all[2].name, "open_outer");
  // Nothing read open_inner's ids before shutdown copied it: the copy has them, and its parent's.
  EXPECT_TRUE(all[1].context.is_valid());
  EXPECT_EQ(all[1].context.span_id, inner_after.span_id);
  EXPECT_EQ(all[1].parent_span_id, all[2].context.span_id);
  EXPECT_EQ(all[1].context.trace_id, all[2].context.trace_id);
  for (int i : {1, 2}) {
    EXPECT_TRUE(all[i].truncated);
    EXPECT_EQ(std::get<bool>(*all[i].attribute("nemo.span.truncated")), true);
    ASSERT_EQ(all[i].events.size(), 1u);
    EXPECT_EQ(all[i].events[0].name, "nemo.span.truncated");
    EXPECT_GT(all[i].end_time_unix_nano, 0);
  }
  EXPECT_FALSE(all[0].truncated);
  EXPECT_EQ(handle_.stats().spans_truncated, 2u);
  EXPECT_FALSE(span_cm("after_shutdown")) << "no pipeline after shutdown";
}

TEST_F(Tracing, StatsCountStartedEndedExported) {
  for (int i = 0; i < 10; ++i) auto s = span_cm("counted");
  auto open = span_cm("still_open");
  ASSERT_TRUE(handle_.force_flush());
  auto st = handle_.stats();
  EXPECT_EQ(st.spans_started, 11u);
  EXPECT_EQ(st.spans_ended, 10u);
  EXPECT_EQ(st.spans_exported, 10u);
  EXPECT_EQ(st.spans_dropped_queue_full, 0u);
  EXPECT_EQ(st.spans_dropped_export_failed, 0u);
  EXPECT_GE(st.export_requests, 1u);
}

TEST_F(Tracing, ResourceCarriesRankAndRun) {
  { auto s = span_cm("r"); }
  spans();
  Resource r = memory_->resource();
  ASSERT_NE(r.attribute("dl.rank"), nullptr);
  EXPECT_EQ(std::get<std::int64_t>(*r.attribute("dl.rank")), 0);
  ASSERT_NE(r.attribute("service.instance.id"), nullptr);
  EXPECT_EQ(std::get<std::string>(*r.attribute("service.instance.id")),
            handle_.config().run_id + "-rank0");
  ASSERT_NE(handle_.resource().attribute("dl.world_size"), nullptr);
}

TEST(Ids, HexRoundTripAndValidity) {
  auto t = TraceId::from_hex("4BF92F3577B34DA6A3CE929D0E0E4736");
  ASSERT_TRUE(t.has_value());
  EXPECT_EQ(t->to_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
  EXPECT_TRUE(t->is_valid());
  EXPECT_FALSE(TraceId{}.is_valid());
  EXPECT_FALSE(TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e473").has_value());
  EXPECT_FALSE(TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e473g").has_value());
  auto s = SpanId::from_hex("00f067aa0ba902b7");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->to_hex(), "00f067aa0ba902b7");
  EXPECT_FALSE(SpanId{}.is_valid());
}

}  // namespace
}  // namespace nemo::lens
