// The parts of `lens report` one at a time: DurationSketch against exact percentiles, the OTLP/JSON
// line reader (valid, malformed, serial against parallel; spans, metrics and logs lines),
// ReportBuilder's rules for top-level steps, in-step time, self time and stragglers, and the
// metrics aggregation (bucket quantiles, cumulative and delta points, series, ranks).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "common/span_reader.hpp"
#include "metrics_fixture.hpp"
#include "otlp_lines.hpp"
#include "report/convert_chrome.hpp"
#include "report/report_builder.hpp"
#include "report/report_metrics.hpp"
#include "report/report_output.hpp"
#include "report/report_sketch.hpp"

namespace nemo::lens::cli {
namespace {

using report_test::Attr;
using report_test::make_span;
using report_test::request_line;
using report_test::SpanSpec;

constexpr std::uint64_t kMs = 1'000'000;
constexpr std::uint64_t kT0 = 1'718'000'000'000'000'000ull;

// numpy.percentile(values, 100 q) with the default "linear" method.
double exact_quantile(std::vector<std::uint64_t> values, double q) {
  std::sort(values.begin(), values.end());
  const double pos = q * static_cast<double>(values.size() - 1);
  const auto lo = static_cast<std::size_t>(std::floor(pos));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return static_cast<double>(values[lo]) +
         (pos - static_cast<double>(lo)) * (static_cast<double>(values[hi]) - values[lo]);
}

constexpr double kQuantiles[] = {0, 0.01, 0.1, 0.25, 0.5, 0.75, 0.9, 0.95, 0.99, 0.999, 1};

void expect_within_error(const DurationSketch& sketch, const std::vector<std::uint64_t>& values,
                         const std::string& what) {
  for (double q : kQuantiles) {
    const double exact = exact_quantile(values, q);
    const double estimate = sketch.quantile(q);
    EXPECT_LE(std::abs(estimate - exact), DurationSketch::kRelativeError * exact + 1e-9)
        << what << ": q=" << q << " exact=" << exact << " estimate=" << estimate;
  }
}

// ---- DurationSketch ----

TEST(DurationSketch, EmptyIsZero) {
  DurationSketch s;
  EXPECT_EQ(s.count(), 0u);
  EXPECT_EQ(s.quantile(0.5), 0.0);
  EXPECT_EQ(s.max(), 0u);
  EXPECT_EQ(s.min(), 0u);
  EXPECT_EQ(s.mean(), 0.0);
}

TEST(DurationSketch, ExactUpToTheLimit) {
  DurationSketch s;
  for (std::uint64_t v : {4u, 1u, 3u, 2u}) s.add(v);
  EXPECT_EQ(s.quantile(0.5), 2.5);  // numpy.percentile([1, 2, 3, 4], 50)
  EXPECT_EQ(s.quantile(0), 1.0);
  EXPECT_EQ(s.quantile(1), 4.0);
  EXPECT_DOUBLE_EQ(s.quantile(0.95), 3.85);
  EXPECT_EQ(s.sum(), 10u);
  EXPECT_EQ(s.min(), 1u);
  EXPECT_EQ(s.max(), 4u);
  EXPECT_FALSE(s.is_bucketed());

  DurationSketch full;
  std::vector<std::uint64_t> values;
  std::mt19937_64 rng(7);
  for (std::size_t i = 0; i < DurationSketch::kExactLimit; ++i) {
    values.push_back(rng() % 1'000'000'007);
    full.add(values.back());
  }
  EXPECT_FALSE(full.is_bucketed());
  for (double q : kQuantiles) EXPECT_DOUBLE_EQ(full.quantile(q), exact_quantile(values, q)) << q;
  full.add(5);
  EXPECT_TRUE(full.is_bucketed());
}

TEST(DurationSketch, WithinOnePercentOfExactPercentiles) {
  std::mt19937_64 rng(42);
  struct Case {
    const char* name;
    std::function<std::uint64_t()> draw;
  };
  std::lognormal_distribution<double> lognormal(std::log(100e6), 0.5);  // ~100 ms steps
  std::exponential_distribution<double> exponential(1 / 2e4);           // ~20 us kernels
  std::uniform_int_distribution<std::uint64_t> uniform(1, 1'000'000'000);
  const Case cases[] = {
      {"lognormal", [&] { return static_cast<std::uint64_t>(lognormal(rng)); }},
      {"exponential", [&] { return static_cast<std::uint64_t>(exponential(rng)); }},
      {"uniform", [&] { return uniform(rng); }},
      {"bimodal",
       [&] { return rng() % 10 == 0 ? 5'000'000'000ull + rng() % 1000 : 1000 + rng() % 50; }},
      {"constant", [] { return std::uint64_t{123'456'789}; }},
      {"with zeros", [&] { return rng() % 4 == 0 ? 0 : 1 + rng() % 100; }},
      {"tiny", [&] { return rng() % 3; }},
  };
  for (const Case& c : cases) {
    DurationSketch s;
    std::vector<std::uint64_t> values;
    for (int i = 0; i < 200'000; ++i) {
      values.push_back(c.draw());
      s.add(values.back());
    }
    ASSERT_TRUE(s.is_bucketed());
    expect_within_error(s, values, c.name);
    EXPECT_EQ(s.count(), values.size());
    EXPECT_EQ(s.max(), *std::max_element(values.begin(), values.end())) << c.name;
    EXPECT_EQ(s.min(), *std::min_element(values.begin(), values.end())) << c.name;
  }
}

TEST(DurationSketch, MergeEqualsOneSketchOfAllValues) {
  std::mt19937_64 rng(3);
  std::vector<std::uint64_t> all;
  DurationSketch parts[4], whole;
  const std::size_t sizes[] = {10, 300, 5000, 100};  // exact + exact, exact + bucketed, ...
  for (int p = 0; p < 4; ++p) {
    for (std::size_t i = 0; i < sizes[p]; ++i) {
      const std::uint64_t v = 1000 + rng() % (p == 2 ? 10'000'000 : 100'000);
      parts[p].add(v);
      whole.add(v);
      all.push_back(v);
    }
  }
  DurationSketch merged;
  for (const DurationSketch& p : parts) merged.merge(p);
  EXPECT_EQ(merged.count(), whole.count());
  EXPECT_EQ(merged.sum(), whole.sum());
  EXPECT_EQ(merged.max(), whole.max());
  for (double q : kQuantiles) EXPECT_DOUBLE_EQ(merged.quantile(q), whole.quantile(q)) << q;
  expect_within_error(merged, all, "merged");

  DurationSketch small_a, small_b;  // two exact sketches that still fit stay exact
  small_a.add(1);
  small_b.add(3);
  small_a.merge(small_b);
  EXPECT_FALSE(small_a.is_bucketed());
  EXPECT_EQ(small_a.quantile(0.5), 2.0);
}

TEST(DurationSketch, MemoryIsBoundedByTheRangeNotTheCount) {
  DurationSketch s;
  for (int i = 0; i < 1'000'000; ++i)
    s.add(100'000'000 + static_cast<std::uint64_t>(i % 1000) * 10'000);
  EXPECT_LT(s.bucket_count(), 20u);  // 100 ms to 110 ms: a handful of 2 % buckets
  for (std::uint64_t v = 1; v < 1'000'000'000'000'000ull; v *= 3) s.add(v);
  EXPECT_LT(s.bucket_count(), 1800u);  // 1 ns to 10^6 s
}

// ---- the line reader ----

std::string parse_error(std::string_view line, bool details = false) {
  SpanLineReader reader({.details = details, .threads = 1});
  ParsedRequest out;
  return reader.parse_line(line, out);
}

TEST(SpanLineReader, ReadsTheFileExporterFormat) {
  SpanSpec s = make_span(0x00f067aa0ba902b7, 0x1122334455667788, "train_step", "step", kT0,
                         kT0 + 250 * kMs, 4711, {{"iteration", std::int64_t{3}}});
  s.truncated = true;
  const std::string line = request_line(report_test::rank_resource(7), {s});
  SpanLineReader reader({.threads = 1});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(line, out), "");
  ASSERT_EQ(out.spans().size(), 1u);
  const SpanRecord& r = out.spans()[0];
  EXPECT_EQ(r.span_id, 0x00f067aa0ba902b7u);
  EXPECT_EQ(r.parent_span_id, 0x1122334455667788u);
  EXPECT_EQ(r.name, "train_step");
  EXPECT_EQ(r.group, "step");
  EXPECT_TRUE(r.has_group);
  EXPECT_EQ(r.thread_id, 4711);
  EXPECT_TRUE(r.truncated);
  EXPECT_EQ(r.start_ns, kT0);
  EXPECT_EQ(r.duration_ns(), 250 * kMs);
  ASSERT_EQ(out.resources.size(), 1u);
  EXPECT_EQ(out.resources[r.resource].rank, 7);
  EXPECT_EQ(out.resources[0].instance_id, "run-42-rank7");
  EXPECT_EQ(out.resources[0].run_id, "run-42");
}

TEST(SpanLineReader, ReadsTheRankUnderEitherNemoLensName) {
  SpanSpec s = make_span(0x00f067aa0ba902b7, 0, "train_step", "step", kT0, kT0 + kMs, 1, {});
  SpanLineReader reader({.threads = 1});
  ParsedRequest out;
  // Newer NeMo Lens releases write nv.dl.rank only.
  ASSERT_EQ(reader.parse_line(request_line({{"nv.dl.rank", std::int64_t{6}}}, {s}), out), "");
  EXPECT_EQ(out.resources.at(0).rank, 6);
  // lens writes both; dl.rank wins wherever it stands.
  ASSERT_EQ(
      reader.parse_line(
          request_line({{"nv.dl.rank", std::int64_t{1}}, {"dl.rank", std::int64_t{2}}}, {s}), out),
      "");
  EXPECT_EQ(out.resources.at(0).rank, 2);
  ASSERT_EQ(
      reader.parse_line(
          request_line({{"dl.rank", std::int64_t{2}}, {"nv.dl.rank", std::int64_t{1}}}, {s}), out),
      "");
  EXPECT_EQ(out.resources.at(0).rank, 2);
}

TEST(SpanLineReader, AcceptsWhatProto3JsonAllows) {
  // Members in another order (value before key, resource after the spans), numbers for times
  // and intValue, dl.rank as a string, unknown members, several resources and scopes, null lists.
  const std::string line = R"({"unknown":[1,{"a":null}],"resourceSpans":[
    {"scopeSpans":[{"spans":[{"endTimeUnixNano":2000,"startTimeUnixNano":"1000",
       "spanId":"AAAAAAAAAAAAAAAA","traceId":"0123456789abcdef0123456789ABCDEF",
       "parentSpanId":"","attributes":[{"value":{"intValue":42},"key":"thread.id"},
       {"key":"deep","value":{"kvlistValue":{"values":[{"key":"k","value":{"arrayValue":{}}}]}}}],
       "extra":{"x":[1,2,3]}}]},{"spans":null}],
     "resource":{"attributes":[{"key":"dl.rank","value":{"stringValue":"5"}}]}},
    {"resource":null,"scopeSpans":[{"scope":{"name":"x"},"spans":[]}]}]})";
  SpanLineReader reader({.threads = 1});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(line, out), "");
  ASSERT_EQ(out.spans().size(), 1u);
  EXPECT_EQ(out.spans()[0].span_id, 0xAAAAAAAAAAAAAAAAu);
  EXPECT_EQ(out.spans()[0].parent_span_id, 0u);
  EXPECT_EQ(out.spans()[0].thread_id, 42);
  EXPECT_EQ(out.spans()[0].duration_ns(), 1000u);
  EXPECT_FALSE(out.spans()[0].has_group);
  EXPECT_EQ(out.resources[0].rank, 5);
  EXPECT_FALSE(out.resources[1].rank.has_value());
}

TEST(SpanLineReader, DetailsTurnAnyValuesIntoPlainJson) {
  SpanSpec s = make_span(
      1, 0, "opt", "optimizer", kT0, kT0 + kMs, 9,
      {{"lr", 0.5},
       {"name", std::string("adam")},
       {"fused", true},
       {"n", std::int64_t{-3}},
       {"shape",
        report_test::RawAnyValue{
            R"({"arrayValue":{"values":[{"intValue":"4"},{"doubleValue":"NaN"}]}})"}},
       {"cfg",
        report_test::RawAnyValue{
            R"({"kvlistValue":{"values":[{"key":"a","value":{"boolValue":false}},{"key":"b"}]}})"}},
       {"raw", report_test::RawAnyValue{R"({"bytesValue":"AQI="})"}},
       {"empty", report_test::RawAnyValue{"{}"}}});
  s.events.push_back({"ev", kT0 + 5, {{"k", std::int64_t{1}}}});
  s.status_code = 2;
  s.status_message = "boom";
  SpanLineReader reader({.details = true, .threads = 1});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(request_line(report_test::rank_resource(0), {s}), out), "");
  const SpanRecord& r = out.spans()[0];
  EXPECT_EQ(
      r.attributes.dump(),
      R"({"lr":0.5,"name":"adam","fused":true,"n":-3,"shape":[4,"NaN"],"cfg":{"a":false,"b":null},)"
      R"("raw":"AQI=","empty":null,"nemo.span.group":"optimizer","thread.id":9})");
  ASSERT_EQ(r.events.size(), 1u);
  EXPECT_EQ(r.events[0].name, "ev");
  EXPECT_EQ(r.events[0].time_ns, kT0 + 5);
  EXPECT_EQ(r.events[0].attributes.dump(), R"({"k":1})");
  EXPECT_EQ(r.status_code, 2);
  EXPECT_EQ(r.status_message, "boom");
  EXPECT_EQ(r.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
}

TEST(SpanLineReader, MalformedLinesSayWhy) {
  const std::string good =
      request_line(report_test::rank_resource(0), {make_span(1, 0, "a", "step", kT0, kT0 + 1, 1)});
  auto replaced = [&](std::string_view from, std::string_view to) {
    std::string s = good;
    s.replace(s.find(from), from.size(), to);
    return s;
  };
  struct Case {
    std::string line;
    std::string error;
  };
  const Case cases[] = {
      {"not json", "invalid JSON at byte 2"},
      {good.substr(0, good.size() - 3), "invalid JSON"},
      {good + "x", "invalid JSON"},
      {"[1,2]", "the line is not a JSON object"},
      {"42", "the line is not a JSON object"},
      {R"({"resourceSpans":{}})", "resourceSpans is not an array"},
      {R"({"resourceSpans":[3]})", "an element of resourceSpans is not an object"},
      {R"({"resourceSpans":[{"scopeSpans":[{"spans":"x"}]}]})", "spans is not an array"},
      {replaced(R"("spanId":"0000000000000001")", R"("spanId":"0000000000000000")"),
       "span 1: spanId '0000000000000000' is not 16 hex digits"},
      {replaced(R"("spanId":"0000000000000001")", R"("spanId":1)"), "span 1: spanId 1 is not"},
      {replaced(R"("spanId":"0000000000000001",)", ""), "span 1: no spanId"},
      {replaced(R"("traceId":"4bf92f3577b34da6a3ce929d0e0e4736")", R"("traceId":"4bf9")"),
       "span 1: traceId '4bf9' is not 32 hex digits"},
      {replaced(R"("startTimeUnixNano":")", R"("startTimeUnixNano":"-)"),
       "span 1: startTimeUnixNano '-1718000000000000000' is not a decimal integer"},
      {replaced(R"("endTimeUnixNano":"1718000000000000001",)", ""), "span 1: no endTimeUnixNano"},
      {replaced(R"("endTimeUnixNano":"1718000000000000001")", R"("endTimeUnixNano":"1")"),
       "span 1: endTimeUnixNano is before startTimeUnixNano"},
      {replaced(R"({"intValue":"1"})", R"({"intValue":"1.5"})"),
       "span 1: intValue '1.5' is not an integer"},
      {replaced(R"({"intValue":"1"})", R"([])"), "span 1: attribute value is not an object"},
      {replaced(R"({"stringValue":"step"})", R"({"stringValue":7})"),
       "span 1: stringValue is not a string"},
  };
  for (const Case& c : cases) {
    const std::string error = parse_error(c.line);
    EXPECT_NE(error.find(c.error), std::string::npos)
        << "line: " << c.line << "\nerror: " << error << "\nexpected: " << c.error;
  }
  EXPECT_EQ(parse_error(good), "");
  // Details check nested values too.
  EXPECT_NE(
      parse_error(
          replaced(R"({"intValue":"1"})", R"({"arrayValue":{"values":[{"intValue":"x"}]}})"), true)
          .find("intValue is not a 64-bit integer"),
      std::string::npos);
}

TEST(SpanLineReader, FilesSkipBlankLinesAndNumberTheRest) {
  const std::string dir = ::testing::TempDir() + "report_unit_lines";
  std::filesystem::create_directories(dir);
  const std::string line =
      request_line(report_test::rank_resource(0), {make_span(1, 0, "a", "step", kT0, kT0 + 1, 1)});
  report_test::write_file(dir + "/in.jsonl",
                          line + "\r\n\n   \n" + "{bad\n" + line);  // no final \n
  for (unsigned threads : {1u, 2u}) {
    SpanLineReader reader({.threads = threads});
    InputFile file(dir + "/in.jsonl");
    std::vector<std::uint64_t> bad;
    std::size_t good = 0;
    reader.read(
        file, [&](const ParsedRequest& r) { good += r.spans().size(); },
        [&](const MalformedLine& m) { bad.push_back(m.line); });
    EXPECT_EQ(good, 2u);
    EXPECT_EQ(bad, std::vector<std::uint64_t>{4});
    EXPECT_EQ(reader.counts().lines, 3u);
    EXPECT_EQ(reader.counts().requests, 2u);
    EXPECT_EQ(reader.counts().malformed, 1u);
  }
  EXPECT_THROW(InputFile{dir + "/missing.jsonl"}, FileError);
  EXPECT_THROW(InputFile{dir}, FileError);
  try {
    InputFile f(dir + "/missing.jsonl");
  } catch (const FileError& e) {
    EXPECT_NE(std::string(e.what()).find("missing.jsonl': No such file or directory"),
              std::string::npos);
  }
}

TEST(SpanLineReader, ParallelParsingKeepsTheInputOrder) {
  const std::string dir = ::testing::TempDir() + "report_unit_parallel";
  std::filesystem::create_directories(dir);
  std::string text;
  std::uint64_t id = 1;
  for (int line = 0; line < 3000; ++line) {
    if (line % 97 == 5) {
      text += "{\"broken\n";
      continue;
    }
    std::vector<SpanSpec> spans;
    for (int i = 0; i < 1 + line % 7; ++i) {
      spans.push_back(make_span(id++, 0, "s", "step", kT0, kT0 + 1, 1));
    }
    text += request_line(report_test::rank_resource(line % 3), spans) + "\n";
  }
  report_test::write_file(dir + "/many.jsonl", text);
  auto collect = [&](unsigned threads) {
    std::vector<std::uint64_t> seen;
    SpanLineReader reader({.threads = threads});
    InputFile file(dir + "/many.jsonl");
    reader.read(
        file,
        [&](const ParsedRequest& r) {
          for (const SpanRecord& s : r.spans()) seen.push_back(s.span_id);
        },
        [&](const MalformedLine& m) { seen.push_back(~m.line); });
    return seen;
  };
  const auto serial = collect(1);
  EXPECT_EQ(serial.size(), id - 1 + 31);
  EXPECT_EQ(collect(2), serial);
  EXPECT_EQ(collect(4), serial);
}

// ---- ReportBuilder ----

// Feeds each vector of spans as one request of rank `rank`.
Report build(const std::vector<std::pair<int, std::vector<SpanSpec>>>& lines,
             double threshold = 20) {
  SpanLineReader reader({.threads = 1});
  ReportBuilder builder;
  ParsedRequest request;
  ReaderCounts counts;
  for (const auto& [rank, spans] : lines) {
    const std::string error =
        reader.parse_line(request_line(report_test::rank_resource(rank), spans), request);
    EXPECT_EQ(error, "");
    builder.add(request);
    ++counts.requests;
    counts.spans += request.span_count;
  }
  ReportOptions options;
  options.straggler_threshold_pct = threshold;
  std::vector<Report> runs = builder.finish(options, counts);
  EXPECT_EQ(runs.size(), 1u);
  return std::move(runs.front());
}

const NameRow& row(const Report& r, std::string_view name) {
  for (const NameRow& n : r.names) {
    if (n.name == name) return n;
  }
  throw std::runtime_error("no row " + std::string(name));
}

TEST(ReportBuilder, TopLevelStepsAndTimeInsideThem) {
  // job > step(100) > [fwd(60) > inner step-group span(10)], opt(20); a lone op outside.
  const Report r = build({{0,
                           {make_span(4, 3, "sync", "step", kT0 + 10 * kMs, kT0 + 20 * kMs),
                            make_span(3, 2, "fwd", "forward_backward", kT0, kT0 + 60 * kMs),
                            make_span(5, 2, "opt", "optimizer", kT0 + 60 * kMs, kT0 + 80 * kMs),
                            make_span(2, 1, "train_step", "step", kT0, kT0 + 100 * kMs),
                            make_span(6, 1, "log", "", kT0 + 100 * kMs, kT0 + 130 * kMs),
                            make_span(1, 0, "job", "job", kT0, kT0 + 200 * kMs)}}});
  EXPECT_EQ(r.step_count, 1u);
  EXPECT_EQ(r.step_total_ns, 100 * kMs);
  ASSERT_EQ(r.ranks.size(), 1u);
  ASSERT_EQ(r.ranks[0].steps.size(), 1u);  // "sync" is in group step but not top-level
  EXPECT_EQ(r.ranks[0].steps[0].name, "train_step");
  EXPECT_EQ(row(r, "fwd").in_step_ns, 60 * kMs);
  EXPECT_EQ(row(r, "fwd").in_step_self_ns, 50 * kMs);
  EXPECT_EQ(row(r, "sync").in_step_ns, 10 * kMs);
  EXPECT_EQ(row(r, "opt").in_step_ns, 20 * kMs);
  EXPECT_EQ(row(r, "train_step").in_step_ns, 100 * kMs);
  EXPECT_EQ(row(r, "train_step").in_step_self_ns, 20 * kMs);
  EXPECT_EQ(row(r, "log").in_step_ns, 0u);
  EXPECT_EQ(row(r, "log").group, "(none)");
  EXPECT_EQ(row(r, "job").in_step_ns, 0u);
  EXPECT_EQ(r.ancestry.unresolved, 0u);
}

TEST(ReportBuilder, ParentsInLaterLinesAndChildrenInLaterLines) {
  // Line 1: a child whose step parent comes in line 2. Line 3: a child of that step, late.
  const Report r =
      build({{0, {make_span(3, 2, "fwd", "forward_backward", kT0, kT0 + 60 * kMs)}},
             {0, {make_span(2, 0, "train_step", "step", kT0, kT0 + 100 * kMs)}},
             {0, {make_span(4, 2, "opt", "optimizer", kT0 + 60 * kMs, kT0 + 90 * kMs)}},
             {0, {make_span(5, 9, "orphan", "step", kT0, kT0 + 5 * kMs)}}});
  EXPECT_EQ(row(r, "fwd").in_step_ns, 60 * kMs);
  EXPECT_EQ(row(r, "opt").in_step_ns, 30 * kMs);  // placed through the recently seen parent
  EXPECT_EQ(r.step_count, 2u);                    // train_step, and orphan (parent never seen)
  EXPECT_EQ(r.ancestry.unresolved, 1u);
}

TEST(ReportBuilder, AncestryIsPerRank) {
  // The same span ids on two ranks do not mix.
  const Report r = build({{0, {make_span(2, 1, "fwd", "forward_backward", kT0, kT0 + 10 * kMs)}},
                          {1, {make_span(1, 0, "train_step", "step", kT0, kT0 + 100 * kMs)}},
                          {0, {make_span(1, 0, "idle", "job", kT0, kT0 + 100 * kMs)}}});
  EXPECT_EQ(row(r, "fwd").in_step_ns, 0u);
  EXPECT_EQ(r.ranks.size(), 2u);
}

// A DDP-like job, the shape the demo's PyTorch job exports: per rank a job span and steps; per
// step forward_backward (with microbatches) and the optimizer on the step's thread, all-reduces
// on a communication thread (children of the step, some outliving it), a data-loading span on a
// worker thread, truncated spans now and then. Every span's parent is in the job.
std::vector<std::pair<int, SpanSpec>> ddp_like_job(std::mt19937_64& rng, int ranks, int steps) {
  std::vector<std::pair<int, SpanSpec>> out;
  auto jitter = [&](std::uint64_t ms) { return ms * kMs + rng() % kMs; };
  for (int rank = 0; rank < ranks; ++rank) {
    std::uint64_t id = 1000 * static_cast<std::uint64_t>(rank + 1);
    const std::uint64_t job = id++;
    std::uint64_t t = kT0;
    for (int step = 0; step < steps; ++step) {
      const std::uint64_t s = id++, fb = id++;
      const std::uint64_t fb_end = t + jitter(60), opt_start = fb_end + jitter(5);
      const std::uint64_t end = opt_start + jitter(15) + jitter(3);
      out.push_back({rank, make_span(s, job, "train_step", "step", t, end, 1)});
      out.push_back({rank, make_span(fb, s, "forward_backward", "forward_backward", t, fb_end, 1)});
      out.push_back({rank, make_span(id++, fb, "microbatch", "microbatch", t, t + jitter(25), 1)});
      out.push_back({rank, make_span(id++, s, "optimizer", "optimizer", opt_start,
                                     opt_start + jitter(15), 1)});
      for (int b = 0; b < 3; ++b) {
        const std::uint64_t ar = t + jitter(20 + 20 * b);
        out.push_back(
            {rank, make_span(id++, s, "all_reduce", "communication", ar, ar + jitter(25), 2)});
      }
      SpanSpec load = make_span(id++, s, "next_batch", "data_loading", t, t + jitter(4), 3);
      load.truncated = step % 7 == 3;
      out.push_back({rank, load});
      t = end + jitter(2);
    }
    out.push_back({rank, make_span(job, 0, "job", "job", kT0, t, 1)});
  }
  return out;
}

// The JSON report of `spans` fed as lines of at most `per_line` spans of one rank each, less its
// "input" (the count of requests follows the lines).
std::string report_of(const std::vector<std::pair<int, SpanSpec>>& spans, std::size_t per_line) {
  std::vector<std::pair<int, std::vector<SpanSpec>>> lines;
  for (const auto& [rank, span] : spans) {
    if (lines.empty() || lines.back().first != rank || lines.back().second.size() >= per_line) {
      lines.push_back({rank, {}});
    }
    lines.back().second.push_back(span);
  }
  nlohmann::ordered_json j = report_json(build(lines));
  j.erase("input");
  return dump_json(j);
}

TEST(ReportBuilder, AnyOrderOfTheSpansGivesTheSameReport) {
  std::mt19937_64 rng(40);
  auto spans = ddp_like_job(rng, 3, 60);
  const std::string reference = report_of(spans, 16);
  ASSERT_NE(reference.find("\"all_reduce\""), std::string::npos);
  std::reverse(spans.begin(), spans.end());  // every parent before its children
  EXPECT_EQ(report_of(spans, 16), reference);
  for (int trial = 0; trial < 12; ++trial) {
    std::shuffle(spans.begin(), spans.end(), rng);
    const std::string shuffled = report_of(spans, 1 + rng() % 40);
    // Where they part, not two 50 kB strings.
    const auto at =
        std::mismatch(shuffled.begin(), shuffled.end(), reference.begin(), reference.end());
    EXPECT_EQ(shuffled, reference)
        << "trial " << trial << ": first difference at byte " << (at.first - shuffled.begin())
        << ": " << std::string(at.first, std::min(at.first + 80, shuffled.end()));
  }
}

TEST(ReportBuilder, NoShareIsAboveOneHundredPercentAndTheStepsThreadAddsUp) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 5; ++trial) {
    const auto j = nlohmann::json::parse(report_of(ddp_like_job(rng, 2, 30), 10));
    ASSERT_GT(j["step"]["total_ns"].get<std::uint64_t>(), 0u);
    std::uint64_t own = 0;
    for (const auto& g : j["groups"]) {
      own += g["in_step_self_ns"].get<std::uint64_t>();
      EXPECT_LE(g["step_share"].get<double>(), 1.0) << g;
      EXPECT_LE(g["self_share"].get<double>(), 1.0) << g;
    }
    EXPECT_EQ(own, j["step"]["total_ns"].get<std::uint64_t>());
    for (const auto& n : j["names"]) {
      EXPECT_LE(n["step_share"].get<double>(), 1.0) << n;
      EXPECT_LE(n["self_share"].get<double>(), 1.0) << n;
    }
    ASSERT_FALSE(j["overlap"]["names"].empty());
    for (const auto* rows : {&j["overlap"]["groups"], &j["overlap"]["names"]}) {
      for (const auto& o : *rows) {
        EXPECT_LE(o["overlapped_share"].get<double>(), 1.0) << o;
        EXPECT_LE(o["exposed_ns"].get<std::uint64_t>(), o["overlapped_ns"].get<std::uint64_t>());
      }
    }
  }
}

TEST(ReportBuilder, ARunFilterNamesOnlyThatRun) {
  SpanLineReader reader({.threads = 1});
  ReportBuilder builder("run-b");
  ParsedRequest request;
  for (const char* run : {"run-a", "run-b", "run-c"}) {
    ASSERT_EQ(
        reader.parse_line(request_line(report_test::rank_resource(0, run),
                                       {make_span(1, 0, "train_step", "step", kT0, kT0 + kMs)}),
                          request),
        "");
    builder.add(request);
  }
  const std::vector<Report> runs = builder.finish({}, {});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].run_ids, std::vector<std::string>{"run-b"});
  EXPECT_EQ(runs[0].step_count, 1u);
}

