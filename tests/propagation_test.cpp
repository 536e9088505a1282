#include "nemo/lens/propagation.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tracing_fixture.hpp"

namespace nemo::lens {
namespace {

using Tracing = lens_test::Tracing;

// The W3C Trace Context examples.
constexpr std::string_view kTraceHex = "4bf92f3577b34da6a3ce929d0e0e4736";
constexpr std::string_view kSpanHex = "00f067aa0ba902b7";
constexpr std::string_view kSampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
constexpr std::string_view kNotSampled = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00";

// The traceparent of the test suite of the specification, with a version and flags.
std::string traceparent(std::string_view version, std::string_view flags = "01") {
  return std::string(version) + "-12345678901234567890123456789012-1234567890123456-" +
         std::string(flags);
}

SpanContext from_traceparent(std::string_view value) {
  return extract_context({{"traceparent", std::string(value)}}).context;
}

// The trace state the context keeps for `tracestate` next to a valid traceparent.
std::string from_tracestate(std::string_view value) {
  const auto in =
      extract_context({{"traceparent", std::string(kSampled)}, {"tracestate", std::string(value)}});
  EXPECT_TRUE(in.context.is_valid());
  return in.context.trace_state;
}

Baggage from_baggage(std::string_view value) {
  return extract_context({{"baggage", std::string(value)}}).baggage;
}

// Whether `part` is `whole` with some elements left out.
bool is_subsequence(const Baggage& part, const Baggage& whole) {
  auto it = whole.begin();
  for (const auto& e : part) {
    it = std::find(it, whole.end(), e);
    if (it == whole.end()) return false;
    ++it;
  }
  return true;
}

SpanContext example_context(std::string trace_state = {}) {
  SpanContext ctx = from_traceparent(kSampled);
  ctx.trace_state = std::move(trace_state);
  return ctx;
}

// "k0=v0,k1=v1,...": `n` list members.
std::string members(int n) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i > 0) out += ',';
    out += "k" + std::to_string(i) + "=v" + std::to_string(i);
  }
  return out;
}

// ---- traceparent ----

TEST(TraceParent, SpecificationExamples) {
  const auto sampled = extract_context({{"traceparent", std::string(kSampled)}});
  ASSERT_TRUE(sampled.context.is_valid());
  EXPECT_EQ(sampled.context.trace_id.to_hex(), kTraceHex);
  EXPECT_EQ(sampled.context.span_id.to_hex(), kSpanHex);
  EXPECT_TRUE(sampled.context.is_sampled());
  EXPECT_EQ(sampled.context.trace_flags, 0x01);
  EXPECT_TRUE(sampled.context.is_remote);
  EXPECT_EQ(sampled.context.trace_state, "");
  EXPECT_TRUE(sampled.baggage.empty());

  const SpanContext not_sampled = from_traceparent(kNotSampled);
  ASSERT_TRUE(not_sampled.is_valid());
  EXPECT_FALSE(not_sampled.is_sampled());
  EXPECT_EQ(not_sampled.trace_flags, 0x00);
}

TEST(TraceParent, TheFlagsLevel2DefinesAreKeptSampledAndRandom) {
  EXPECT_EQ(from_traceparent(traceparent("00", "ff")).trace_flags, 0x03);
  EXPECT_EQ(from_traceparent(traceparent("00", "fe")).trace_flags, 0x02);
  EXPECT_EQ(from_traceparent(traceparent("00", "09")).trace_flags, 0x01);
  EXPECT_EQ(from_traceparent(traceparent("00", "02")).trace_flags, 0x02);
  EXPECT_EQ(from_traceparent(traceparent("00", "03")).trace_flags, 0x03);
  for (std::string flags : {"00", "01", "02", "03"}) {  // re-injected unchanged
    Carrier out;
    inject_context(from_traceparent(traceparent("00", flags)), out);
    EXPECT_EQ(out["traceparent"], traceparent("00", flags));
  }
  Carrier out;
  inject_context(from_traceparent(traceparent("00", "fd")), out);  // undefined bits dropped
  EXPECT_EQ(out["traceparent"], traceparent("00", "01"));
  const SpanContext random = from_traceparent(traceparent("00", "03"));
  EXPECT_EQ(deserialize_context(serialize_context(random)).trace_flags, 0x03);
}

// A root's trace id is random, so it has W3C Level 2's random flag (0x02), as OpenTelemetry's SDKs
// set it; a child has its parent's, whatever the parent says.
TEST_F(Tracing, ChildrenOfARandomTraceIdKeepTheRandomFlag) {
  const SpanContext remote = from_traceparent(traceparent("00", "03"));
  SpanStartOptions options;
  options.parent = &remote;
  {
    Span child = start_span("child", options);
    Span grandchild = span_cm("grandchild");
    EXPECT_EQ(child.context().trace_flags, 0x03);
    EXPECT_EQ(grandchild.context().trace_flags, 0x03);
  }
  {
    auto root = span_cm("own root");
    Span child = span_cm("child of own root");
    EXPECT_EQ(root.context().trace_flags, 0x03);
    EXPECT_EQ(child.context().trace_flags, 0x03);
  }
  const SpanContext not_random = from_traceparent(traceparent("00", "01"));
  options.parent = &not_random;
  Span child = start_span("child of a non-random id", options);
  EXPECT_EQ(child.context().trace_flags, 0x01);
}

TEST(TraceParent, MalformedValuesGiveAnInvalidContext) {
  const std::string ok = traceparent("00");
  const std::vector<std::string> bad = {
      "",
      " ",
      "00",
      "00-",
      ok.substr(0, ok.size() - 1),                               // flags too short
      ok + "0",                                                  // flags too long
      ok + ".",                                                  // trailing character
      ok + "-",                                                  // version 00 has no more fields
      ok + "-what-the-future-will-be-like",                      // ... not even valid ones
      "00-12345678901234567890123456789012-1234567890123456-1",  // flags of one digit
      "00-12345678901234567890123456789012-1234567890123456-001",
      "000-12345678901234567890123456789012-1234567890123456-01",  // version too long
      "0000-12345678901234567890123456789012-1234567890123456-01",
      "0-12345678901234567890123456789012-1234567890123456-01",   // version too short
      ".0-12345678901234567890123456789012-1234567890123456-01",  // illegal characters
      "0.-12345678901234567890123456789012-1234567890123456-01",
      "00-.2345678901234567890123456789012-1234567890123456-01",
      "00-1234567890123456789012345678901.-1234567890123456-01",
      "00-12345678901234567890123456789012-.234567890123456-01",
      "00-12345678901234567890123456789012-123456789012345.-01",
      "00-12345678901234567890123456789012-1234567890123456-.0",
      "00-12345678901234567890123456789012-1234567890123456-0.",
      "00-123456789012345678901234567890123-1234567890123456-01",  // trace id too long
      "00-1234567890123456789012345678901-1234567890123456-01",    // trace id too short
      "00-12345678901234567890123456789012-12345678901234567-01",  // span id too long
      "00-12345678901234567890123456789012-123456789012345-01",    // span id too short
      "00-00000000000000000000000000000000-1234567890123456-01",   // all-zero trace id
      "00-12345678901234567890123456789012-0000000000000000-01",   // all-zero span id
      "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",   // upper-case hex
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00F067AA0BA902B7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0A",
      "0A-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",  // not hex
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902bz-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0x",
      "0x-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
      "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",  // wrong separators
      "00-4bf92f3577b34da6a3ce929d0e0e4736+00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7+01",
      "004bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",  // a separator moved
      "00--4bf92f3577b34da6a3ce929d0e0e473600f067aa0ba902b7-01",
      "00- 4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",  // whitespace inside
      "00-4bf92f3577b34da6a3ce929d0e0e4736 -00f067aa0ba902b7-01",
      "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-\t01",
      std::string(kSampled) + "\n",  // only spaces and tabs surround a value
      "\n" + std::string(kSampled),
      [] {
        std::string s(kSampled);
        s[20] = '\0';
        return s;
      }(),
      "ff-12345678901234567890123456789012-1234567890123456-01",  // version ff is forbidden
      "ff-12345678901234567890123456789012-1234567890123456-01-future",
  };
  for (const auto& value : bad) {
    const SpanContext ctx = from_traceparent(value);
    EXPECT_FALSE(ctx.is_valid()) << "'" << value << "'";
    EXPECT_EQ(ctx, SpanContext{}) << "'" << value << "'";
  }
}

