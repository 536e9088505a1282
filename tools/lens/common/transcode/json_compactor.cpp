#include "common/transcode/json_compactor.hpp"

#include <algorithm>
#include <array>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <system_error>
#include <utility>

#include "common/transcode/request_shape.hpp"
#include "strings.hpp"

namespace lens_cli::transcode {

namespace {

constexpr int kMaxJsonDepth = 128;

// Where a value sits in the request, for the shape checks and the item count.
enum class Role : std::uint8_t {
  kOther,
  kRoot,           // the body's object
  kResourceList,   // its resourceSpans (resourceMetrics, resourceLogs) array
  kResourceGroup,  // an element of that
  kScopeList,      // scopeSpans
  kScopeGroup,
  kItems,       // spans or logRecords, whose elements are counted
  kMetricList,  // metrics
  kMetric,      // an element of that
  kMetricData,  // a metric's gauge, sum, histogram, exponentialHistogram or summary
  kDataPoints,  // its dataPoints, whose elements are counted
};

// What a value must be where it appears.
enum class Shape : std::uint8_t { kAny, kObject, kArrayOrNull, kObjectOrNull };

// The numeric members the compactor normalises (docs/otlp.md, "What lens collect keeps"): an
// AnyValue's doubleValue and intValue, a number data point's or exemplar's asDouble and asInt.
enum class Number : std::uint8_t { kNone, kDouble, kInt, kAsInt };

// The members of a Metric's data oneof, as OTLP/JSON spells them.
constexpr std::string_view kMetricDataKeys[] = {"gauge", "sum", "histogram", "exponentialHistogram",
                                                "summary"};

// The bytes a JSON string holds as they are: printable ASCII except '"' and '\'.
constexpr std::array<bool, 256> kPlainStringBytes = [] {
  std::array<bool, 256> plain{};
  for (std::size_t c = 0x20; c < 0x80; ++c) plain[c] = c != '"' && c != '\\';
  return plain;
}();

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// True when a JSON number token is beyond the range of a double (readers such as nlohmann/json
// refuse those); numbers that underflow to zero are fine.
bool overflows_double(std::string_view number) {
  double ignored = 0;
  const auto r = std::from_chars(number.data(), number.data() + number.size(), ignored);
  if (r.ec != std::errc::result_out_of_range) return false;
  // Out of range one way or the other: the decimal exponent of the first significant digit says
  // which.
  std::size_t i = number.starts_with('-') ? 1 : 0;
  const std::size_t int_start = i;
  while (i < number.size() && number[i] >= '0' && number[i] <= '9') ++i;
  const auto int_digits = static_cast<long long>(i - int_start);
  long long magnitude = 0;
  if (number[int_start] != '0') {
    magnitude = int_digits - 1;
  } else {
    long long zeros = 0;
    if (i < number.size() && number[i] == '.') {
      ++i;
      while (i < number.size() && number[i] == '0') {
        ++zeros;
        ++i;
      }
    }
    magnitude = -(zeros + 1);
  }
  const std::size_t e = number.find_first_of("eE");
  if (e != std::string_view::npos) {
    std::size_t j = e + 1;
    const bool negative = j < number.size() && number[j] == '-';
    if (j < number.size() && (number[j] == '-' || number[j] == '+')) ++j;
    long long exponent = 0;
    for (; j < number.size(); ++j)
      exponent = std::min(exponent * 10 + (number[j] - '0'), 1LL << 40);
    magnitude += negative ? -exponent : exponent;
  }
  return magnitude > 0;
}

// Validates a body as JSON (RFC 8259: grammar, UTF-8, escapes, surrogate pairs) by recursive
// descent and copies each token as written, without the whitespace between tokens, checking the
// request's shape on the way.
class JsonCompactor {
 public:
  JsonCompactor(std::string_view body, std::string& out, Signal signal)
      : begin_(body.data()),
        p_(begin_),
        end_(begin_ + body.size()),
        out_(out),
        signal_(signal),
        shape_(shape_of(signal)) {}

  std::string error;
  std::uint64_t items = 0;  // spans, data points or log records

  bool body() {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;  // a UTF-8 BOM
    skip_space();
    if (p_ == end_) return invalid("empty body");
    if (*p_ != '{') {
      const char c = *p_;
      const bool value_start = c == '[' || c == '"' || c == '-' || (c >= '0' && c <= '9') ||
                               c == 't' || c == 'f' || c == 'n';
      return value_start ? fail("the body is not a JSON object") : unexpected();
    }
    if (!value(Role::kRoot, 0)) return false;
    skip_space();
    return p_ == end_ || unexpected();
  }

 private:
  const char* const begin_;
  const char* p_;
  const char* const end_;
  std::string& out_;
  const Signal signal_;
  const SignalShape& shape_;
  std::string_view data_key_;  // the metric data member being read (for its error messages)

