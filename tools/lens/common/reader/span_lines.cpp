#include "common/reader/span_lines.hpp"

#include <cstdint>
#include <exception>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "nemo/lens/semconv.hpp"

namespace nemo::lens::cli::reader {

namespace {

// The objects and arrays of an ExportTraceServiceRequest the handler knows; kSkip for any other.
enum class Node : std::uint8_t {
  kRoot,
  kResourceSpansList,
  kResourceSpans,
  kResource,
  kScopeSpansList,
  kScopeSpans,
  kSpanList,
  kSpan,
  kEventList,
  kEvent,
  kAttributeList,
  kAttribute,
  kAnyValue,
  kStatus,
  kCapture,  // an AnyValue captured whole (details)
};

// What a member of a known object is for.
enum class Field : std::uint8_t {
  kIgnored,
  kResourceSpans,
  kResource,
  kScopeSpans,
  kSpans,
  kAttributes,
  kEvents,
  kStatus,
  kTraceId,
  kSpanId,
  kParentSpanId,
  kName,
  kStartTime,
  kEndTime,
  kTime,
  kKey,
  kValue,
  kStringValue,
  kBoolValue,
  kIntValue,
  kDoubleValue,
  kComplexValue,  // arrayValue, kvlistValue
  kStatusCode,
  kStatusMessage,
  kResourceMetrics,  // captured whole (ReaderOptions::metrics), then read from the document
  kResourceLogs,     // captured whole (ReaderOptions::logs), else skipped
};

// Whose attributes an attribute list holds.
enum class Owner : std::uint8_t { kResource, kSpan, kEvent };

struct Frame {
  Node node;
  Owner owner = Owner::kSpan;
  Field field = Field::kIgnored;  // the member whose value comes next (objects)
};

// The members of the objects the handler knows, one table for reading and for naming them: where
// each appears, its key and what it is for. The first entry of a Field names it in errors (as
// `shown` when that is set).
struct Member {
  Node node;
  std::string_view key;
  Field field;
  std::string_view shown = {};
};

constexpr Member kMembers[] = {
    {Node::kRoot, "resourceSpans", Field::kResourceSpans},
    {Node::kRoot, "resourceMetrics", Field::kResourceMetrics},
    {Node::kRoot, "resourceLogs", Field::kResourceLogs},
    {Node::kResourceSpans, "resource", Field::kResource},
    {Node::kResourceSpans, "scopeSpans", Field::kScopeSpans},
    {Node::kResource, "attributes", Field::kAttributes},
    {Node::kScopeSpans, "spans", Field::kSpans},
    {Node::kSpan, "spanId", Field::kSpanId},
    {Node::kSpan, "name", Field::kName},
    {Node::kSpan, "parentSpanId", Field::kParentSpanId},
    {Node::kSpan, "startTimeUnixNano", Field::kStartTime},
    {Node::kSpan, "endTimeUnixNano", Field::kEndTime},
    {Node::kSpan, "attributes", Field::kAttributes},
    {Node::kSpan, "traceId", Field::kTraceId},
    {Node::kSpan, "events", Field::kEvents},
    {Node::kSpan, "status", Field::kStatus},
    {Node::kEvent, "timeUnixNano", Field::kTime},
    {Node::kEvent, "name", Field::kName},
    {Node::kEvent, "attributes", Field::kAttributes},
    {Node::kAttribute, "key", Field::kKey},
    {Node::kAttribute, "value", Field::kValue},
    {Node::kAnyValue, "stringValue", Field::kStringValue},
    {Node::kAnyValue, "intValue", Field::kIntValue},
    {Node::kAnyValue, "boolValue", Field::kBoolValue},
    {Node::kAnyValue, "doubleValue", Field::kDoubleValue},
    {Node::kAnyValue, "bytesValue", Field::kStringValue},
    {Node::kAnyValue, "arrayValue", Field::kComplexValue},
    {Node::kAnyValue, "kvlistValue", Field::kComplexValue},
    {Node::kStatus, "code", Field::kStatusCode, "status.code"},
    {Node::kStatus, "message", Field::kStatusMessage, "status.message"},
};

Field classify(Node node, std::string_view key) {
  for (const Member& m : kMembers) {
    if (m.node == node && m.key == key) return m.field;
  }
  return Field::kIgnored;
}

// Null-terminated: every key and `shown` is a string literal.
const char* field_name(Field f) {
  for (const Member& m : kMembers) {
    if (m.field == f) return (m.shown.empty() ? m.key : m.shown).data();
  }
  return "value";
}

// The attribute being read: its key and, without details, its scalar value.
struct PendingAttribute {
  std::string key;
  bool has_key = false;
  enum class Kind : std::uint8_t { kNone, kString, kInt, kBool, kOther } kind = Kind::kNone;
  std::string text;
  std::int64_t integer = 0;
  bool boolean = false;
  ojson captured;  // the whole AnyValue (details)
};

// A scalar JSON value as the SAX interface delivers it.
struct Scalar {
  enum class Type : std::uint8_t { kNull, kBool, kInteger, kUnsigned, kFloat, kString } type;
  bool boolean = false;
  std::int64_t integer = 0;
  std::uint64_t unsigned_integer = 0;
  double floating = 0;
  std::string* text = nullptr;
};

class OtlpSaxHandler {
 public:
  using json = nlohmann::json;

