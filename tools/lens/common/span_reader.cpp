#include "common/span_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

#include "nemo/lens/semconv.hpp"

namespace nemo::lens::cli {

// ---- InputFile ----

InputFile::InputFile(std::string path) : path_(std::move(path)) {
  if (path_ == "-") {
    stream_ = stdin;
    return;
  }
  stream_ = std::fopen(path_.c_str(), "rb");
  if (stream_ == nullptr) {
    throw FileError("cannot open '" + path_ + "': " + std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fileno(stream_), &st) == 0 && S_ISDIR(st.st_mode)) {
    std::fclose(stream_);
    stream_ = nullptr;
    throw FileError("cannot read '" + path_ + "': it is a directory");
  }
}

InputFile::InputFile(InputFile&& other) noexcept
    : path_(std::move(other.path_)), stream_(std::exchange(other.stream_, nullptr)) {}

InputFile::~InputFile() {
  if (stream_ != nullptr && stream_ != stdin) std::fclose(stream_);
}

namespace {

using ojson = nlohmann::ordered_json;

// ---- lines ----

// Splits a stream into lines without a limit on their number: one buffer, grown up to the
// longest line (at most kMaxLineBytes; longer lines are reported as too long and skipped).
class LineSplitter {
 public:
  LineSplitter(std::FILE* stream, const std::string& path) : stream_(stream), path_(path) {
    buffer_.resize(std::size_t{1} << 20);
  }

