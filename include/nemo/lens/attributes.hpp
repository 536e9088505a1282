// Attribute values: what a span, event or link carries (OpenTelemetry's types: bool, int64,
// double, string and arrays of each). Attribute is the cheap, non-owning form taken by the API;
// KeyValue the owning form exporters read.
//
//   LENS_SPAN(span, SpanGroup::STEP, "train_step", {"iteration", it}, {"loss", loss});
//   span.set_attribute("tokens", std::int64_t{4096});
//   span.set_attribute("layers", std::vector<std::int64_t>{0, 1, 2});
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

namespace nemo::lens {

/// An owned attribute value.
using AttributeValue =
    std::variant<bool, std::int64_t, double, std::string, std::vector<bool>,
                 std::vector<std::int64_t>, std::vector<double>, std::vector<std::string>>;

/// An owned key and value, as exporters see them.
struct KeyValue {
  std::string key;
  AttributeValue value;
  friend bool operator==(const KeyValue&, const KeyValue&) = default;
};

/// A non-owning attribute value, valid for the duration of the call it is passed to. Constructed
/// implicitly from bool, any integer (stored as int64), float or double, a string (literal,
/// std::string, std::string_view) or a vector/span of those.
class AttributeArg {
 public:
  /// The kinds of value an argument can hold.
  enum class Type : std::uint8_t {
    kBool, kInt, kDouble, kString, kBoolArray, kIntArray, kDoubleArray, kStringArray, kStringViewArray
  };

  /// A boolean. Templated so that pointers do not silently convert to bool.
  template <class T, std::enable_if_t<std::is_same_v<T, bool>, int> = 0>
  AttributeArg(T v) noexcept : type_(Type::kBool), b_(v) {}  // NOLINT(google-explicit-constructor)
  /// Any integer type except bool and char, stored as int64.
  template <class T, std::enable_if_t<std::is_integral_v<T> && !std::is_same_v<T, bool> &&
                                          !std::is_same_v<T, char>,
                                      int> = 0>
  AttributeArg(T v) noexcept  // NOLINT(google-explicit-constructor)
      : type_(Type::kInt), i_(static_cast<std::int64_t>(v)) {}
  /// A float or double.
  template <class T, std::enable_if_t<std::is_floating_point_v<T>, int> = 0>
  AttributeArg(T v) noexcept : type_(Type::kDouble), d_(static_cast<double>(v)) {}  // NOLINT
  /// A string.
  AttributeArg(std::string_view v) noexcept : type_(Type::kString), s_(v) {}  // NOLINT
  /// A string literal or C string (null is the empty string).
  AttributeArg(const char* v) noexcept  // NOLINT(google-explicit-constructor)
      : type_(Type::kString), s_(v != nullptr ? std::string_view(v) : std::string_view()) {}
  /// A string.
  AttributeArg(const std::string& v) noexcept : type_(Type::kString), s_(v) {}  // NOLINT
  /// An array of booleans.
  AttributeArg(const std::vector<bool>& v) noexcept : type_(Type::kBoolArray), ba_(&v) {}  // NOLINT
  /// An array of integers.
  AttributeArg(std::span<const std::int64_t> v) noexcept  // NOLINT(google-explicit-constructor)
      : type_(Type::kIntArray), ia_(v) {}
  /// An array of integers.
  AttributeArg(const std::vector<std::int64_t>& v) noexcept  // NOLINT
      : type_(Type::kIntArray), ia_(v) {}
  /// An array of doubles.
  AttributeArg(std::span<const double> v) noexcept : type_(Type::kDoubleArray), da_(v) {}  // NOLINT
  /// An array of doubles.
  AttributeArg(const std::vector<double>& v) noexcept  // NOLINT(google-explicit-constructor)
      : type_(Type::kDoubleArray), da_(v) {}
  /// An array of strings.
  AttributeArg(const std::vector<std::string>& v) noexcept  // NOLINT
      : type_(Type::kStringArray), sa_(&v) {}
  /// An array of strings.
  AttributeArg(std::span<const std::string_view> v) noexcept  // NOLINT
      : type_(Type::kStringViewArray), sva_(v) {}

  /// Which member holds the value.
  Type type() const noexcept { return type_; }
  /// The value; valid only for the matching type().
  bool as_bool() const noexcept { return b_; }
  std::int64_t as_int() const noexcept { return i_; }
  double as_double() const noexcept { return d_; }
  std::string_view as_string() const noexcept { return s_; }
  const std::vector<bool>& as_bool_array() const noexcept { return *ba_; }
  std::span<const std::int64_t> as_int_array() const noexcept { return ia_; }
  std::span<const double> as_double_array() const noexcept { return da_; }
  const std::vector<std::string>& as_string_array() const noexcept { return *sa_; }
  std::span<const std::string_view> as_string_view_array() const noexcept { return sva_; }

 private:
  Type type_;
  union {
    bool b_;
    std::int64_t i_;
    double d_;
    std::string_view s_;
    const std::vector<bool>* ba_;
    std::span<const std::int64_t> ia_;
    std::span<const double> da_;
    const std::vector<std::string>* sa_;
    std::span<const std::string_view> sva_;
  };
};

/// A key and a non-owning value: the `{"key", value}` pairs the instrumentation API takes.
struct Attribute {
  std::string_view key;
  AttributeArg value;
};

}  // namespace nemo::lens