TEST(TraceParent, SurroundingSpacesAndTabsAreIgnored) {
  for (const char* pad : {" ", "\t", "\t ", "  \t  "}) {
    for (const std::string& value : {pad + std::string(kSampled), std::string(kSampled) + pad,
                                     pad + std::string(kSampled) + pad}) {
      const SpanContext ctx = from_traceparent(value);
      ASSERT_TRUE(ctx.is_valid()) << "'" << value << "'";
      EXPECT_EQ(ctx.trace_id.to_hex(), kTraceHex);
    }
  }
}

TEST(TraceParent, HigherVersionsAreReadThroughTheirFirstFourFields) {
  for (const std::string& value :
       {traceparent("cc"), traceparent("cc") + "-what-the-future-will-be-like", traceparent("01"),
        traceparent("01") + "-", traceparent("fe", "00") + "-0123-extra",
        traceparent("cc", "03")}) {
    const SpanContext ctx = from_traceparent(value);
    ASSERT_TRUE(ctx.is_valid()) << value;
    EXPECT_EQ(ctx.trace_id.to_hex(), "12345678901234567890123456789012");
    EXPECT_EQ(ctx.span_id.to_hex(), "1234567890123456");
    EXPECT_TRUE(ctx.is_remote);
  }
  EXPECT_FALSE(from_traceparent(traceparent("fe", "00")).is_sampled());
  EXPECT_TRUE(from_traceparent(traceparent("cc", "03")).is_sampled());
  const std::vector<std::string> bad = {
      traceparent("cc") + ".what-the-future-will-be-like",
      traceparent("cc") + "0",
      traceparent("cc").substr(0, 54),
      "cc-12345678901234567890123456789012-1234567890123456-",
      "cc-12345678901234567890123456789012-1234567890123456-0-future",
      "cc-1234567890123456789012345678901A-1234567890123456-01-future",
      "cc-12345678901234567890123456789012.1234567890123456-01-future",
      "cc-00000000000000000000000000000000-1234567890123456-01-future",
      "cc-12345678901234567890123456789012-0000000000000000-01",
      "CC-12345678901234567890123456789012-1234567890123456-01",
  };
  for (const auto& value : bad) {
    EXPECT_FALSE(from_traceparent(value).is_valid()) << value;
  }
}

TEST(TraceParent, HeaderNamesInAnyCase) {
  for (const char* name : {"TraceParent", "TRACEPARENT", "TrAcEpArEnT"}) {
    const auto in = extract_context({{name, std::string(kSampled)}, {"TraceState", "foo=1"}});
    EXPECT_TRUE(in.context.is_valid()) << name;
    EXPECT_EQ(in.context.trace_state, "foo=1") << name;
  }
  for (const char* name : {"trace-parent", "trace.parent", "traceparent "}) {
    EXPECT_FALSE(extract_context({{name, std::string(kSampled)}}).context.is_valid()) << name;
  }
  // The lower-case spelling wins over another one.
  const auto in =
      extract_context({{"TRACEPARENT", traceparent("00")}, {"traceparent", std::string(kSampled)}});
  EXPECT_EQ(in.context.trace_id.to_hex(), kTraceHex);
}

// ---- tracestate ----

TEST(TraceState, ValidListsAreKeptNormalised) {
  EXPECT_EQ(from_tracestate("congo=t61rcWkgMzE"), "congo=t61rcWkgMzE");
  EXPECT_EQ(from_tracestate("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"),
            "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE");
  EXPECT_EQ(from_tracestate("foo=1 \t , \t bar=2, \t baz=3"), "foo=1,bar=2,baz=3");
  EXPECT_EQ(from_tracestate("foo=1\t \t,\t \tbar=2,\t \tbaz=3"), "foo=1,bar=2,baz=3");
  for (const char* ows : {" foo=1", "\tfoo=1", "foo=1 ", "foo=1\t", "\t foo=1 \t"}) {
    EXPECT_EQ(from_tracestate(ows), "foo=1") << "'" << ows << "'";
  }
  // Empty and whitespace-only members, e.g. from joined empty headers.
  EXPECT_EQ(from_tracestate(""), "");
  EXPECT_EQ(from_tracestate(" , ,\t"), "");
  EXPECT_EQ(from_tracestate(",foo=1,,  ,bar=2,"), "foo=1,bar=2");
  // A value keeps its inner and leading spaces.
  EXPECT_EQ(from_tracestate("foo=a b,bar= x"), "foo=a b,bar= x");
}

TEST(TraceState, KeyGrammar) {
  const std::string simple = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
  const std::string value = [] {
    std::string v;
    for (char c = 0x20; c <= 0x7E; ++c) {
      if (c != ',' && c != '=') v += c;
    }
    return v;
  }();
  EXPECT_EQ(from_tracestate(simple + "=" + value), simple + "=" + value);
  EXPECT_EQ(from_tracestate(simple + "@a-z0-9_-*/=" + value), simple + "@a-z0-9_-*/=" + value);
  // Level 2: a key starts with a lower-case letter or a digit, and '@' is a key character
  // anywhere after the first (Level 1's tenant@system form is one case of it).
  for (const char* key :
       {"0tenant@system", "1foo", "foo@", "foo@@bar", "foo@bar@baz", "t@1v", "a@*/"}) {
    EXPECT_EQ(from_tracestate(std::string(key) + "=1,bar=2"), std::string(key) + "=1,bar=2");
  }
  const std::string long_key(256, 'z');
  EXPECT_EQ(from_tracestate("foo=1," + long_key + "=1"), "foo=1," + long_key + "=1");
  // The 256 characters are the only length limit, wherever the '@' is.
  for (const std::string& key :
       {std::string(241, 't') + "@" + std::string(14, 'v'), std::string(242, 't') + "@v",
        "t@" + std::string(15, 'v'), "t@" + std::string(254, 'v')}) {
    EXPECT_EQ(from_tracestate("foo=1," + key + "=1"), "foo=1," + key + "=1") << key.size();
  }
}