TEST(ReportBuilder, StragglersAreStrictlyAboveTheFloorAndTheMads) {
  std::vector<std::pair<int, std::vector<SpanSpec>>> lines;
  const std::uint64_t step_ms[] = {100, 100, 100, 120, 121};
  std::uint64_t id = 1;
  for (int rank = 0; rank < 5; ++rank) {
    for (int i = 0; i < 3; ++i) {
      lines.push_back(
          {rank, {make_span(id++, 0, "train_step", "step", kT0, kT0 + step_ms[rank] * kMs)}});
    }
  }
  // Median 100, MAD 0: the floor decides. 21 % of 100 is 21 ms: none; 20 %: 121 > 120 only.
  EXPECT_TRUE(build(lines, 21).stragglers.empty());
  Report r = build(lines, 20);
  ASSERT_EQ(r.stragglers.size(), 1u);
  EXPECT_EQ(r.stragglers[0].figures.rank, 4);
  r = build(lines, 19.5);  // 19.5 ms: ranks 4 and 3, the larger excess first
  ASSERT_EQ(r.stragglers.size(), 2u);
  EXPECT_EQ(r.stragglers[0].figures.rank, 4);
  EXPECT_EQ(r.stragglers[1].figures.rank, 3);
  EXPECT_DOUBLE_EQ(r.stragglers[0].role.median_step_ns, 100.0 * kMs);
  EXPECT_EQ(r.stragglers[0].figures.flagged_by,
            std::vector<StragglerMeasure>{StragglerMeasure::kStepTime});
  EXPECT_TRUE(r.ranks[4].steps[0].straggler);
  EXPECT_FALSE(r.ranks[0].steps[0].straggler);
}

