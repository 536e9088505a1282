// The OTLP exporter encodes protobuf, and the file exporter OTLP/JSON, straight from the
// pipeline's span records (append_otlp_proto_records, write_otlp_proto_records,
// write_otlp_json_records), most spans from bytes made once per site and thread. Real spans of
// every shape go through a real pipeline to an exporter that gets the records; each batch is
// encoded both from the records and from what other exporters are given (materialize(), then
// append_otlp_proto or append_otlp_json, the general encoders), and the bytes must be equal (the
// ids the record encoding made for spans that had none are given to the SpanData). The protobuf
// is also decoded with libprotobuf, the JSON parsed with nlohmann::json. The test compiles
// src/tracing/records.cpp itself.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <thread>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "scoped_env.hpp"
#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "nemo/lens/lens.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"
#include "tracing/engine.hpp"

namespace {

using namespace nemo::lens;
using lens_test::ScopedEnv;
using Request = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;

// `bytes` as an id of N bytes (all zero when the size is wrong).
template <class Id>
Id id_of(const std::string& bytes) {
  Id id;
  if (bytes.size() == id.bytes.size()) std::memcpy(id.bytes.data(), bytes.data(), bytes.size());
  return id;
}

// The ids of the spans of an OTLP/JSON request, in order.
std::vector<std::pair<TraceId, SpanId>> json_ids(const std::string& request) {
  std::vector<std::pair<TraceId, SpanId>> ids;
  const auto doc = nlohmann::json::parse(request);
  for (const auto& s : doc.at("resourceSpans").at(0).at("scopeSpans").at(0).at("spans")) {
    ids.emplace_back(TraceId::from_hex(s.at("traceId").get<std::string>()).value_or(TraceId{}),
                     SpanId::from_hex(s.at("spanId").get<std::string>()).value_or(SpanId{}));
  }
  return ids;
}

// Gets the records; keeps both encodings of every batch, and how each span reads as SpanData. A
// span whose ids nothing asked for has none in its record: the record encoding makes them
// (export_ids()), and the SpanData takes them from it.
class TwoWayExporter : public SpanExporter, public detail::RecordSpanExporter {
 public:
  ExportResult export_spans(std::span<const SpanData* const>, const Resource&,
                            std::chrono::steady_clock::time_point) noexcept override {
    span_calls_.fetch_add(1);
    return ExportResult::kFailure;
  }
  bool encodes_records() const noexcept override { return true; }
  ExportResult export_records(std::span<const detail::SpanRecord* const> records,
                              const Resource& resource, const detail::TickConverter& clock,
                              std::chrono::steady_clock::time_point) noexcept override {
    try {
      std::vector<bool> had_ids;
      for (const detail::SpanRecord* r : records) had_ids.push_back(r->span_id.is_valid());
      // Every other batch, written over the buffer the earlier ones left (as the exporters do).
      const bool over = calls_++ % 2 == 1;
      std::string from_records;
      if (over) {
        const std::size_t size =
            detail::write_otlp_proto_records(proto_buffer_, records, resource, clock);
        if (size > proto_buffer_.size()) return ExportResult::kFailure;
        from_records = proto_buffer_.substr(0, size);
      } else {
        detail::append_otlp_proto_records(from_records, records, resource, clock);
      }
      // JSON after some bytes that must stay as they are.
      const std::size_t at = over ? 3 : 0;
      if (json_buffer_.size() < at) json_buffer_.resize(at, '#');
      const std::size_t json_size =
          detail::write_otlp_json_records(json_buffer_, at, records, resource, clock);
      if (json_buffer_.compare(0, at, std::string(at, '#')) != 0) return ExportResult::kFailure;
      const std::string json_from_records = json_buffer_.substr(at, json_size);
      const auto json_span_ids = json_ids(json_from_records);
      if (json_span_ids.size() != records.size()) return ExportResult::kFailure;
      Request request;
      if (!request.ParseFromString(from_records) || request.resource_spans_size() != 1 ||
          request.resource_spans(0).scope_spans_size() != 1 ||
          request.resource_spans(0).scope_spans(0).spans_size() !=
              static_cast<int>(records.size())) {
        return ExportResult::kFailure;
      }
      const auto& encoded = request.resource_spans(0).scope_spans(0).spans();
      std::vector<SpanData> data(records.size());
      std::vector<const SpanData*> views;
      for (std::size_t i = 0; i < records.size(); ++i) {
        const detail::SpanRecord& r = *records[i];
        detail::materialize(r, clock, data[i]);
        if (!had_ids[i]) {
          std::lock_guard lock(mu_);
          ++ids_made_;
          // The encoder wrote nothing into the record.
          if (r.span_id.is_valid()) ++records_written_;
          // A span with a parent keeps the trace id it was given at its start.
          if (r.trace_id.is_valid() && id_of<TraceId>(encoded[i].trace_id()) != r.trace_id) {
            ++trace_ids_changed_;
          }
          data[i].context.trace_id = id_of<TraceId>(encoded[i].trace_id());
          data[i].context.span_id = id_of<SpanId>(encoded[i].span_id());
        }
        views.push_back(&data[i]);
      }
      std::string from_data;
      detail::append_otlp_proto(from_data, views, resource);
      // The same spans with the ids the JSON encoding made.
      std::vector<SpanData> json_data = data;
      for (std::size_t i = 0; i < records.size(); ++i) {
        if (had_ids[i]) continue;
        json_data[i].context.trace_id = json_span_ids[i].first;
        json_data[i].context.span_id = json_span_ids[i].second;
      }
      std::vector<const SpanData*> json_views;
      for (const SpanData& d : json_data) json_views.push_back(&d);
      std::string json_from_data;
      detail::append_otlp_json(json_from_data, json_views, resource);
      std::lock_guard lock(mu_);
      batches_.push_back({std::move(from_records), std::move(from_data),
                          std::move(json_from_records), std::move(json_from_data)});
      spans_.insert(spans_.end(), data.begin(), data.end());
    } catch (...) {
      return ExportResult::kFailure;
    }
    return ExportResult::kSuccess;
  }