TEST(TraceState, RepeatedKeysAreKeptAsReceived) {
  EXPECT_EQ(from_tracestate("foo=1,foo=1"), "foo=1,foo=1");
  EXPECT_EQ(from_tracestate("foo=1, bar=2 ,foo=3"), "foo=1,bar=2,foo=3");
}

TEST(TraceState, ListsLongerThan512CharactersAreCutByWholeMembers) {
  // 5 members of 100 characters and 1 of 200: 701 characters. The long member goes first, then
  // members from the end, until 512 remain.
  auto member = [](char key, std::size_t size) {
    return std::string(1, key) + "=" + std::string(size - 2, 'v');
  };
  const std::string a = member('a', 100), b = member('b', 100), c = member('c', 100),
                    d = member('d', 100), e = member('e', 100), l = member('l', 200);
  EXPECT_EQ(from_tracestate(a + "," + l + "," + b + "," + c + "," + d + "," + e),
            a + "," + b + "," + c + "," + d + "," + e);
  const std::string f = member('f', 100);
  EXPECT_EQ(from_tracestate(a + "," + b + "," + c + "," + d + "," + e + "," + f),
            a + "," + b + "," + c + "," + d + "," + e)
      << "605 characters: the last member goes";
  // Exactly 512 characters stay whole.
  const std::string exact = a + "," + b + "," + c + "," + d + "," + member('g', 108);
  ASSERT_EQ(exact.size(), 512u);
  EXPECT_EQ(from_tracestate(exact), exact);
}

TEST(TraceState, AnInvalidListIsDroppedAndTheTraceParentKept) {
  const std::vector<std::string> bad = {
      "foo =1",  // key grammar
      "FOO=1",
      "foo.bar=1",
      "_foo=1",
      "-foo=1,bar=2",
      "@foo=1,bar=2",
      "bar=2,@foo=1",
      "_t@v=1",
      "foo=1,fOo=2",
      "foo=1," + std::string(257, 'z') + "=1",
      "foo=1,t@" + std::string(255, 'v') + "=1",
      "foo=bar=baz",  // value grammar
      "foo=,bar=3",
      "foo=1;bar=2",
      "foo=a\tb",
      "foo=caf\xC3\xA9",
      "foo=a\x7F",
      "foo=" + std::string(257, 'v'),
      "foo",  // not a key=value pair
      "=1",
      "foo:1",
      members(33),  // more than 32 members
  };
  for (const auto& value : bad) {
    const auto in =
        extract_context({{"traceparent", std::string(kSampled)}, {"tracestate", value}});
    EXPECT_TRUE(in.context.is_valid()) << value;
    EXPECT_EQ(in.context.trace_state, "") << value;
  }
  EXPECT_EQ(from_tracestate("foo=" + std::string(256, 'v')), "foo=" + std::string(256, 'v'));
  EXPECT_EQ(from_tracestate(members(32)), members(32));
  EXPECT_EQ(from_tracestate(members(32) + ",,"), members(32)) << "empty members do not count";
}

TEST(TraceState, ReadOnlyWithAValidTraceParent) {
  for (const Carrier& carrier :
       {Carrier{{"tracestate", "foo=1"}},
        Carrier{{"traceparent", "00-00000000000000000000000000000000-1234567890123456-01"},
                {"tracestate", "foo=1"}}}) {
    const auto in = extract_context(carrier);
    EXPECT_FALSE(in.context.is_valid());
    EXPECT_EQ(in.context.trace_state, "");
  }
}

// ---- inject ----

TEST(Inject, WritesTraceParentAndTraceState) {
  Carrier carrier{{"other", "kept"}};
  inject_context(example_context("rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"), carrier);
  EXPECT_EQ(carrier, (Carrier{{"other", "kept"},
                              {"traceparent", std::string(kSampled)},
                              {"tracestate", "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE"}}));
  // Without a trace state a stale one is removed.
  SpanContext unsampled = from_traceparent(kNotSampled);
  inject_context(unsampled, carrier);
  EXPECT_EQ(carrier, (Carrier{{"other", "kept"}, {"traceparent", std::string(kNotSampled)}}));
}

TEST(Inject, OnlyTheDefinedFlagsAndVersion00AreWritten) {
  SpanContext ctx = example_context();
  ctx.trace_flags = 0xfd;
  Carrier carrier;
  inject_context(ctx, carrier);
  EXPECT_EQ(carrier.at("traceparent"), kSampled);
  ctx.trace_flags = 0xfc;
  inject_context(ctx, carrier);
  EXPECT_EQ(carrier.at("traceparent"), kNotSampled);
  ctx.trace_flags = 0xff;  // sampled and random
  inject_context(ctx, carrier);
  EXPECT_EQ(carrier.at("traceparent"), std::string(kSampled.substr(0, 53)) + "03");
  inject_context(from_traceparent(traceparent("cc") + "-future"), carrier);
  EXPECT_EQ(carrier.at("traceparent"), traceparent("00"));
}

TEST(Inject, AnInvalidContextWritesNoTraceHeaders) {
  Carrier carrier{{"traceparent", "untouched"}, {"tracestate", "untouched"}};
  inject_context(SpanContext{}, carrier);
  SpanContext half = example_context();
  half.span_id = SpanId{};
  inject_context(half, carrier);
  EXPECT_EQ(carrier, (Carrier{{"traceparent", "untouched"}, {"tracestate", "untouched"}}));
  // Baggage does not depend on the trace context.
  inject_context(SpanContext{}, carrier, {{"k", "v"}});
  EXPECT_EQ(carrier.at("baggage"), "k=v");
  EXPECT_EQ(carrier.at("traceparent"), "untouched");
}

TEST(Inject, WithoutTracingOrACurrentSpanWritesNothing) {
  Carrier carrier;
  inject_context(carrier);
  EXPECT_TRUE(carrier.empty());
  EXPECT_EQ(serialize_context(), "");
}

TEST(Inject, TraceStateKeepsValidMembersAndAtMost32) {
  Carrier carrier;
  inject_context(example_context("a=1,BAD=2,b=3,a=4,c"), carrier);
  EXPECT_EQ(carrier.at("tracestate"), "a=1,b=3,a=4") << "bad members dropped, repeats kept";
  inject_context(example_context(members(40)), carrier);
  EXPECT_EQ(carrier.at("tracestate"), members(32)) << "cut from the end";
  // Members longer than 128 characters go first, then members from the end.
  const std::string long1 = "long1=" + std::string(130, 'x');
  const std::string long2 = "long2=" + std::string(200, 'y');
  inject_context(example_context(long1 + "," + members(31) + "," + long2 + ",last=1"), carrier);
  EXPECT_EQ(carrier.at("tracestate"), members(31) + ",last=1");
  inject_context(example_context(long1 + "," + members(32)), carrier);
  EXPECT_EQ(carrier.at("tracestate"), members(32));
  inject_context(example_context(long1 + "," + members(30)), carrier);
  EXPECT_EQ(carrier.at("tracestate"), long1 + "," + members(30)) << "nothing to cut";
  inject_context(example_context("BAD"), carrier);
  EXPECT_EQ(carrier.count("tracestate"), 0u);
  // At most 512 characters: six members of 100 characters are cut to five.
  std::string six;
  for (char k = 'a'; k < 'g'; ++k)
    six += std::string(six.empty() ? "" : ",") + k + "=" + std::string(98, 'v');
  inject_context(example_context(six), carrier);
  EXPECT_EQ(carrier.at("tracestate"), six.substr(0, 5 * 101 - 1));
}

