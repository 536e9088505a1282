// The `file` exporter never writes a line `lens report` cannot read: a batch whose OTLP/JSON line
// would exceed the limit becomes a line per span, and a span too long alone has its longest
// strings cut and marked. With a small limit on generated spans, then with a real 200 MB
// attribute read back by the lens binary.
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "common/span_reader.hpp"
#include "export/exporters.hpp"
#include "export/json_writer.hpp"
#include "lens_collect.hpp"
#include "nemo/lens/lens.hpp"

namespace {

using nemo::lens::ExportResult;
using nemo::lens::Resource;
using nemo::lens::SpanData;
using nemo::lens::detail::FileSpanExporter;
using Json = nlohmann::json;
using namespace std::chrono_literals;
using lens_test::lines_of;

static_assert(nemo::lens::cli::SpanLineReader::kMaxLineBytes ==
                  nemo::lens::detail::json::kMaxLineBytes,
              "lens report reads every line the file exporter writes");

// A temporary directory, removed with what it holds.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = std::filesystem::temp_directory_path() / "lens-line-limit-XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

SpanData span_with(int i, std::vector<nemo::lens::KeyValue> attributes) {
  SpanData s;
  s.name = "step " + std::to_string(i);
  s.group = "step";
  s.context.trace_id = *nemo::lens::TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  s.context.span_id.bytes[7] = static_cast<std::uint8_t>(i + 1);
  s.context.trace_flags = 1;
  s.start_time_unix_nano = 1'700'000'000'000'000'000 + i;
  s.end_time_unix_nano = s.start_time_unix_nano + 1'000'000;
  s.attributes = std::move(attributes);
  return s;
}

ExportResult export_all(FileSpanExporter& exporter, const std::vector<SpanData>& spans) {
  std::vector<const SpanData*> views;
  for (const auto& s : spans) views.push_back(&s);
  return exporter.export_spans(views, Resource{}, std::chrono::steady_clock::now() + 10s);
}

// The spans of one line, parsed.
std::vector<Json> spans_of(const std::string& line) {
  std::vector<Json> spans;
  const Json doc = Json::parse(line);
  for (const auto& rs : doc["resourceSpans"]) {
    for (const auto& ss : rs["scopeSpans"]) {
      for (const auto& s : ss["spans"]) spans.push_back(s);
    }
  }
  return spans;
}

std::string string_attribute(const Json& span, const std::string& key) {
  for (const auto& a : span["attributes"]) {
    if (a["key"] == key) return a["value"]["stringValue"].get<std::string>();
  }
  return "<none>";
}

constexpr std::size_t kLimit = 4096;

TEST(FileLineLimit, BatchOverTheLimitIsALinePerSpan) {
  TempDir dir;
  const std::string path = dir.file("spans.jsonl");
  FileSpanExporter exporter(path, {}, kLimit);
  std::vector<SpanData> spans;
  for (int i = 0; i < 3; ++i) spans.push_back(span_with(i, {{"text", std::string(1500, 'a')}}));
  ASSERT_EQ(export_all(exporter, spans), ExportResult::kSuccess);
  // A batch that fits stays one line.
  ASSERT_EQ(export_all(exporter, {span_with(7, {{"text", std::string("short")}})}),
            ExportResult::kSuccess);
  exporter.shutdown(std::chrono::steady_clock::now());
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 4u);
  for (std::size_t i = 0; i < lines.size(); ++i) {
    EXPECT_LE(lines[i].size(), kLimit);
    const std::vector<Json> in_line = spans_of(lines[i]);
    ASSERT_EQ(in_line.size(), 1u);
    EXPECT_EQ(in_line[0]["name"], i < 3 ? "step " + std::to_string(i) : "step 7");
  }
  EXPECT_EQ(string_attribute(spans_of(lines[1])[0], "text"), std::string(1500, 'a'));
  EXPECT_EQ(exporter.spans_cut(), 0u);
}

TEST(FileLineLimit, SpansOfABatchOverTheLimitShareLinesThatFit) {
  TempDir dir;
  const std::string path = dir.file("spans.jsonl");
  FileSpanExporter exporter(path, {}, kLimit);
  std::vector<SpanData> spans;
  for (int i = 0; i < 8; ++i) spans.push_back(span_with(i, {{"text", std::string(400, 'a')}}));
  ASSERT_EQ(export_all(exporter, spans), ExportResult::kSuccess);
  exporter.shutdown(std::chrono::steady_clock::now());
  const std::vector<std::string> lines = lines_of(path);
  EXPECT_GT(lines.size(), 1u);
  EXPECT_LT(lines.size(), spans.size());
  int next = 0;
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), kLimit);
    for (const Json& span : spans_of(line)) {
      EXPECT_EQ(span["name"], "step " + std::to_string(next++));
      EXPECT_EQ(string_attribute(span, "text"), std::string(400, 'a'));
    }
  }
  EXPECT_EQ(next, 8);
  EXPECT_EQ(exporter.spans_cut(), 0u);
}