  // The next line, without its '\n' and a trailing '\r'; false at the end of the input.
  // `too_long` tells that the line was longer than the limit (its text is then empty).
  bool next(std::string_view& line, bool& too_long) {
    too_long = false;
    for (;;) {
      const char* base = buffer_.data();
      if (const void* nl = std::memchr(base + begin_, '\n', end_ - begin_)) {
        const std::size_t at = static_cast<std::size_t>(static_cast<const char*>(nl) - base);
        line = std::string_view(base + begin_, at - begin_);
        begin_ = at + 1;
        if (discarding_) {
          discarding_ = false;
          too_long = true;
          line = {};
        }
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      if (eof_) {
        if (begin_ == end_ && !discarding_) return false;
        line = std::string_view(base + begin_, end_ - begin_);
        begin_ = end_;
        if (discarding_) {
          discarding_ = false;
          too_long = true;
          line = {};
        }
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        return true;
      }
      if (begin_ > 0) {
        std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
        end_ -= begin_;
        begin_ = 0;
      }
      if (end_ == buffer_.size()) {
        if (buffer_.size() >= SpanLineReader::kMaxLineBytes) {
          discarding_ = true;  // keep reading to the end of this line, dropping its text
          end_ = 0;
        } else {
          buffer_.resize(std::min(buffer_.size() * 2, SpanLineReader::kMaxLineBytes));
        }
      }
      const std::size_t n = std::fread(buffer_.data() + end_, 1, buffer_.size() - end_, stream_);
      end_ += n;
      if (n == 0) {
        if (std::ferror(stream_)) {
          throw FileError("cannot read '" + path_ + "': " + std::strerror(errno));
        }
        eof_ = true;
      }
    }
  }

 private:
  std::FILE* stream_;
  const std::string& path_;
  std::vector<char> buffer_;
  std::size_t begin_ = 0;
  std::size_t end_ = 0;
  bool eof_ = false;
  bool discarding_ = false;
};

bool is_blank(std::string_view line) {
  for (char c : line) {
    if (c != ' ' && c != '\t' && c != '\r' && c != '\n') return false;
  }
  return true;
}

// ---- scalar conversions ----

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// 16 hex digits as a 64-bit value.
std::optional<std::uint64_t> parse_span_id(std::string_view s) {
  if (s.size() != 16) return std::nullopt;
  std::uint64_t v = 0;
  for (char c : s) {
    const int d = hex_digit(c);
    if (d < 0) return std::nullopt;
    v = (v << 4) | static_cast<std::uint64_t>(d);
  }
  return v;
}

bool is_trace_id(std::string_view s) {
  if (s.size() != 32) return false;
  bool nonzero = false;
  for (char c : s) {
    const int d = hex_digit(c);
    if (d < 0) return false;
    nonzero = nonzero || d != 0;
  }
  return nonzero;
}

template <class T>
std::optional<T> parse_decimal(std::string_view s) {
  T v{};
  const char* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (s.empty() || ec != std::errc() || ptr != end) return std::nullopt;
  return v;
}

// Printable text for an error message: at most 40 bytes, control characters as '?'.
std::string excerpt(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 40)) out += static_cast<unsigned char>(c) < 0x20 ? '?' : c;
  if (s.size() > 40) out += "...";
  return out;
}

// An OTLP AnyValue (as parsed JSON) as plain JSON: stringValue and bytesValue a string,
// boolValue a boolean, intValue an integer, doubleValue a number (or the string "NaN",
// "Infinity", "-Infinity"), arrayValue an array, kvlistValue an object, an empty one null.
// Returns an error message, empty on success.
std::string plain_value(const ojson& any, ojson& out, int depth) {
  if (depth > 32) return "attribute value nested more than 32 deep";
  if (!any.is_object()) return "attribute value is not an object";
  out = nullptr;
  for (const auto& [key, v] : any.items()) {
    if (key == "stringValue" || key == "bytesValue") {
      if (!v.is_string()) return key + " is not a string";
      out = v;
    } else if (key == "boolValue") {
      if (!v.is_boolean()) return "boolValue is not a boolean";
      out = v;
    } else if (key == "intValue") {
      if (v.is_number_integer()) {
        out = v;
      } else if (auto n = v.is_string()
                              ? parse_decimal<std::int64_t>(v.get_ref<const std::string&>())
                              : std::nullopt) {
        out = *n;
      } else {
        return "intValue is not a 64-bit integer";
      }
    } else if (key == "doubleValue") {
      if (!v.is_number() && !v.is_string()) return "doubleValue is not a number";
      out = v;
    } else if (key == "arrayValue" || key == "kvlistValue") {
      const bool kvlist = key == "kvlistValue";
      if (!v.is_object()) return key + " is not an object";
      out = kvlist ? ojson::object() : ojson::array();
      auto values = v.find("values");
      if (values == v.end() || values->is_null()) continue;
      if (!values->is_array()) return key + ".values is not an array";
      for (const ojson& element : *values) {
        ojson plain;
        if (!kvlist) {
          if (std::string e = plain_value(element, plain, depth + 1); !e.empty()) return e;
          out.push_back(std::move(plain));
          continue;
        }
        if (!element.is_object()) return "kvlistValue element is not an object";
        auto k = element.find("key");
        if (k == element.end() || !k->is_string()) return "kvlistValue element has no string key";
        auto value = element.find("value");
        if (value != element.end() && !value->is_null()) {
          if (std::string e = plain_value(*value, plain, depth + 1); !e.empty()) return e;
        }
        out[k->get<std::string>()] = std::move(plain);
      }
    }
  }
  return {};
}

// ---- the SAX handler ----

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
  kResourceLogs,     // skipped
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

  OtlpSaxHandler(ParsedRequest& out, bool details, bool metrics)
      : out_(out), details_(details), read_metrics_(metrics) {
    out_.resources.clear();
    out_.span_count = 0;
    out_.has_spans = out_.has_metrics = out_.has_logs = false;
    out_.metrics.clear();
    out_.data_points = 0;
  }