// Rank `rank`'s steps 1..7 of 10 ms (step 5 of 50 ms), each with forward_backward; step 5's
// carries captured spans: two layers (the second 40 ms long on rank 1: the stall, 5 ms on rank 0,
// which waits in its all-reduce instead), captured by capture `id` with reason slow_step.
std::vector<SpanSpec> captured_job(int rank, std::int64_t id) {
  std::vector<SpanSpec> spans;
  const std::vector<Attr> marks = {{"lens.capture.reason", std::string("slow_step")},
                                   {"lens.capture.id", id}};
  for (std::int64_t i = 1; i <= 7; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 100 * kMs, sid = 10 * i;
    const std::uint64_t length = (i == 5 ? 50 : 10) * kMs;
    spans.push_back(make_span(sid, 0, "train_step", "step", t, t + length, 1, {{"iteration", i}}));
    if (i != 5) {
      spans.push_back(make_span(sid + 1, sid, "forward_backward", "forward_backward", t,
                                t + 8 * kMs, 1, {{"iteration", i}}));
      continue;
    }
    const std::uint64_t fb = rank == 1 ? 48 * kMs : 13 * kMs;
    spans.push_back(make_span(sid + 1, sid, "forward_backward", "forward_backward", t, t + fb, 1,
                              {{"iteration", i}}));
    spans.push_back(
        make_span(sid + 2, sid + 1, "layer_forward", "layer", t + 1 * kMs, t + 4 * kMs, 1, marks));
    spans.push_back(make_span(sid + 3, sid + 1, "layer_forward", "layer", t + 4 * kMs,
                              t + (rank == 1 ? 44 : 9) * kMs, 1, marks));
    spans.push_back(make_span(sid + 4, sid, "all_reduce", "communication", t + fb, t + 50 * kMs, 1,
                              {{"iteration", i}}));
  }
  // A manual capture's span outside any step.
  spans.push_back(
      make_span(99, 0, "save", "checkpoint", kT0, kT0 + kMs, 1,
                {{"lens.capture.reason", std::string("manual")}, {"lens.capture.id", id + 1}}));
  return spans;
}

