#include "span_reader.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <utility>

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
};

// Whose attributes an attribute list holds.
enum class Owner : std::uint8_t { kResource, kSpan, kEvent };

struct Frame {
  Node node;
  Owner owner = Owner::kSpan;
  Field field = Field::kIgnored;  // the member whose value comes next (objects)
};

Field classify(Node node, std::string_view key) {
  switch (node) {
    case Node::kRoot:
      if (key == "resourceSpans") return Field::kResourceSpans;
      break;
    case Node::kResourceSpans:
      if (key == "resource") return Field::kResource;
      if (key == "scopeSpans") return Field::kScopeSpans;
      break;
    case Node::kResource:
      if (key == "attributes") return Field::kAttributes;
      break;
    case Node::kScopeSpans:
      if (key == "spans") return Field::kSpans;
      break;
    case Node::kSpan:
      if (key == "spanId") return Field::kSpanId;
      if (key == "name") return Field::kName;
      if (key == "parentSpanId") return Field::kParentSpanId;
      if (key == "startTimeUnixNano") return Field::kStartTime;
      if (key == "endTimeUnixNano") return Field::kEndTime;
      if (key == "attributes") return Field::kAttributes;
      if (key == "traceId") return Field::kTraceId;
      if (key == "events") return Field::kEvents;
      if (key == "status") return Field::kStatus;
      break;
    case Node::kEvent:
      if (key == "timeUnixNano") return Field::kTime;
      if (key == "name") return Field::kName;
      if (key == "attributes") return Field::kAttributes;
      break;
    case Node::kAttribute:
      if (key == "key") return Field::kKey;
      if (key == "value") return Field::kValue;
      break;
    case Node::kAnyValue:
      if (key == "stringValue") return Field::kStringValue;
      if (key == "intValue") return Field::kIntValue;
      if (key == "boolValue") return Field::kBoolValue;
      if (key == "doubleValue") return Field::kDoubleValue;
      if (key == "bytesValue") return Field::kStringValue;
      if (key == "arrayValue" || key == "kvlistValue") return Field::kComplexValue;
      break;
    case Node::kStatus:
      if (key == "code") return Field::kStatusCode;
      if (key == "message") return Field::kStatusMessage;
      break;
    default:
      break;
  }
  return Field::kIgnored;
}

const char* field_name(Field f) {
  switch (f) {
    case Field::kResourceSpans:
      return "resourceSpans";
    case Field::kResource:
      return "resource";
    case Field::kScopeSpans:
      return "scopeSpans";
    case Field::kSpans:
      return "spans";
    case Field::kAttributes:
      return "attributes";
    case Field::kEvents:
      return "events";
    case Field::kStatus:
      return "status";
    case Field::kTraceId:
      return "traceId";
    case Field::kSpanId:
      return "spanId";
    case Field::kParentSpanId:
      return "parentSpanId";
    case Field::kName:
      return "name";
    case Field::kStartTime:
      return "startTimeUnixNano";
    case Field::kEndTime:
      return "endTimeUnixNano";
    case Field::kTime:
      return "timeUnixNano";
    case Field::kKey:
      return "key";
    case Field::kValue:
      return "value";
    case Field::kStringValue:
      return "stringValue";
    case Field::kBoolValue:
      return "boolValue";
    case Field::kIntValue:
      return "intValue";
    case Field::kDoubleValue:
      return "doubleValue";
    case Field::kComplexValue:
      return "arrayValue";
    case Field::kStatusCode:
      return "status.code";
    case Field::kStatusMessage:
      return "status.message";
    case Field::kIgnored:
      break;
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

  OtlpSaxHandler(ParsedRequest& out, bool details) : out_(out), details_(details) {
    out_.resources.clear();
    out_.span_count = 0;
  }

  const std::string& error() const { return error_; }
  bool saw_root() const { return saw_root_; }

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
        return expect(false, Node::kResourceSpansList, owner);
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
      stack_.pop_back();  // the AnyValue object is complete
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
    if (capture_stack_.size() > 64) return fail(where_attribute() + "value nested too deeply");
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
        if (a.key == "dl.rank") {
          if (a.kind == PendingAttribute::Kind::kInt) r.rank = a.integer;
          if (a.kind == PendingAttribute::Kind::kString) {
            if (auto v = parse_decimal<std::int64_t>(a.text)) r.rank = *v;
          }
        } else if (a.key == "service.instance.id" && a.kind == PendingAttribute::Kind::kString) {
          r.instance_id = a.text;
        } else if (a.key == "nemo.run.id" && a.kind == PendingAttribute::Kind::kString) {
          r.run_id = a.text;
        }
        return true;
      }
      case Owner::kSpan: {
        SpanRecord& s = span();
        if (a.key == "nemo.span.group" && a.kind == PendingAttribute::Kind::kString) {
          s.group = a.text;
          s.has_group = true;
        } else if (a.key == "thread.id" && a.kind == PendingAttribute::Kind::kInt) {
          s.thread_id = a.integer;
        } else if (a.key == "nemo.span.truncated" && a.kind == PendingAttribute::Kind::kBool) {
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

std::string SpanLineReader::parse_line(std::string_view line, ParsedRequest& out) const {
  OtlpSaxHandler handler(out, options_.details);
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
  ++counts_.requests;
  counts_.spans += request.span_count;
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
