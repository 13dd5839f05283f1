// libFuzzer target: encoding arbitrary bytes with each tokenizer family. The first input
// byte picks the tokenizer, the rest is the text:
//   0  ByteTokenizer: one id per byte, all below 256, and decode(encode(s)) == s for any s
//   1  a small SentencePiece model (trained once at start-up with the project's options):
//      ids in range, decode(encode(s)) == s for valid UTF-8 s (byte fallback, identity
//      normalization; data/sentencepiece_tokenizer.h)
//   2, 3  a small byte-level BPE vocabulary (all 256 byte pieces, a few merges, specials) with
//      pre-tokenizer "gpt2" or "smollm": ids in range, decode(encode(s)) == s unless s holds
//      the bos or eos text (data/bpe_tokenizer.h)
// Encoding the same text twice must give the same ids.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/sentencepiece_tokenizer.h"
#include "fuzz_util.h"

namespace {

using dark::data::BpeTokenizer;

// Whether s is well-formed UTF-8 (no overlong forms, surrogates or code points past U+10FFFF).
bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n = 0;
    char32_t cp = 0;
    if (c < 0x80) { ++i; continue; }
    if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
    else return false;
    for (int k = 1; k <= n; ++k) {
      if (i + static_cast<std::size_t>(k) >= s.size()) return false;
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (d & 0x3F);
    }
    if ((n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

std::unique_ptr<dark::data::SentencePieceTokenizer> small_sentencepiece() {
  const char* words[] = {"the", "model", "attention", "def", "return", "x", "=", "42", "(", ")", ":", "  ",
                         "in", "for", "print", "data", "tensor", "é", "€", "日本"};
  std::vector<std::string> lines;
  for (int i = 0; i < 400; ++i) {
    std::string line;
    for (int k = 0; k < 8; ++k) line += std::string(words[(i * 7 + k * 13 + k * i) % 20]) + (k % 3 ? " " : "  ");
    lines.push_back(line);
  }
  dark::data::SentencePieceOptions options;
  options.vocab_size = 320;
  options.character_coverage = 1.0;
  return dark::data::SentencePieceTokenizer::train(lines, options);
}

std::unique_ptr<BpeTokenizer> small_bpe(const std::string& pre) {
  dark::data::BpeVocab v;
  v.tokens = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
  v.token_types = {3, 3, 3};
  for (int b = 0; b < 256; ++b) {
    v.tokens.push_back(BpeTokenizer::byte_encode(std::string(1, static_cast<char>(b))));
    v.token_types.push_back(1);
  }
  v.merges = {"h e", "Ġ t", "Ġt he", "i n", "in g", "Ġ a", "e r", "o n", "1 2", "Ċ Ċ", "Ġ Ġ"};
  for (const std::string& m : v.merges) {
    v.tokens.push_back(m.substr(0, m.find(' ')) + m.substr(m.find(' ') + 1));
    v.token_types.push_back(1);
  }
  v.eos_id = 0;
  v.bos_id = 1;
  v.pre = pre;
  return std::make_unique<BpeTokenizer>(std::move(v));
}

struct Tokenizers {
  std::unique_ptr<dark::data::Tokenizer> byte = std::make_unique<dark::data::ByteTokenizer>();
  std::unique_ptr<dark::data::Tokenizer> sentencepiece = small_sentencepiece();
  std::unique_ptr<dark::data::Tokenizer> bpe_gpt2 = small_bpe("gpt2");
  std::unique_ptr<dark::data::Tokenizer> bpe_smollm = small_bpe("smollm");
};

const Tokenizers& tokenizers() {
  static const Tokenizers t;
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data + 1), size - 1);
  const Tokenizers& all = tokenizers();
  const int which = data[0] % 4;
  const dark::data::Tokenizer& tok = which == 0   ? *all.byte
                                     : which == 1 ? *all.sentencepiece
                                     : which == 2 ? *all.bpe_gpt2
                                                  : *all.bpe_smollm;
  const std::vector<std::int32_t> ids = tok.encode(text);
  for (const std::int32_t id : ids) DARK_FUZZ_ASSERT(id >= 0 && id < tok.vocab_size());
  DARK_FUZZ_ASSERT(tok.encode(text) == ids);
  const std::string back = tok.decode(ids);
  bool round_trips = true;
  if (which == 0) DARK_FUZZ_ASSERT(ids.size() == text.size());
  if (which == 1) round_trips = valid_utf8(text);
  if (which >= 2) round_trips = text.find("<|endoftext|>") == std::string::npos && text.find("<|im_start|>") == std::string::npos;
  if (round_trips) DARK_FUZZ_ASSERT(back == text);
  return 0;
}