  const std::string& error() const { return error_; }
  bool saw_root() const { return saw_root_; }
  /// The resourceMetrics array, captured (ReaderOptions::metrics); null when absent.
  const ojson& resource_metrics() const { return metrics_; }

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
          break;  // skipped
        }
        out_.has_metrics = true;
        if (!read_metrics_) break;
        metrics_ = ojson::array();
        capturing_metrics_ = true;
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
      capturing_metrics_ = false;
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
      return fail(capturing_metrics_ ? std::string("resourceMetrics nested too deeply")
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
    s.span_id = s.parent_span_id = s.start_ns = s.end_ns = 0;
    s.name.clear();
    s.group.clear();
    s.has_group = false;
    s.thread_id.reset();
    s.truncated = false;
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
        } else if (a.key == semconv::kNemoSpanTruncated &&
                   a.kind == PendingAttribute::Kind::kBool) {
          s.truncated = a.boolean;
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
  ojson metrics_;
  bool capturing_metrics_ = false;
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

namespace {

// ---- metrics lines (read from the captured resourceMetrics document) ----

// An integer field of a data point: a decimal string (as OTLP/JSON writes 64-bit integers) or a
// JSON integer.
template <class T>
std::optional<T> integer_value(const ojson& v) {
  if (v.is_string()) return parse_decimal<T>(v.get_ref<const std::string&>());
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (std::in_range<T>(u)) return static_cast<T>(u);
    return std::nullopt;
  }
  if (v.is_number_integer()) {
    const auto i = v.get<std::int64_t>();
    if (std::in_range<T>(i)) return static_cast<T>(i);
  }
  return std::nullopt;
}

// A double field: a JSON number, or a string ("NaN", "Infinity", "-Infinity", or a decimal
// number, as proto3 JSON readers accept).
std::optional<double> double_value(const ojson& v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const std::string& s = v.get_ref<const std::string&>();
  if (s == "NaN") return std::numeric_limits<double>::quiet_NaN();
  if (s == "Infinity") return std::numeric_limits<double>::infinity();
  if (s == "-Infinity") return -std::numeric_limits<double>::infinity();
  return parse_decimal<double>(s);
}

// The members of an object, null and absent alike; `what` names it in errors.
class Members {
 public:
  Members(const ojson& object, std::string prefix) : object_(object), prefix_(std::move(prefix)) {}

  const ojson* find(const char* key) const {
    auto it = object_.find(key);
    return it == object_.end() || it->is_null() ? nullptr : &*it;
  }

  // The array member `key` (empty when absent or null), or an error.
  bool array(const char* key, const ojson*& out, std::string& error) const {
    out = find(key);
    if (out != nullptr && !out->is_array()) {
      error = prefix_ + key + " is not an array";
      return false;
    }
    return true;
  }

  template <class T>
  bool integer(const char* key, T& out, std::string& error) const {
    const ojson* v = find(key);
    if (v == nullptr) return true;
    auto n = integer_value<T>(*v);
    if (!n) {
      error = prefix_ + key + " " + shown(*v) + " is not a decimal integer";
      return false;
    }
    out = *n;
    return true;
  }

  bool number(const char* key, std::optional<double>& out, std::string& error) const {
    const ojson* v = find(key);
    if (v == nullptr) return true;
    out = double_value(*v);
    if (!out) {
      error = prefix_ + key + " " + shown(*v) + " is not a number";
      return false;
    }
    return true;
  }

  const std::string& prefix() const { return prefix_; }

  static std::string shown(const ojson& v) {
    if (v.is_string()) return "'" + excerpt(v.get_ref<const std::string&>()) + "'";
    return excerpt(v.dump());
  }

 private:
  const ojson& object_;
  std::string prefix_;
};

// A resource's dl.rank (else nv.dl.rank), service.instance.id and nemo.run.id.
std::string read_metric_resource(const ojson* resource, SpanResource& out) {
  if (resource == nullptr) return {};
  if (!resource->is_object()) return "resourceMetrics: resource is not an object";
  const ojson* attributes = nullptr;
  std::string error;
  if (!Members(*resource, "resourceMetrics: resource.").array("attributes", attributes, error)) {
    return error;
  }
  if (attributes == nullptr) return {};
  for (const ojson& kv : *attributes) {
    if (!kv.is_object()) return "resourceMetrics: an element of attributes is not an object";
    auto key = kv.find("key");
    auto value = kv.find("value");
    if (key == kv.end() || !key->is_string()) return "resourceMetrics: an attribute has no key";
    if (value == kv.end() || !value->is_object()) continue;
    const std::string& k = key->get_ref<const std::string&>();
    auto string_value = value->find("stringValue");
    const bool is_string = string_value != value->end() && string_value->is_string();
    if (k == semconv::kDlRank || (k == semconv::kNvDlRank && !out.rank)) {
      if (auto i = value->find("intValue"); i != value->end()) {
        if (auto n = integer_value<std::int64_t>(*i)) out.rank = *n;
      } else if (is_string) {
        if (auto n = parse_decimal<std::int64_t>(string_value->get_ref<const std::string&>())) {
          out.rank = *n;
        }
      }
    } else if (k == semconv::kServiceInstanceId && is_string) {
      out.instance_id = string_value->get<std::string>();
    } else if (k == semconv::kNemoRunId && is_string) {
      out.run_id = string_value->get<std::string>();
    }
  }
  return {};
}

// A data point's attributes as its series key: "k=v" sorted by key, joined by ", ".
std::string read_series(const ojson* attributes, const std::string& prefix, std::string& error) {
  if (attributes == nullptr) return {};
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const ojson& kv : *attributes) {
    if (!kv.is_object()) {
      error = prefix + "an element of attributes is not an object";
      return {};
    }
    auto key = kv.find("key");
    if (key == kv.end() || !key->is_string()) {
      error = prefix + "an attribute has no key";
      return {};
    }
    ojson plain;
    auto value = kv.find("value");
    if (value != kv.end() && !value->is_null()) {
      if (std::string e = plain_value(*value, plain, 0); !e.empty()) {
        error = prefix + "attribute '" + excerpt(key->get_ref<const std::string&>()) + "': " + e;
        return {};
      }
    }
    pairs.emplace_back(key->get<std::string>(),
                       plain.is_string()
                           ? plain.get<std::string>()
                           : plain.dump(-1, ' ', false, ojson::error_handler_t::replace));
  }
  std::sort(pairs.begin(), pairs.end());
  std::string series;
  for (const auto& [k, v] : pairs) {
    if (!series.empty()) series += ", ";
    series += k + "=" + v;
  }
  return series;
}

