// Aligned plain-text tables for the verbs' human output (lens report, lens ctl): columns separated
// by two spaces, each left- or right-aligned, no trailing spaces.
//
//   TextTable t({{"RANK", true}, {"NAME", false}}, /*indent=*/2);
//   t.add({"3", "train_step"});
//   std::cout << t.str();   // "  RANK  NAME\n     3  train_step\n"
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

namespace nemo::lens::cli {

/// `text` safe to print on a terminal: C0 control characters, DEL and the C1 controls (U+0080 to
/// U+009F) become `\xHH` / `\u00HH`, so that a span name from the wire cannot move the cursor,
/// ring the bell or start an escape sequence. Everything else is kept as it is.
std::string escape_control(std::string_view text);

/// A table whose cells are printed through escape_control().
class TextTable {
 public:
  /// A column: its title and whether its cells are right-aligned.
  struct Column {
    std::string title;
    bool right;
  };

  /// A table of `columns`, each line starting with `indent` spaces.
  explicit TextTable(std::vector<Column> columns, std::size_t indent = 0);

  /// Appends a row of one cell per column.
  void add(std::vector<std::string> cells);

  /// The header and the rows, one line each.
  std::string str() const;

 private:
  std::vector<Column> columns_;
  std::size_t indent_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace nemo::lens::cli
