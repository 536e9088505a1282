// The hand-written OTLP protobuf encoding (append_otlp_proto) decoded by the distribution's
// protobuf library with .proto files written from the specification (tests/proto), field by
// field; the response decoders; gzip.
#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <vector>

#include "common/otlp_transcode.hpp"
#include "export/exporters.hpp"
#include "export/otlp.hpp"
#include "export/otlp_common.hpp"
#include "export/protobuf_wire.hpp"
#include "nemo/lens/version.hpp"
#include "opentelemetry/proto/collector/trace/v1/trace_service.pb.h"

namespace {

using namespace nemo::lens;
namespace pb_trace = opentelemetry::proto::trace::v1;
namespace pb_common = opentelemetry::proto::common::v1;
using Request = opentelemetry::proto::collector::trace::v1::ExportTraceServiceRequest;
using Response = opentelemetry::proto::collector::trace::v1::ExportTraceServiceResponse;

std::string bytes_of(const auto& id) {
  return std::string(reinterpret_cast<const char*>(id.bytes.data()), id.bytes.size());
}

SpanData full_span() {
  SpanData s;
  s.name = "forward_backward";
  s.group = "step";
  s.context.trace_id = *TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736");
  s.context.span_id = *SpanId::from_hex("00f067aa0ba902b7");
  s.context.trace_flags = 1;
  s.context.trace_state = "vendor=abc";
  s.parent_span_id = *SpanId::from_hex("b7ad6b7169203331");
  s.parent_is_remote = true;
  s.kind = SpanKind::kClient;
  s.start_time_unix_nano = 1'700'000'000'123'456'789;
  s.end_time_unix_nano = 1'700'000'000'223'456'789;
  s.attributes = {{"iteration", std::int64_t{-42}},
                  {"loss", 0.125},
                  {"ok", true},
                  {"name", std::string("mlp")},
                  {"sizes", std::vector<std::int64_t>{1, 2, 300}},
                  {"flags", std::vector<bool>{true, false}},
                  {"rates", std::vector<double>{0.5, -1.0}},
                  {"tags", std::vector<std::string>{"a", "b"}}};
  s.dropped_attributes_count = 3;
  s.events.push_back(
      SpanEvent{"checkpoint", 1'700'000'000'200'000'000, {{"bytes", std::int64_t{4096}}}, 1});
  s.dropped_events_count = 2;
  SpanLink link;
  link.context.trace_id = *TraceId::from_hex("0af7651916cd43dd8448eb211c80319c");
  link.context.span_id = *SpanId::from_hex("53995c3f42cd8ad8");
  link.context.trace_flags = 1;
  link.context.is_remote = true;
  link.context.trace_state = "k=v";
  link.attributes = {{"stage", std::int64_t{3}}};
  link.dropped_attributes_count = 4;
  s.links.push_back(link);
  s.dropped_links_count = 5;
  s.status_code = StatusCode::kError;
  s.status_message = "out of memory";
  s.thread_id = 1234;
  return s;
}

Resource test_resource() {
  Resource r;
  r.attributes = {{"service.name", std::string("trainer")}, {"dl.rank", std::int64_t{3}}};
  return r;
}

Request decode(const std::vector<const SpanData*>& spans, const Resource& resource) {
  std::string bytes;
  detail::append_otlp_proto(bytes, spans, resource);
  Request request;
  EXPECT_TRUE(request.ParseFromString(bytes));
  return request;
}

const pb_common::AnyValue* find(const google::protobuf::RepeatedPtrField<pb_common::KeyValue>& kvs,
                                const std::string& key) {
  for (const auto& kv : kvs) {
    if (kv.key() == key) return &kv.value();
  }
  return nullptr;
}

TEST(OtlpProto, EveryFieldDecodesWithLibprotobuf) {
  const SpanData s = full_span();
  const Request request = decode({&s}, test_resource());
  ASSERT_EQ(request.resource_spans_size(), 1);
  const auto& rs = request.resource_spans(0);
  ASSERT_EQ(rs.resource().attributes_size(), 2);
  EXPECT_EQ(rs.resource().attributes(0).key(), "service.name");
  EXPECT_EQ(rs.resource().attributes(0).value().string_value(), "trainer");
  EXPECT_EQ(rs.resource().attributes(1).value().int_value(), 3);
  ASSERT_EQ(rs.scope_spans_size(), 1);
  EXPECT_EQ(rs.scope_spans(0).scope().name(), "nemo.lens");
  EXPECT_EQ(rs.scope_spans(0).scope().version(), NEMO_LENS_VERSION_STRING);
  ASSERT_EQ(rs.scope_spans(0).spans_size(), 1);
  const pb_trace::Span& span = rs.scope_spans(0).spans(0);

  EXPECT_EQ(span.trace_id(), bytes_of(s.context.trace_id));
  EXPECT_EQ(span.span_id(), bytes_of(s.context.span_id));
  EXPECT_EQ(span.parent_span_id(), bytes_of(s.parent_span_id));
  EXPECT_EQ(span.trace_state(), "vendor=abc");
  EXPECT_EQ(span.flags(), 0x1u | 0x100u | 0x200u);
  EXPECT_EQ(span.name(), "forward_backward");
  EXPECT_EQ(span.kind(), pb_trace::Span::SPAN_KIND_CLIENT);
  EXPECT_EQ(span.start_time_unix_nano(), 1'700'000'000'123'456'789u);
  EXPECT_EQ(span.end_time_unix_nano(), 1'700'000'000'223'456'789u);

  // The span's attributes in order, then nemo.span.group and thread.id.
  ASSERT_EQ(span.attributes_size(), 10);
  EXPECT_EQ(find(span.attributes(), "iteration")->int_value(), -42);
  EXPECT_EQ(find(span.attributes(), "loss")->double_value(), 0.125);
  EXPECT_TRUE(find(span.attributes(), "ok")->bool_value());
  EXPECT_EQ(find(span.attributes(), "name")->string_value(), "mlp");
  const auto& sizes = find(span.attributes(), "sizes")->array_value();
  ASSERT_EQ(sizes.values_size(), 3);
  EXPECT_EQ(sizes.values(2).int_value(), 300);
  const auto& flags = find(span.attributes(), "flags")->array_value();
  ASSERT_EQ(flags.values_size(), 2);
  EXPECT_TRUE(flags.values(0).bool_value());
  EXPECT_EQ(flags.values(1).value_case(), pb_common::AnyValue::kBoolValue);
  EXPECT_FALSE(flags.values(1).bool_value());
  EXPECT_EQ(find(span.attributes(), "rates")->array_value().values(1).double_value(), -1.0);
  EXPECT_EQ(find(span.attributes(), "tags")->array_value().values(1).string_value(), "b");
  EXPECT_EQ(span.attributes(8).key(), "nemo.span.group");
  EXPECT_EQ(span.attributes(8).value().string_value(), "step");
  EXPECT_EQ(span.attributes(9).key(), "thread.id");
  EXPECT_EQ(span.attributes(9).value().int_value(), 1234);
  EXPECT_EQ(span.dropped_attributes_count(), 3u);

  ASSERT_EQ(span.events_size(), 1);
  EXPECT_EQ(span.events(0).name(), "checkpoint");
  EXPECT_EQ(span.events(0).time_unix_nano(), 1'700'000'000'200'000'000u);
  EXPECT_EQ(span.events(0).attributes(0).value().int_value(), 4096);
  EXPECT_EQ(span.events(0).dropped_attributes_count(), 1u);
  EXPECT_EQ(span.dropped_events_count(), 2u);

  ASSERT_EQ(span.links_size(), 1);
  EXPECT_EQ(span.links(0).trace_id(), bytes_of(s.links[0].context.trace_id));
  EXPECT_EQ(span.links(0).span_id(), bytes_of(s.links[0].context.span_id));
  EXPECT_EQ(span.links(0).trace_state(), "k=v");
  EXPECT_EQ(span.links(0).flags(), 0x1u | 0x100u | 0x200u);
  EXPECT_EQ(span.links(0).attributes(0).value().int_value(), 3);
  EXPECT_EQ(span.links(0).dropped_attributes_count(), 4u);
  EXPECT_EQ(span.dropped_links_count(), 5u);

  EXPECT_EQ(span.status().code(), pb_trace::Status::STATUS_CODE_ERROR);
  EXPECT_EQ(span.status().message(), "out of memory");
}

TEST(OtlpProto, RootLocalSpanLeavesOptionalFieldsOut) {
  SpanData s;
  s.name = "job";
  s.context.trace_id = *TraceId::from_hex("0102030405060708090a0b0c0d0e0f10");
  s.context.span_id = *SpanId::from_hex("0102030405060708");
  s.context.trace_flags = 1;
  s.start_time_unix_nano = -5;  // clamped, as in the JSON encoding
  const Request request = decode({&s, nullptr}, Resource{});
  const pb_trace::Span& span = request.resource_spans(0).scope_spans(0).spans(0);
  ASSERT_EQ(request.resource_spans(0).scope_spans(0).spans_size(), 1);  // the null entry skipped
  EXPECT_TRUE(span.parent_span_id().empty());
  EXPECT_TRUE(span.trace_state().empty());
  EXPECT_EQ(span.flags(), 0x101u);  // sampled, parent known to be local
  EXPECT_EQ(span.kind(), pb_trace::Span::SPAN_KIND_INTERNAL);
  EXPECT_EQ(span.start_time_unix_nano(), 0u);
  EXPECT_EQ(span.attributes_size(), 0);
  EXPECT_EQ(span.status().code(), pb_trace::Status::STATUS_CODE_UNSET);
  EXPECT_FALSE(span.has_status() && !span.status().message().empty());
}

TEST(OtlpProto, ExplicitGroupAndThreadAttributesWin) {
  SpanData s = full_span();
  s.attributes = {{"nemo.span.group", std::string("mine")}, {"thread.id", std::int64_t{7}}};
  const Request request = decode({&s}, Resource{});
  const pb_trace::Span& span = request.resource_spans(0).scope_spans(0).spans(0);
  ASSERT_EQ(span.attributes_size(), 2);
  EXPECT_EQ(span.attributes(0).value().string_value(), "mine");
  EXPECT_EQ(span.attributes(1).value().int_value(), 7);
}

TEST(OtlpProto, InvalidUtf8IsRepairedSoProto3Accepts) {
  SpanData s = full_span();
  s.name = std::string("bad\xff\xfe name");
  s.attributes = {{std::string("k\xc3"), std::string("v\xe2\x82")}};
  const Request request = decode({&s}, Resource{});  // libprotobuf refuses invalid UTF-8 strings
  const pb_trace::Span& span = request.resource_spans(0).scope_spans(0).spans(0);
  EXPECT_EQ(span.name(), "bad\xef\xbf\xbd\xef\xbf\xbd name");
  EXPECT_EQ(span.attributes(0).key(), "k\xef\xbf\xbd");
}

TEST(OtlpProto, LargeMessagesGetMultiByteLengths) {
  // Lengths of 128 bytes and more take two or three varint bytes; the encoder moves the content
  // to make room. 2000 spans with a 2.5 MB attribute make the span's and the outer lengths four
  // bytes long.
  std::vector<SpanData> spans(2000, full_span());
  spans[0].attributes.push_back({"blob", std::string(2'500'000, 'x')});
  std::vector<const SpanData*> views;
  for (auto& s : spans) views.push_back(&s);
  const Request request = decode(views, test_resource());
  ASSERT_EQ(request.resource_spans(0).scope_spans(0).spans_size(), 2000);
  EXPECT_EQ(find(request.resource_spans(0).scope_spans(0).spans(0).attributes(), "blob")
                ->string_value()
                .size(),
            2'500'000u);
  EXPECT_EQ(request.resource_spans(0).scope_spans(0).spans(1999).name(), "forward_backward");
}

TEST(OtlpProto, ReceiverTranscodingGivesTheJsonExportersBytes) {
  // Two independent paths to OTLP/JSON: protobuf then lens collect's transcoder, and the library's
  // JSON writer. They must agree byte for byte.
  SpanData a = full_span();
  SpanData b;
  b.name = "root";
  b.context.trace_id = *TraceId::from_hex("0102030405060708090a0b0c0d0e0f10");
  b.context.span_id = *SpanId::from_hex("0102030405060708");
  std::vector<const SpanData*> views{&a, &b};
  std::string proto, via_receiver, direct;
  detail::append_otlp_proto(proto, views, test_resource());
  const auto r = lens_cli::protobuf_to_json(proto, via_receiver);
  ASSERT_TRUE(r.ok) << r.error;
  EXPECT_EQ(r.spans, 2u);
  detail::append_otlp_json(direct, views, test_resource());
  EXPECT_EQ(via_receiver, direct);
}

// A Writer over a kept buffer writes the bytes one appending to an empty string does, from where
// it is told, leaving the bytes before and after as they were and the buffer's size alone until
// it needs room.
TEST(ProtobufWriter, OverwriteWritesWhatAppendWritesAndKeepsTheRest) {
  auto write = [](detail::pb::Writer& w) {
    w.reserve(64);
    w.varint_field(1, 300);
    const auto mark = w.begin_message(2);
    w.bytes_field(1, "abc");
    w.fixed64_field(2, 7);
    w.end_message(mark);
  };
  std::string appended;
  {
    detail::pb::Writer w(appended);
    write(w);
  }
  std::string kept(100, '#');
  std::size_t size = 0;
  {
    detail::pb::Writer w(kept, 5, detail::pb::Writer::Overwrite{});
    write(w);
    size = w.size() - 5;
  }
  EXPECT_EQ(kept.size(), 100u) << "room enough: not resized";
  EXPECT_EQ(kept.substr(5, size), appended);
  EXPECT_EQ(kept.substr(0, 5), "#####");
  EXPECT_EQ(kept.substr(5 + size), std::string(100 - 5 - size, '#'));
  std::string small(3, '#');
  {
    detail::pb::Writer w(small, 2, detail::pb::Writer::Overwrite{});
    write(w);
    size = w.size() - 2;
  }
  EXPECT_GE(small.size(), 2 + size) << "grown for the writes";
  EXPECT_EQ(small.substr(2, size), appended);
}

// is_ascii() reads whole words and, below four bytes, the first, middle and last: a byte of the
// high half anywhere in a string of any length is found.
TEST(ProtobufWriter, NonAsciiIsFoundAtEveryPositionOfEveryLength) {
  for (std::size_t n = 0; n <= 40; ++n) {
    const std::string ascii(n, 'a');
    EXPECT_TRUE(detail::otlp::is_ascii(ascii)) << n;
    for (std::size_t i = 0; i < n; ++i) {
      std::string s = ascii;
      s[i] = static_cast<char>(0x80 | static_cast<int>(i));
      EXPECT_FALSE(detail::otlp::is_ascii(s)) << n << " " << i;
    }
  }
}

TEST(OtlpResponses, PartialSuccessFromProtobuf) {
  Response response;
  response.mutable_partial_success()->set_rejected_spans(7);
  response.mutable_partial_success()->set_error_message("too old");
  const auto p = detail::parse_partial_success_proto(response.SerializeAsString());
  EXPECT_EQ(p.rejected, 7);
  EXPECT_EQ(p.error_message, "too old");
  EXPECT_EQ(detail::parse_partial_success_proto("").rejected, 0);
  EXPECT_EQ(detail::parse_partial_success_proto("\x0a\x05\x08").rejected, 0);  // truncated
}

TEST(OtlpResponses, PartialSuccessFromJson) {
  EXPECT_EQ(
      detail::parse_partial_success_json(R"({"partialSuccess":{"rejectedSpans":"12"}})").rejected,
      12);
  const auto p = detail::parse_partial_success_json(
      R"({"partialSuccess":{"rejectedSpans":3,"errorMessage":"x"}})");
  EXPECT_EQ(p.rejected, 3);
  EXPECT_EQ(p.error_message, "x");
  EXPECT_EQ(detail::parse_partial_success_json("{}").rejected, 0);
  EXPECT_EQ(detail::parse_partial_success_json("").rejected, 0);
  EXPECT_EQ(detail::parse_partial_success_json("not json").rejected, 0);
}

TEST(OtlpGzip, DecompressesWithZlibInflateToTheInput) {
  std::string input;
  for (int i = 0; i < 10'000; ++i) input += "span " + std::to_string(i) + ";";
  std::string compressed;
  ASSERT_TRUE(detail::gzip_compress(input, compressed));
  EXPECT_LT(compressed.size(), input.size() / 3);
  ASSERT_GE(compressed.size(), 2u);
  EXPECT_EQ(static_cast<unsigned char>(compressed[0]), 0x1f);  // the gzip magic
  EXPECT_EQ(static_cast<unsigned char>(compressed[1]), 0x8b);
  z_stream zs{};
  ASSERT_EQ(inflateInit2(&zs, 16 + 15), Z_OK);
  std::string out(input.size() + 16, '\0');
  zs.next_in = reinterpret_cast<Bytef*>(compressed.data());
  zs.avail_in = static_cast<uInt>(compressed.size());
  zs.next_out = reinterpret_cast<Bytef*>(out.data());
  zs.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(inflate(&zs, Z_FINISH), Z_STREAM_END);
  out.resize(zs.total_out);
  inflateEnd(&zs);
  EXPECT_EQ(out, input);
}

}  // namespace