  OtlpSaxHandler(ParsedRequest& out, bool details, bool metrics, bool logs)
      : out_(out), details_(details), read_metrics_(metrics), read_logs_(logs) {
    out_.resources.clear();
    out_.span_count = 0;
    out_.has_spans = out_.has_metrics = out_.has_logs = false;
    out_.metrics.clear();
    out_.data_points = 0;
    out_.logs.clear();
  }

  const std::string& error() const { return error_; }
  bool saw_root() const { return saw_root_; }
  /// The resourceMetrics array, captured (ReaderOptions::metrics); null when absent.
  ojson take_resource_metrics() { return std::move(metrics_); }
  /// The resourceLogs array, captured (ReaderOptions::logs); null when absent.
  ojson take_resource_logs() { return std::move(logs_); }

  // SAX interface.
  bool null() { return scalar({Scalar::Type::kNull}); }
  bool boolean(bool v) {
    Scalar s{Scalar::Type::kBool};
    s.boolean = v;
    return scalar(s);
  }
  bool number_integer(json::number_integer_t v) {
    Scalar s{Scalar::Type::kInteger};
    s.integer = v;
    return scalar(s);
  }
  bool number_unsigned(json::number_unsigned_t v) {
    Scalar s{Scalar::Type::kUnsigned};
    s.unsigned_integer = v;
    return scalar(s);
  }
  bool number_float(json::number_float_t v, const json::string_t& /*text*/) {
    Scalar s{Scalar::Type::kFloat};
    s.floating = v;
    return scalar(s);
  }
  bool string(json::string_t& v) {
    Scalar s{Scalar::Type::kString};
    s.text = &v;
    return scalar(s);
  }
  bool binary(json::binary_t& /*v*/) { return fail("unexpected binary value"); }
  bool start_object(std::size_t /*elements*/) { return start(true); }
  bool start_array(std::size_t /*elements*/) { return start(false); }
  bool end_object() { return end(); }
  bool end_array() { return end(); }
  bool key(json::string_t& k) {
    if (skip_depth_ > 0) return true;
    Frame& top = stack_.back();
    if (top.node == Node::kCapture) {
      capture_key_ = k;
      return true;
    }
    top.field = classify(top.node, k);
    return true;
  }
  bool parse_error(std::size_t position, const std::string& /*last_token*/,
                   const nlohmann::detail::exception& e) {
    // "[json.exception.parse_error.101] parse error at line 1, column 5: syntax error ..."
    std::string_view what = e.what();
    if (auto colon = what.find(": ", what.find("parse error")); colon != std::string_view::npos) {
      what.remove_prefix(colon + 2);
    }
    error_ = "invalid JSON at byte " + std::to_string(position) + ": ";
    for (char c : what.substr(0, 160)) error_ += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
    return false;
  }

 private:
  bool fail(std::string message) {
    if (error_.empty()) error_ = std::move(message);
    return false;
  }

  // Names the span being read in messages about it.
  std::string span_prefix() const { return "span " + std::to_string(out_.span_count) + ": "; }

