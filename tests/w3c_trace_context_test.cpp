// The header checks of the W3C Trace Context test suite (github.com/w3c/trace-context,
// test/test.py: Level 1 and 2 tests at the suite's default strictness), restated for lens. The
// suite plays a client: it sends a request with some headers to a service and reads the traceparent
// and tracestate of the call the service makes on. Here the service is lens_test::Service below: it
// extracts the request's context, handles it in a span that continues it (or starts a new trace),
// and makes each outgoing call in a child span whose context inject_context() writes.
//
// The outgoing headers are read as the suite reads them, independently of lens' parser: exactly
// one traceparent of the version 00 shape, and a tracestate whose every member must follow the
// Level 2 grammar (an ill-formed one fails the test), of which the first of each key counts.
// The W3C Baggage suite's checks follow at the end.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <regex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "nemo/lens/propagation.hpp"
#include "tracing_fixture.hpp"

namespace lens_test {
namespace {

using nemo::lens::Carrier;
using nemo::lens::SpanContext;
using nemo::lens::SpanStartOptions;

// The request headers in the order sent; a name may repeat.
using Headers = std::vector<std::pair<std::string, std::string>>;

// The ids the suite sends.
constexpr const char* kTraceId = "12345678901234567890123456789012";
constexpr const char* kParentId = "1234567890123456";

std::string tp(const std::string& flags = "00") {
  return std::string("00-") + kTraceId + "-" + kParentId + "-" + flags;
}

// An outgoing traceparent, read with the suite's pattern.
struct TraceParent {
  std::string version, trace_id, parent_id;
  int flags = -1;
};

// An outgoing tracestate: its members, the first of each key (as the suite keeps them).
struct TraceState {
  std::string text;  // the header as written, empty when absent
  std::vector<std::pair<std::string, std::string>> members;
  bool contains(const std::string& key) const { return find(key) != nullptr; }
  const std::string* find(const std::string& key) const {
    for (const auto& [k, v] : members) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  std::string at(const std::string& key) const {
    const std::string* v = find(key);
    return v != nullptr ? *v : "<absent>";
  }
};

struct Outgoing {
  TraceParent traceparent;
  TraceState tracestate;
};

bool same_name(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

// What an HTTP server hands the application: fields of one name combined into one value with
// ", " (RFC 9110 section 5.3), under the name's first spelling.
Carrier combine(const Headers& headers) {
  Carrier carrier;
  for (const auto& [name, value] : headers) {
    auto it = carrier.begin();
    while (it != carrier.end() && !same_name(it->first, name)) ++it;
    if (it == carrier.end()) {
      carrier.emplace(name, value);
    } else {
      it->second += ", " + value;
    }
  }
  return carrier;
}

TraceParent read_traceparent(const Carrier& out) {
  TraceParent result;
  int found = 0;
  std::string value;
  for (const auto& [name, v] : out) {
    if (same_name(name, "traceparent")) {
      ++found;
      value = v;
    }
  }
  EXPECT_EQ(found, 1) << "expected one outgoing traceparent";
  static const std::regex kFormat("^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})$");
  std::smatch m;
  if (!std::regex_match(value, m, kFormat)) {
    ADD_FAILURE() << "outgoing traceparent '" << value << "' is not well formed";
    return result;
  }
  result = {m[1], m[2], m[3], std::stoi(m[4], nullptr, 16)};
  return result;
}

TraceState read_tracestate(const Carrier& out) {
  TraceState result;
  static const std::regex kDelimiter("[ \t]*,[ \t]*");
  static const std::regex kMember(
      "^([0-9a-z][_0-9a-z*/@-]{0,255})=([\\x20-\\x2b\\x2d-\\x3c\\x3e-\\x7e]{0,255}"
      "[\\x21-\\x2b\\x2d-\\x3c\\x3e-\\x7e])$");
  for (const auto& [name, value] : out) {
    if (!same_name(name, "tracestate")) continue;
    if (!result.text.empty()) result.text += ',';
    result.text += value;
    for (std::sregex_token_iterator it(value.begin(), value.end(), kDelimiter, -1), end; it != end;
         ++it) {
      const std::string member = *it;
      if (member.empty()) continue;
      std::smatch m;
      if (!std::regex_match(member, m, kMember)) {
        ADD_FAILURE() << "outgoing tracestate member '" << member << "' is not well formed";
        continue;
      }
      if (!result.contains(m[1])) result.members.emplace_back(m[1], m[2]);
    }
  }
  return result;
}

// The service under test.
class Service : public Tracing {
 protected:
  // Handles one request with `headers`, making `calls` outgoing calls; their headers.
  std::vector<Outgoing> request(const Headers& headers, int calls) {
    const nemo::lens::ExtractedContext in = nemo::lens::extract_context(combine(headers));
    SpanStartOptions options;
    if (in.context.is_valid()) options.parent = &in.context;
    options.kind = nemo::lens::SpanKind::kServer;
    std::vector<Outgoing> out;
    auto server = nemo::lens::start_span("handle", options);
    for (int i = 0; i < calls; ++i) {
      SpanStartOptions client;
      client.kind = nemo::lens::SpanKind::kClient;
      auto call = nemo::lens::start_span("call", client);
      Carrier carrier;
      nemo::lens::inject_context(carrier);
      out.push_back({read_traceparent(carrier), read_tracestate(carrier)});
    }
    return out;
  }

  Outgoing single(const Headers& headers) { return request(headers, 1).at(0); }

  // The outgoing trace id for a request with one traceparent `value`.
  std::string trace_id_for(const std::string& value) {
    return single({{"traceparent", value}}).traceparent.trace_id;
  }

  // The outgoing tracestate for a request with the valid traceparent and these tracestate fields.
  TraceState state_for(const std::vector<std::string>& fields) {
    Headers headers = {{"traceparent", tp()}};
    for (const auto& f : fields) headers.emplace_back("tracestate", f);
    const Outgoing out = single(headers);
    EXPECT_EQ(out.traceparent.trace_id, kTraceId) << "the traceparent was not continued";
    return out.tracestate;
  }
};

// ---- traceparent ----

TEST_F(Service, WithoutTraceHeadersStartsAValidTrace) {
  const Outgoing out = single({});
  EXPECT_EQ(out.traceparent.version, "00");
  EXPECT_EQ(out.traceparent.trace_id.size(), 32u);
  EXPECT_NE(out.traceparent.trace_id, std::string(32, '0'));
  EXPECT_TRUE(out.tracestate.text.empty());
}

TEST_F(Service, TraceParentWithoutTraceStateKeepsTheTraceIdUnderANewParentId) {
  const Outgoing out = single({{"traceparent", tp("01")}});
  EXPECT_EQ(out.traceparent.trace_id, kTraceId);
  EXPECT_NE(out.traceparent.parent_id, kParentId);
  EXPECT_EQ(out.traceparent.flags & 1, 1) << "sampled flag";
}

TEST_F(Service, TwoTraceParentFieldsStartANewTrace) {
  const Outgoing out =
      single({{"traceparent", "00-12345678901234567890123456789011-1234567890123456-01"},
              {"traceparent", "00-12345678901234567890123456789012-1234567890123456-01"}});
  EXPECT_NE(out.traceparent.trace_id, "12345678901234567890123456789011");
  EXPECT_NE(out.traceparent.trace_id, "12345678901234567890123456789012");
}

TEST_F(Service, MisspelledTraceParentNamesAreNotRead) {
  for (const char* name : {"trace-parent", "trace.parent"}) {
    EXPECT_NE(single({{name, tp("01")}}).traceparent.trace_id, kTraceId) << name;
  }
}

TEST_F(Service, TraceParentNameIsReadInAnyCase) {
  for (const char* name : {"TraceParent", "TrAcEpArEnT", "TRACEPARENT"}) {
    EXPECT_EQ(single({{name, tp("01")}}).traceparent.trace_id, kTraceId) << name;
  }
}

TEST_F(Service, Version00WithTrailingCharactersIsInvalid) {
  EXPECT_NE(trace_id_for(tp("01") + "."), kTraceId);
  EXPECT_NE(trace_id_for(tp("01") + "-what-the-future-will-be-like"), kTraceId);
}

TEST_F(Service, FutureVersionIsReadThroughItsKnownFields) {
  const std::string cc = std::string("cc-") + kTraceId + "-" + kParentId + "-01";
  EXPECT_EQ(trace_id_for(cc), kTraceId);
  EXPECT_EQ(trace_id_for(cc + "-what-the-future-will-be-like"), kTraceId);
  EXPECT_NE(trace_id_for(cc + ".what-the-future-will-be-like"), kTraceId);
}

TEST_F(Service, VersionFfIsInvalid) {
  EXPECT_NE(trace_id_for(std::string("ff-") + kTraceId + "-" + kParentId + "-01"), kTraceId);
}

TEST_F(Service, VersionWithIllegalCharactersIsInvalid) {
  for (const char* version : {".0", "0."}) {
    EXPECT_NE(trace_id_for(std::string(version) + "-" + kTraceId + "-" + kParentId + "-01"),
              kTraceId)
        << version;
  }
}

TEST_F(Service, VersionOfMoreOrFewerThanTwoDigitsIsInvalid) {
  for (const char* version : {"000", "0000", "0"}) {
    EXPECT_NE(trace_id_for(std::string(version) + "-" + kTraceId + "-" + kParentId + "-01"),
              kTraceId)
        << version;
  }
}

TEST_F(Service, AllZeroTraceIdIsReplaced) {
  const std::string zero(32, '0');
  EXPECT_NE(trace_id_for("00-" + zero + "-" + kParentId + "-01"), zero);
}

TEST_F(Service, TraceIdWithIllegalCharactersIsInvalid) {
  for (const char* id : {".2345678901234567890123456789012", "1234567890123456789012345678901."}) {
    const std::string out = trace_id_for(std::string("00-") + id + "-" + kParentId + "-01");
    EXPECT_NE(out, id);
    EXPECT_EQ(out.find('.'), std::string::npos);
  }
}

TEST_F(Service, TraceIdOfMoreOrFewerThan32DigitsIsInvalid) {
  const std::string long_id = "123456789012345678901234567890123";
  const std::string out = trace_id_for("00-" + long_id + "-" + kParentId + "-01");
  EXPECT_NE(out, kTraceId);
  EXPECT_NE(out, "23456789012345678901234567890123");
  const std::string short_id = "1234567890123456789012345678901";
  EXPECT_NE(trace_id_for("00-" + short_id + "-" + kParentId + "-01").substr(0, 31), short_id);
}

TEST_F(Service, InvalidParentIdStartsANewTrace) {
  for (const char* id : {"0000000000000000", ".234567890123456", "123456789012345.",
                         "12345678901234567", "123456789012345"}) {
    EXPECT_NE(trace_id_for(std::string("00-") + kTraceId + "-" + id + "-01"), kTraceId) << id;
  }
}

TEST_F(Service, InvalidTraceFlagsStartANewTrace) {
  for (const char* flags : {".0", "0.", "001", "1"}) {
    EXPECT_NE(trace_id_for(tp(flags)), kTraceId) << flags;
  }
}

TEST_F(Service, SpacesAndTabsAroundTheTraceParentAreIgnored) {
  for (const std::string& value : {" " + tp("01"), "\t" + tp("01"), tp("01") + " ", tp("01") + "\t",
                                   "\t " + tp("01") + " \t"}) {
    EXPECT_EQ(trace_id_for(value), kTraceId) << "'" << value << "'";
  }
}

// ---- tracestate ----

TEST_F(Service, TraceStateWithoutTraceParentIsDiscarded) {
  EXPECT_TRUE(single({{"tracestate", "foo=1"}}).tracestate.members.empty());
  EXPECT_TRUE(single({{"tracestate", "foo=1,bar=2"}}).tracestate.members.empty());
}

TEST_F(Service, TraceStateIsInheritedWithTheTraceParent) {
  const TraceState s = state_for({"foo=1,bar=2"});
  EXPECT_EQ(s.at("foo"), "1");
  EXPECT_EQ(s.at("bar"), "2");
}

TEST_F(Service, MisspelledTraceStateNamesAreNotRead) {
  for (const char* name : {"trace-state", "trace.state"}) {
    const Outgoing out = single({{"traceparent", tp()}, {name, "foo=1"}});
    EXPECT_FALSE(out.tracestate.contains("foo")) << name;
  }
}

TEST_F(Service, TraceStateNameIsReadInAnyCase) {
  for (const char* name : {"TraceState", "TrAcEsTaTe", "TRACESTATE"}) {
    const Outgoing out = single({{"traceparent", tp()}, {name, "foo=1"}});
    EXPECT_EQ(out.tracestate.at("foo"), "1") << name;
  }
}

TEST_F(Service, EmptyTraceStateFieldsAreDiscarded) {
  const TraceState empty = state_for({""});
  EXPECT_TRUE(empty.members.empty());
  EXPECT_TRUE(empty.text.empty()) << "no empty tracestate is sent";
  EXPECT_EQ(state_for({"foo=1", ""}).at("foo"), "1");
  EXPECT_EQ(state_for({"", "foo=1"}).at("foo"), "1");
}

TEST_F(Service, SeveralTraceStateFieldsAreCombinedInOrder) {
  const TraceState s = state_for({"foo=1,bar=2", "rojo=1,congo=2", "baz=3"});
  EXPECT_EQ(s.members,
            (std::vector<std::pair<std::string, std::string>>{
                {"foo", "1"}, {"bar", "2"}, {"rojo", "1"}, {"congo", "2"}, {"baz", "3"}}));
}

TEST_F(Service, RepeatedKeysLeaveTheTraceStateInherited) {
  EXPECT_EQ(state_for({"foo=1,foo=1"}).at("foo"), "1");
  const std::string two = state_for({"foo=1,foo=2"}).at("foo");
  EXPECT_TRUE(two == "1" || two == "2") << two;
  EXPECT_EQ(state_for({"foo=1", "foo=1"}).at("foo"), "1");
  const std::string split = state_for({"foo=1", "foo=2"}).at("foo");
  EXPECT_TRUE(split == "1" || split == "2") << split;
}

TEST_F(Service, EveryAllowedCharacterIsInherited) {
  std::string key = "abcdefghijklmnopqrstuvwxyz0123456789_-*/";
  std::string value;
  for (char c = 0x20; c <= 0x7E; ++c) {
    if (c != ',' && c != '=') value += c;
  }
  EXPECT_EQ(state_for({key + "=" + value}).at(key), value);
  key += "@a-z0-9_-*/";
  EXPECT_EQ(state_for({key + "=" + value}).at(key), value);
}

TEST_F(Service, SpacesAndTabsAroundTraceStateMembersAreIgnored) {
  for (const char* value : {"foo=1 \t , \t bar=2, \t baz=3", "foo=1\t \t,\t \tbar=2,\t \tbaz=3"}) {
    const TraceState s = state_for({value});
    EXPECT_EQ(s.at("foo"), "1") << value;
    EXPECT_EQ(s.at("bar"), "2") << value;
    EXPECT_EQ(s.at("baz"), "3") << value;
  }
  for (const char* value : {" foo=1", "\tfoo=1", "foo=1 ", "foo=1\t", "\t foo=1 \t"}) {
    EXPECT_EQ(state_for({value}).at("foo"), "1") << "'" << value << "'";
  }
}

TEST_F(Service, KeysWithIllegalCharactersAreNotInherited) {
  EXPECT_FALSE(state_for({"foo =1"}).contains("foo "));
  EXPECT_FALSE(state_for({"FOO=1"}).contains("FOO"));
  EXPECT_FALSE(state_for({"foo.bar=1"}).contains("foo.bar"));
}

TEST_F(Service, KeysWithAtSignsFollowTheKeyGrammar) {
  for (const char* key : {"foo@", "foo@@bar", "foo@bar@baz"}) {
    const TraceState s = state_for({std::string(key) + "=1,bar=2"});
    EXPECT_EQ(s.at(key), "1") << key;
    EXPECT_EQ(s.at("bar"), "2") << key;
  }
  // A key may not start with '@': the list is discarded.
  EXPECT_FALSE(state_for({"@foo=1,bar=2"}).contains("bar"));
}

TEST_F(Service, ThirtyTwoMembersAreInheritedAndThirtyThreeDiscarded) {
  std::vector<std::string> fields;
  std::string field;
  for (int i = 1; i <= 33; ++i) {
    char member[16];
    std::snprintf(member, sizeof member, "bar%02d=%02d", i, i);
    if (!field.empty()) field += ',';
    field += member;
    if (i % 10 == 0 || i == 32) {
      fields.push_back(field);
      field.clear();
    }
  }
  const TraceState s32 = state_for(fields);
  EXPECT_EQ(s32.at("bar01"), "01");
  EXPECT_EQ(s32.members.size(), 32u);
  fields.back() += ",bar33=33";
  EXPECT_FALSE(state_for(fields).contains("bar01"));
}

TEST_F(Service, KeysOfUpTo256CharactersAreInheritedWhereverTheAtSignIs) {
  for (const std::string& key :
       {std::string(256, 'z'), std::string(241, 't') + "@" + std::string(14, 'v'),
        std::string(242, 't') + "@v", "t@" + std::string(15, 'v')}) {
    const TraceState s = state_for({"foo=1", key + "=1"});
    EXPECT_EQ(s.at("foo"), "1") << key.size();
    EXPECT_EQ(s.at(key), "1") << key.size();
  }
  EXPECT_FALSE(state_for({"foo=1", std::string(257, 'z') + "=1"}).contains("foo"));
}

TEST_F(Service, ValuesWithIllegalCharactersDiscardTheTraceState) {
  EXPECT_FALSE(state_for({"foo=bar=baz"}).contains("foo"));
  const TraceState s = state_for({"foo=,bar=3"});
  EXPECT_FALSE(s.contains("foo"));
  EXPECT_FALSE(s.contains("bar"));
}

// ---- several outgoing calls ----

TEST_F(Service, CallsFromAValidTraceParentShareItsTraceIdUnderDistinctParentIds) {
  std::set<std::string> trace_ids, parent_ids;
  for (const Outgoing& out : request({{"traceparent", tp("01")}}, 3)) {
    trace_ids.insert(out.traceparent.trace_id);
    parent_ids.insert(out.traceparent.parent_id);
  }
  EXPECT_EQ(trace_ids, std::set<std::string>{kTraceId});
  EXPECT_EQ(parent_ids.size(), 3u);
}

TEST_F(Service, CallsWithoutTraceParentHaveDistinctParentIds) {
  std::set<std::string> parent_ids;
  for (const Outgoing& out : request({}, 3)) parent_ids.insert(out.traceparent.parent_id);
  EXPECT_EQ(parent_ids.size(), 3u);
}

TEST_F(Service, CallsFromAnIllegalTraceParentStartANewTrace) {
  std::set<std::string> trace_ids, parent_ids;
  const std::string zero(32, '0');
  for (const Outgoing& out :
       request({{"traceparent", "00-" + zero + "-" + kParentId + "-01"}}, 3)) {
    trace_ids.insert(out.traceparent.trace_id);
    parent_ids.insert(out.traceparent.parent_id);
  }
  EXPECT_EQ(trace_ids.count(zero), 0u);
  EXPECT_EQ(parent_ids.size(), 3u);
}

// ---- Level 2 ----

TEST_F(Service, RandomFlagIsPropagated) {
  const Outgoing out = single({{"traceparent", tp("02")}});
  EXPECT_EQ(out.traceparent.trace_id, kTraceId);
  EXPECT_NE(out.traceparent.parent_id, kParentId);
  EXPECT_EQ(out.traceparent.flags & 0x02, 0x02) << "random flag";
}

// ---- W3C Baggage ----
// The checks of the W3C Baggage test suite (github.com/w3c/baggage, test/test_baggage.py) on
// what extract_context() and inject_context() do; properties, which lens does not represent, are
// checked to leave their member intact.

using nemo::lens::Baggage;

Baggage baggage_of(const Headers& headers) {
  return nemo::lens::extract_context(combine(headers)).baggage;
}

std::string injected(const Baggage& baggage) {
  Carrier carrier;
  nemo::lens::inject_context(SpanContext{}, carrier, baggage);
  return carrier.count("baggage") != 0 ? carrier.at("baggage") : "<none>";
}

TEST(W3CBaggage, ASimpleMemberIsRead) {
  EXPECT_EQ(baggage_of({{"baggage", "SomeKey=SomeValue"}}), (Baggage{{"SomeKey", "SomeValue"}}));
}

TEST(W3CBaggage, MembersWithPropertiesAreRead) {
  const Baggage expected = {{"SomeKey", "SomeValue"}, {"SomeKey2", "SomeValue2"}};
  for (const char* value :
       {"SomeKey=SomeValue;SomeProp,SomeKey2=SomeValue2;ValueProp=PropVal",
        "SomeKey=SomeValue;SomePropKey=SomePropValue,SomeKey2=SomeValue2;SomePropKey2="
        "SomePropValue2",
        "SomeKey=SomeValue;SomeProp;SomeProp=PropValue;SomeProp=AnotherPropValue,SomeKey2="
        "SomeValue2",
        "SomeKey=SomeValue;ValueProp%20%09%20%3D%20%09%20PropVal,SomeKey2=SomeValue2"}) {
    EXPECT_EQ(baggage_of({{"baggage", value}}), expected) << value;
  }
}

TEST(W3CBaggage, SpacesAndTabsAroundKeysValuesAndPropertiesAreIgnored) {
  const Baggage expected = {{"SomeKey", "SomeValue"}, {"SomeKey2", "SomeValue2"}};
  for (const char* value : {"SomeKey \t = \t SomeValue \t ; \t SomeProp \t , \t SomeKey2 \t = \t "
                            "SomeValue2 \t ; \t ValueProp \t = \t PropVal",
                            "SomeKey \t = \t SomeValue \t ; \t SomePropKey=SomePropValue \t , \t "
                            "SomeKey2 \t = \t SomeValue2 \t ; \t SomePropKey2 \t = \t "
                            "SomePropValue2"}) {
    EXPECT_EQ(baggage_of({{"baggage", value}}), expected) << value;
  }
  EXPECT_EQ(baggage_of({{"baggage", "SomeKey \t = \t SomeValue \t "}}),
            (Baggage{{"SomeKey", "SomeValue"}}));
}

TEST(W3CBaggage, AValueMayHoldEqualsSigns) {
  EXPECT_EQ(baggage_of({{"baggage", "SomeKey=SomeValue=equals"}}),
            (Baggage{{"SomeKey", "SomeValue=equals"}}));
}

// "\t \"';=asdf!@#$%^&*()" percent-encoded the way the suite's Python reference encodes it.
constexpr const char* kOddValue = "\t \"';=asdf!@#$%^&*()";
constexpr const char* kOddValueEncoded = "%09%20%22%27%3B%3Dasdf%21%40%23%24%25%5E%26%2A%28%29";

TEST(W3CBaggage, PercentEncodedValuesAreDecoded) {
  EXPECT_EQ(baggage_of({{"baggage", std::string("SomeKey=") + kOddValueEncoded}}),
            (Baggage{{"SomeKey", kOddValue}}));
  EXPECT_EQ(baggage_of({{"baggage", std::string("SomeKey \t = \t ") + kOddValueEncoded + " \t "}}),
            (Baggage{{"SomeKey", kOddValue}}));
}

TEST(W3CBaggage, InjectedValuesArePercentEncodedAndDecodeBack) {
  const std::string header = injected({{"SomeKey", kOddValue}});
  // Only baggage-octets on the wire (the characters that need no escape may go either way).
  const std::string value = header.substr(header.find('=') + 1);
  for (char c : value) {
    const auto u = static_cast<unsigned char>(c);
    EXPECT_TRUE(u == 0x21 || (u >= 0x23 && u <= 0x2B) || (u >= 0x2D && u <= 0x3A) ||
                (u >= 0x3C && u <= 0x5B) || (u >= 0x5D && u <= 0x7E))
        << header;
  }
  EXPECT_EQ(baggage_of({{"baggage", header}}), (Baggage{{"SomeKey", kOddValue}}));
}

TEST(W3CBaggage, SixtyFourMembersAreAllPropagated) {
  Baggage members;
  for (int i = 0; i < 64; ++i) members.emplace_back("key" + std::to_string(i), "value");
  const std::string header = injected(members);
  EXPECT_EQ(std::count(header.begin(), header.end(), ','), 63);
  EXPECT_EQ(baggage_of({{"baggage", header}}), members);
}

TEST(W3CBaggage, AMemberOf8192BytesIsPropagated) {
  std::string long_value;
  for (int i = 0; i < 819; ++i) long_value += "0123456789";
  const std::string header = injected({{"a", long_value}});
  EXPECT_EQ(header.size(), 8192u);
  EXPECT_EQ(baggage_of({{"baggage", header}}), (Baggage{{"a", long_value}}));
}

TEST(W3CBaggage, SeveralBaggageFieldsAreCombined) {
  EXPECT_EQ(baggage_of({{"baggage", "userId=alice"},
                        {"baggage", "serverNode=DF%2028,isProduction=false"}}),
            (Baggage{{"userId", "alice"}, {"serverNode", "DF 28"}, {"isProduction", "false"}}));
  EXPECT_EQ(baggage_of({{"baggage", "userId =   alice"},
                        {"Baggage", "serverNode = DF%2028, isProduction = false"}}),
            (Baggage{{"userId", "alice"}, {"serverNode", "DF 28"}, {"isProduction", "false"}}));
}

}  // namespace
}  // namespace lens_test
