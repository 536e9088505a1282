#include "common/text_table.hpp"

#include <algorithm>
#include <utility>

namespace nemo::lens::cli {

std::string escape_control(std::string_view text) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    } else if (c == 0xc2 && i + 1 < text.size() &&
               static_cast<unsigned char>(text[i + 1]) >= 0x80 &&
               static_cast<unsigned char>(text[i + 1]) <= 0x9f) {
      const auto next = static_cast<unsigned char>(text[++i]);  // a C1 control, in UTF-8
      out += "\\u00";
      out += kHex[next >> 4];
      out += kHex[next & 0xf];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

TextTable::TextTable(std::vector<Column> columns, std::size_t indent)
    : columns_(std::move(columns)), indent_(indent) {}

void TextTable::add(std::vector<std::string> cells) {
  for (std::string& cell : cells) {
    if (std::any_of(cell.begin(), cell.end(), [](char ch) {
          const auto c = static_cast<unsigned char>(ch);
          return c < 0x20 || c == 0x7f || c == 0xc2;
        })) {
      cell = escape_control(cell);
    }
  }
  rows_.push_back(std::move(cells));
}

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