TEST(Inject, RoundTripGivesIdenticalHeaders) {
  const SpanContext ctx = example_context(" rojo=00f067aa0ba902b7 ,congo=t61rcWkgMzE,, x@y=a b");
  const Baggage baggage = {{"userId", "alice"},
                           {"serverNode", "DF 28"},
                           {"isProduction", "false"},
                           {"note", "50% off, \"quoted\"; back\\slash = é ✓"},
                           {"userId", "bob"}};
  Carrier first;
  inject_context(ctx, first, baggage);
  const ExtractedContext in = extract_context(first);
  Carrier second;
  inject_context(in.context, second, in.baggage);
  EXPECT_EQ(first, second);
  EXPECT_EQ(in.baggage, baggage);
  EXPECT_EQ(in.context.trace_id, ctx.trace_id);
  EXPECT_EQ(in.context.span_id, ctx.span_id);
  EXPECT_EQ(in.context.trace_flags, ctx.trace_flags);
  EXPECT_EQ(in.context.trace_state, "rojo=00f067aa0ba902b7,congo=t61rcWkgMzE,x@y=a b");
  EXPECT_TRUE(in.context.is_remote);
}

// Found by fuzz_extract_context. Minimal input: a version-cc traceparent and the tracestate "k=v"
// under mixed-case header names, and the extracted context written back without its trace state.
// A context written over received headers must replace them whatever the case of their names:
// extraction reads any case, so a stale "TraceState" came back with the new context, and a
// transport would send a stale "TraceParent" next to the new "traceparent" (two traceparent
// headers: invalid).
TEST(Inject, ReplacesReceivedHeadersWhateverTheCaseOfTheirNames) {
  Carrier carrier{{"TraceParent", traceparent("cc", "09")}, {"TraceState", "k=v"}};
  const SpanContext ctx = example_context();  // no trace state
  inject_context(ctx, carrier);
  const ExtractedContext in = extract_context(carrier);
  EXPECT_EQ(in.context.trace_id, ctx.trace_id);
  EXPECT_EQ(in.context.span_id, ctx.span_id);
  EXPECT_EQ(in.context.trace_state, "") << "the stale TraceState was read back";
  EXPECT_EQ(carrier, (Carrier{{"traceparent", std::string(kSampled)}}));
}

// ---- baggage ----

TEST(Baggage, SpecificationExamples) {
  EXPECT_EQ(from_baggage("key1=value1;property1;property2, key2 = value2, key3=value3; "
                         "propertyKey=propertyValue"),
            (Baggage{{"key1", "value1"}, {"key2", "value2"}, {"key3", "value3"}}));
  EXPECT_EQ(from_baggage("userId=alice,serverNode=DF%2028,isProduction=false"),
            (Baggage{{"userId", "alice"}, {"serverNode", "DF 28"}, {"isProduction", "false"}}));
  EXPECT_EQ(from_baggage("userId =   alice, serverNode = DF%2028, isProduction = false"),
            (Baggage{{"userId", "alice"}, {"serverNode", "DF 28"}, {"isProduction", "false"}}));
}

TEST(Baggage, ValuesArePercentDecoded) {
  EXPECT_EQ(from_baggage("k=a=b==c"), (Baggage{{"k", "a=b==c"}})) << "'=' is a value character";
  EXPECT_EQ(from_baggage("k=caf%C3%A9,l=caf%c3%a9"), (Baggage{{"k", "café"}, {"l", "café"}}));
  EXPECT_EQ(from_baggage("k=100%25,l=%2C%3B%22%5C%20"), (Baggage{{"k", "100%"}, {"l", ",;\"\\ "}}));
  EXPECT_EQ(from_baggage("k=,l="), (Baggage{{"k", ""}, {"l", ""}}));
  EXPECT_EQ(from_baggage("k=1,k=2"), (Baggage{{"k", "1"}, {"k", "2"}})) << "order kept";
  EXPECT_EQ(from_baggage("!#$%25&'*+-.^_`|~09azAZ=v"), (Baggage{{"!#$%&'*+-.^_`|~09azAZ", "v"}}))
      << "every token character, '%' escaped";
  EXPECT_EQ(from_baggage(",, k=v ,\t,"), (Baggage{{"k", "v"}}));
  EXPECT_EQ(extract_context({{"Baggage", "k=v"}}).baggage, (Baggage{{"k", "v"}}));
}

TEST(Baggage, InvalidUtf8BecomesTheReplacementCharacter) {
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(from_baggage("k=%FF"), (Baggage{{"k", fffd}}));
  EXPECT_EQ(from_baggage("k=a%C3"), (Baggage{{"k", "a" + fffd}}));
  EXPECT_EQ(from_baggage("k=%E2%82x"), (Baggage{{"k", fffd + "x"}})) << "one for a cut sequence";
  EXPECT_EQ(from_baggage("k=%C0%AF"), (Baggage{{"k", fffd + fffd}})) << "overlong";
  EXPECT_EQ(from_baggage("k=%ED%A0%80"), (Baggage{{"k", fffd + fffd + fffd}})) << "surrogate";
  EXPECT_EQ(from_baggage("k=%F4%90%80%80"), (Baggage{{"k", fffd + fffd + fffd + fffd}}));
  EXPECT_EQ(from_baggage("k=%F0%9F%98%80%E2%9C%93"), (Baggage{{"k", "\xF0\x9F\x98\x80✓"}}));
}

TEST(Baggage, KeysArePercentDecoded) {
  EXPECT_EQ(from_baggage("user%20id=1,caf%C3%A9=2,%41=3"),
            (Baggage{{"user id", "1"}, {"café", "2"}, {"A", "3"}}));
  EXPECT_EQ(from_baggage("100%25=x"), (Baggage{{"100%", "x"}}));
}

// The grammar allows only tokens as keys and baggage-octets in values; the specification leaves
// what to do with other characters open, and lens keeps them, as the JS propagator does.
TEST(Baggage, CharactersOutsideTheGrammarAreKept) {
  EXPECT_EQ(from_baggage("k(1)=v,(x)=y"), (Baggage{{"k(1)", "v"}, {"(x)", "y"}}));
  EXPECT_EQ(from_baggage("k y=a b,k\"=a\"b,k=a\\b,t=a\tb"),
            (Baggage{{"k y", "a b"}, {"k\"", "a\"b"}, {"k", "a\\b"}, {"t", "a\tb"}}));
  EXPECT_EQ(from_baggage("k=caf\xC3\xA9,k\xC3\xA9=v"), (Baggage{{"k", "café"}, {"ké", "v"}}));
  const std::string fffd = "\xEF\xBF\xBD";
  EXPECT_EQ(from_baggage("k=a\xFF"
                         "b"),
            (Baggage{{"k", "a" + fffd + "b"}}))
      << "raw bytes too";
}

