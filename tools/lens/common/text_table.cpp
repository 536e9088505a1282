#include "common/text_table.hpp"

#include <algorithm>
#include <utility>

namespace nemo::lens::cli {

TextTable::TextTable(std::vector<Column> columns, std::size_t indent)
    : columns_(std::move(columns)), indent_(indent) {}

void TextTable::add(std::vector<std::string> cells) { rows_.push_back(std::move(cells)); }

std::string TextTable::str() const {
  std::vector<std::size_t> width(columns_.size(), 0);
  for (std::size_t c = 0; c < columns_.size(); ++c) width[c] = columns_[c].title.size();
  for (const auto& row : rows_) {
    for (std::size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string text(indent_, ' ');
    for (std::size_t c = 0; c < cells.size(); ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) text += "  ";
      text += columns_[c].right ? pad + cells[c] : cells[c] + pad;
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    out += text + '\n';
  };
  std::vector<std::string> titles;
  for (const Column& c : columns_) titles.push_back(c.title);
  line(titles);
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace nemo::lens::cli