std::string read_point(const ojson& p, MetricType type, const std::string& prefix,
                       MetricPoint& out) {
  if (!p.is_object()) return prefix + "is not an object";
  const Members m(p, prefix);
  std::string error;
  const ojson* attributes = nullptr;
  if (!m.array("attributes", attributes, error)) return error;
  out.series = read_series(attributes, prefix, error);
  if (!error.empty()) return error;
  std::uint32_t flags = 0;
  if (!m.integer("startTimeUnixNano", out.start_ns, error) ||
      !m.integer("timeUnixNano", out.time_ns, error) || !m.integer("flags", flags, error)) {
    return error;
  }
  if (type == MetricType::kGauge || type == MetricType::kSum) {
    if (m.find("asInt") != nullptr) {
      if (!m.integer("asInt", out.int_value, error)) return error;
      out.is_int = true;
      out.has_value = true;
      out.value = static_cast<double>(out.int_value);
    }
    if (m.find("asDouble") != nullptr) {
      std::optional<double> d;
      if (!m.number("asDouble", d, error)) return error;
      out.is_int = false;
      out.has_value = true;
      out.value = *d;
    }
    if ((flags & 1) != 0) out.has_value = false;  // FLAG_NO_RECORDED_VALUE
    return {};
  }
  if (!m.integer("count", out.count, error) || !m.number("sum", out.sum, error) ||
      !m.number("min", out.min, error) || !m.number("max", out.max, error)) {
    return error;
  }
  if (type != MetricType::kHistogram) return {};
  const ojson* counts = nullptr;
  const ojson* bounds = nullptr;
  if (!m.array("bucketCounts", counts, error) || !m.array("explicitBounds", bounds, error)) {
    return error;
  }
  if (counts != nullptr) {
    for (const ojson& c : *counts) {
      auto n = integer_value<std::uint64_t>(c);
      if (!n) return prefix + "bucketCounts holds " + Members::shown(c) + ", not a decimal integer";
      out.bucket_counts.push_back(*n);
    }
  }
  if (bounds != nullptr) {
    for (const ojson& b : *bounds) {
      auto d = double_value(b);
      if (!d) return prefix + "explicitBounds holds " + Members::shown(b) + ", not a number";
      out.explicit_bounds.push_back(*d);
    }
  }
  if (!out.bucket_counts.empty() && out.bucket_counts.size() != out.explicit_bounds.size() + 1) {
    return prefix + std::to_string(out.bucket_counts.size()) + " bucketCounts for " +
           std::to_string(out.explicit_bounds.size()) + " explicitBounds (expected one more)";
  }
  if (out.bucket_counts.empty()) out.explicit_bounds.clear();
  return {};
}