TEST(ReportBuilder, CapturedStepsAreListedAgainstTheRanksMedianStepTheStalledRankFirst) {
  const Report r = build({{0, captured_job(0, 3)}, {1, captured_job(1, 7)}});
  const CapturedSummary& c = r.captured;
  EXPECT_EQ(c.spans, 6u);
  EXPECT_EQ(c.by_reason,
            (std::vector<std::pair<std::string, std::uint64_t>>{{"manual", 2}, {"slow_step", 4}}));
  EXPECT_EQ(c.outside_steps, 2u);
  EXPECT_EQ(c.steps_total, 2u);
  ASSERT_EQ(c.steps.size(), 2u);
  const CapturedStepRow& lead = c.steps[0];
  EXPECT_EQ(lead.rank, 1) << "the stalled rank first: the least time in communication";
  EXPECT_EQ(c.steps[1].rank, 0);
  EXPECT_EQ(lead.name, "train_step");
  EXPECT_EQ(lead.iteration, 5);
  EXPECT_EQ(lead.duration_ns, 50 * kMs);
  EXPECT_DOUBLE_EQ(lead.median_ns, 10.0 * kMs);
  EXPECT_EQ(lead.reasons, std::vector<std::string>{"slow_step"});
  EXPECT_EQ(lead.capture_ids, std::vector<std::int64_t>{7});
  EXPECT_EQ(lead.captured_spans, 2u);
  EXPECT_EQ(lead.spans, 5u);
  EXPECT_EQ(lead.communication_ns, 2 * kMs);
  EXPECT_EQ(c.steps[1].communication_ns, 37 * kMs);
  // Own time adds up to the step: the layers 43 ms, forward_backward 5, the all-reduce 2.
  ASSERT_FALSE(lead.names.empty());
  EXPECT_EQ(lead.names[0].name, "layer_forward");
  EXPECT_EQ(lead.names[0].spans, 2u);
  EXPECT_EQ(lead.names[0].own_ns, 43 * kMs);
  EXPECT_EQ(lead.names[0].within_ns, 43 * kMs);
  EXPECT_EQ(lead.names[0].longest_ns, 40 * kMs);
  std::uint64_t own = 0;
  for (const CapturedTime& t : lead.groups) own += t.own_ns;
  EXPECT_EQ(own, lead.duration_ns);
  EXPECT_EQ(lead.groups[0].group, "layer");
  // The steps the rank captured nothing of are in no captured row; the boxes name their spans.
  ASSERT_EQ(lead.boxes.size(), 5u);
  EXPECT_EQ(c.box_names[lead.boxes[0].name_id],
            (std::pair<std::string, std::string>{"step", "train_step"}));
  EXPECT_EQ(std::count_if(lead.boxes.begin(), lead.boxes.end(),
                          [](const StepBox& b) { return b.captured; }),
            2);
  // Text: the step, its ranks and where the lead rank's time went; JSON: the same figures.
  const std::string text = report_text(r);
  EXPECT_NE(text.find("Captured steps (the flight recorder's detail, exported only for these "
                      "steps; 6 captured spans: manual 2, slow_step 4)\n"
                      "  2 captured spans are in no top-level step\n"
                      "  train_step iteration 5: 2 ranks (slow_step), 50.00ms\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("layer_forward 43.00ms"), std::string::npos) << text;
  const auto j = report_json(r);
  ASSERT_TRUE(j.contains("captured")) << j.dump();
  EXPECT_EQ(j["captured"]["steps"][0]["rank"], 1);
  EXPECT_EQ(j["captured"]["steps"][0]["names"][0]["longest_ns"], 40 * kMs);
  EXPECT_FALSE(j["captured"]["steps"][0].contains("boxes")) << "only for the HTML page";
  JsonOptions page;
  page.step_boxes = true;
  EXPECT_EQ(report_json(r, page)["captured"]["steps"][0]["boxes"].size(), 5u);
  EXPECT_FALSE(report_json(build({{0, {make_span(1, 0, "s", "step", kT0, kT0 + kMs)}}}))
                   .contains("captured"))
      << "no captured spans, no key";
}

TEST(ReportBuilder, TimelineIsThinnedEvenly) {
  TimelineSampler sampler(10);
  for (std::uint64_t i = 0; i < 1000; ++i) sampler.add({i, 1, {}, {}});
  EXPECT_LE(sampler.steps().size(), 10u);
  EXPECT_GE(sampler.steps().size(), 5u);
  EXPECT_EQ(sampler.seen(), 1000u);
  const std::vector<TimelineStep> kept = sampler.steps();
  for (std::size_t i = 1; i < kept.size(); ++i) {
    EXPECT_EQ(kept[i].start_ns - kept[i - 1].start_ns, kept[1].start_ns - kept[0].start_ns);
  }
  // The same steps whatever the order they come in.
  std::vector<std::uint64_t> starts(1000);
  for (std::uint64_t i = 0; i < 1000; ++i) starts[i] = i;
  std::shuffle(starts.begin(), starts.end(), std::mt19937_64(7));
  TimelineSampler shuffled(10);
  for (std::uint64_t start : starts) shuffled.add({start, 1, {}, {}});
  EXPECT_EQ(shuffled.steps(), kept);
}

// ---- the Chrome trace writer ----

// ---- metrics lines ----

std::string one_metric_line(const std::string& metric, int rank = 0) {
  return report_test::metrics_line(report_test::rank_resource(rank), {metric});
}

TEST(SpanLineReader, ReadsMetricsLines) {
  const std::string line = report_test::metrics_line(
      report_test::rank_resource(4),
      {R"({"name":"tokens","unit":"{token}","sum":{"dataPoints":[{"attributes":[
          {"key":"z","value":{"intValue":"2"}},{"key":"a","value":{"stringValue":"x"}}],
          "startTimeUnixNano":"5","timeUnixNano":10,"asInt":"-7"},
          {"timeUnixNano":"11","asDouble":"NaN"},{"timeUnixNano":"12","asDouble":1.5,"flags":1}],
          "aggregationTemporality":"AGGREGATION_TEMPORALITY_DELTA","isMonotonic":true}})",
       R"({"name":"h","histogram":{"dataPoints":[{"count":"3","sum":1.5,"bucketCounts":["1",2],
          "explicitBounds":[0.5],"min":0.1,"max":"Infinity"}],"aggregationTemporality":2}})",
       R"({"name":"e","exponentialHistogram":{"dataPoints":[{"count":"4","sum":2}]}})",
       R"({"name":"s","summary":{"dataPoints":[{"count":"9","sum":3,"quantileValues":[]}]}})",
       R"({"name":"nodata","description":"x"})"});
  SpanLineReader reader({.threads = 1, .metrics = true});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(line, out), "");
  EXPECT_TRUE(out.has_metrics);
  EXPECT_FALSE(out.has_spans);
  EXPECT_FALSE(out.has_logs);
  EXPECT_EQ(out.data_points, 6u);
  ASSERT_EQ(out.metrics.size(), 5u);
  const MetricRecord& sum = out.metrics[0];
  EXPECT_EQ(out.resources[sum.resource].rank, 4);
  EXPECT_EQ(sum.name, "tokens");
  EXPECT_EQ(sum.unit, "{token}");
  EXPECT_EQ(sum.type, MetricType::kSum);
  EXPECT_EQ(sum.temporality, 1);
  EXPECT_TRUE(sum.monotonic);
  ASSERT_EQ(sum.points.size(), 3u);
  EXPECT_EQ(sum.points[0].series, "a=x, z=2");  // sorted by key, plain values
  EXPECT_EQ(sum.points[0].start_ns, 5u);
  EXPECT_EQ(sum.points[0].time_ns, 10u);
  EXPECT_TRUE(sum.points[0].has_value && sum.points[0].is_int);
  EXPECT_EQ(sum.points[0].int_value, -7);
  EXPECT_TRUE(std::isnan(sum.points[1].value));
  EXPECT_FALSE(sum.points[1].is_int);
  EXPECT_FALSE(sum.points[2].has_value);  // flagged as no recorded value
  const MetricPoint& h = out.metrics[1].points[0];
  EXPECT_EQ(out.metrics[1].type, MetricType::kHistogram);
  EXPECT_EQ(h.count, 3u);
  EXPECT_EQ(h.sum, 1.5);
  EXPECT_EQ(h.bucket_counts, (std::vector<std::uint64_t>{1, 2}));
  EXPECT_EQ(h.explicit_bounds, (std::vector<double>{0.5}));
  EXPECT_EQ(h.min, 0.1);
  EXPECT_EQ(h.max, std::numeric_limits<double>::infinity());
  EXPECT_EQ(out.metrics[2].type, MetricType::kExponentialHistogram);
  EXPECT_EQ(out.metrics[2].points[0].count, 4u);
  EXPECT_EQ(out.metrics[2].points[0].scale, 0);  // no buckets: none read
  EXPECT_TRUE(out.metrics[2].points[0].positive.counts.empty());
  EXPECT_EQ(out.metrics[3].type, MetricType::kSummary);
  EXPECT_EQ(out.metrics[3].points[0].sum, 3.0);
  EXPECT_EQ(out.metrics[4].type, MetricType::kNone);

  // Without ReaderOptions::metrics the line is only checked and counted.
  SpanLineReader plain({.threads = 1});
  ASSERT_EQ(plain.parse_line(line, out), "");
  EXPECT_TRUE(out.has_metrics);
  EXPECT_TRUE(out.metrics.empty());
}

TEST(SpanLineReader, LinesOfEachSignalAreCounted) {
  const std::string dir = ::testing::TempDir() + "report_unit_signals";
  std::filesystem::create_directories(dir);
  const std::string spans =
      request_line(report_test::rank_resource(0), {make_span(1, 0, "a", "step", kT0, kT0 + 1, 1)});
  const std::string metric =
      one_metric_line(R"({"name":"g","gauge":{"dataPoints":[{"asInt":"1"},{"asInt":"2"}]}})");
  const std::string logs = report_test::logs_line(report_test::rank_resource(0), "hello");
  report_test::write_file(dir + "/in.jsonl", spans + "\n" + metric + "\n" + logs + "\n" + logs +
                                                 "\n{}\n" + R"({"resourceLogs":null})" + "\n" +
                                                 R"({"resourceLogs":{}})" + "\n");
  for (unsigned threads : {1u, 2u}) {
    SpanLineReader reader({.threads = threads, .metrics = true});
    InputFile file(dir + "/in.jsonl");
    std::vector<std::string> bad;
    reader.read(
        file, [](const ParsedRequest&) {}, [&](const MalformedLine& m) { bad.push_back(m.error); });
    EXPECT_EQ(bad, std::vector<std::string>{"resourceLogs is not an array"});
    EXPECT_EQ(reader.counts().lines, 7u);
    EXPECT_EQ(reader.counts().requests, 2u);  // the spans and {}
    EXPECT_EQ(reader.counts().spans, 1u);
    EXPECT_EQ(reader.counts().metric_lines, 1u);
    EXPECT_EQ(reader.counts().data_points, 2u);
    EXPECT_EQ(reader.counts().log_lines, 3u);
    EXPECT_EQ(reader.counts().malformed, 1u);
  }
}

TEST(SpanLineReader, ReadsLogRecordsLeniently) {
  const std::string line = R"({"resourceLogs":[{"resource":{"attributes":[
      {"key":"dl.rank","value":{"intValue":"3"}},{"key":"nemo.run.id","value":{"stringValue":"r"}}]},
    "scopeLogs":[{"logRecords":[
      {"timeUnixNano":"1500","severityNumber":17,"severityText":"ERROR",
       "body":{"stringValue":"nan loss"}},
      {"observedTimeUnixNano":"2500","severityNumber":"x","body":{"kvlistValue":{"values":[
       {"key":"step","value":{"intValue":"7"}}]}}},
      "not a record",
      {"timeUnixNano":"0","observedTimeUnixNano":"9","body":{"stringValue":")" +
                           std::string(1500, 'a') + R"("}}]},
      {"logRecords":{}}]},
    {"resource":[],"scopeLogs":[{"logRecords":[{"timeUnixNano":"4"}]}]}]})";
  SpanLineReader reader({.threads = 1, .logs = true});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(line, out), "");
  EXPECT_TRUE(out.has_logs);
  ASSERT_EQ(out.logs.size(), 4u);
  EXPECT_EQ(out.resources.at(out.logs[0].resource).rank, 3);
  EXPECT_EQ(out.resources.at(out.logs[0].resource).run_id, "r");
  EXPECT_EQ(out.logs[0].time_ns, 1500u);
  EXPECT_EQ(out.logs[0].severity_number, 17);
  EXPECT_EQ(out.logs[0].severity_text, "ERROR");
  EXPECT_EQ(out.logs[0].body, "nan loss");
  EXPECT_EQ(out.logs[1].time_ns, 2500u) << "the observed time without a time";
  EXPECT_EQ(out.logs[1].severity_number, 0) << "a severity that is not a number is skipped";
  EXPECT_EQ(out.logs[1].body, R"({"step":7})");
  EXPECT_EQ(out.logs[2].time_ns, 9u) << "a zero time is no time";
  EXPECT_EQ(out.logs[2].body.size(), 1000u) << "bodies are cut at 1000 bytes";
  EXPECT_FALSE(out.resources.at(out.logs[3].resource).rank) << "a resource not an object";
  // Without the option the records are not read, and the line is the same line.
  SpanLineReader plain({.threads = 1});
  ASSERT_EQ(plain.parse_line(line, out), "");
  EXPECT_TRUE(out.has_logs);
  EXPECT_TRUE(out.logs.empty());
}

TEST(ReportBuilder, LogRecordsKeptForThePageWarningsFirst) {
  ReportBuilder builder;
  ParsedRequest r;
  r.resources.emplace_back().rank = 1;
  r.has_logs = true;
  const std::size_t n = ReportBuilder::kMaxLogRows + 10;
  auto log = [&](std::uint64_t time, int severity) {
    LogEntry& l = r.logs.emplace_back();
    l.time_ns = time;
    l.severity_number = severity;
  };
  for (std::size_t i = 0; i < n; ++i) log(n - i, 9);
  for (std::uint64_t i = 0; i < 5; ++i) log(100 + i, 17);
  builder.add(r);
  const Report report = builder.finish({}, {}).front();
  EXPECT_EQ(report.log_count, n + 5);
  ASSERT_EQ(report.logs.size(), ReportBuilder::kMaxLogRows);
  EXPECT_EQ(std::count_if(report.logs.begin(), report.logs.end(),
                          [](const LogRow& l) { return l.severity_number == 17; }),
            5);
  EXPECT_TRUE(
      std::is_sorted(report.logs.begin(), report.logs.end(),
                     [](const LogRow& a, const LogRow& b) { return a.time_ns < b.time_ns; }));
  EXPECT_EQ(report.logs.front().rank, 1);
}