  // The node a container (object when `is_object`) starting here becomes, or fails.
  bool start(bool is_object) {
    if (skip_depth_ > 0) {
      ++skip_depth_;
      return true;
    }
    if (stack_.empty()) {
      if (!is_object) return fail("the line is not a JSON object");
      saw_root_ = true;
      stack_.push_back({Node::kRoot});
      return true;
    }
    Frame& top = stack_.back();
    if (top.node == Node::kCapture) return capture_start(is_object);
    const bool in_array = is_list(top.node);
    const Field field = in_array ? Field::kIgnored : top.field;
    if (!in_array && field == Field::kIgnored) {
      skip_depth_ = 1;
      return true;
    }
    const Owner owner = top.owner;
    auto expect = [&](bool want_object, Node node, Owner new_owner) {
      if (is_object != want_object) {
        return fail((in_array ? std::string("an element of ") + list_name(top.node)
                              : std::string(field_name(field))) +
                    (want_object ? " is not an object" : " is not an array"));
      }
      stack_.push_back({node, new_owner});
      return true;
    };
    if (in_array) {
      switch (top.node) {
        case Node::kResourceSpansList:
          out_.resources.emplace_back();
          return expect(true, Node::kResourceSpans, owner);
        case Node::kScopeSpansList:
          return expect(true, Node::kScopeSpans, owner);
        case Node::kSpanList:
          if (!expect(true, Node::kSpan, Owner::kSpan)) return false;
          begin_span();
          return true;
        case Node::kEventList:
          if (!expect(true, Node::kEvent, Owner::kEvent)) return false;
          if (details_) span().events.emplace_back();
          have_event_time_ = false;
          return true;
        case Node::kAttributeList:
          if (!expect(true, Node::kAttribute, owner)) return false;
          attribute_.has_key = false;
          attribute_.key.clear();
          attribute_.kind = PendingAttribute::Kind::kNone;
          attribute_.captured = nullptr;
          return true;
        default:
          return fail("unexpected array");
      }
    }
    switch (field) {
      case Field::kResourceSpans:
        out_.has_spans = true;
        return expect(false, Node::kResourceSpansList, owner);
      case Field::kResourceMetrics:
      case Field::kResourceLogs:
        if (is_object) return fail(std::string(field_name(field)) + " is not an array");
        if (field == Field::kResourceLogs) {
          out_.has_logs = true;
          if (!read_logs_) break;  // skipped
          logs_ = ojson::array();
          capturing_ = Capturing::kLogs;
          capture_stack_.assign(1, &logs_);
          stack_.push_back({Node::kCapture, owner});
          return true;
        }
        out_.has_metrics = true;
        if (!read_metrics_) break;
        metrics_ = ojson::array();
        capturing_ = Capturing::kMetrics;
        capture_stack_.assign(1, &metrics_);
        stack_.push_back({Node::kCapture, owner});
        return true;
      case Field::kResource:
        return expect(true, Node::kResource, Owner::kResource);
      case Field::kScopeSpans:
        return expect(false, Node::kScopeSpansList, owner);
      case Field::kSpans:
        return expect(false, Node::kSpanList, owner);
      case Field::kAttributes:
        return expect(false, Node::kAttributeList, owner);
      case Field::kEvents:
        if (!details_) break;
        return expect(false, Node::kEventList, owner);
      case Field::kStatus:
        if (!details_) break;
        return expect(true, Node::kStatus, owner);
      case Field::kValue:
        if (!is_object) return fail(span_prefix() + "attribute value is not an object");
        if (details_ && owner != Owner::kResource) {
          attribute_.captured = ojson::object();
          capture_stack_.assign(1, &attribute_.captured);
          stack_.push_back({Node::kCapture, owner});
          return true;
        }
        stack_.push_back({Node::kAnyValue, owner});
        return true;
      case Field::kComplexValue:  // arrays and kvlists matter only with details (captured)
        if (!is_object) return fail(span_prefix() + "arrayValue or kvlistValue is not an object");
        attribute_.kind = PendingAttribute::Kind::kOther;
        break;
      default:
        return fail(span_prefix() + field_name(field) + " is not a scalar");
    }
    skip_depth_ = 1;
    return true;
  }

