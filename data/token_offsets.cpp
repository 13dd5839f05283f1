// Where tokens begin in their text (see token_offsets.h).
#include "data/token_offsets.h"

namespace dark::data {

std::optional<std::vector<std::size_t>> token_starts(const Tokenizer& tokenizer, std::span<const std::int32_t> ids,
                                                     std::string_view text) {
  std::vector<std::size_t> starts;
  std::size_t at = 0;
  for (const std::int32_t id : ids) {
    starts.push_back(at);
    const std::string piece = tokenizer.decode(std::vector<std::int32_t>{id});
    if (text.compare(at, piece.size(), piece) != 0) return std::nullopt;
    at += piece.size();
  }
  if (at != text.size()) return std::nullopt;
  starts.push_back(at);
  return starts;
}

}  // namespace dark::data
