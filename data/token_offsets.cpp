// Where tokens begin in their text (see token_offsets.h).
#include "data/token_offsets.h"

namespace dark::data {

std::optional<std::vector<std::size_t>> token_starts(const Tokenizer& tokenizer, std::span<const std::int32_t> ids,
                                                     std::string_view text) {
  std::vector<std::size_t> starts;
  std::size_t at = 0;
  for (std::size_t t = 0; t < ids.size(); ++t) {
    starts.push_back(at);
    // A token's text in context: what it adds to the token before it. SentencePiece drops the
    // space of a first "▁word" when decoding it alone, but not after another token.
    std::string piece = tokenizer.decode(ids.subspan(t, 1));
    if (t > 0) {
      const std::string before = tokenizer.decode(ids.subspan(t - 1, 1)),
                        both = tokenizer.decode(ids.subspan(t - 1, 2));
      if (!both.starts_with(before)) return std::nullopt;
      piece = both.substr(before.size());
    }
    if (text.compare(at, piece.size(), piece) != 0) return std::nullopt;
    at += piece.size();
  }
  if (at != text.size()) return std::nullopt;
  starts.push_back(at);
  return starts;
}

}  // namespace dark::data