  bool end() {
    if (skip_depth_ > 0) {
      --skip_depth_;
      return true;
    }
    Frame& top = stack_.back();
    if (top.node == Node::kCapture) {
      capture_stack_.pop_back();
      if (!capture_stack_.empty()) return true;
      stack_.pop_back();  // the AnyValue object (or the resourceMetrics array) is complete
      capturing_ = Capturing::kValue;
      return true;
    }
    const Node node = top.node;
    const Owner owner = top.owner;
    stack_.pop_back();
    switch (node) {
      case Node::kSpan:
        return end_span();
      case Node::kAttribute:
        return end_attribute(owner);
      case Node::kEvent:
        if (!have_event_time_) return fail(span_prefix() + "an event has no timeUnixNano");
        return true;
      default:
        return true;
    }
  }

  bool scalar(const Scalar& s) {
    if (skip_depth_ > 0) return true;
    if (stack_.empty()) return fail("the line is not a JSON object");
    Frame& top = stack_.back();
    if (top.node == Node::kCapture) return capture_scalar(s);
    if (is_list(top.node)) {
      return fail(std::string("an element of ") + list_name(top.node) + " is not an object");
    }
    const Field field = top.field;
    const bool is_null = s.type == Scalar::Type::kNull;
    switch (field) {
      case Field::kIgnored:
        return true;
      case Field::kResourceSpans:
      case Field::kScopeSpans:
      case Field::kSpans:
      case Field::kAttributes:
      case Field::kEvents:
        if (is_null) return true;
        return fail(std::string(field_name(field)) + " is not an array");
      case Field::kResource:
      case Field::kStatus:
        if (is_null) return true;
        return fail(std::string(field_name(field)) + " is not an object");
      case Field::kResourceMetrics:
      case Field::kResourceLogs:
        if (!is_null) return fail(std::string(field_name(field)) + " is not an array");
        (field == Field::kResourceMetrics ? out_.has_metrics : out_.has_logs) = true;
        return true;
      case Field::kTraceId:
        if (s.type != Scalar::Type::kString || !is_trace_id(*s.text)) {
          return fail(span_prefix() + "traceId " + shown(s) + " is not 32 hex digits");
        }
        have_trace_id_ = true;
        span().trace_key = trace_key_of(*s.text);
        if (details_) span().trace_id = *s.text;
        return true;
      case Field::kSpanId: {
        auto id = s.type == Scalar::Type::kString ? parse_span_id(*s.text) : std::nullopt;
        if (!id || *id == 0) {
          return fail(span_prefix() + "spanId " + shown(s) + " is not 16 hex digits");
        }
        span().span_id = *id;
        return true;
      }
      case Field::kParentSpanId: {
        if (is_null || (s.type == Scalar::Type::kString && s.text->empty())) return true;
        auto id = s.type == Scalar::Type::kString ? parse_span_id(*s.text) : std::nullopt;
        if (!id) return fail(span_prefix() + "parentSpanId " + shown(s) + " is not 16 hex digits");
        span().parent_span_id = *id;
        return true;
      }
      case Field::kName:
        if (s.type != Scalar::Type::kString) {
          return fail(span_prefix() + (top.node == Node::kEvent ? "event " : "") +
                      "name is not a string");
        }
        if (top.node == Node::kEvent) {
          if (details_) span().events.back().name = *s.text;
        } else {
          span().name = *s.text;
        }
        return true;
      case Field::kStartTime:
      case Field::kEndTime:
      case Field::kTime: {
        auto t = time_value(s);
        if (!t) {
          return fail(span_prefix() + field_name(field) + " " + shown(s) +
                      " is not a decimal integer");
        }
        if (field == Field::kStartTime) {
          span().start_ns = *t;
          have_start_ = true;
        } else if (field == Field::kEndTime) {
          span().end_ns = *t;
          have_end_ = true;
        } else {
          if (details_) span().events.back().time_ns = *t;
          have_event_time_ = true;
        }
        return true;
      }
      case Field::kKey:
        if (s.type != Scalar::Type::kString) return fail("an attribute key is not a string");
        attribute_.key = *s.text;
        attribute_.has_key = true;
        return true;
      case Field::kValue:
        if (is_null) return true;
        return fail(where_attribute() + "attribute value is not an object");
      case Field::kStringValue:
        if (s.type != Scalar::Type::kString) {
          return fail(where_attribute() + "stringValue is not a string");
        }
        attribute_.kind = PendingAttribute::Kind::kString;
        attribute_.text = *s.text;
        return true;
      case Field::kIntValue: {
        std::optional<std::int64_t> v;
        if (s.type == Scalar::Type::kInteger) v = s.integer;
        if (s.type == Scalar::Type::kUnsigned && s.unsigned_integer <= INT64_MAX) {
          v = static_cast<std::int64_t>(s.unsigned_integer);
        }
        if (s.type == Scalar::Type::kString) v = parse_decimal<std::int64_t>(*s.text);
        if (!v) return fail(where_attribute() + "intValue " + shown(s) + " is not an integer");
        attribute_.kind = PendingAttribute::Kind::kInt;
        attribute_.integer = *v;
        return true;
      }
      case Field::kBoolValue:
        if (s.type != Scalar::Type::kBool) {
          return fail(where_attribute() + "boolValue is not a boolean");
        }
        attribute_.kind = PendingAttribute::Kind::kBool;
        attribute_.boolean = s.boolean;
        return true;
      case Field::kDoubleValue:
        if (s.type == Scalar::Type::kBool || is_null) {
          return fail(where_attribute() + "doubleValue is not a number");
        }
        attribute_.kind = PendingAttribute::Kind::kOther;
        return true;
      case Field::kComplexValue:
        if (is_null) return true;
        return fail(where_attribute() + "arrayValue or kvlistValue is not an object");
      case Field::kStatusCode:
        if (s.type == Scalar::Type::kInteger || s.type == Scalar::Type::kUnsigned) {
          span().status_code = static_cast<int>(
              s.type == Scalar::Type::kInteger ? s.integer
                                               : static_cast<std::int64_t>(s.unsigned_integer));
          return true;
        }
        if (s.type == Scalar::Type::kString) {  // the enum's name, as proto3 JSON allows
          const std::string& t = *s.text;
          span().status_code = t == "STATUS_CODE_OK" ? 1 : t == "STATUS_CODE_ERROR" ? 2 : 0;
          return true;
        }
        return is_null ? true : fail(span_prefix() + "status.code is not a number");
      case Field::kStatusMessage:
        if (s.type == Scalar::Type::kString) span().status_message = *s.text;
        return true;
    }
    return true;
  }