// The metric numbered `number` (from 1, in the line) into `out`.
std::string read_metric(const ojson& metric, std::size_t number, std::size_t resource,
                        MetricRecord& out, std::size_t& points) {
  if (!metric.is_object()) {
    return "an element of resourceMetrics[].scopeMetrics[].metrics is not an object";
  }
  out.resource = resource;
  auto name = metric.find("name");
  if (name == metric.end() || !name->is_string() || name->get_ref<const std::string&>().empty()) {
    return "metric " + std::to_string(number) + ": no name";
  }
  out.name = name->get<std::string>();
  const std::string prefix = "metric '" + excerpt(out.name) + "': ";
  if (auto unit = metric.find("unit"); unit != metric.end() && !unit->is_null()) {
    if (!unit->is_string()) return prefix + "unit is not a string";
    out.unit = unit->get<std::string>();
  }
  static constexpr std::pair<const char*, MetricType> kTypes[] = {
      {"gauge", MetricType::kGauge},
      {"sum", MetricType::kSum},
      {"histogram", MetricType::kHistogram},
      {"exponentialHistogram", MetricType::kExponentialHistogram},
      {"summary", MetricType::kSummary}};
  const ojson* data = nullptr;
  const char* data_key = nullptr;
  for (const auto& [key, type] : kTypes) {
    auto it = metric.find(key);
    if (it == metric.end() || it->is_null()) continue;
    if (!it->is_object()) return prefix + key + " is not an object";
    data = &*it;
    data_key = key;
    out.type = type;
  }
  if (data == nullptr) return {};  // no data: nothing to report
  const Members m(*data, prefix + data_key + ".");
  std::string error;
  if (auto t = m.find("aggregationTemporality")) {
    if (t->is_string()) {  // the enum's name, as proto3 JSON allows
      const std::string& text = t->get_ref<const std::string&>();
      out.temporality = text == "AGGREGATION_TEMPORALITY_DELTA"        ? 1
                        : text == "AGGREGATION_TEMPORALITY_CUMULATIVE" ? 2
                                                                       : 0;
    } else if (!m.integer("aggregationTemporality", out.temporality, error)) {
      return error;
    }
  }
  if (auto monotonic = m.find("isMonotonic")) {
    if (!monotonic->is_boolean()) return m.prefix() + "isMonotonic is not a boolean";
    out.monotonic = monotonic->get<bool>();
  }
  const ojson* data_points = nullptr;
  if (!m.array("dataPoints", data_points, error)) return error;
  if (data_points == nullptr) return {};
  out.points.resize(data_points->size());
  for (std::size_t i = 0; i < data_points->size(); ++i) {
    const std::string point_prefix = prefix + "dataPoints[" + std::to_string(i) + "]: ";
    if (std::string e = read_point((*data_points)[i], out.type, point_prefix, out.points[i]);
        !e.empty()) {
      return e;
    }
  }
  points += out.points.size();
  return {};
}