  struct Batch {
    std::string from_records, from_data;            // protobuf
    std::string json_from_records, json_from_data;  // OTLP/JSON
  };
  std::vector<Batch> batches() const {
    std::lock_guard lock(mu_);
    return batches_;
  }
  std::vector<SpanData> spans() const {
    std::lock_guard lock(mu_);
    return spans_;
  }
  int span_calls() const { return span_calls_.load(); }
  // Spans exported without ids; of those, records the encoder wrote ids into, and spans whose
  // trace id it changed.
  struct IdCounts {
    int made = 0, records_written = 0, trace_ids_changed = 0;
  };
  IdCounts id_counts() const {
    std::lock_guard lock(mu_);
    return {ids_made_, records_written_, trace_ids_changed_};
  }

 private:
  mutable std::mutex mu_;
  int calls_ = 0;
  std::string proto_buffer_, json_buffer_;  // kept from batch to batch
  int ids_made_ = 0, records_written_ = 0, trace_ids_changed_ = 0;
  std::vector<Batch> batches_;
  std::vector<SpanData> spans_;
  std::atomic<int> span_calls_{0};
};

class RecordEncoding : public testing::Test {
 protected:
  void SetUp() override {
    env_.set("OTEL_SPAN_ATTRIBUTE_COUNT_LIMIT", "7");
    env_.set("OTEL_ATTRIBUTE_VALUE_LENGTH_LIMIT", "40");
    NemoLensConfig config;
    config.enabled = true;
    config.export_strategy = "all_ranks";
    config.span_groups = "all";
    SetupOptions options;
    options.exporter = exporter_;
    options.allow_reinit = true;
    handle_ = setup_telemetry(config, 0, 1, options);
  }
  void TearDown() override { handle_.shutdown(); }

  // Every batch: the same bytes both ways, and bytes libprotobuf reads.
  std::vector<SpanData> check_batches() {
    EXPECT_TRUE(handle_.force_flush());
    std::size_t decoded = 0;
    for (const auto& b : exporter_->batches()) {
      EXPECT_EQ(b.from_records, b.from_data);
      EXPECT_EQ(b.json_from_records, b.json_from_data);
      Request request;
      EXPECT_TRUE(request.ParseFromString(b.from_records));
      for (const auto& rs : request.resource_spans()) {
        for (const auto& ss : rs.scope_spans()) decoded += ss.spans_size();
      }
    }
    auto spans = exporter_->spans();
    EXPECT_EQ(decoded, spans.size());
    EXPECT_EQ(exporter_->span_calls(), 0) << "the pipeline hands records to a RecordSpanExporter";
    return spans;
  }

