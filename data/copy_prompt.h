// The copy task's prompts: a random list of n words, then the same list again,
//   Here is a list of words: w1 w2 ... wn
//   The same list again: w1 w2 ... wn
// with the bookkeeping that scoring needs: which tokens of the repeat belong to which word,
// and how far back (in tokens) each word's first occurrence is. On the repeat every token is
// predictable by copying (induction), none from the language alone: the words are drawn
// without replacement from data/common_words.h, so no word follows two different words.
// The distance back is the same for every word of a list (the list's tokens plus the line
// between), so the list length sets it.
//
// Lists are a function of (seed, n, trial) alone (Philox, core/philox.h): the same on every
// machine, whatever other lengths a run asks for.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "data/tokenizer.h"

namespace dark::data {

// n words drawn without replacement from common_words() (2 <= n <= kCommonWordCount).
std::vector<std::string> copy_words(std::uint64_t seed, std::int64_t n, int trial);

// The prompt text of a list.
std::string copy_text(const std::vector<std::string>& words);

// One word of the list: its tokens in the first occurrence and in the repeat, [begin, end) as
// indices in CopyPrompt::ids.
struct CopyWord {
  std::int64_t first_begin = 0, first_end = 0;
  std::int64_t repeat_begin = 0, repeat_end = 0;
  // Tokens from the word's first occurrence to its repeat (repeat_begin - first_begin).
  std::int64_t distance() const { return repeat_begin - first_begin; }
};

struct CopyPrompt {
  std::vector<std::string> words;
  std::string text;
  std::vector<std::int32_t> ids;  // bos when asked, then tokenizer.encode(text)
  std::vector<CopyWord> spans;    // one per word, in list order
};

// Tokenizes the prompt of `words` and maps tokens to words by their characters: a token
// belongs to the word that holds its first non-space character, and a token of whitespace
// alone to the word right after it (so a word's tokens decode to " word" however the
// tokenizer splits it). Throws when the tokens do not add up to the text
// (data/token_offsets.h: the mapping would be wrong), or a word gets no token of its own.
CopyPrompt copy_prompt(const Tokenizer& tokenizer, bool bos, const std::vector<std::string>& words);

}  // namespace dark::data
