// libFuzzer target: SentencePieceTokenizer::from_model_bytes (data/sentencepiece_tokenizer.h)
// on arbitrary bytes. A model that loads must keep the Tokenizer contract on a fixed text:
// ids in [0, vocab_size), eos inside the vocabulary, every id printable by piece() and the
// ids decodable.
#include <cstdint>
#include <string>

#include "core/error.h"
#include "data/sentencepiece_tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  std::unique_ptr<dark::data::SentencePieceTokenizer> tok;
  try {
    tok = dark::data::SentencePieceTokenizer::from_model_bytes(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz");
  } catch (const dark::Error&) {
    return 0;
  }
  const std::int32_t vocab = tok->vocab_size();
  DARK_FUZZ_ASSERT(vocab > 0);
  DARK_FUZZ_ASSERT(tok->eos_id() >= 0 && tok->eos_id() < vocab);
  DARK_FUZZ_ASSERT(tok->bos_id() >= -1 && tok->bos_id() < vocab);
  try {
    const std::vector<std::int32_t> ids = tok->encode("Hello, world!\n  def f(x): return 42 \xc3\xa9\xe2\x82\xac");
    for (const std::int32_t id : ids) {
      DARK_FUZZ_ASSERT(id >= 0 && id < vocab);
      (void)tok->piece(id);
    }
    (void)tok->decode(ids);
  } catch (const dark::Error&) {
  }
  return 0;
}