  ScopedEnv env_;
  std::shared_ptr<TwoWayExporter> exporter_ = std::make_shared<TwoWayExporter>();
  TelemetryHandle handle_;
};

TEST_F(RecordEncoding, InlineAttributesOfEveryType) {
  for (int i = 0; i < 3; ++i) {
    LENS_SPAN(s, SpanGroup::STEP, "train_step", {"iteration", i}, {"loss", 0.5 * i},
              {"ok", i % 2 == 0}, {"stage", "fwd"});
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(spans[2].name, "train_step");
  EXPECT_EQ(spans[2].group, "step");
  EXPECT_EQ(std::get<std::int64_t>(*spans[2].attribute("iteration")), 2);
  EXPECT_EQ(std::get<double>(*spans[2].attribute("loss")), 1.0);
  EXPECT_EQ(std::get<bool>(*spans[2].attribute("ok")), true);
  EXPECT_EQ(std::get<std::string>(*spans[2].attribute("stage")), "fwd");
  EXPECT_LE(spans[2].start_time_unix_nano, spans[2].end_time_unix_nano);
}

// The values a span of the common shape (a site, inline attributes, nothing cold) is written
// from bytes made for its site: each type at its edges, strings JSON must escape, keys of the
// slot's full length.
TEST_F(RecordEncoding, InlineValuesAtTheirEdges) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::int64_t ints[] = {0, 1, 127, 128, -1, -128, 99999999, 100000000,
                               9999999999999999, 10000000000000000,
                               std::numeric_limits<std::int64_t>::max(),
                               std::numeric_limits<std::int64_t>::min()};
  for (const std::int64_t i : ints) {
    LENS_SPAN(s, SpanGroup::STEP, "ints", {"i", i}, {"a_key_of_21_bytes_xyz", i / 7});
  }
  for (const double d : {0.0, -0.0, 0.1, 1e300, -2.5, 3.0, nan, inf, -inf}) {
    LENS_SPAN(s, SpanGroup::STEP, "doubles", {"d", d}, {"ok", d > 0}, {"no", d <= 0});
  }
  for (const char* v : {"", "x", "sixteen_bytes_16", "quote\"d", "back\\slash", "tab\there",
                        "\x01", "\x7f", "caf\xc3\xa9"}) {
    LENS_SPAN(s, SpanGroup::STEP, "strings", {"v", v});
  }
  {
    LENS_SPAN(s, SpanGroup::STEP, "esc\"aped\\name\n", {"k\"ey", 1});  // name and key escaped
  }
  {
    LENS_SPAN(s, SpanGroup::STEP, "a");  // a span shorter than 128 bytes: a 1-byte length
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), std::size(ints) + 9 + 9 + 2);
  EXPECT_EQ(std::get<std::int64_t>(*spans[std::size(ints) - 1].attribute("i")),
            std::numeric_limits<std::int64_t>::min());
  EXPECT_EQ(std::get<std::string>(*spans[std::size(ints) + 9 + 3].attribute("v")), "quote\"d");
}

// Kinds, status codes, remote and local parents and sampled-out flags of spans otherwise of the
// common shape.
TEST_F(RecordEncoding, KindsStatusesAndParentsOfSiteSpans) {
  SpanContext remote;
  remote.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  remote.span_id = *SpanId::from_hex("00f067aa0ba902b7");
  remote.trace_flags = 1;
  remote.is_remote = true;
  for (const SpanKind kind : {SpanKind::kInternal, SpanKind::kServer, SpanKind::kClient,
                              SpanKind::kProducer, SpanKind::kConsumer}) {
    SpanStartOptions o;
    o.parent = &remote;
    o.kind = kind;
    auto s = start_span("remote_child", o, {{"rank", 3}});
    s.set_status(kind == SpanKind::kServer ? StatusCode::kError : StatusCode::kOk);
    auto child = managed_span("step", "local_child", {{"n", 1}});
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 10u);
  EXPECT_TRUE(spans[1].parent_is_remote);
  EXPECT_FALSE(spans[0].parent_is_remote);
  EXPECT_EQ(spans[0].parent_span_id, spans[1].context.span_id);
}

