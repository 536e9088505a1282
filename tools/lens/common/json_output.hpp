// A tiny JSON writer for the lens command's --json output: string escaping per RFC 8259, numbers,
// arrays of strings and objects, all on one line without spaces.
//
//   JsonObject obj;
//   obj.add("catalog", json_string("base")).add("groups", json_string_array(groups));
//   std::cout << obj.str() << '\n';   // {"catalog":"base","groups":["job"]}
#pragma once

#include <string>
#include <string_view>

namespace nemo::lens::cli {

/// `s` as a JSON string literal, quotes included: `"` and `\` are escaped, control characters
/// become \b, \f, \n, \r, \t or \u00XX; every other byte (UTF-8 included) is copied.
std::string json_string(std::string_view s);

/// The shortest decimal text that reads back as exactly `v` (std::to_chars), e.g. "1", "0.25",
/// "1e-05". Also the form the plain-text output uses.
std::string format_number(double v);

/// `v` as a JSON number (format_number()), or "null" when it is not finite.
std::string json_number(double v);

/// `v` as a JSON number.
std::string json_number(int v);

/// `v` as a JSON boolean.
inline std::string json_bool(bool v) { return v ? "true" : "false"; }

/// A JSON array of the strings in `items`, in iteration order.
template <class Range>
std::string json_string_array(const Range& items) {
  std::string out = "[";
  for (const auto& item : items) {
    if (out.size() > 1) out += ',';
    out += json_string(item);
  }
  out += ']';
  return out;
}

/// A JSON object built member by member, in insertion order. Keys are not checked for
/// duplicates.
class JsonObject {
 public:
  /// Adds the member `key` whose value is the JSON text `json` (from the functions above or
  /// another JsonObject's str()).
  JsonObject& add(std::string_view key, std::string_view json);

  /// The object's JSON text.
  std::string str() const { return "{" + members_ + "}"; }

 private:
  std::string members_;
};

}  // namespace nemo::lens::cli