TEST(Baggage, PropertiesAreIgnoredWhateverTheyHold) {
  for (const char* member : {"k=v;p", "k=v; p ; q = r", "k=v;", "k=v;;p", "k=v;=p", "k=v;p q",
                             "k=v;p=a b", "k=v;p=%zz", "k=v;p=a\\b"}) {
    EXPECT_EQ(from_baggage(std::string("a=1,") + member + ",b=2"),
              (Baggage{{"a", "1"}, {"k", "v"}, {"b", "2"}}))
        << member;
  }
}

TEST(Baggage, MalformedMembersAreSkipped) {
  for (const char* bad : {"novalue", "=v", " =v", "k=%", "k=%4", "k=%zz", "k=%4g", "%zz=v", "%4=v",
                          "%FF=v", "%C3=v", "%00%FF=v", "%=v"}) {
    EXPECT_EQ(from_baggage(std::string("a=1,") + bad + ",b=2"), (Baggage{{"a", "1"}, {"b", "2"}}))
        << bad;
  }
}

// The specification requires a lone member of 8192 bytes to be propagated (the JS propagator
// skips members over 4096 bytes; lens does not).
TEST(Baggage, ALoneMemberOf8192BytesIsReadAndWritten) {
  const std::string value(8190, 'x');
  EXPECT_EQ(from_baggage("a=" + value), (Baggage{{"a", value}}));
  Carrier carrier;
  inject_context(SpanContext{}, carrier, {{"a", value}});
  EXPECT_EQ(carrier.at("baggage"), "a=" + value);
  EXPECT_EQ(carrier.at("baggage").size(), 8192u);
}

TEST(Baggage, ExtractionStopsBeforeThe8193rdByte) {
  // Two members of 4096 bytes and the comma between them are 8193 bytes: the second is not read,
  // nor anything after it.
  const std::string a = "a=" + std::string(4094, 'x');
  const std::string b = "b=" + std::string(4094, 'y');
  EXPECT_EQ(from_baggage(a + "," + b + ",c=1"), (Baggage{{"a", std::string(4094, 'x')}}));
  const std::string b2 = "b=" + std::string(4093, 'y');  // 8192 bytes with the comma
  EXPECT_EQ(from_baggage(a + "," + b2).size(), 2u);
  // Skipped members do not count.
  EXPECT_EQ(from_baggage("novalue=%zz," + a + "," + b2).size(), 2u);
}

TEST(Baggage, ExtractionStopsAfter180Members) {
  const Baggage all = from_baggage(members(200));
  ASSERT_EQ(all.size(), 180u);
  EXPECT_EQ(all.back(), (std::pair<std::string, std::string>{"k179", "v179"}));
}

TEST(Baggage, InjectEncodesWhatTheSpecificationRequires) {
  Carrier carrier;
  std::string every_byte;
  for (int c = 0; c < 256; ++c) every_byte += static_cast<char>(c);
  inject_context(SpanContext{}, carrier,
                 {{"serverNode", "DF 28"}, {"pct", "100%"}, {"eq", "a=b"}, {"all", every_byte}});
  std::string expected_all;
  for (int c = 0; c < 256; ++c) {
    const bool octet = c == 0x21 || (c >= 0x23 && c <= 0x2B) || (c >= 0x2D && c <= 0x3A) ||
                       (c >= 0x3C && c <= 0x5B) || (c >= 0x5D && c <= 0x7E);
    if (octet && c != '%') {
      expected_all += static_cast<char>(c);
    } else {
      constexpr char kHex[] = "0123456789ABCDEF";
      expected_all += {'%', kHex[c >> 4], kHex[c & 0xF]};
    }
  }
  EXPECT_EQ(carrier.at("baggage"), "serverNode=DF%2028,pct=100%25,eq=a=b,all=" + expected_all);
}

TEST(Baggage, InjectEncodesKeysAsTokens) {
  Carrier carrier;
  inject_context(SpanContext{}, carrier,
                 {{"", "a"},
                  {"bad key", "b"},
                  {"ключ", "c"},
                  {"k=(1)", "d"},
                  {"1%", "e"},
                  {"!#$&'*+-.^_`|~", "f"}});
  EXPECT_EQ(carrier.at("baggage"),
            "bad%20key=b,%D0%BA%D0%BB%D1%8E%D1%87=c,k%3D%281%29=d,1%25=e,!#$&'*+-.^_`|~=f");
  EXPECT_EQ(
      from_baggage(carrier.at("baggage")),
      (Baggage{
          {"bad key", "b"}, {"ключ", "c"}, {"k=(1)", "d"}, {"1%", "e"}, {"!#$&'*+-.^_`|~", "f"}}));
  Carrier none;
  inject_context(SpanContext{}, none, {{"", "b"}});
  EXPECT_TRUE(none.empty()) << "no header rather than an empty one";
}

TEST(Baggage, InjectKeepsAtMost180MembersIn8192Bytes) {
  Baggage many;
  for (int i = 0; i < 200; ++i) many.emplace_back("k" + std::to_string(i), "v");
  Carrier carrier;
  inject_context(SpanContext{}, carrier, many);
  EXPECT_EQ(from_baggage(carrier.at("baggage")), Baggage(many.begin(), many.begin() + 180));

  // The limit applies to the encoded header: "k=" and 2730 encoded spaces are 8192 bytes.
  inject_context(SpanContext{}, carrier, {{"k", std::string(2730, ' ')}});
  EXPECT_EQ(carrier.at("baggage").size(), 8192u);
  inject_context(SpanContext{}, carrier, {{"k", std::string(2731, ' ')}, {"s", "1"}});
  EXPECT_EQ(carrier.at("baggage"), "s=1");
  // Members that do not fit still count among the 180.
  Baggage counted = {{"big", std::string(8190, 'x')}};
  for (int i = 0; i < 200; ++i) counted.emplace_back("k" + std::to_string(i), "v");
  inject_context(SpanContext{}, carrier, counted);
  EXPECT_EQ(from_baggage(carrier.at("baggage")),
            Baggage(counted.begin() + 1, counted.begin() + 180))
      << "the 8194-byte member is dropped, and k179 is the 181st";

  // Whole members only: one that would take the header past 8192 bytes is dropped, later smaller
  // ones still go.
  const Baggage big = {{"a", std::string(4094, 'x')},
                       {"b", std::string(4094, 'y')},
                       {"c", std::string(4093, 'z')},
                       {"d", "1"}};
  inject_context(SpanContext{}, carrier, big);
  EXPECT_EQ(from_baggage(carrier.at("baggage")), (Baggage{big[0], big[2]}));
  EXPECT_EQ(carrier.at("baggage").size(), 8192u);
  inject_context(SpanContext{}, carrier, {{"k", std::string(8191, 'x')}});
  EXPECT_EQ(carrier.count("baggage"), 0u) << "nothing fits: no header, not a stale one";

  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    Baggage random;
    const int n = std::uniform_int_distribution<int>(1, 120)(rng);
    for (int i = 0; i < n; ++i) {
      random.emplace_back("k" + std::to_string(i),
                          std::string(std::uniform_int_distribution<int>(0, 600)(rng), '%'));
    }
    Carrier c;
    inject_context(SpanContext{}, c, random);
    EXPECT_LE(c.at("baggage").size(), 8192u);
    const Baggage back = from_baggage(c.at("baggage"));
    EXPECT_LE(back.size(), 180u);
    EXPECT_TRUE(is_subsequence(back, random));
  }
}