  // ---- captured AnyValues (details) ----

  bool capture_start(bool is_object) {
    if (capture_stack_.size() > 64) {
      return fail(capturing_ == Capturing::kMetrics
                      ? std::string("resourceMetrics nested too deeply")
                  : capturing_ == Capturing::kLogs ? std::string("resourceLogs nested too deeply")
                                                   : where_attribute() + "value nested too deeply");
    }
    ojson& parent = *capture_stack_.back();
    ojson child = is_object ? ojson::object() : ojson::array();
    ojson* slot = nullptr;
    if (parent.is_array()) {
      parent.push_back(std::move(child));
      slot = &parent.back();
    } else {
      slot = &(parent[capture_key_] = std::move(child));
    }
    capture_stack_.push_back(slot);
    return true;
  }

  bool capture_scalar(const Scalar& s) {
    ojson value;
    switch (s.type) {
      case Scalar::Type::kNull:
        break;
      case Scalar::Type::kBool:
        value = s.boolean;
        break;
      case Scalar::Type::kInteger:
        value = s.integer;
        break;
      case Scalar::Type::kUnsigned:
        value = s.unsigned_integer;
        break;
      case Scalar::Type::kFloat:
        value = s.floating;
        break;
      case Scalar::Type::kString:
        value = std::move(*s.text);
        break;
    }
    ojson& parent = *capture_stack_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(value));
    } else {
      parent[capture_key_] = std::move(value);
    }
    return true;
  }

  // ---- spans and attributes ----

  SpanRecord& span() { return out_.span_storage[out_.span_count - 1]; }