  bool fail(std::string message) {
    error = std::move(message);
    return false;
  }
  bool invalid(std::string_view what, const char* at) {
    return fail("invalid JSON: " + std::string(what) + " at byte " +
                std::to_string(static_cast<std::size_t>(at - begin_)));
  }
  bool invalid(std::string_view what) { return invalid(what, p_); }
  bool unexpected() {
    if (p_ == end_) return invalid("unexpected end");
    const auto c = static_cast<unsigned char>(*p_);
    static constexpr char kHex[] = "0123456789abcdef";
    const std::string shown = c > 0x20 && c < 0x7F
                                  ? std::string{'\'', *p_, '\''}
                                  : std::string{'0', 'x', kHex[c >> 4], kHex[c & 15]};
    return invalid("unexpected " + shown);
  }

  void skip_space() {
    while (p_ != end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  // The role of the member `key` (as written) of an object of role `object`.
  Role child_role(Role object, std::string_view key) {
    switch (object) {
      case Role::kRoot:
        return key_is(key, shape_.root_key) ? Role::kResourceList : Role::kOther;
      case Role::kResourceGroup:
        return key_is(key, shape_.scopes_key) ? Role::kScopeList : Role::kOther;
      case Role::kScopeGroup:
        if (!key_is(key, shape_.items_key)) return Role::kOther;
        return signal_ == Signal::kMetrics ? Role::kMetricList : Role::kItems;
      case Role::kMetric:
        for (const std::string_view data : kMetricDataKeys) {
          if (key_is(key, data)) {
            data_key_ = data;
            return Role::kMetricData;
          }
        }
        return Role::kOther;
      case Role::kMetricData:
        return key_is(key, "dataPoints") ? Role::kDataPoints : Role::kOther;
      default:
        return Role::kOther;
    }
  }

  // Whether the key as written (between its quotes) reads `name`, escapes included.
  static bool key_is(std::string_view raw, std::string_view name) {
    if (raw.find('\\') == std::string_view::npos) return raw == name;
    std::size_t n = 0;
    for (std::size_t i = 0; i < raw.size(); ++i, ++n) {
      char c = raw[i];
      if (c == '\\') {
        if (raw[i + 1] != 'u') return false;  // \" \\ \/ \b ... never spell a letter of a name
        int v = 0;
        for (std::size_t k = i + 2; k < i + 6; ++k) v = v * 16 + hex_value(raw[k]);
        c = static_cast<char>(v);
        if (v >= 0x80) return false;
        i += 5;
      }
      if (n >= name.size() || name[n] != c) return false;
    }
    return n == name.size();
  }

  std::string shape_error(Role role) const {
    const std::string resources(shape_.root_key);
    const std::string scopes = resources + "[]." + std::string(shape_.scopes_key);
    const std::string list = scopes + "[]." + std::string(shape_.items_key);
    switch (role) {
      case Role::kResourceGroup:
        return "an element of " + resources + " is not an object";
      case Role::kScopeGroup:
        return "an element of " + scopes + " is not an object";
      case Role::kMetric:
        return "an element of " + list + " is not an object";
      case Role::kResourceList:
        return resources + " is not an array";
      case Role::kScopeList:
        return scopes + " is not an array";
      case Role::kMetricData:
        return list + "[]." + std::string(data_key_) + " is not an object";
      case Role::kDataPoints:
        return list + "[]." + std::string(data_key_) + ".dataPoints is not an array";
      default:
        return list + " is not an array";
    }
  }

  static Shape shape_for(Role role) {
    switch (role) {
      case Role::kOther:
        return Shape::kAny;
      case Role::kRoot:
      case Role::kResourceGroup:
      case Role::kScopeGroup:
      case Role::kMetric:
        return Shape::kObject;
      case Role::kMetricData:
        return Shape::kObjectOrNull;
      default:
        return Shape::kArrayOrNull;
    }
  }

  // The value at p_ (after any whitespace); `depth` is that of the container holding it. `number`
  // says whether it is a double or an int64 member to normalise, whose key starts at `key_at` in
  // out_ (for renaming an intValue that holds no int64 into a doubleValue).
  bool value(Role role, int depth, Number number = Number::kNone, std::size_t key_at = 0) {
    if (p_ == end_) return unexpected();
    const char c = *p_;
    const Shape shape = shape_for(role);
    if ((shape == Shape::kObject && c != '{') ||
        (shape == Shape::kArrayOrNull && c != '[' && c != 'n') ||
        (shape == Shape::kObjectOrNull && c != '{' && c != 'n')) {
      return fail(shape_error(role));
    }
    switch (c) {
      case '{':
        return object(role, depth + 1);
      case '[':
        return array(role, depth + 1);
      case '"':
        return string();
      case 't':
        return literal("true");
      case 'f':
        return literal("false");
      case 'n':
        if (number == Number::kDouble) {
          // JSON.stringify (the OpenTelemetry JS SDK) writes NaN and both infinities as null;
          // which one it was is lost, and "NaN" says so in the encoding OTLP/JSON allows.
          if (!literal("null", false)) return false;
          out_.append("\"NaN\"");
          return true;
        }
        return literal("null");
      default:
        if (c != '-' && (c < '0' || c > '9')) return unexpected();
        return number == Number::kNone ? this->number() : numeric_member(number, key_at);
    }
  }

  // The key of a member that numeric_member() normalises.
  static Number number_kind(std::string_view key) {
    if (key_is(key, "doubleValue") || key_is(key, "asDouble")) return Number::kDouble;
    if (key_is(key, "intValue")) return Number::kInt;
    if (key_is(key, "asInt")) return Number::kAsInt;
    return Number::kNone;
  }

  // A number token as the value of a double or int64 member: written as OTLP/JSON allows. Beyond
  // a double's range (1e999): the string "Infinity" or "-Infinity", as a double member. An int64
  // member holding anything but a whole number within int64 written as digits (1e+300, 2.5,
  // 9223372036854775808: what the JS SDK sends for a JavaScript number that Number.isInteger
  // calls whole): the same token under the double member's key (doubleValue, asDouble), so the
  // value sent is the value kept.
  bool numeric_member(Number number, std::size_t key_at) {
    const char* const start = p_;
    bool integral = false;
    bool overflows = false;
    if (!scan_number(integral, overflows)) return false;
    const std::string_view text(start, static_cast<std::size_t>(p_ - start));
    bool keep = number == Number::kDouble && !overflows;
    if (number != Number::kDouble && integral) {
      std::int64_t ignored = 0;
      const auto r = std::from_chars(text.data(), text.data() + text.size(), ignored);
      keep = r.ec == std::errc() && r.ptr == text.data() + text.size();
    }
    if (keep) {
      out_.append(text);
      return true;
    }
    if (number != Number::kDouble) {
      out_.resize(key_at);
      out_.append(number == Number::kAsInt ? "\"asDouble\":" : "\"doubleValue\":");
    }
    if (overflows) {
      out_.append(text.starts_with('-') ? "\"-Infinity\"" : "\"Infinity\"");
    } else {
      out_.append(text);
    }
    return true;
  }

  bool object(Role role, int depth) {
    if (depth > kMaxJsonDepth)
      return fail("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    ++p_;
    out_.push_back('{');
    skip_space();
    if (p_ != end_ && *p_ == '}') {
      ++p_;
      out_.push_back('}');
      return true;
    }
    for (;;) {
      if (p_ == end_ || *p_ != '"') return p_ == end_ ? unexpected() : invalid("expected a key");
      const char* const key_start = p_;
      const std::size_t key_out = out_.size();
      if (!string()) return false;
      const std::string_view key(key_start + 1, static_cast<std::size_t>(p_ - key_start - 2));
      skip_space();
      if (p_ == end_ || *p_ != ':') return p_ == end_ ? unexpected() : invalid("expected ':'");
      ++p_;
      out_.push_back(':');
      skip_space();
      const Role child = role == Role::kOther ? Role::kOther : child_role(role, key);
      if (!value(child, depth, number_kind(key), key_out)) return false;
      skip_space();
      if (p_ == end_) return unexpected();
      if (*p_ == '}') {
        ++p_;
        out_.push_back('}');
        return true;
      }
      if (*p_ != ',') return invalid("expected ',' or '}'");
      ++p_;
      out_.push_back(',');
      skip_space();
    }
  }

  bool array(Role role, int depth) {
    if (depth > kMaxJsonDepth)
      return fail("JSON nested deeper than " + std::to_string(kMaxJsonDepth));
    ++p_;
    out_.push_back('[');
    skip_space();
    if (p_ != end_ && *p_ == ']') {
      ++p_;
      out_.push_back(']');
      return true;
    }
    Role child = Role::kOther;
    if (role == Role::kResourceList) {
      child = Role::kResourceGroup;
    } else if (role == Role::kScopeList) {
      child = Role::kScopeGroup;
    } else if (role == Role::kMetricList) {
      child = Role::kMetric;
    }
    const bool counted = role == Role::kItems || role == Role::kDataPoints;
    for (;;) {
      if (counted) ++items;
      if (!value(child, depth)) return false;
      skip_space();
      if (p_ == end_) return unexpected();
      if (*p_ == ']') {
        ++p_;
        out_.push_back(']');
        return true;
      }
      if (*p_ != ',') return invalid("expected ',' or ']'");
      ++p_;
      out_.push_back(',');
      skip_space();
    }
  }

  // A string, copied as written except that an escaped lone surrogate (\ud800 without its low
  // half, \udc00 alone) becomes \ufffd, as invalid UTF-8 does on the protobuf path.
  bool string() {
    const char* start = p_++;
    for (;;) {
      while (p_ != end_ && kPlainStringBytes[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ == end_) return invalid("unterminated string", start);
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') break;
      if (c == '\\') {
        const char* const at = p_;
        bool lone_surrogate = false;
        if (!escape(lone_surrogate)) return false;
        if (lone_surrogate) {
          out_.append(start, static_cast<std::size_t>(at - start));
          out_.append("\\ufffd");
          start = p_;
        }
      } else if (c < 0x20) {
        return invalid("control character in a string");
      } else {
        const auto* const u = reinterpret_cast<const unsigned char*>(p_);
        const nemo::lens::detail::Utf8Step step =
            nemo::lens::detail::utf8_step(u, reinterpret_cast<const unsigned char*>(end_));
        if (!step.valid) return invalid("invalid UTF-8 in a string");
        p_ += step.length;
      }
    }
    ++p_;
    out_.append(start, static_cast<std::size_t>(p_ - start));
    return true;
  }

  // \uXXXX at p_: its code unit, or -1.
  int code_unit() const {
    if (end_ - p_ < 6 || p_[0] != '\\' || p_[1] != 'u') return -1;
    int v = 0;
    for (int i = 2; i < 6; ++i) {
      const int d = hex_value(p_[i]);
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }

  // The escape at p_; an escaped surrogate without its other half is skipped and flagged.
  bool escape(bool& lone_surrogate) {
    if (end_ - p_ < 2) return invalid("unterminated string");
    switch (p_[1]) {
      case '"':
      case '\\':
      case '/':
      case 'b':
      case 'f':
      case 'n':
      case 'r':
      case 't':
        p_ += 2;
        return true;
      case 'u':
        break;
      default:
        return invalid("invalid escape");
    }
    const int unit = code_unit();
    if (unit < 0) return invalid("invalid \\u escape");
    p_ += 6;
    if (unit >= 0xDC00 && unit <= 0xDFFF) {
      lone_surrogate = true;
    } else if (unit >= 0xD800 && unit <= 0xDBFF) {
      const int low = code_unit();
      if (low >= 0xDC00 && low <= 0xDFFF) {
        p_ += 6;
      } else {
        lone_surrogate = true;  // what follows is read on its own
      }
    }
    return true;
  }

  bool digits() {
    const char* const start = p_;
    while (p_ != end_ && *p_ >= '0' && *p_ <= '9') ++p_;
    return p_ != start;
  }

  bool number() {
    const char* const start = p_;
    bool integral = false;
    bool out_of_range = false;
    if (!scan_number(integral, out_of_range)) return false;
    if (out_of_range) return invalid("number out of range", start);
    out_.append(start, static_cast<std::size_t>(p_ - start));
    return true;
  }

  // Moves past the number token at p_, checking its grammar; `integral` when it has neither
  // fraction nor exponent, `out_of_range` when it is beyond a double's range.
  bool scan_number(bool& integral, bool& out_of_range) {
    const char* const start = p_;
    if (*p_ == '-') ++p_;
    const char* const int_start = p_;
    if (p_ != end_ && *p_ == '0') {
      ++p_;
    } else if (!digits()) {
      return invalid("invalid number", start);
    }
    const bool long_integer = p_ - int_start > 308;
    bool exponent = false;
    bool fraction = false;
    if (p_ != end_ && *p_ == '.') {
      fraction = true;
      ++p_;
      if (!digits()) return invalid("invalid number", start);
    }
    if (p_ != end_ && (*p_ == 'e' || *p_ == 'E')) {
      exponent = true;
      ++p_;
      if (p_ != end_ && (*p_ == '+' || *p_ == '-')) ++p_;
      if (!digits()) return invalid("invalid number", start);
    }
    const std::string_view text(start, static_cast<std::size_t>(p_ - start));
    integral = !fraction && !exponent;
    out_of_range = (exponent || long_integer) && overflows_double(text);
    return true;
  }

  bool literal(std::string_view word, bool copy = true) {
    if (static_cast<std::size_t>(end_ - p_) < word.size() ||
        std::memcmp(p_, word.data(), word.size()) != 0) {
      return unexpected();
    }
    p_ += word.size();
    if (copy) out_.append(word);
    return true;
  }
};

}  // namespace

bool compact_json(std::string_view body, std::string& out, Signal signal, std::string& error,
                  std::uint64_t& items) {
  JsonCompactor compactor(body, out, signal);
  const bool ok = compactor.body();
  error = std::move(compactor.error);
  items = compactor.items;
  return ok;
}

}  // namespace lens_cli::transcode