// The attributes the encoder adds give way to the span's own of the same keys, inline.
TEST_F(RecordEncoding, OwnGroupAndThreadIdAttributesWin) {
  {
    LENS_SPAN(s, SpanGroup::STEP, "both", {"nemo.span.group", "mine"}, {"thread.id", 7});
  }
  {
    LENS_SPAN(s, SpanGroup::STEP, "group_only", {"nemo.span.group", "mine"});
  }
  {
    LENS_SPAN(s, SpanGroup::STEP, "thread_only", {"x", 1}, {"thread.id", 7});
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 3u);
  EXPECT_EQ(std::get<std::string>(*spans[0].attribute("nemo.span.group")), "mine");
}

// More sites and threads in a batch than the cache of their bytes holds (its table collides, its
// arena starts again), and site names too long for it.
TEST_F(RecordEncoding, ManySitesAndThreadsInABatch) {
  auto spans_of = [](int thread) {
    for (int i = 0; i < 150; ++i) {
      const std::string name = "site_" + std::to_string(i) + std::string(40, 'n');
      auto s = managed_span("step", name, {{"i", i}});
    }
    auto long_name = managed_span("step", std::string(300, 'L'), {{"thread", thread}});
  };
  std::thread a(spans_of, 1), b(spans_of, 2);
  a.join();
  b.join();
  spans_of(3);
  EXPECT_EQ(check_batches().size(), 3u * 151);
}

TEST_F(RecordEncoding, AttributesBeyondTheSlotsKeepTheirOrderAndLimits) {
  {
    auto s = managed_span("checkpoint", "save",
                          {{"a", 1}, {"b", 2}, {"c", 3}, {"d", 4}, {"e", 5}});  // a fifth: cold
    s.set_attribute("a_key_longer_than_the_inline_slot_has_room_for", 6);
    s.set_attribute("path", std::string(60, 'x'));  // cut to 40 bytes, cold
    s.set_attribute("over_the_limit", 8);           // the eighth: dropped
    s.set_attribute("b", std::string(30, 'y'));     // replaces an inline value with a long one
    s.set_attribute("layers", std::vector<std::int64_t>{1, 2, 3});  // dropped too
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 1u);
  const SpanData& s = spans[0];
  std::vector<std::string> keys;
  for (const auto& kv : s.attributes) keys.push_back(kv.key);
  EXPECT_EQ(keys, (std::vector<std::string>{"a", "b", "c", "d", "e",
                                            "a_key_longer_than_the_inline_slot_has_room_for",
                                            "path"}));
  EXPECT_EQ(std::get<std::string>(*s.attribute("b")), std::string(30, 'y'));
  EXPECT_EQ(std::get<std::string>(*s.attribute("path")), std::string(40, 'x'));
  EXPECT_EQ(s.dropped_attributes_count, 2u);
}

TEST_F(RecordEncoding, RedactedAndNonAsciiStrings) {
  {
    LENS_SPAN(s, SpanGroup::STEP, "étape", {"token", "secret"}, {"note", "naïve"});
    s.set_attribute("bad_utf8", std::string("\xff\xfe", 2));
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(std::get<std::string>(*spans[0].attribute("token")), "[REDACTED]");
  EXPECT_EQ(std::get<std::string>(*spans[0].attribute("note")), "naïve");
}

TEST_F(RecordEncoding, EventsLinksStatusKindParentAndTraceState) {
  SpanContext remote;
  remote.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  remote.span_id = *SpanId::from_hex("00f067aa0ba902b7");
  remote.trace_flags = 1;
  remote.is_remote = true;
  remote.trace_state = "vendor=abc";
  {
    SpanStartOptions o;
    o.parent = &remote;
    o.kind = SpanKind::kServer;
    o.link = &remote;
    auto s = start_span("handle", o, {{"rank", 3}});
    s.add_event("checkpoint", {{"bytes", 4096}});
    s.set_status(StatusCode::kError, "it broke");
    auto child = span_cm("child");  // inherits the trace state from its parent record
    child.set_kind(SpanKind::kClient);
    child.record_exception("ValueError", "bad value");
  }
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 2u);
  const SpanData& child = spans[0];
  const SpanData& parent = spans[1];
  EXPECT_EQ(parent.context.trace_state, "vendor=abc");
  EXPECT_EQ(child.context.trace_state, "vendor=abc");
  EXPECT_EQ(parent.parent_span_id, remote.span_id);
  EXPECT_TRUE(parent.parent_is_remote);
  EXPECT_EQ(parent.links.size(), 1u);
  EXPECT_EQ(parent.events.size(), 1u);
  EXPECT_EQ(parent.status_message, "it broke");
  EXPECT_EQ(child.kind, SpanKind::kClient);
  EXPECT_EQ(child.status_code, StatusCode::kError);
  EXPECT_EQ(child.parent_span_id, parent.context.span_id);
}