TEST(SpanLineReader, MalformedMetricsLinesSayWhy) {
  struct Case {
    std::string line;
    std::string error;
  };
  const std::string sum = R"({"name":"s","sum":{"dataPoints":[POINT]}})";
  auto with_point = [&](const std::string& point) {
    std::string m = sum;
    m.replace(m.find("POINT"), 5, point);
    return one_metric_line(m);
  };
  auto with_histogram = [&](const std::string& point) {
    return one_metric_line(R"({"name":"h","histogram":{"dataPoints":[)" + point + "]}}");
  };
  auto with_exponential = [&](const std::string& point) {
    return one_metric_line(R"({"name":"e","exponentialHistogram":{"dataPoints":[)" + point + "]}}");
  };
  const Case cases[] = {
      {R"({"resourceMetrics":{}})", "resourceMetrics is not an array"},
      {R"({"resourceMetrics":7})", "resourceMetrics is not an array"},
      {R"({"resourceMetrics":[1]})", "an element of resourceMetrics is not an object"},
      {R"({"resourceMetrics":[{"scopeMetrics":{}}]})",
       "resourceMetrics[].scopeMetrics is not an array"},
      {R"({"resourceMetrics":[{"scopeMetrics":[{"metrics":[3]}]}]})",
       "an element of resourceMetrics[].scopeMetrics[].metrics is not an object"},
      {R"({"resourceMetrics":[{"resource":[],"scopeMetrics":[]}]})",
       "resourceMetrics: resource is not an object"},
      {one_metric_line(R"({"sum":{}})"), "metric 1: no name"},
      {one_metric_line(R"({"name":"x","gauge":[]})"), "metric 'x': gauge is not an object"},
      {one_metric_line(R"({"name":"x","gauge":{"dataPoints":{}}})"),
       "metric 'x': gauge.dataPoints is not an array"},
      {with_point("3"), "metric 's': dataPoints[0]: is not an object"},
      {with_point(R"({"timeUnixNano":"-1"})"),
       "metric 's': dataPoints[0]: timeUnixNano '-1' is not a decimal integer"},
      {with_point(R"({"asInt":"1.5"})"), "metric 's': dataPoints[0]: asInt '1.5' is not a decimal"},
      {with_point(R"({"asDouble":"lots"})"), "dataPoints[0]: asDouble 'lots' is not a number"},
      {with_point(R"({"attributes":[{"value":{"intValue":"1"}}]})"), "an attribute has no key"},
      {with_point(R"({"attributes":[{"key":"k","value":{"intValue":"x"}}]})"),
       "attribute 'k': intValue is not a 64-bit integer"},
      {with_histogram(R"({"count":"2","bucketCounts":["1","1"],"explicitBounds":[]})"),
       "metric 'h': dataPoints[0]: 2 bucketCounts for 0 explicitBounds (expected one more)"},
      {with_histogram(R"({"bucketCounts":["x"]})"),
       "bucketCounts holds 'x', not a decimal integer"},
      {with_histogram(R"({"explicitBounds":[true]})"), "explicitBounds holds true, not a number"},
      {with_histogram(R"({"sum":"x"})"), "dataPoints[0]: sum 'x' is not a number"},
      {one_metric_line(R"({"name":"x","sum":{"aggregationTemporality":"x2","isMonotonic":1}})"),
       "metric 'x': sum.isMonotonic is not a boolean"},
      {with_exponential(R"({"scale":"x"})"), "dataPoints[0]: scale 'x' is not a decimal integer"},
      {with_exponential(R"({"scale":2147483648})"), "scale 2147483648 is not a decimal integer"},
      {with_exponential(R"({"positive":[]})"), "dataPoints[0]: positive is not an object"},
      {with_exponential(R"({"negative":{"bucketCounts":{}}})"),
       "dataPoints[0]: negative.bucketCounts is not an array"},
      {with_exponential(R"({"positive":{"bucketCounts":["-1"]}})"),
       "positive.bucketCounts holds '-1', not a decimal integer"},
      {with_exponential(R"({"zeroCount":1.5})"), "zeroCount 1.5 is not a decimal integer"},
  };
  for (const Case& c : cases) {
    SpanLineReader reader({.threads = 1, .metrics = true});
    ParsedRequest out;
    const std::string error = reader.parse_line(c.line, out);
    EXPECT_NE(error.find(c.error), std::string::npos)
        << "line: " << c.line << "\nerror: " << error << "\nexpected: " << c.error;
  }
}

TEST(SpanLineReader, ReadsExponentialHistogramBuckets) {
  const std::string line = one_metric_line(
      R"({"name":"e","exponentialHistogram":{"dataPoints":[{"count":"7","sum":3.5,"scale":-2,
          "zeroCount":"1","zeroThreshold":1e-9,"positive":{"offset":-3,"bucketCounts":["2",1]},
          "negative":{"bucketCounts":["0","3"]}},{"count":"0","scale":"20"}],
          "aggregationTemporality":1}})");
  SpanLineReader reader({.threads = 1, .metrics = true});
  ParsedRequest out;
  ASSERT_EQ(reader.parse_line(line, out), "");
  ASSERT_EQ(out.metrics.size(), 1u);
  ASSERT_EQ(out.metrics[0].points.size(), 2u);
  const MetricPoint& p = out.metrics[0].points[0];
  EXPECT_EQ(p.scale, -2);
  EXPECT_EQ(p.zero_count, 1u);
  EXPECT_EQ(p.zero_threshold, 1e-9);
  EXPECT_EQ(p.positive.offset, -3);
  EXPECT_EQ(p.positive.counts, (std::vector<std::uint64_t>{2, 1}));
  EXPECT_EQ(p.negative.offset, 0);  // absent: 0, as in protobuf
  EXPECT_EQ(p.negative.counts, (std::vector<std::uint64_t>{0, 3}));
  EXPECT_EQ(out.metrics[0].points[1].scale, 20);
}

// ---- metrics aggregation ----

MetricPoint histogram_point(std::vector<std::uint64_t> counts, std::vector<double> bounds,
                            std::optional<double> min = {}, std::optional<double> max = {}) {
  MetricPoint p;
  for (std::uint64_t c : counts) p.count += c;
  p.bucket_counts = std::move(counts);
  p.explicit_bounds = std::move(bounds);
  p.min = min;
  p.max = max;
  p.sum = 0;
  return p;
}

TEST(BucketHistogram, QuantilesInterpolateInsideTheirBucket) {
  const BucketHistogram h =
      BucketHistogram::of(histogram_point({0, 2, 6, 2, 0}, {0.05, 0.1, 0.25, 1}));
  EXPECT_DOUBLE_EQ(*h.quantile(0.5), 0.175);    // rank 5: 3 of the 6 values in (0.1, 0.25]
  EXPECT_DOUBLE_EQ(*h.quantile(0.95), 0.8125);  // rank 9.5: 1.5 of 2 in (0.25, 1]
  EXPECT_DOUBLE_EQ(*h.quantile(0), 0.05);
  EXPECT_DOUBLE_EQ(*h.quantile(1), 1.0);
  EXPECT_DOUBLE_EQ(*h.max_estimate(), 1.0);  // the highest non-empty bucket's bound
  // min and max clamp the estimates; max is then exact.
  const BucketHistogram c =
      BucketHistogram::of(histogram_point({0, 8, 2, 0, 0}, {0.05, 0.1, 0.25, 1}, 0.08, 0.2));
  EXPECT_DOUBLE_EQ(*c.quantile(0.5), 0.08 + 0.02 * 5 / 8);
  EXPECT_DOUBLE_EQ(*c.quantile(0.95), 0.175);
  EXPECT_DOUBLE_EQ(*c.max_estimate(), 0.2);
  // The first bucket starts at 0 (positive bounds) and the overflow bucket ends at the last bound.
  const BucketHistogram edges = BucketHistogram::of(histogram_point({2, 0, 2}, {10, 20}));
  EXPECT_DOUBLE_EQ(*edges.quantile(0.25), 5.0);
  EXPECT_DOUBLE_EQ(*edges.quantile(1), 20.0);
  EXPECT_DOUBLE_EQ(*edges.max_estimate(), 20.0);
  // Nothing to estimate from.
  EXPECT_FALSE(BucketHistogram::of(histogram_point({}, {})).quantile(0.5));
  EXPECT_FALSE(BucketHistogram::of(histogram_point({0, 0}, {1})).quantile(0.5));
  EXPECT_FALSE(BucketHistogram::of(histogram_point({3}, {})).quantile(0.5));
  EXPECT_DOUBLE_EQ(*BucketHistogram::of(histogram_point({3}, {}, 1.0, 4.0)).quantile(0.5), 2.5);
}

TEST(BucketHistogram, MergeAddsBucketsAndRebucketsOtherBounds) {
  BucketHistogram h = BucketHistogram::of(histogram_point({1, 1, 1}, {1, 2}, 0.5, 3.0));
  h.merge(BucketHistogram::of(histogram_point({0, 2, 0}, {1, 2}, 1.5, 1.7)));
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{1, 3, 1}));
  EXPECT_EQ(h.count, 5u);
  EXPECT_EQ(h.min, 0.5);
  EXPECT_EQ(h.max, 3.0);
  // Other bounds: each bucket goes to the one holding its upper bound (2.0 -> (1, 2], 5 -> +inf).
  h.merge(BucketHistogram::of(histogram_point({4, 1, 6}, {2.0, 5.0})));
  EXPECT_EQ(h.counts, (std::vector<std::uint64_t>{1, 7, 8}));
  EXPECT_EQ(h.count, 16u);
  EXPECT_FALSE(h.min.has_value());  // not every point knew it
  BucketHistogram without_sum;
  MetricPoint p = histogram_point({1}, {});
  p.sum.reset();
  without_sum.merge(BucketHistogram::of(p));
  without_sum.merge(BucketHistogram::of(histogram_point({1}, {})));
  EXPECT_FALSE(without_sum.has_sum);
}

// An exponential histogram point at `scale` with positive buckets from `offset`.
MetricPoint exponential_point(std::int32_t scale, std::int32_t offset,
                              std::vector<std::uint64_t> positive, std::uint64_t zero = 0,
                              std::int32_t negative_offset = 0,
                              std::vector<std::uint64_t> negative = {}) {
  MetricPoint p;
  p.scale = scale;
  p.zero_count = zero;
  p.positive = {offset, std::move(positive)};
  p.negative = {negative_offset, std::move(negative)};
  p.count = zero;
  for (std::uint64_t c : p.positive.counts) p.count += c;
  for (std::uint64_t c : p.negative.counts) p.count += c;
  p.sum = 0;
  return p;
}

// The OTLP bucket index of v > 0 at `scale`: bucket k holds (base^k, base^(k+1)] with base =
// 2^(2^-scale), so k = ceil(log2(v) * 2^scale) - 1. Computed from the logarithm, independently of
// lens' code.
std::int32_t bucket_index(double v, int scale) {
  return static_cast<std::int32_t>(std::ceil(std::log2(v) * std::pow(2.0, scale))) - 1;
}

// A point holding `values` (all > 0) in exponential buckets at `scale`.
MetricPoint exponential_of(const std::vector<double>& values, int scale) {
  std::int32_t lo = std::numeric_limits<std::int32_t>::max();
  std::int32_t hi = std::numeric_limits<std::int32_t>::min();
  for (double v : values) {
    lo = std::min(lo, bucket_index(v, scale));
    hi = std::max(hi, bucket_index(v, scale));
  }
  std::vector<std::uint64_t> counts(static_cast<std::size_t>(hi - lo + 1));
  for (double v : values) ++counts[static_cast<std::size_t>(bucket_index(v, scale) - lo)];
  return exponential_point(scale, lo, std::move(counts));
}

// The q-quantile of `values` by the nearest rank: the ceil(q·n)-th smallest.
double nearest_rank(std::vector<double> values, double q) {
  std::sort(values.begin(), values.end());
  const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(values.size())));
  return values[std::max<std::size_t>(rank, 1) - 1];
}

