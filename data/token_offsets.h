// Where each token of an encoded text begins, in characters of the text: what the recall tasks
// use to find a needle's or a word's tokens. A token's text is what it adds when decoded after
// the token before it (SentencePiece decodes a lone "▁word" without its space); a tokenizer
// whose tokens do not add up to the text that way (and so hide where they begin) gets nothing.
#pragma once
#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "data/tokenizer.h"

namespace dark::data {

// The first character of each of `ids` (the encoding of `text`, without bos) in `text`, and
// text.size() last; nullopt when the tokens do not decode one by one to the text.
std::optional<std::vector<std::size_t>> token_starts(const Tokenizer& tokenizer, std::span<const std::int32_t> ids,
                                                     std::string_view text);

}  // namespace dark::data