// Through a pipeline the exporter encodes the spans' records itself; a batch that might make too
// long a line goes the SpanData way above, each span with the ids it would have had.
TEST(FileLineLimit, RecordsOfABatchOverTheLimitShareLinesThatFitToo) {
  TempDir dir;
  const std::string path = dir.file("spans.jsonl");
  auto exporter = std::make_shared<FileSpanExporter>(path, std::string_view{}, kLimit);
  nemo::lens::NemoLensConfig config;
  config.enabled = true;
  config.export_strategy = "all_ranks";
  config.span_groups = "all";
  config.metrics_enabled = false;
  nemo::lens::SetupOptions options;
  options.exporter = exporter;
  options.allow_reinit = true;
  nemo::lens::TelemetryHandle handle = nemo::lens::setup_telemetry(config, 0, 1, options);
  {
    auto root = nemo::lens::managed_span("step", "root");
    for (int i = 0; i < 8; ++i) {
      auto s = nemo::lens::managed_span("step", "long " + std::to_string(i));
      s.set_attribute("note", std::string(400, 'a'));  // cold: too long for a slot
    }
  }
  ASSERT_TRUE(handle.force_flush(10s));
  // A batch that fits is one line, written from the records.
  for (int i = 0; i < 3; ++i) auto s = nemo::lens::managed_span("step", "short", {{"i", i}});
  ASSERT_TRUE(handle.force_flush(10s));
  handle.shutdown();
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_GT(lines.size(), 2u);
  int long_spans = 0, short_spans = 0;
  std::string root_span_id;
  std::vector<std::string> parents;
  for (const std::string& line : lines) {
    EXPECT_LE(line.size(), kLimit);
    for (const Json& span : spans_of(line)) {
      if (span["name"] == "root") {
        root_span_id = span["spanId"];
      } else if (span["name"] == "short") {
        ++short_spans;
      } else {
        ++long_spans;
        EXPECT_EQ(string_attribute(span, "note"), std::string(400, 'a'));
        parents.push_back(span.value("parentSpanId", ""));
      }
    }
  }
  EXPECT_EQ(long_spans, 8);
  EXPECT_EQ(short_spans, 3);
  EXPECT_EQ(root_span_id.size(), 16u);
  for (const std::string& parent : parents) EXPECT_EQ(parent, root_span_id);
  EXPECT_EQ(exporter->spans_cut(), 0u);
}

TEST(FileLineLimit, SpanOverTheLimitHasItsLongStringsCutAndMarked) {
  TempDir dir;
  const std::string path = dir.file("spans.jsonl");
  FileSpanExporter exporter(path, {}, kLimit);
  // Quotes double when escaped; "é" (two bytes) everywhere puts most cuts inside a character.
  std::string big;
  while (big.size() < 100'000) big += "\"\xC3\xA9";
  std::vector<SpanData> spans{span_with(0, {{"big", big},
                                            {"small", std::string("kept")},
                                            {"list", std::vector<std::string>{"x", big}}}),
                              span_with(1, {{"other", std::string("whole")}})};
  spans[0].status_message = big;
  ASSERT_EQ(export_all(exporter, spans), ExportResult::kSuccess);
  exporter.shutdown(std::chrono::steady_clock::now());
  const std::vector<std::string> lines = lines_of(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_LE(lines[0].size(), kLimit);
  const Json cut = spans_of(lines[0])[0];
  const std::string mark = "\xE2\x80\xA6[lens: cut from " + std::to_string(big.size()) + " bytes]";
  for (const std::string& value :
       {string_attribute(cut, "big"), cut["status"]["message"].get<std::string>(),
        cut["attributes"][2]["value"]["arrayValue"]["values"][1]["stringValue"]
            .get<std::string>()}) {
    ASSERT_GT(value.size(), mark.size());
    EXPECT_EQ(value.substr(value.size() - mark.size()), mark);
    const std::string kept = value.substr(0, value.size() - mark.size());
    EXPECT_EQ(big.compare(0, kept.size(), kept), 0) << "a prefix of the value, whole characters";
  }
  EXPECT_EQ(string_attribute(cut, "small"), "kept");
  EXPECT_EQ(spans_of(lines[1])[0]["name"], "step 1");
  EXPECT_EQ(string_attribute(spans_of(lines[1])[0], "other"), "whole");
  EXPECT_EQ(exporter.spans_cut(), 1u);
}

// The finding: one span with a 200 MB attribute made a line longer than the 256 MiB lens report
// reads, which it then counted as malformed.
TEST(FileLineLimit, TwoHundredMegabyteAttributeIsReadByLensReport) {
  TempDir dir;
  const std::string path = dir.file("spans.jsonl");
  {
    FileSpanExporter exporter(path);
    // 200 MB ending in 70 MB of quotes: 340 MB once escaped. (The cut keeps a prefix of plain
    // letters, which keeps lens report's reading below short.)
    std::string blob(200'000'000, 'a');
    std::fill(blob.end() - 70'000'000, blob.end(), '"');
    std::vector<SpanData> spans(1, span_with(0, {}));  // moved in: one copy of the 200 MB
    spans[0].attributes.push_back({"blob", std::move(blob)});
    ASSERT_EQ(export_all(exporter, spans), ExportResult::kSuccess);
    EXPECT_EQ(exporter.spans_cut(), 1u);
    exporter.shutdown(std::chrono::steady_clock::now());
  }
  EXPECT_LE(std::filesystem::file_size(path), nemo::lens::detail::json::kMaxLineBytes + 1);
  const std::string out = dir.file("report.json");
  lens_test::ChildProcess report({LENS_BINARY, "report", "--json", path}, out);
  // A bound, not a figure: 9 s alone on 2 cores, over 20 s (the default wait) beside a build.
  ASSERT_EQ(report.wait(std::chrono::seconds(120)), 0) << report.stderr_text();
  std::ifstream in(out);
  const Json j = Json::parse(in);
  EXPECT_EQ(j["input"]["malformed_lines"], 0) << report.stderr_text();
  EXPECT_EQ(j["input"]["spans"], 1);
}

}  // namespace