TEST(ExponentialHistogram, QuantilesInterpolateExponentiallyInsideTheirBucket) {
  // Scale 0, base 2: one value in (1, 2], three in (2, 4].
  const BucketHistogram h = BucketHistogram::of(exponential_point(0, 0, {1, 3}));
  // Rank 2 is 1 of the 3 values of (2, 4]: a third of the way through it in log scale.
  EXPECT_DOUBLE_EQ(*h.quantile(0.5), std::pow(2.0, 1 + 1.0 / 3));
  EXPECT_DOUBLE_EQ(*h.quantile(0.95), std::pow(2.0, 1 + 2.8 / 3));
  EXPECT_DOUBLE_EQ(*h.quantile(0), 1.0);
  EXPECT_DOUBLE_EQ(*h.quantile(1), 4.0);
  EXPECT_DOUBLE_EQ(*h.max_estimate(), 4.0);
  // Scale 2 (base 2^(1/4)), offset 3, as in the report's fixture: rank 2 of 4 in bucket 4.
  const BucketHistogram fixture = BucketHistogram::of(exponential_point(2, 3, {1, 3}));
  EXPECT_DOUBLE_EQ(*fixture.quantile(0.5), std::pow(2.0, (4 + 1.0 / 3) / 4));
  // A negative scale: base 2^(2^2) = 16, bucket -1 is (1/16, 1].
  const BucketHistogram coarse = BucketHistogram::of(exponential_point(-2, -1, {2}));
  EXPECT_DOUBLE_EQ(*coarse.quantile(0.5), 0.25);  // half-way: 16^-0.5
}

TEST(ExponentialHistogram, NegativeBucketsAndTheZeroBucketComeInValueOrder) {
  // Scale 1 (base sqrt 2): two values in [-1, -1/sqrt 2), one zero, one in (2, 2 sqrt 2].
  const BucketHistogram h = BucketHistogram::of(exponential_point(1, 2, {1}, 1, -1, {2}));
  EXPECT_DOUBLE_EQ(*h.quantile(0), -1.0);
  EXPECT_DOUBLE_EQ(*h.quantile(0.25), -std::pow(2.0, -0.25));  // half-way through, in log scale
  EXPECT_DOUBLE_EQ(*h.quantile(0.5), -std::pow(2.0, -0.5));    // the top of the negative bucket
  EXPECT_EQ(*h.quantile(0.6), 0.0);
  EXPECT_DOUBLE_EQ(*h.quantile(0.9), std::pow(2.0, 2.6 / 2));
  EXPECT_DOUBLE_EQ(*h.max_estimate(), std::pow(2.0, 1.5));
  // Only negative values: the maximum is the top of the highest bucket.
  EXPECT_DOUBLE_EQ(*BucketHistogram::of(exponential_point(0, 0, {}, 0, 3, {1, 1})).max_estimate(),
                   -8.0);
  EXPECT_EQ(*BucketHistogram::of(exponential_point(0, 0, {}, 5)).quantile(0.5), 0.0);
  // Nothing to estimate from.
  EXPECT_FALSE(BucketHistogram::of(exponential_point(3, 0, {0, 0})).quantile(0.5));
  EXPECT_FALSE(BucketHistogram::of(exponential_point(3, 0, {0, 0})).max_estimate());
}

TEST(ExponentialHistogram, MinAndMaxClampTheEstimates) {
  MetricPoint p = exponential_point(0, 0, {1, 3});
  p.min = 1.5;
  p.max = 2.5;
  const BucketHistogram h = BucketHistogram::of(p);
  EXPECT_DOUBLE_EQ(*h.quantile(0), 1.5);
  EXPECT_DOUBLE_EQ(*h.quantile(0.95), 2.5);
  EXPECT_DOUBLE_EQ(*h.max_estimate(), 2.5);
}

// Against the exact quantiles of the values the buckets were filled with: the estimate is in the
// same bucket as the exact value (at most one bucket width, a factor of base, away).
TEST(ExponentialHistogram, EstimatesFallInTheBucketOfTheExactQuantile) {
  std::mt19937 rng(11);
  // Spreads whose buckets fit within the 320 kept at each scale (as an SDK's 160 do).
  for (const auto& [scale, sigma] : {std::pair{-1, 1.5}, {0, 1.5}, {3, 1.5}, {4, 1.0}, {8, 0.05}}) {
    std::lognormal_distribution<double> latency(1.0, sigma);
    std::vector<double> values(5000);
    for (double& v : values) v = latency(rng);
    const MetricPoint point = exponential_of(values, scale);
    ASSERT_LE(point.positive.counts.size(), 320u) << scale;
    const BucketHistogram h = BucketHistogram::of(point);
    ASSERT_EQ(h.exponential.scale, scale);
    const double base = std::pow(2.0, std::pow(2.0, -scale));
    for (double q : {0.05, 0.25, 0.5, 0.9, 0.95, 0.99}) {
      const double exact = nearest_rank(values, q);
      const double estimate = *h.quantile(q);
      EXPECT_LE(estimate, exact * base * (1 + 1e-12)) << "scale " << scale << " q " << q;
      EXPECT_GE(estimate, exact / base * (1 - 1e-12)) << "scale " << scale << " q " << q;
      EXPECT_EQ(bucket_index(estimate, scale), bucket_index(exact, scale))
          << "scale " << scale << " q " << q << ": " << estimate << " vs " << exact;
    }
  }
}

TEST(ExponentialHistogram, MergingDifferentScalesUsesTheCoarserOne) {
  // The same values (some below 1: negative indices) at scales 3 and 1: merged at scale 1, the
  // buckets are those of the scale-1 histogram, twice.
  std::mt19937 rng(3);
  std::lognormal_distribution<double> d(0.0, 2.0);
  std::vector<double> values(2000);
  for (double& v : values) v = d(rng);
  BucketHistogram fine = BucketHistogram::of(exponential_of(values, 3));
  const BucketHistogram coarse = BucketHistogram::of(exponential_of(values, 1));
  fine.merge(coarse);
  EXPECT_EQ(fine.exponential.scale, 1);
  EXPECT_EQ(fine.count, 4000u);
  ASSERT_EQ(fine.exponential.positive.size(), coarse.exponential.positive.size());
  for (const auto& [k, c] : coarse.exponential.positive) {
    EXPECT_EQ(fine.exponential.positive.at(k), 2 * c) << "bucket " << k;
  }
  for (double q : {0.5, 0.95}) EXPECT_DOUBLE_EQ(*fine.quantile(q), *coarse.quantile(q)) << q;
}

// What OTLP allows but the report cannot place is read, never a malformed line: lens collect
// accepts any 32-bit scale and offset.
TEST(ExponentialHistogram, ScalesAndIndicesOutsideOtlpsRange) {
  // Finer than 20: read at 20 (bucket 8 at scale 22 is bucket 2 at scale 20, also for -8 -> -2).
  const BucketHistogram fine = BucketHistogram::of(exponential_point(22, 8, {1}, 0, -8, {1}));
  EXPECT_EQ(fine.exponential.scale, 20);
  EXPECT_EQ(fine.exponential.positive, (std::map<std::int32_t, std::uint64_t>{{2, 1}}));
  EXPECT_EQ(fine.exponential.negative, (std::map<std::int32_t, std::uint64_t>{{-2, 1}}));
  const BucketHistogram finest =
      BucketHistogram::of(exponential_point(std::numeric_limits<std::int32_t>::max(), -5, {1, 1}));
  EXPECT_EQ(finest.exponential.positive, (std::map<std::int32_t, std::uint64_t>{{-1, 2}}));
  // Coarser than -10, or indices past 32 bits: count and sum, no buckets, no quantiles.
  for (const MetricPoint& p :
       {exponential_point(-11, 0, {4}),
        exponential_point(0, std::numeric_limits<std::int32_t>::max(), {1, 1})}) {
    const BucketHistogram h = BucketHistogram::of(p);
    EXPECT_TRUE(h.exponential.empty);
    EXPECT_EQ(h.count, p.count);
    EXPECT_FALSE(h.quantile(0.5));
  }
  // Through the line reader: readable, not malformed.
  const std::string line = one_metric_line(
      R"({"name":"e","exponentialHistogram":{"dataPoints":[{"count":"1","scale":-40,
          "positive":{"offset":2147483647,"bucketCounts":["1"]}}]}})");
  SpanLineReader reader({.threads = 1, .metrics = true});
  ParsedRequest out;
  EXPECT_EQ(reader.parse_line(line, out), "");
}

TEST(ExponentialHistogram, BucketsSpanningTooFarLowerTheScale) {
  BucketHistogram h = BucketHistogram::of(exponential_point(20, 0, {1}));
  h.merge(BucketHistogram::of(exponential_point(20, 1000, {1})));
  // 1001 buckets apart at scale 20; 251 at scale 18 (1000 / 4 = 250), within the 320 kept.
  EXPECT_EQ(h.exponential.scale, 18);
  EXPECT_EQ(h.exponential.positive, (std::map<std::int32_t, std::uint64_t>{{0, 1}, {250, 1}}));
  EXPECT_EQ(h.exponential.total(), 2u);
}

// A request of one metric on one resource, built directly.
ParsedRequest metric_request(MetricRecord metric, std::optional<std::int64_t> rank,
                             std::string instance_id = {}) {
  ParsedRequest r;
  SpanResource& resource = r.resources.emplace_back();
  resource.rank = rank;
  resource.instance_id = std::move(instance_id);
  metric.resource = 0;
  r.metrics.push_back(std::move(metric));
  r.has_metrics = true;
  return r;
}

MetricRecord number_metric(const std::string& name, MetricType type, int temporality,
                           std::vector<std::tuple<std::string, std::uint64_t, double>> points,
                           bool ints = false) {
  MetricRecord m;
  m.name = name;
  m.type = type;
  m.temporality = temporality;
  for (const auto& [series, time, value] : points) {
    MetricPoint& p = m.points.emplace_back();
    p.series = series;
    p.time_ns = time;
    p.has_value = true;
    p.is_int = ints;
    p.int_value = static_cast<std::int64_t>(value);
    p.value = value;
  }
  return m;
}

TEST(MetricAggregator, SumsGaugesAndRanks) {
  MetricAggregator agg;
  // Cumulative: the latest point of each series, added up; a point older than one seen is not
  // the last value.
  agg.add(metric_request(
      number_metric("c", MetricType::kSum, 2, {{"", 10, 5}, {"a=1", 10, 7}}, true), 0));
  agg.add(metric_request(
      number_metric("c", MetricType::kSum, 2, {{"", 30, 9}, {"a=1", 5, 100}}, true), 0));
  // Delta: every point added up.
  agg.add(
      metric_request(number_metric("d", MetricType::kSum, 1, {{"", 1, 0.5}, {"x=y", 2, 0.25}}), 0));
  agg.add(metric_request(number_metric("d", MetricType::kSum, 1, {{"", 3, 1.0}}), 0));
  // Gauge: the latest point of any series.
  agg.add(metric_request(
      number_metric("g", MetricType::kGauge, 0, {{"gpu=0", 20, 1}, {"gpu=1", 10, 2}}), 0));
  agg.add(metric_request(number_metric("g", MetricType::kGauge, 0, {{"gpu=1", 20, 3}}), 0));
  // Ranks: dl.rank, else service.instance.id, else unknown; int sums past INT64_MAX turn double.
  const double big = 9.0e18;
  agg.add(
      metric_request(number_metric("c", MetricType::kSum, 2, {{"", 1, big}, {"b", 1, big}}, true),
                     std::nullopt, "w"));
  agg.add(
      metric_request(number_metric("c", MetricType::kSum, 0, {{"", 1, 1}}, true), std::nullopt));
  agg.add(metric_request(number_metric("c", MetricType::kSum, 2, {{"", 1, 2}}, true), -1));
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 6u);
  EXPECT_EQ(rows[0].name, "c");
  EXPECT_EQ(rows[0].rank, -1);
  EXPECT_EQ(rows[1].rank, 0);
  EXPECT_TRUE(rows[1].is_int);
  EXPECT_EQ(rows[1].int_value, 16);  // 9 + 7
  EXPECT_EQ(rows[1].series, 2u);
  EXPECT_EQ(rows[1].points, 4u);
  EXPECT_EQ(rows[1].temporality, "cumulative");
  EXPECT_EQ(rows[2].instance_id, "w");
  EXPECT_FALSE(rows[2].rank.has_value());
  EXPECT_FALSE(rows[2].is_int);
  EXPECT_DOUBLE_EQ(rows[2].value, 2 * big);
  EXPECT_FALSE(rows[3].rank.has_value());
  EXPECT_EQ(rows[3].instance_id, "");
  EXPECT_EQ(rows[3].int_value, 1);
  EXPECT_EQ(rows[4].name, "d");
  EXPECT_DOUBLE_EQ(rows[4].value, 1.75);
  EXPECT_EQ(rows[4].temporality, "delta");
  EXPECT_EQ(rows[5].name, "g");
  EXPECT_EQ(rows[5].value, 3.0);  // gpu=1 at 20, read after gpu=0 at 20
  EXPECT_EQ(rows[5].temporality, "");
  EXPECT_EQ(rows[5].series, 2u);
  // Each series' latest value, by attributes: not only the latest of them all.
  ASSERT_EQ(rows[5].by_series.size(), 2u);
  EXPECT_EQ(rows[5].by_series[0].attributes, "gpu=0");
  EXPECT_EQ(rows[5].by_series[0].value, 1.0);
  EXPECT_EQ(rows[5].by_series[1].attributes, "gpu=1");
  EXPECT_EQ(rows[5].by_series[1].value, 3.0);
  EXPECT_TRUE(rows[4].by_series.empty()) << "sums add their series up";
  EXPECT_EQ(rows[1].attributes, "") << "two series";
}

