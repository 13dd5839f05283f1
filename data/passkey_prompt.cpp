// Passkey-retrieval prompts (see passkey_prompt.h).
#include "data/passkey_prompt.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <string_view>

#include "core/error.h"
#include "core/philox.h"
#include "data/token_offsets.h"

namespace dark::data {
// Helpers, in a namespace of their own (the unity build compiles this file with others).
namespace passkey_prompt_impl {

constexpr std::string_view kTask =
    "There is an important info hidden inside a lot of irrelevant text. Find it and memorize them. I will quiz you "
    "about the important information there.";
constexpr std::array<std::string_view, 5> kFiller = {"The grass is green.", "The sky is blue.", "The sun is yellow.",
                                                     "Here we go.", "There and back again."};
constexpr std::string_view kQuestion = "What is the pass key? The pass key is";
constexpr std::uint64_t kPasskeyStream = 0x706173736b6579;  // "passkey"

// Sentences first..last-1 of the endless filler, joined by spaces.
std::string filler(std::int64_t first, std::int64_t last) {
  std::string out;
  for (std::int64_t i = first; i < last; ++i) {
    if (i > first) out += ' ';
    out += kFiller[static_cast<std::size_t>(i % static_cast<std::int64_t>(kFiller.size()))];
  }
  return out;
}

std::int64_t sentences_before(std::int64_t filler_sentences, double depth) {
  return std::llround(depth * static_cast<double>(filler_sentences));
}

std::int64_t token_count(const Tokenizer& tokenizer, bool bos, const std::string& text) {
  return static_cast<std::int64_t>(tokenizer.encode(text).size()) + (bos ? 1 : 0);
}

}  // namespace passkey_prompt_impl

std::vector<double> passkey_depths(int n) {
  DARK_CHECK(n >= 1, "passkey: the number of depths must be >= 1, got ", n);
  if (n == 1) return {0.5};
  std::vector<double> depths;
  for (int i = 0; i < n; ++i) depths.push_back(static_cast<double>(i) / (n - 1));
  return depths;
}

std::int32_t passkey_of(std::uint64_t seed, std::int64_t length, double depth, int trial) {
  DARK_CHECK(length >= 1 && length < (std::int64_t{1} << 24), "passkey: length must be in 1..2^24 - 1, got ", length);
  DARK_CHECK(depth >= 0 && depth <= 1, "passkey: depth must be in [0, 1], got ", depth);
  DARK_CHECK(trial >= 0 && trial < (1 << 20), "passkey: trial must be in 0..2^20 - 1, got ", trial);
  const auto millionths = static_cast<std::uint64_t>(std::llround(depth * 1e6));
  const std::uint64_t counter =
      (static_cast<std::uint64_t>(length) << 40) | (millionths << 20) | static_cast<std::uint64_t>(trial);
  const philox::Block b = philox::block(seed, passkey_prompt_impl::kPasskeyStream, counter);
  const std::uint64_t bits = (static_cast<std::uint64_t>(b.v[0]) << 32) | b.v[1];
  // floor(bits * n / 2^64): uniform up to a bias of n / 2^64.
  const auto index = static_cast<std::int32_t>((static_cast<unsigned __int128>(bits) * kPasskeyMax) >> 64);
  return 1 + index;
}

std::string passkey_text(std::int64_t filler_sentences, std::int64_t before, std::int32_t key) {
  DARK_CHECK(filler_sentences >= 0 && before >= 0 && before <= filler_sentences, "passkey: ", before,
             " sentences before the needle of ", filler_sentences, " is not a split of the filler");
  const std::string n = std::to_string(key);
  std::string text(passkey_prompt_impl::kTask);
  text += '\n' + passkey_prompt_impl::filler(0, before);
  text += "\nThe pass key is " + n + ". Remember it. " + n + " is the pass key.";
  text += '\n' + passkey_prompt_impl::filler(before, filler_sentences);
  text += '\n';
  text += passkey_prompt_impl::kQuestion;
  return text;
}

PasskeyPrompt passkey_prompt(const Tokenizer& tokenizer, bool bos, std::int64_t length, double depth,
                             std::int32_t key) {
  DARK_CHECK(depth >= 0 && depth <= 1, "passkey: depth must be in [0, 1], got ", depth);
  DARK_CHECK(key >= 1 && key <= kPasskeyMax, "passkey: the key must be in 1..", kPasskeyMax, ", got ", key);
  DARK_CHECK(!bos || tokenizer.bos_id() >= 0, "passkey: bos asked for, but tokenizer ", tokenizer.hash(), " has none");
  const auto tokens = [&](std::int64_t s) {
    return passkey_prompt_impl::token_count(tokenizer, bos,
                                            passkey_text(s, passkey_prompt_impl::sentences_before(s, depth), key));
  };
  const std::int64_t bare = tokens(0);
  DARK_CHECK(length >= bare, "passkey: a prompt of ", length, " tokens is too short: without any filler it takes ",
             bare, " tokens of tokenizer ", tokenizer.hash());
  // The fewest sentences that reach `length` (every sentence adds at least one token, so
  // `length` sentences do), then whichever of it and one fewer comes closer.
  std::int64_t lo = 0, hi = length;
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (tokens(mid) >= length)
      hi = mid;
    else
      lo = mid + 1;
  }
  std::int64_t s = lo;
  if (s > 0 && length - tokens(s - 1) <= tokens(s) - length) --s;

  PasskeyPrompt p;
  p.key = key;
  p.depth = depth;
  p.filler_sentences = s;
  p.sentences_before = passkey_prompt_impl::sentences_before(s, depth);
  p.text = passkey_text(s, p.sentences_before, key);
  if (bos) p.ids.push_back(tokenizer.bos_id());
  const std::vector<std::int32_t> body = tokenizer.encode(p.text);
  p.ids.insert(p.ids.end(), body.begin(), body.end());
  // The token that holds the needle line's first character; where the tokens do not decode one
  // by one to the text, the token count of everything before that line.
  const std::size_t needle_char =
      passkey_prompt_impl::kTask.size() + 1 + passkey_prompt_impl::filler(0, p.sentences_before).size() + 1;
  if (const auto starts = token_starts(tokenizer, body, p.text)) {
    std::size_t t = 0;
    while ((*starts)[t + 1] <= needle_char) ++t;
    p.needle_token = static_cast<std::int64_t>(t) + (bos ? 1 : 0);
  } else {
    p.needle_token = passkey_prompt_impl::token_count(tokenizer, bos, p.text.substr(0, needle_char));
  }
  const std::vector<std::int32_t> answered = tokenizer.encode(p.text + " " + std::to_string(key));
  if (answered.size() > body.size() && std::equal(body.begin(), body.end(), answered.begin()))
    p.answer.assign(answered.begin() + static_cast<std::ptrdiff_t>(body.size()), answered.end());
  return p;
}

}  // namespace dark::data
