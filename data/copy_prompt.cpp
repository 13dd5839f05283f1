// The copy task's prompts (see copy_prompt.h).
#include "data/copy_prompt.h"

#include <numeric>

#include "core/error.h"
#include "core/philox.h"
#include "data/common_words.h"
#include "data/token_offsets.h"

namespace dark::data {
// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace copy_prompt_impl {

constexpr std::string_view kHeader = "Here is a list of words:";
constexpr std::string_view kAgain = "\nThe same list again:";
constexpr std::uint64_t kCopyStream = 0x636f70797461736b;  // "copytask"

// Where each word of the text stands: [begin, end) in characters, first list then repeat.
struct WordChars {
  std::vector<std::size_t> begin, end;
};

std::string build_text(const std::vector<std::string>& words, WordChars* chars) {
  std::string text(kHeader);
  const auto list = [&] {
    for (const std::string& w : words) {
      text += ' ';
      if (chars) chars->begin.push_back(text.size());
      text += w;
      if (chars) chars->end.push_back(text.size());
    }
  };
  list();
  text += kAgain;
  list();
  return text;
}

}  // namespace copy_prompt_impl

std::vector<std::string> copy_words(std::uint64_t seed, std::int64_t n, int trial) {
  const auto& pool = common_words();
  DARK_CHECK(n >= 2 && n <= static_cast<std::int64_t>(pool.size()), "copy task: a list holds 2 to ", pool.size(),
             " words (the word list's size), got ", n);
  DARK_CHECK(trial >= 0 && trial < (1 << 20), "copy task: trial must be in 0..2^20 - 1, got ", trial);
  std::vector<std::size_t> order(pool.size());
  std::iota(order.begin(), order.end(), 0);
  // The first n steps of a Fisher-Yates shuffle, one 64-bit draw (two Philox lanes) per step.
  const std::uint64_t base = (static_cast<std::uint64_t>(n) << 44) | (static_cast<std::uint64_t>(trial) << 24);
  std::vector<std::string> words;
  for (std::int64_t i = 0; i < n; ++i) {
    const philox::Block b =
        philox::block(seed, copy_prompt_impl::kCopyStream, base | static_cast<std::uint64_t>(i / 2));
    const int lane = static_cast<int>(i % 2) * 2;
    const std::uint64_t bits = (static_cast<std::uint64_t>(b.v[lane]) << 32) | b.v[lane + 1];
    const std::uint64_t left = pool.size() - static_cast<std::uint64_t>(i);
    const auto pick =
        static_cast<std::size_t>(i) + static_cast<std::size_t>((static_cast<unsigned __int128>(bits) * left) >> 64);
    std::swap(order[static_cast<std::size_t>(i)], order[pick]);
    words.emplace_back(pool[order[static_cast<std::size_t>(i)]]);
  }
  return words;
}

std::string copy_text(const std::vector<std::string>& words) { return copy_prompt_impl::build_text(words, nullptr); }

CopyPrompt copy_prompt(const Tokenizer& tokenizer, bool bos, const std::vector<std::string>& words) {
  DARK_CHECK(!words.empty(), "copy task: the list is empty");
  DARK_CHECK(!bos || tokenizer.bos_id() >= 0, "copy task: bos asked for, but tokenizer ", tokenizer.hash(),
             " has none");
  for (const std::string& w : words)
    DARK_CHECK(!w.empty() && w.find_first_of(" \n") == std::string::npos, "copy task: word '", w,
               "' is empty or holds a space or newline");
  CopyPrompt p;
  p.words = words;
  copy_prompt_impl::WordChars chars;
  p.text = copy_prompt_impl::build_text(words, &chars);
  if (bos) p.ids.push_back(tokenizer.bos_id());
  const std::size_t first_text_token = p.ids.size();
  const std::vector<std::int32_t> body = tokenizer.encode(p.text);
  p.ids.insert(p.ids.end(), body.begin(), body.end());

  const std::optional<std::vector<std::size_t>> starts = token_starts(tokenizer, body, p.text);
  DARK_CHECK(starts.has_value(), "copy task: the tokens of tokenizer ", tokenizer.hash(),
             " do not decode token by token "
             "to the prompt; the words' tokens cannot be told apart");
  // Each token goes to the word occurrence holding its first non-space character; a token of
  // whitespace alone, to the word right after it (SentencePiece's lone "▁" before a word).
  const std::size_t n = words.size();
  std::vector<std::int64_t> begin(2 * n, -1), end(2 * n, -1);  // word occurrence -> its tokens
  std::size_t occurrence = 0;
  for (std::size_t t = 0; t < body.size(); ++t) {
    const std::size_t own = p.text.find_first_not_of(" \n", (*starts)[t]);
    if (own == std::string::npos || own > (*starts)[t + 1]) continue;  // whitespace not just before a word
    while (occurrence < 2 * n && chars.end[occurrence] <= own) ++occurrence;
    if (occurrence < 2 * n && chars.begin[occurrence] <= own) {
      const auto id = static_cast<std::int64_t>(first_text_token + t);
      if (begin[occurrence] < 0) begin[occurrence] = id;
      end[occurrence] = id + 1;
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    DARK_CHECK(begin[i] >= 0 && begin[n + i] >= 0, "copy task: word ", i, " ('", words[i],
               "') has no token of its own "
               "under tokenizer ",
               tokenizer.hash());
    p.spans.push_back({begin[i], end[i], begin[n + i], end[n + i]});
  }
  return p;
}

}  // namespace dark::data