TEST_F(RecordEncoding, IdsNothingAskedForAreMadeAsTheRecordIsEncoded) {
  {
    Span root = managed_span("step", "root");  // its ids are made when its first child starts
    { Span a = managed_span("step", "a"); }    // a and b: the trace id from the root, no span id
    { Span b = managed_span("step", "b"); }
  }
  { Span lone = managed_span("step", "lone"); }  // no ids at all
  const auto spans = check_batches();
  ASSERT_EQ(spans.size(), 4u);
  const auto counts = exporter_->id_counts();
  EXPECT_EQ(counts.made, 3) << "a, b and lone reach the exporter without ids";
  EXPECT_EQ(counts.records_written, 0) << "the encoder writes nothing into a record";
  EXPECT_EQ(counts.trace_ids_changed, 0);
  auto named = [&](std::string_view name) {
    return *std::find_if(spans.begin(), spans.end(),
                         [&](const SpanData& s) { return s.name == name; });
  };
  const SpanData root = named("root"), a = named("a"), b = named("b"), lone = named("lone");
  for (const SpanData& s : {root, a, b, lone}) EXPECT_TRUE(s.context.is_valid()) << s.name;
  EXPECT_EQ(a.context.trace_id, root.context.trace_id);
  EXPECT_EQ(b.context.trace_id, root.context.trace_id);
  EXPECT_EQ(a.parent_span_id, root.context.span_id);
  EXPECT_EQ(b.parent_span_id, root.context.span_id);
  EXPECT_NE(a.context.span_id, b.context.span_id);
  EXPECT_NE(a.context.span_id, root.context.span_id);
  EXPECT_NE(lone.context.trace_id, root.context.trace_id);
  EXPECT_FALSE(lone.parent_span_id.is_valid());
}

TEST_F(RecordEncoding, TruncatedCopiesAtShutdown) {
  Span open = managed_span("step", "still_running", {{"iteration", 9}});
  { auto done = span_cm("done"); }
  ASSERT_TRUE(handle_.shutdown());
  open.end();
  std::size_t truncated = 0;
  for (const auto& b : exporter_->batches()) {
    EXPECT_EQ(b.from_records, b.from_data);
    EXPECT_EQ(b.json_from_records, b.json_from_data);
  }
  for (const auto& s : exporter_->spans()) {
    if (!s.truncated) continue;
    ++truncated;
    EXPECT_EQ(s.name, "still_running");
    EXPECT_EQ(std::get<bool>(*s.attribute("nemo.span.truncated")), true);
    EXPECT_EQ(std::get<std::int64_t>(*s.attribute("iteration")), 9);
  }
  EXPECT_EQ(truncated, 1u);
}

TEST(RecordEncodingJson, OtlpOverJsonIsGivenSpanData) {
  // Over http/json the OTLP exporter takes SpanData: it does not encode records.
  ScopedEnv env;
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json");
  EXPECT_FALSE(dynamic_cast<detail::RecordSpanExporter&>(*detail::make_otlp_exporter())
                   .encodes_records());
  env.set("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf");
  EXPECT_TRUE(dynamic_cast<detail::RecordSpanExporter&>(*detail::make_otlp_exporter())
                  .encodes_records());
}

}  // namespace