// Reads the metrics of a captured resourceMetrics array into `out`; the error that makes the
// line malformed, empty when valid.
std::string read_metrics(const ojson& resource_metrics, ParsedRequest& out) {
  std::size_t metric_number = 0;
  for (const ojson& rm : resource_metrics) {
    if (!rm.is_object()) return "an element of resourceMetrics is not an object";
    const Members group(rm, "resourceMetrics[].");
    std::string error;
    SpanResource& resource = out.resources.emplace_back();
    if (std::string e = read_metric_resource(group.find("resource"), resource); !e.empty()) {
      return e;
    }
    const std::size_t resource_index = out.resources.size() - 1;
    const ojson* scopes = nullptr;
    if (!group.array("scopeMetrics", scopes, error)) return error;
    if (scopes == nullptr) continue;
    for (const ojson& sm : *scopes) {
      if (!sm.is_object()) return "an element of resourceMetrics[].scopeMetrics is not an object";
      const ojson* metrics = nullptr;
      if (!Members(sm, "resourceMetrics[].scopeMetrics[].").array("metrics", metrics, error)) {
        return error;
      }
      if (metrics == nullptr) continue;
      for (const ojson& metric : *metrics) {
        ++metric_number;
        MetricRecord& record = out.metrics.emplace_back();
        if (std::string e =
                read_metric(metric, metric_number, resource_index, record, out.data_points);
            !e.empty()) {
          return e;
        }
      }
    }
  }
  return {};
}

}  // namespace

std::string SpanLineReader::parse_line(std::string_view line, ParsedRequest& out) const {
  OtlpSaxHandler handler(out, options_.details, options_.metrics);
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
  if (handler.resource_metrics().is_array()) {
    try {
      if (std::string e = read_metrics(handler.resource_metrics(), out); !e.empty()) return e;
    } catch (const std::exception& e) {
      return std::string("cannot read the metrics: ") + e.what();
    }
  }
  return {};
}

namespace {

std::string too_long_error() {
  return "the line is longer than " + std::to_string(SpanLineReader::kMaxLineBytes >> 20) + " MiB";
}

// Lines handed to a parsing thread, and what it made of them.
struct Chunk {
  struct Line {
    std::size_t offset;
    std::size_t size;
    std::uint64_t number;
    bool too_long;
  };
  std::uint64_t sequence = 0;
  std::string text;  // the lines' text, back to back
  std::vector<Line> lines;
  std::vector<ParsedRequest> requests;  // requests[i]: lines[i] parsed (reused between chunks)
  std::vector<std::string> errors;      // errors[i]: why lines[i] is malformed, empty if not
};

constexpr std::size_t kChunkBytes = std::size_t{1} << 20;
constexpr std::size_t kChunkLines = 256;

}  // namespace

unsigned SpanLineReader::thread_count() const {
  if (options_.threads != 0) return options_.threads;
  return std::clamp(std::thread::hardware_concurrency(), 1u, 4u);
}

void SpanLineReader::deliver(std::string_view path, std::uint64_t number, std::string& error,
                             const ParsedRequest& request, const RequestCallback& on_request,
                             const MalformedCallback& on_malformed) {
  ++counts_.lines;
  if (!error.empty()) {
    ++counts_.malformed;
    on_malformed(MalformedLine{path, number, std::move(error)});
    return;
  }
  if (request.has_spans) {
    ++counts_.requests;
    counts_.spans += request.span_count;
  }
  if (request.has_metrics) {
    ++counts_.metric_lines;
    counts_.data_points += request.data_points;
  }
  if (request.has_logs) ++counts_.log_lines;
  on_request(request);
}