TEST(MetricAggregator, ExponentialHistogramsGetQuantiles) {
  MetricAggregator agg;
  auto metric = [](int temporality, std::uint64_t time, MetricPoint p, std::string series = "") {
    MetricRecord m;
    m.name = "e";
    m.type = MetricType::kExponentialHistogram;
    m.temporality = temporality;
    p.time_ns = time;
    p.series = std::move(series);
    m.points.push_back(std::move(p));
    return m;
  };
  // Cumulative: the latest point of each series, the series merged (scale 1 with scale 0: 0).
  agg.add(metric_request(metric(2, 10, exponential_point(0, 0, {9, 9})), 0));
  agg.add(metric_request(metric(2, 20, exponential_point(0, 0, {1, 1})), 0));
  agg.add(metric_request(metric(2, 20, exponential_point(1, 2, {2}), "x=1"), 0));
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].count, 4u);
  // Scale 0: one value in (1, 2], three in (2, 4] (bucket 2 at scale 1 is bucket 1 at scale 0).
  EXPECT_DOUBLE_EQ(*rows[0].p50, std::pow(2.0, 1 + 1.0 / 3));
  EXPECT_DOUBLE_EQ(*rows[0].p95, std::pow(2.0, 1 + 2.8 / 3));
  EXPECT_DOUBLE_EQ(*rows[0].max, 4.0);
}

TEST(MetricAggregator, HistogramsCumulativeAndDelta) {
  MetricAggregator agg;
  auto histogram = [](int temporality, std::uint64_t time, std::vector<std::uint64_t> counts,
                      double sum, std::string series = "") {
    MetricRecord m;
    m.name = "h";
    m.type = MetricType::kHistogram;
    m.temporality = temporality;
    MetricPoint p = histogram_point(std::move(counts), {1, 2});
    p.time_ns = time;
    p.sum = sum;
    p.series = std::move(series);
    m.points.push_back(p);
    return m;
  };
  agg.add(metric_request(histogram(2, 10, {1, 1, 0}, 2.0), 0));
  agg.add(metric_request(histogram(2, 20, {2, 2, 0}, 5.0), 0));           // cumulative: replaces
  agg.add(metric_request(histogram(2, 15, {9, 9, 9}, 99.0), 0));          // older: ignored
  agg.add(metric_request(histogram(2, 20, {0, 0, 2}, 6.0, "other"), 0));  // another series: added
  agg.add(metric_request(histogram(1, 10, {1, 0, 0}, 0.5), 1));
  agg.add(metric_request(histogram(1, 20, {1, 2, 0}, 3.5), 1));  // delta: added
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[0].count, 6u);
  EXPECT_EQ(rows[0].sum, 11.0);
  EXPECT_DOUBLE_EQ(*rows[0].mean, 11.0 / 6);
  EXPECT_DOUBLE_EQ(*rows[0].p50, 1.5);  // rank 3: 1 of the 2 values in (1, 2]
  EXPECT_DOUBLE_EQ(*rows[0].max, 2.0);  // the overflow bucket ends at the last bound
  EXPECT_EQ(rows[0].series, 2u);
  EXPECT_EQ(rows[1].count, 4u);
  EXPECT_EQ(rows[1].sum, 4.0);
  EXPECT_EQ(rows[1].temporality, "delta");
  EXPECT_DOUBLE_EQ(*rows[1].p50, 1.0);  // rank 2: the top of (0, 1]
}

// ---- metric series over time ----

// The points of a row's only series as (time, value) pairs.
std::vector<std::pair<std::uint64_t, double>> values_of(const MetricRow& row) {
  std::vector<std::pair<std::uint64_t, double>> out;
  for (const SeriesPoint& p : row.timeseries.at(0).points) out.emplace_back(p.time_ns, p.value);
  return out;
}

using Values = std::vector<std::pair<std::uint64_t, double>>;

TEST(MetricSeries, SumsAndGaugesOverTime) {
  MetricAggregator agg;
  // Cumulative: each point's value, by time whatever the order read.
  agg.add(metric_request(number_metric("c", MetricType::kSum, 2, {{"", 30, 9}}, true), 0));
  agg.add(
      metric_request(number_metric("c", MetricType::kSum, 2, {{"", 10, 5}, {"", 20, 7}}, true), 0));
  // Delta: the running total, so that the last point is the row's value.
  agg.add(metric_request(number_metric("d", MetricType::kSum, 1, {{"", 1, 0.5}, {"", 3, 1.0}}), 0));
  agg.add(metric_request(number_metric("d", MetricType::kSum, 1, {{"", 2, 0.25}}), 0));
  // Gauge: each series' points as they are.
  agg.add(metric_request(
      number_metric("g", MetricType::kGauge, 0, {{"gpu=0", 20, 1}, {"gpu=1", 10, 2}}), 0));
  agg.add(metric_request(number_metric("g", MetricType::kGauge, 0, {{"gpu=1", 20, 3}}), 0));
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(values_of(rows[0]), (Values{{10, 5}, {20, 7}, {30, 9}}));
  EXPECT_TRUE(rows[0].timeseries[0].points[0].is_int);
  EXPECT_EQ(rows[0].timeseries[0].points[2].int_value, 9);
  EXPECT_EQ(values_of(rows[1]), (Values{{1, 0.5}, {2, 0.75}, {3, 1.75}}));
  EXPECT_FALSE(rows[1].timeseries[0].points[0].is_int);
  ASSERT_EQ(rows[2].timeseries.size(), 2u);
  EXPECT_EQ(rows[2].timeseries[0].attributes, "gpu=0");
  EXPECT_EQ(values_of(rows[2]), (Values{{20, 1}}));
  EXPECT_EQ(rows[2].timeseries[1].attributes, "gpu=1");
  ASSERT_EQ(rows[2].timeseries[1].points.size(), 2u);
  EXPECT_EQ(rows[2].timeseries[1].points[1].value, 3.0);
}

// Two runs in one receiver's files (two jobs, or a restart with a new run id): two curves of the
// rank's metric, not one that jumps back.
TEST(MetricSeries, EachRunIsASeriesOfItsOwn) {
  MetricAggregator agg;
  for (const char* run : {"b", "a"}) {
    ParsedRequest r =
        metric_request(number_metric("c", MetricType::kSum, 2, {{"", 10, 5}, {"", 20, 7}}), 0);
    r.resources[0].run_id = run;
    agg.add(r);
  }
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 1u);
  ASSERT_EQ(rows[0].timeseries.size(), 2u);
  EXPECT_EQ(rows[0].timeseries[0].run_id, "a");
  EXPECT_EQ(rows[0].timeseries[1].run_id, "b");
  EXPECT_EQ(values_of(rows[0]), (Values{{10, 5}, {20, 7}}));
  EXPECT_EQ(rows[0].timeseries[1].points.size(), 2u);
}

MetricRecord histogram_metric(int temporality, std::uint64_t time,
                              std::vector<std::uint64_t> counts, double sum) {
  MetricRecord m;
  m.name = "h";
  m.type = MetricType::kHistogram;
  m.temporality = temporality;
  MetricPoint p = histogram_point(std::move(counts), {1, 2}, 0.0, 10.0);
  p.time_ns = time;
  p.sum = sum;
  m.points.push_back(std::move(p));
  return m;
}

TEST(MetricSeries, HistogramsGiveEachIntervalsCountSumAndPercentiles) {
  MetricAggregator agg;
  // Cumulative: each point minus the one before it; after a reset (fewer values), the point.
  agg.add(metric_request(histogram_metric(2, 10, {2, 0, 0}, 1.0), 0));
  agg.add(metric_request(histogram_metric(2, 20, {2, 4, 0}, 7.0), 0));
  agg.add(metric_request(histogram_metric(2, 30, {1, 0, 1}, 4.0), 0));
  // Delta: each point as it is.
  agg.add(metric_request(histogram_metric(1, 10, {0, 2, 0}, 3.0), 1));
  agg.add(metric_request(histogram_metric(1, 20, {0, 0, 2}, 8.0), 1));
  const std::vector<MetricRow> rows = agg.finish();
  ASSERT_EQ(rows.size(), 2u);
  const std::vector<SeriesPoint>& c = rows[0].timeseries.at(0).points;
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].count, 2u);
  EXPECT_EQ(c[0].sum, 1.0);
  EXPECT_DOUBLE_EQ(*c[0].p50, 0.5);  // (0, 1], min 0
  EXPECT_EQ(c[1].count, 4u);         // 6 - 2, all in (1, 2]
  EXPECT_EQ(c[1].sum, 6.0);
  EXPECT_DOUBLE_EQ(*c[1].p50, 1.5);
  EXPECT_DOUBLE_EQ(*c[1].p95, 1.95);
  EXPECT_EQ(c[2].count, 2u) << "a reset: the point itself";
  EXPECT_EQ(c[2].sum, 4.0);
  EXPECT_DOUBLE_EQ(*c[2].p95, 2 + 8 * 0.9);  // (2, max 10]: rank 1.9 is 0.9 into it
  const std::vector<SeriesPoint>& d = rows[1].timeseries.at(0).points;
  ASSERT_EQ(d.size(), 2u);
  EXPECT_EQ(d[0].count, 2u);
  EXPECT_DOUBLE_EQ(*d[0].p50, 1.5);
  EXPECT_EQ(d[1].count, 2u);
  EXPECT_EQ(d[1].sum, 8.0);
}

TEST(MetricSeries, ExponentialHistogramIntervalsAtTheCoarserScale) {
  MetricAggregator agg;
  auto metric = [](std::uint64_t time, MetricPoint p) {
    MetricRecord m;
    m.name = "e";
    m.type = MetricType::kExponentialHistogram;
    m.temporality = 2;
    p.time_ns = time;
    m.points.push_back(std::move(p));
    return m;
  };
  // Scale 1 then scale 0: bucket 2 (scale 1) is bucket 1 (scale 0); 1 + 3 values in (2, 4].
  agg.add(metric_request(metric(10, exponential_point(1, 2, {1})), 0));
  agg.add(metric_request(metric(20, exponential_point(0, 1, {4})), 0));
  const std::vector<MetricRow> rows = agg.finish();
  const std::vector<SeriesPoint>& e = rows.at(0).timeseries.at(0).points;
  ASSERT_EQ(e.size(), 2u);
  EXPECT_EQ(e[1].count, 3u);
  EXPECT_DOUBLE_EQ(*e[1].p50, std::pow(2.0, 1.5));
}