// Found by fuzz_extract_context, minimal input "\n\nk=" followed by 1000 "%FF" (an empty
// traceparent and tracestate, then the baggage) under mixed-case header names. The value decodes
// to 1000 U+FFFD, 9000 bytes once encoded: nothing fits, and the received "Baggage" must not be
// left behind, whatever the case of its name.
TEST(Baggage, WhenNothingFitsNoStaleHeaderIsLeftInAnyCase) {
  std::string value;
  for (int i = 0; i < 1000; ++i) value += "%FF";
  Carrier carrier{{"Baggage", "k=" + value}};
  const Baggage received = extract_context(carrier).baggage;
  ASSERT_EQ(received.size(), 1u);
  inject_context(SpanContext{}, carrier, received);
  EXPECT_TRUE(extract_context(carrier).baggage.empty()) << "the stale Baggage was read back";
  EXPECT_EQ(carrier.count("Baggage"), 0u);
  EXPECT_TRUE(carrier.empty());
}

TEST(Baggage, IndependentOfTheTraceParent) {
  const auto in = extract_context({{"traceparent", "garbage"}, {"baggage", "k=v"}});
  EXPECT_FALSE(in.context.is_valid());
  EXPECT_EQ(in.baggage, (Baggage{{"k", "v"}}));
}

// ---- NeMo Lens' JSON carrier bytes ----

TEST(JsonCarrier, WrittenAsNemoLensPythonWritesIt) {
  // What json.dumps({"traceparent": ..., "tracestate": ...}).encode() gives in NeMo Lens.
  EXPECT_EQ(serialize_context_json(example_context("rojo=1,congo=2")),
            std::string(R"({"traceparent": ")") + std::string(kSampled) +
                R"(", "tracestate": "rojo=1,congo=2"})");
  EXPECT_EQ(serialize_context_json(example_context()),
            std::string(R"({"traceparent": ")") + std::string(kSampled) + R"("})");
  EXPECT_EQ(serialize_context_json(example_context(R"(a=x"y\z)")),
            std::string(R"({"traceparent": ")") + std::string(kSampled) +
                R"(", "tracestate": "a=x\"y\\z"})");
  EXPECT_EQ(serialize_context_json(SpanContext{}), "");
}

TEST(JsonCarrier, ReadByDeserializeContextBesideTheBinaryForm) {
  const std::string python = std::string(R"(  {"traceparent": ")") + std::string(kSampled) +
                             R"(", "tracestate": "rojo=1", "baggage": "k=v"})";
  const SpanContext ctx = deserialize_context(python);
  ASSERT_TRUE(ctx.is_valid());
  EXPECT_EQ(ctx.trace_id.to_hex(), kTraceHex);
  EXPECT_EQ(ctx.span_id.to_hex(), kSpanHex);
  EXPECT_TRUE(ctx.is_sampled());
  EXPECT_TRUE(ctx.is_remote);
  EXPECT_EQ(ctx.trace_state, "rojo=1");
  EXPECT_EQ(deserialize_context(R"({"TraceParent":")" + std::string(kNotSampled) + R"("})"),
            from_traceparent(kNotSampled));
  const SpanContext with_state = example_context("rojo=1,congo=2");
  const SpanContext back = deserialize_context(serialize_context_json(with_state));
  EXPECT_EQ(back.trace_id, with_state.trace_id);
  EXPECT_EQ(back.trace_state, "rojo=1,congo=2");
  EXPECT_EQ(deserialize_context(serialize_context(with_state)), back);  // both forms agree
  const std::string sampled(kSampled);
  for (const std::string& bad : std::vector<std::string>{
           R"({})", R"({"traceparent": 5})", R"({"traceparent": "00-zz"})",
           R"([")" + sampled + R"("])", R"({"traceparent": ")" + sampled, "{\xff}", "{"}) {
    EXPECT_EQ(deserialize_context(bad), SpanContext{}) << bad;
  }
}

// ---- binary form ----

TEST(Binary, LayoutIsDocumented) {
  const SpanContext ctx = example_context("rojo=1,congo=2");
  const std::string bytes = serialize_context(ctx);
  ASSERT_EQ(bytes.size(), 26u + 2u + 14u);
  EXPECT_EQ(bytes[0], 1);
  EXPECT_EQ(bytes.substr(1, 16),
            std::string(reinterpret_cast<const char*>(ctx.trace_id.bytes.data()), 16));
  EXPECT_EQ(static_cast<unsigned char>(bytes[1]), 0x4b);
  EXPECT_EQ(bytes.substr(17, 8),
            std::string(reinterpret_cast<const char*>(ctx.span_id.bytes.data()), 8));
  EXPECT_EQ(static_cast<unsigned char>(bytes[24]), 0xb7);
  EXPECT_EQ(bytes[25], 1);
  EXPECT_EQ(bytes[26], 14);
  EXPECT_EQ(bytes[27], 0);
  EXPECT_EQ(bytes.substr(28), "rojo=1,congo=2");
  EXPECT_EQ(serialize_context(example_context()).size(), 26u);
}

TEST(Binary, RoundTrip) {
  for (const std::string& state : {std::string(), std::string("rojo=00f067aa0ba902b7"), members(32),
                                   std::string(" a=1 ,, b=2")}) {
    SpanContext ctx = example_context(state);
    const SpanContext back = deserialize_context(serialize_context(ctx));
    ASSERT_TRUE(back.is_valid());
    EXPECT_EQ(back.trace_id, ctx.trace_id);
    EXPECT_EQ(back.span_id, ctx.span_id);
    EXPECT_EQ(back.trace_flags, ctx.trace_flags);
    EXPECT_TRUE(back.is_remote);
    std::string normalised = state == " a=1 ,, b=2" ? "a=1,b=2" : state;
    EXPECT_EQ(back.trace_state, normalised);
    EXPECT_EQ(serialize_context(back), serialize_context(ctx));
  }
  SpanContext unsampled = from_traceparent(kNotSampled);
  EXPECT_FALSE(deserialize_context(serialize_context(unsampled)).is_sampled());
}