  void begin_span() {
    if (out_.span_count == out_.span_storage.size()) out_.span_storage.emplace_back();
    SpanRecord& s = out_.span_storage[out_.span_count++];
    s.span_id = s.parent_span_id = s.trace_key = s.start_ns = s.end_ns = 0;
    s.name.clear();
    s.group.clear();
    s.has_group = false;
    s.thread_id.reset();
    s.iteration.reset();
    s.truncated = false;
    s.capture_reason.clear();
    s.capture_id.reset();
    s.gpu = {};
    s.resource = out_.resources.size() - 1;
    if (details_) {
      s.trace_id.clear();
      s.status_code = 0;
      s.status_message.clear();
      s.attributes = ojson::object();
      s.events.clear();
    }
    have_trace_id_ = have_start_ = have_end_ = false;
  }

  bool end_span() {
    const SpanRecord& s = span();
    if (s.span_id == 0) return fail(span_prefix() + "no spanId");
    if (!have_trace_id_) return fail(span_prefix() + "no traceId");
    if (!have_start_) return fail(span_prefix() + "no startTimeUnixNano");
    if (!have_end_) return fail(span_prefix() + "no endTimeUnixNano");
    if (s.end_ns < s.start_ns) {
      return fail(span_prefix() + "endTimeUnixNano is before startTimeUnixNano");
    }
    return true;
  }

  bool end_attribute(Owner owner) {
    PendingAttribute& a = attribute_;
    if (!a.has_key) return fail(where_attribute() + "an attribute has no key");
    const bool captured = details_ && owner != Owner::kResource;
    ojson plain;
    if (captured && !a.captured.is_null()) {
      if (std::string e = plain_value(a.captured, plain, 0); !e.empty()) {
        return fail(where_attribute() + "attribute '" + excerpt(a.key) + "': " + e);
      }
      if (plain.is_string()) {
        a.kind = PendingAttribute::Kind::kString;
        a.text = plain.get<std::string>();
      } else if (plain.is_number_integer()) {
        a.kind = PendingAttribute::Kind::kInt;
        a.integer = plain.get<std::int64_t>();
      } else if (plain.is_boolean()) {
        a.kind = PendingAttribute::Kind::kBool;
        a.boolean = plain.get<bool>();
      } else {
        a.kind = PendingAttribute::Kind::kOther;
      }
    }
    switch (owner) {
      case Owner::kResource: {
        SpanResource& r = out_.resources.back();
        // dl.rank, else nv.dl.rank (newer NeMo Lens): lens writes both, with the same value.
        if (a.key == semconv::kDlRank || (a.key == semconv::kNvDlRank && !r.rank)) {
          if (a.kind == PendingAttribute::Kind::kInt) r.rank = a.integer;
          if (a.kind == PendingAttribute::Kind::kString) {
            if (auto v = parse_decimal<std::int64_t>(a.text)) r.rank = *v;
          }
        } else if (a.key == semconv::kServiceInstanceId &&
                   a.kind == PendingAttribute::Kind::kString) {
          r.instance_id = a.text;
        } else if (a.key == semconv::kNemoRunId && a.kind == PendingAttribute::Kind::kString) {
          r.run_id = a.text;
        }
        return true;
      }
      case Owner::kSpan: {
        SpanRecord& s = span();
        if (a.key == semconv::kNemoSpanGroup && a.kind == PendingAttribute::Kind::kString) {
          s.group = a.text;
          s.has_group = true;
        } else if (a.key == semconv::kThreadId && a.kind == PendingAttribute::Kind::kInt) {
          s.thread_id = a.integer;
        } else if (a.key == kIterationKey && a.kind == PendingAttribute::Kind::kInt) {
          s.iteration = a.integer;
        } else if (a.key == semconv::kNemoSpanTruncated &&
                   a.kind == PendingAttribute::Kind::kBool) {
          s.truncated = a.boolean;
        } else if (a.key == semconv::kLensCaptureReason &&
                   a.kind == PendingAttribute::Kind::kString) {
          s.capture_reason = a.text;
        } else if (a.key == semconv::kLensCaptureId && a.kind == PendingAttribute::Kind::kInt) {
          s.capture_id = a.integer;
        } else if (a.key.starts_with("gpu.") && a.kind == PendingAttribute::Kind::kInt &&
                   a.integer >= 0) {
          const auto v = static_cast<std::uint64_t>(a.integer);
          if (a.key == kGpuBusyKey) s.gpu.busy_ns = v;
          if (a.key == kGpuKernelsKey) s.gpu.kernels = v;
          if (a.key == kGpuStartKey) s.gpu.start_ns = v;
          if (a.key == kGpuEndKey) s.gpu.end_ns = v;
          if (a.key == "gpu.correlation_id") s.gpu_kernel = true;
          if (a.key == "gpu.stream") s.gpu_stream = a.integer;
        }
        if (details_) s.attributes[a.key] = std::move(plain);
        return true;
      }
      case Owner::kEvent:
        if (details_) span().events.back().attributes[a.key] = std::move(plain);
        return true;
    }
    return true;
  }

