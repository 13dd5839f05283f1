// libFuzzer target: the two JSON tokenizer files we read, chosen by the first input byte:
//   even: tokenizer.bpe.json or tokenizer.spm.json, the GGUF tokenizer files a checkpoint
//         carries (data/tokenizer_file.h tokenizer_from_file, kind "gguf");
//   odd:  a Hugging Face tokenizer.json (data/hf_tokenizer_json.h parse_hf_tokenizer_json),
//         then a BpeTokenizer built from it with eos = token 0.
// Each must be accepted or rejected with dark::Error. An accepted one must encode to ids in
// range, and writing it back out must rebuild a tokenizer with the same hash.
#include <cstdint>
#include <memory>
#include <string>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "data/tokenizer_file.h"
#include "fuzz_util.h"

namespace {

void check_tokenizer(const dark::data::Tokenizer& t, const std::string& kind) {
  const std::vector<std::int32_t> ids = t.encode("the cat 42 <|im_start|> caf\xc3\xa9 \xff");
  for (const std::int32_t id : ids) DARK_FUZZ_ASSERT(id >= 0 && id < t.vocab_size());
  (void)t.decode(ids);
  const auto file = dark::data::tokenizer_file(t);
  DARK_FUZZ_ASSERT(file.has_value());
  DARK_FUZZ_ASSERT(dark::data::tokenizer_from_file(kind, file->bytes, "round trip")->hash() == t.hash());
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  const std::string text(reinterpret_cast<const char*>(data) + 1, size - 1);
  try {
    if (data[0] % 2 == 0) {
      check_tokenizer(*dark::data::tokenizer_from_file("gguf", text, "fuzz"), "gguf");
      return 0;
    }
    dark::data::BpeVocab v = dark::data::parse_hf_tokenizer_json(text, "fuzz");
    if (v.tokens.empty()) return 0;
    v.eos_id = 0;
    check_tokenizer(dark::data::BpeTokenizer(std::move(v)), "hf");
  } catch (const dark::Error&) {
  }
  return 0;
}