TEST(Binary, TraceStateIsCutTo512Bytes) {
  std::string state;
  for (int i = 0; i < 30; ++i) {
    if (i > 0) state += ',';
    state += "key" + std::to_string(i) + "=" + std::string(20, 'v');
  }
  state = "big=" + std::string(200, 'b') + "," + state;  // 31 members, 1004 bytes
  const std::string bytes = serialize_context(example_context(state));
  ASSERT_LE(bytes.size(), 28u + 512u);
  const SpanContext back = deserialize_context(bytes);
  ASSERT_TRUE(back.is_valid());
  EXPECT_LE(back.trace_state.size(), 512u);
  EXPECT_EQ(back.trace_state.rfind("key0=", 0), 0u) << "the long member goes first";
  EXPECT_EQ(state.find(back.trace_state), 205u) << "then members from the end";
}

TEST(Binary, InvalidContextSerialisesToNothing) {
  EXPECT_EQ(serialize_context(SpanContext{}), "");
  SpanContext half = example_context();
  half.trace_id = TraceId{};
  EXPECT_EQ(serialize_context(half), "");
}

TEST(Binary, MalformedBytesGiveAnInvalidContext) {
  const std::string good = serialize_context(example_context("rojo=1"));
  const std::string bare = serialize_context(example_context());
  auto with = [](std::string s, std::size_t at, char c) {
    s[at] = c;
    return s;
  };
  std::string zero_trace = bare;
  std::fill(zero_trace.begin() + 1, zero_trace.begin() + 17, '\0');
  std::string zero_span = bare;
  std::fill(zero_span.begin() + 17, zero_span.begin() + 25, '\0');
  std::string oversize = bare + std::string("\x01\x02", 2) + std::string(513, 'a');
  std::string zero_length = bare + std::string(2, '\0');
  for (const std::string& bytes :
       {std::string(), with(good, 0, 0), with(good, 0, 2), with(good, 0, '\xff'), with(bare, 0, 0),
        zero_trace, zero_span, good + "x", bare + "x", good.substr(1), with(good, 26, 7),
        with(good, 26, 5), with(good, 27, 1), oversize, zero_length}) {
    EXPECT_FALSE(deserialize_context(bytes).is_valid()) << bytes.size();
    EXPECT_EQ(deserialize_context(bytes), SpanContext{});
  }
}

TEST(Binary, TruncationAtEveryLength) {
  const std::string good = serialize_context(example_context(members(10)));
  for (std::size_t n = 0; n < good.size(); ++n) {
    const SpanContext ctx = deserialize_context(good.substr(0, n));
    // At 26 bytes the cut falls where a message without a trace state ends.
    EXPECT_EQ(ctx.is_valid(), n == 26) << n;
    if (n == 26) {
      EXPECT_EQ(ctx.trace_state, "");
    }
  }
}

TEST(Binary, AnInvalidTraceStateIsDroppedAndTheContextKept) {
  const std::string bare = serialize_context(example_context());
  for (const std::string state : {"FOO=1", "a=1,@b=2", " , "}) {
    std::string bytes = bare;
    bytes += static_cast<char>(state.size());
    bytes += '\0';
    bytes += state;
    const SpanContext ctx = deserialize_context(bytes);
    EXPECT_TRUE(ctx.is_valid()) << state;
    EXPECT_EQ(ctx.trace_state, "") << state;
  }
}

// Whether `bytes` has the structure of a version-1 message with non-zero ids (an independent
// reading of the documented format).
bool well_formed(const std::string& b) {
  if (b.size() < 26 || b[0] != 1) return false;
  if (std::all_of(b.begin() + 1, b.begin() + 17, [](char c) { return c == 0; })) return false;
  if (std::all_of(b.begin() + 17, b.begin() + 25, [](char c) { return c == 0; })) return false;
  if (b.size() == 26) return true;
  if (b.size() < 28) return false;
  const std::size_t n = static_cast<unsigned char>(b[26]) | static_cast<unsigned char>(b[27]) << 8;
  return n >= 1 && n <= 512 && b.size() == 28 + n;
}

TEST(Binary, RandomBytesNeverCrash) {
  std::mt19937 rng(20240611);
  std::uniform_int_distribution<int> byte(0, 255);
  int valid = 0;
  for (int round = 0; round < 20000; ++round) {
    std::string bytes(std::uniform_int_distribution<int>(0, 600)(rng), '\0');
    for (auto& c : bytes) c = static_cast<char>(byte(rng));
    if (round % 4 == 0 && !bytes.empty()) bytes[0] = 1;  // get past the version check
    if (round % 8 == 0 && bytes.size() >= 28) {          // and the length check
      const std::size_t n = std::min<std::size_t>(bytes.size() - 28, 512);
      bytes.resize(28 + n);
      bytes[26] = static_cast<char>(n & 0xFF);
      bytes[27] = static_cast<char>(n >> 8);
    }
    const SpanContext ctx = deserialize_context(bytes);
    EXPECT_EQ(ctx.is_valid(), well_formed(bytes)) << round;
    if (ctx.is_valid()) {
      ++valid;
      EXPECT_TRUE(ctx.is_remote);
      EXPECT_EQ(ctx.trace_flags & ~3, 0);  // sampled and random only
      EXPECT_TRUE(ctx.trace_state.empty()) << "random bytes (with this seed) are no tracestate";
    }
  }
  EXPECT_GT(valid, 0) << "the generator should reach valid messages";
}

TEST(Binary, MutatedMessagesNeverCrash) {
  const std::string good = serialize_context(example_context(members(12)));
  std::mt19937 rng(99);
  for (int round = 0; round < 5000; ++round) {
    std::string bytes = good;
    const int flips = std::uniform_int_distribution<int>(1, 4)(rng);
    for (int i = 0; i < flips; ++i) {
      bytes[std::uniform_int_distribution<std::size_t>(0, bytes.size() - 1)(rng)] =
          static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    }
    const SpanContext ctx = deserialize_context(bytes);
    EXPECT_EQ(ctx.is_valid(), well_formed(bytes));
    if (ctx.is_valid() && !ctx.trace_state.empty()) {
      // Whatever survives is a valid trace state: extracting it again keeps it.
      EXPECT_EQ(from_tracestate(ctx.trace_state), ctx.trace_state);
    }
  }
}

TEST(Extract, RandomHeadersNeverCrash) {
  std::mt19937 rng(5);
  constexpr std::string_view alphabet = "0123456789abcdefABCDEF-=,;% \t@*/_.xyz\xC3\xA9\0\x7F";
  for (int round = 0; round < 5000; ++round) {
    auto text = [&] {
      std::string s(std::uniform_int_distribution<int>(0, 80)(rng), ' ');
      for (auto& c : s) {
        c = alphabet[std::uniform_int_distribution<std::size_t>(0, alphabet.size() - 1)(rng)];
      }
      return s;
    };
    std::string tp = std::string(kSampled);
    if (round % 2 == 0) tp = text();
    const auto in =
        extract_context({{"traceparent", tp}, {"tracestate", text()}, {"baggage", text()}});
    if (in.context.is_valid()) {
      Carrier out;
      inject_context(in.context, out, in.baggage);
      EXPECT_EQ(extract_context(out).context, in.context);
      EXPECT_EQ(extract_context(out).baggage, in.baggage);
    }
  }
}