// Property: whatever the points and their order, the last point of a series is the row's value
// (sums and gauges), and a histogram's intervals add up to its count; past kMaxSeriesPoints the
// series is thinned and still ends there.
TEST(MetricSeries, LastPointIsTheRowsValue) {
  std::mt19937_64 rng(7);
  for (const std::size_t n : {std::size_t{1}, std::size_t{5}, std::size_t{300},
                              MetricAggregator::kMaxSeriesPoints * 3 + 7}) {
    for (const int temporality : {1, 2}) {
      MetricAggregator agg;
      std::vector<std::uint64_t> times(n);
      for (std::size_t i = 0; i < n; ++i) times[i] = kT0 + (i + 1) * kMs;
      std::shuffle(times.begin(), times.end(), rng);
      for (const std::uint64_t t : times) {
        const auto step = static_cast<double>(t - kT0) / kMs;
        // Cumulative values grow with time; delta values are any.
        const double v = temporality == 2 ? step * 3 : static_cast<double>(rng() % 100);
        agg.add(metric_request(
            number_metric("s", MetricType::kSum, temporality, {{"", t, v}}, true), 0));
        agg.add(metric_request(number_metric("g", MetricType::kGauge, 0, {{"", t, v / 7}}), 0));
        const auto k = static_cast<std::uint64_t>(step);
        agg.add(metric_request(
            histogram_metric(temporality, t,
                             temporality == 2 ? std::vector<std::uint64_t>{k, k, 0}
                                              : std::vector<std::uint64_t>{rng() % 3, 1, 0},
                             static_cast<double>(k)),
            0));
      }
      const std::vector<MetricRow> rows = agg.finish();
      ASSERT_EQ(rows.size(), 3u);
      const std::string what =
          "n=" + std::to_string(n) + " temporality " + std::to_string(temporality);
      for (const MetricRow& row : rows) {
        const std::vector<SeriesPoint>& points = row.timeseries.at(0).points;
        ASSERT_FALSE(points.empty()) << what;
        EXPECT_LE(points.size(), MetricAggregator::kMaxSeriesPoints) << what;
        EXPECT_GE(points.size(), std::min(n, MetricAggregator::kMaxSeriesPoints / 2)) << what;
        EXPECT_TRUE(std::is_sorted(
            points.begin(), points.end(),
            [](const SeriesPoint& a, const SeriesPoint& b) { return a.time_ns < b.time_ns; }))
            << what;
        EXPECT_EQ(points.back().time_ns, kT0 + n * kMs) << what;
        if (row.type == MetricType::kHistogram) {
          std::uint64_t count = 0;
          for (const SeriesPoint& p : points) count += p.count;
          EXPECT_EQ(count, row.count) << what;
        } else {
          EXPECT_EQ(points.back().value, row.value) << row.name << " " << what;
          EXPECT_EQ(points.back().is_int, row.is_int) << row.name << " " << what;
        }
      }
    }
  }
}

// Reads a Chrome trace written by `writer` fed `requests`.
nlohmann::json chrome_trace_of(const std::vector<ParsedRequest>& requests) {
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  {
    ChromeTraceWriter writer(out, "memory");
    for (const ParsedRequest& r : requests) writer.add(r);
    writer.finish();
  }
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  return nlohmann::json::parse(text);
}

TEST(ChromeTrace, MetricsBecomeCounterTracksOfTheirRank) {
  const nlohmann::json trace = chrome_trace_of({
      metric_request(number_metric("dl.loss", MetricType::kGauge, 0,
                                   {{"", kT0 + 1500, 2.5}, {"", kT0 + 3000, 2.0}, {"", 0, 9.0}}),
                     3),
      metric_request(
          number_metric("dl.samples", MetricType::kSum, 1,
                        {{"phase=train", kT0 + 1000, 64}, {"phase=train", kT0 + 2000, 64}}, true),
          3),
      metric_request(histogram_metric(1, kT0 + 2000, {0, 2, 0}, 3.0), std::nullopt),
  });
  std::vector<nlohmann::json> counters, processes;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "C") counters.push_back(e);
    if (e["ph"] == "M" && e["name"] == "process_name") processes.push_back(e);
  }
  ASSERT_EQ(counters.size(), 5u) << "not the point without a time: " << trace.dump();
  // By name, then rank: dl.loss and dl.samples of rank 3, then h of the unknown rank.
  EXPECT_EQ(counters[0], nlohmann::json::parse(R"({"name":"dl.loss","cat":"metric","ph":"C",
      "pid":3,"tid":0,"ts":1718000000000001.5,"args":{"value":2.5}})"));
  EXPECT_EQ(counters[1]["args"]["value"], 2.0);
  EXPECT_EQ(counters[1]["ts"], 1718000000000003.0);
  EXPECT_EQ(counters[2]["name"], "dl.samples {phase=train}");
  EXPECT_EQ(counters[2]["args"]["value"], 64);
  EXPECT_EQ(counters[3]["args"]["value"], 128) << "a delta sum's total then";
  EXPECT_EQ(counters[4]["name"], "h");
  EXPECT_EQ(counters[4]["pid"], kUnknownRankPid);
  EXPECT_EQ(counters[4]["args"], nlohmann::json::parse(R"({"count":2,"p50":1.5,"p95":1.95})"));
  // Processes that only have metrics are named too.
  ASSERT_EQ(processes.size(), 2u);
  EXPECT_EQ(processes[0]["args"]["name"], "rank 3");
  EXPECT_EQ(processes[1]["args"]["name"], "rank unknown");
}

TEST(ChromeTrace, MicrosecondsAreExactDecimalText) {
  EXPECT_EQ(micros_text(0), "0");
  EXPECT_EQ(micros_text(999), "0.999");
  EXPECT_EQ(micros_text(1500), "1.5");
  EXPECT_EQ(micros_text(2000), "2");
  EXPECT_EQ(micros_text(1'718'000'000'000'000'001ull), "1718000000000000.001");
  EXPECT_EQ(micros_text(18'446'744'073'709'551'615ull), "18446744073709551.615");
}

TEST(ChromeTrace, ACapturedSpanIsInTheCapturedCategoryWithItsMarks) {
  SpanLineReader reader({.details = true, .threads = 1});
  ParsedRequest request;
  ASSERT_EQ(
      reader.parse_line(request_line(report_test::rank_resource(0), captured_job(0, 3)), request),
      "");
  const nlohmann::json trace = chrome_trace_of({request});
  int captured = 0, spans = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] != "X") continue;
    ++spans;
    if (e["name"] == "layer_forward") {
      EXPECT_EQ(e["cat"], "layer,captured");
      EXPECT_EQ(e["args"]["lens.capture.reason"], "slow_step");
      EXPECT_EQ(e["args"]["lens.capture.id"], 3);
      ++captured;
    } else if (e["name"] == "forward_backward") {
      EXPECT_EQ(e["cat"], "forward_backward");
    }
  }
  EXPECT_EQ(captured, 2);
  EXPECT_EQ(spans, 18) << "every span, captured or not";
}

// Two ranks' steps of 10 ms on thread 1: forward_backward 8 ms, all_reduce 2 ms; each with kernel
// spans (<PREFIX>_GPU_KERNEL_SPANS: gpu.correlation_id, no thread.id): two GEMMs of 3 ms under
// forward_backward on stream 7, an NCCL kernel under the all-reduce on stream 9.
std::vector<SpanSpec> kernel_span_job() {
  std::vector<SpanSpec> spans;
  auto kernel = [](std::uint64_t id, std::uint64_t parent, const char* name, std::uint64_t start,
                   std::uint64_t end, std::int64_t stream) {
    return make_span(id, parent, name, "forward_backward", start, end, 0,
                     {{"gpu.kind", std::string("kernel")},
                      {"gpu.device", std::int64_t{0}},
                      {"gpu.stream", stream},
                      {"gpu.correlation_id", static_cast<std::int64_t>(id)}});
  };
  for (std::int64_t i = 1; i <= 3; ++i) {
    const std::uint64_t t = kT0 + static_cast<std::uint64_t>(i) * 100 * kMs, sid = 10 * i;
    spans.push_back(
        make_span(sid, 0, "train_step", "step", t, t + 10 * kMs, 1, {{"iteration", i}}));
    spans.push_back(
        make_span(sid + 1, sid, "forward_backward", "forward_backward", t, t + 8 * kMs, 1));
    spans.push_back(kernel(sid + 2, sid + 1, "ampere_sgemm", t + 1 * kMs, t + 4 * kMs, 7));
    spans.push_back(kernel(sid + 3, sid + 1, "ampere_sgemm", t + 4 * kMs, t + 7 * kMs, 7));
    spans.push_back(
        make_span(sid + 4, sid, "all_reduce", "communication", t + 8 * kMs, t + 10 * kMs, 1));
    SpanSpec nccl =
        kernel(sid + 5, sid + 4, "ncclDevKernel_AllReduce", t + 8 * kMs, t + 10 * kMs, 9);
    nccl.group = "communication";
    spans.push_back(nccl);
  }
  return spans;
}

// Kernel spans run on the GPU: they take nothing of the step thread's own time, and an NCCL
// kernel under a collective is not a collective of its own.
TEST(ReportBuilder, KernelSpansAreBesideTheStepsThreadAndNoCollective) {
  const Report r = build({{0, kernel_span_job()}, {1, kernel_span_job()}});
  std::map<std::string, std::uint64_t> self;
  for (const NameRow& n : r.names) self[n.name] = n.in_step_self_ns;
  EXPECT_EQ(self["forward_backward"], 6 * 8 * kMs);
  EXPECT_EQ(self["all_reduce"], 6 * 2 * kMs);
  EXPECT_EQ(self["ampere_sgemm"], 0u);
  EXPECT_EQ(self["ncclDevKernel_AllReduce"], 0u);
  ASSERT_FALSE(r.findings.empty());
  EXPECT_EQ(r.findings[0].matched_collectives, 3u) << "one all-reduce per step, not two";
  bool gemm_beside = false;
  for (const OverlapRow& o : r.overlap_names) gemm_beside |= o.name == "ampere_sgemm";
  EXPECT_TRUE(gemm_beside) << "the GPU's kernels are beside the step's thread";
}

// lens convert puts kernel spans on a track per GPU stream, named so.
TEST(ChromeTrace, KernelSpansGoOnTheirGpuStreamsTrack) {
  SpanLineReader reader({.details = true, .threads = 1});
  ParsedRequest request;
  ASSERT_EQ(
      reader.parse_line(request_line(report_test::rank_resource(0), kernel_span_job()), request),
      "");
  const nlohmann::json trace = chrome_trace_of({request});
  std::map<std::int64_t, std::string> thread_names;
  std::map<std::string, std::set<std::int64_t>> tids;
  for (const auto& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      thread_names[e["tid"].get<std::int64_t>()] = e["args"]["name"];
    } else if (e["ph"] == "X") {
      tids[e["name"]].insert(e["tid"].get<std::int64_t>());
    }
  }
  EXPECT_EQ(tids["ampere_sgemm"], std::set<std::int64_t>{kGpuStreamTid - 7});
  EXPECT_EQ(tids["ncclDevKernel_AllReduce"], std::set<std::int64_t>{kGpuStreamTid - 9});
  EXPECT_EQ(tids["forward_backward"], std::set<std::int64_t>{1});
  EXPECT_EQ(thread_names[kGpuStreamTid - 7], "GPU stream 7");
  EXPECT_EQ(thread_names[kGpuStreamTid - 9], "GPU stream 9");
}

TEST(ChromeTrace, SpansWithoutRankOrThreadStillGetAProcessAndAThread) {
  const std::string line =
      R"({"resourceSpans":[{"resource":{"attributes":[]},"scopeSpans":[{"spans":[
      {"traceId":"4bf92f3577b34da6a3ce929d0e0e4736","spanId":"0000000000000001","name":"x",
       "startTimeUnixNano":"1500","endTimeUnixNano":"4000"}]}]}]})";
  SpanLineReader reader({.details = true, .threads = 1});
  ParsedRequest request;
  ASSERT_EQ(reader.parse_line(line, request), "");
  char* buffer = nullptr;
  std::size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  ChromeTraceWriter writer(out, "memory");
  writer.add(request);
  writer.finish();
  std::fclose(out);
  const std::string text(buffer, size);
  std::free(buffer);
  const auto trace = nlohmann::json::parse(text);
  const auto& events = trace["traceEvents"];
  ASSERT_EQ(events.size(), 4u);
  EXPECT_EQ(events[0]["args"]["name"], "rank unknown");
  EXPECT_EQ(events[0]["pid"], kUnknownRankPid);
  EXPECT_EQ(events[2]["args"]["name"], "thread unknown");
  EXPECT_EQ(events[3]["cat"], "(none)");
  EXPECT_NE(text.find(R"("ts":1.5,"dur":2.5,)"), std::string::npos) << text;
}

}  // namespace
}  // namespace nemo::lens::cli