  std::string where_attribute() const {
    return out_.span_count == 0 ? std::string("resource: ") : span_prefix();
  }

  static std::optional<std::uint64_t> time_value(const Scalar& s) {
    if (s.type == Scalar::Type::kString) return parse_decimal<std::uint64_t>(*s.text);
    if (s.type == Scalar::Type::kUnsigned) return s.unsigned_integer;
    if (s.type == Scalar::Type::kInteger && s.integer >= 0) {
      return static_cast<std::uint64_t>(s.integer);
    }
    return std::nullopt;
  }

  static std::string shown(const Scalar& s) {
    switch (s.type) {
      case Scalar::Type::kString:
        return "'" + excerpt(*s.text) + "'";
      case Scalar::Type::kNull:
        return "null";
      case Scalar::Type::kBool:
        return s.boolean ? "true" : "false";
      case Scalar::Type::kInteger:
        return std::to_string(s.integer);
      case Scalar::Type::kUnsigned:
        return std::to_string(s.unsigned_integer);
      case Scalar::Type::kFloat:
        return "(a fraction)";
    }
    return "";
  }

  static bool is_list(Node n) {
    return n == Node::kResourceSpansList || n == Node::kScopeSpansList || n == Node::kSpanList ||
           n == Node::kEventList || n == Node::kAttributeList;
  }

  static const char* list_name(Node n) {
    switch (n) {
      case Node::kResourceSpansList:
        return "resourceSpans";
      case Node::kScopeSpansList:
        return "scopeSpans";
      case Node::kSpanList:
        return "spans";
      case Node::kEventList:
        return "events";
      case Node::kAttributeList:
        return "attributes";
      default:
        return "an array";
    }
  }

  ParsedRequest& out_;
  const bool details_;
  const bool read_metrics_;
  const bool read_logs_;
  ojson metrics_;
  ojson logs_;
  // What the capture stack is building: an attribute's AnyValue, or a whole resourceMetrics or
  // resourceLogs array.
  enum class Capturing { kValue, kMetrics, kLogs } capturing_ = Capturing::kValue;
  std::vector<Frame> stack_;
  std::size_t skip_depth_ = 0;  // > 0 inside a value the handler does not read
  bool saw_root_ = false;
  bool have_trace_id_ = false;
  bool have_start_ = false;
  bool have_end_ = false;
  bool have_event_time_ = false;
  PendingAttribute attribute_;
  std::vector<ojson*> capture_stack_;
  std::string capture_key_;
  std::string error_;
};

}  // namespace

std::string read_span_line(std::string_view line, ParsedRequest& out, bool details, bool metrics,
                           bool logs, ojson& resource_metrics, ojson& resource_logs) {
  OtlpSaxHandler handler(out, details, metrics, logs);
  bool ok = false;
  try {
    ok = nlohmann::json::sax_parse(line.data(), line.data() + line.size(), &handler);
  } catch (const std::exception& e) {  // e.g. out of memory building a captured value
    return std::string("cannot parse the line: ") + e.what();
  }
  if (!ok) {
    return handler.error().empty() ? std::string("invalid JSON") : handler.error();
  }
  if (!handler.saw_root()) return "the line is not a JSON object";
  if (!out.has_metrics && !out.has_logs) out.has_spans = true;  // {} is an empty trace request
  resource_metrics = handler.take_resource_metrics();
  resource_logs = handler.take_resource_logs();
  return {};
}

}  // namespace nemo::lens::cli::reader