void SpanLineReader::read(InputFile& file, const RequestCallback& on_request,
                          const MalformedCallback& on_malformed) {
  LineSplitter lines(file.stream(), file.path());
  std::string_view line;
  bool too_long = false;
  std::uint64_t number = 0;
  const unsigned threads = thread_count();
  if (threads <= 1) {
    while (lines.next(line, too_long)) {
      ++number;
      if (!too_long && is_blank(line)) continue;
      std::string error = too_long ? too_long_error() : parse_line(line, request_);
      deliver(file.path(), number, error, request_, on_request, on_malformed);
    }
    return;
  }

  // Parsing threads take chunks of lines; this thread reads the next chunks meanwhile and hands
  // the parsed requests on in input order. At most 2 chunks per thread are in flight.
  std::mutex mutex;
  std::condition_variable work_ready, chunk_done;
  std::deque<Chunk*> todo;
  std::map<std::uint64_t, Chunk*> done;
  bool stop = false;
  std::vector<std::unique_ptr<Chunk>> pool;
  std::vector<Chunk*> free_chunks;
  for (unsigned i = 0; i < 2 * threads; ++i) {
    free_chunks.push_back(pool.emplace_back(std::make_unique<Chunk>()).get());
  }
  auto work = [&] {
    for (;;) {
      Chunk* c = nullptr;
      {
        std::unique_lock lock(mutex);
        work_ready.wait(lock, [&] { return stop || !todo.empty(); });
        if (stop) return;
        c = todo.front();
        todo.pop_front();
      }
      if (c->requests.size() < c->lines.size()) c->requests.resize(c->lines.size());
      c->errors.resize(c->lines.size());
      for (std::size_t i = 0; i < c->lines.size(); ++i) {
        const Chunk::Line& l = c->lines[i];
        c->errors[i] = l.too_long ? too_long_error()
                                  : parse_line(std::string_view(c->text).substr(l.offset, l.size),
                                               c->requests[i]);
      }
      std::lock_guard lock(mutex);
      done.emplace(c->sequence, c);
      chunk_done.notify_all();
    }
  };
  std::vector<std::thread> workers;
  struct Join {  // stops and joins the threads however this function is left
    std::vector<std::thread>& workers;
    std::mutex& mutex;
    bool& stop;
    std::condition_variable& work_ready;
    ~Join() {
      {
        std::lock_guard lock(mutex);
        stop = true;
      }
      work_ready.notify_all();
      for (std::thread& t : workers) t.join();
    }
  } join{workers, mutex, stop, work_ready};
  for (unsigned i = 0; i < threads; ++i) workers.emplace_back(work);

  std::uint64_t submitted = 0, delivered = 0;
  bool end_of_input = false;
  for (;;) {
    while (!end_of_input && !free_chunks.empty()) {
      Chunk* c = free_chunks.back();
      c->text.clear();
      c->lines.clear();
      while (c->text.size() < kChunkBytes && c->lines.size() < kChunkLines) {
        if (!lines.next(line, too_long)) {
          end_of_input = true;
          break;
        }
        ++number;
        if (!too_long && is_blank(line)) continue;
        c->lines.push_back({c->text.size(), line.size(), number, too_long});
        c->text.append(line);
      }
      if (c->lines.empty()) break;
      free_chunks.pop_back();
      c->sequence = submitted++;
      {
        std::lock_guard lock(mutex);
        todo.push_back(c);
      }
      work_ready.notify_one();
    }
    if (delivered == submitted) {
      if (end_of_input) return;
      continue;
    }
    Chunk* c = nullptr;
    {
      std::unique_lock lock(mutex);
      chunk_done.wait(lock, [&] { return done.contains(delivered); });
      auto it = done.find(delivered);
      c = it->second;
      done.erase(it);
    }
    for (std::size_t i = 0; i < c->lines.size(); ++i) {
      deliver(file.path(), c->lines[i].number, c->errors[i], c->requests[i], on_request,
              on_malformed);
    }
    ++delivered;
    free_chunks.push_back(c);
  }
}

}  // namespace nemo::lens::cli