// ---- through the pipeline ----

TEST_F(Tracing, ExtractedContextIsTheParentOfANewSpan) {
  const auto in = extract_context(
      {{"traceparent", std::string(kSampled)}, {"tracestate", "rojo=00f067aa0ba902b7"}});
  SpanStartOptions options;
  options.parent = &in.context;
  options.kind = SpanKind::kServer;
  Carrier outgoing;
  {
    auto server = start_span("handle", options, {{"rpc", "step"}});
    ASSERT_TRUE(server);
    inject_context(outgoing);
    EXPECT_EQ(deserialize_context(serialize_context()).span_id, server.context().span_id);
  }
  const SpanData s = only(spans(), "handle");
  EXPECT_EQ(s.context.trace_id.to_hex(), kTraceHex);
  EXPECT_EQ(s.parent_span_id.to_hex(), kSpanHex);
  EXPECT_TRUE(s.parent_is_remote);
  EXPECT_TRUE(s.context.is_sampled());
  EXPECT_FALSE(s.context.is_remote);
  EXPECT_EQ(s.context.trace_state, "rojo=00f067aa0ba902b7");
  EXPECT_EQ(s.kind, SpanKind::kServer);
  // What the span sends on: same trace, its own span id, the trace state carried along.
  EXPECT_EQ(outgoing.at("traceparent"),
            "00-" + std::string(kTraceHex) + "-" + s.context.span_id.to_hex() + "-01");
  EXPECT_EQ(outgoing.at("tracestate"), "rojo=00f067aa0ba902b7");
  outgoing.clear();
  inject_context(outgoing);
  EXPECT_TRUE(outgoing.empty()) << "the span has ended";
}

TEST_F(Tracing, AnUnsampledRemoteParentIsFollowed) {
  const SpanContext remote = from_traceparent(kNotSampled);
  SpanStartOptions options;
  options.parent = &remote;
  Carrier outgoing;
  {
    auto span = start_span("handle", options);
    EXPECT_FALSE(span.is_recording());
    EXPECT_EQ(current_span_context().trace_id, remote.trace_id);
    inject_context(outgoing);
  }
  EXPECT_TRUE(spans().empty());
  EXPECT_EQ(extract_context(outgoing).context.trace_id, remote.trace_id);
  EXPECT_FALSE(extract_context(outgoing).context.is_sampled());
}

TEST_F(Tracing, DeserialisedContextIsAParentToo) {
  SpanContext sender_ctx;
  std::string message;
  {
    auto send = span_cm("send");
    sender_ctx = send.context();
    message = serialize_context();
  }
  const SpanContext remote = deserialize_context(message);
  ASSERT_TRUE(remote.is_remote);
  SpanStartOptions options;
  options.parent = &remote;
  { auto recv = start_span("recv", options); }
  const auto all = spans();
  const SpanData recv = only(all, "recv");
  EXPECT_EQ(recv.context.trace_id, sender_ctx.trace_id);
  EXPECT_EQ(recv.parent_span_id, sender_ctx.span_id);
  EXPECT_TRUE(recv.parent_is_remote);
}

TEST_F(Tracing, ExtractedContextIsALinkTarget) {
  const auto in = extract_context(
      {{"traceparent", std::string(kSampled)}, {"tracestate", "congo=t61rcWkgMzE"}});
  SpanStartOptions options;
  options.link = &in.context;
  { auto span = start_span("linked", options); }
  const SpanData s = only(spans(), "linked");
  ASSERT_EQ(s.links.size(), 1u);
  EXPECT_EQ(s.links[0].context, in.context);
  EXPECT_TRUE(s.links[0].context.is_remote);
  EXPECT_EQ(s.links[0].context.trace_state, "congo=t61rcWkgMzE");
  EXPECT_NE(s.context.trace_id, in.context.trace_id) << "a link is not a parent";
  EXPECT_FALSE(s.parent_span_id.is_valid());
}

TEST_F(Tracing, CreateLinkedSpanJoinsTheCurrentTrace) {
  const SpanContext target = from_traceparent(kSampled);
  SpanContext outer_ctx;
  {
    auto outer = span_cm("outer");
    outer_ctx = outer.context();
    auto linked = create_linked_span("recv", target, {{"bytes", 4096}});
    ASSERT_TRUE(linked);
    EXPECT_EQ(current_span_context(), linked.context());
  }
  { auto root = create_linked_span("root", target); }
  const auto all = spans();
  const SpanData recv = only(all, "recv");
  EXPECT_EQ(recv.context.trace_id, outer_ctx.trace_id);
  EXPECT_EQ(recv.parent_span_id, outer_ctx.span_id);
  EXPECT_EQ(recv.group, "");
  ASSERT_EQ(recv.links.size(), 1u);
  EXPECT_EQ(recv.links[0].context, target);
  EXPECT_EQ(std::get<std::int64_t>(*recv.attribute("bytes")), 4096);
  const SpanData root = only(all, "root");
  EXPECT_FALSE(root.parent_span_id.is_valid());
  EXPECT_NE(root.context.trace_id, target.trace_id);
  ASSERT_EQ(root.links.size(), 1u);
  EXPECT_EQ(root.links[0].context.span_id, target.span_id);
}

TEST_F(Tracing, CreateLinkedSpanFromACarrier) {
  { auto s = create_linked_span("from_headers", Carrier{{"traceparent", std::string(kSampled)}}); }
  { auto s = create_linked_span("bad_headers", Carrier{{"traceparent", "00-zz"}}); }
  { auto s = create_linked_span("invalid_target", SpanContext{}); }
  const auto all = spans();
  ASSERT_EQ(only(all, "from_headers").links.size(), 1u);
  EXPECT_EQ(only(all, "from_headers").links[0].context.span_id.to_hex(), kSpanHex);
  EXPECT_TRUE(only(all, "bad_headers").links.empty()) << "still a span, without a link";
  EXPECT_TRUE(only(all, "invalid_target").links.empty());
}

TEST_F(Tracing, GatedCreateLinkedSpanFollowsItsGroup) {
  start("default");
  const SpanContext target = from_traceparent(kSampled);
  {
    auto off = create_linked_span("step", "step_recv", target);
    EXPECT_FALSE(off);
    auto on = create_linked_span("job", "job_recv", target, {{"peer", 3}});
    EXPECT_TRUE(on);
  }
  const auto all = spans();
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].name, "job_recv");
  EXPECT_EQ(all[0].group, "job");
  ASSERT_EQ(all[0].links.size(), 1u);
  EXPECT_EQ(all[0].links[0].context, target);
}

TEST(CreateLinkedSpan, WithoutTracingIsAnEmptyHandle) {
  auto span = create_linked_span("x", from_traceparent(kSampled));
  EXPECT_FALSE(span);
  auto gated = create_linked_span("job", "x", from_traceparent(kSampled));
  EXPECT_FALSE(gated);
}

}  // namespace
}  // namespace nemo::lens
