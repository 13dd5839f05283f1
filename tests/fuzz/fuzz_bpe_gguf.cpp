// libFuzzer target: the GGUF tokenizer loaders, through load_gguf_tokenizer (data/tokenizer.cpp),
// which picks by tokenizer.ggml.model the byte-level BPE (BpeTokenizer::from_gguf,
// data/bpe_tokenizer_gguf.cpp, "gpt2") or the SentencePiece-style one (SpmTokenizer::from_gguf,
// data/spm_tokenizer_gguf.cpp, "llama"), from a GGUF file's tokenizer.ggml.* metadata (the
// input, in a memfd). A tokenizer that loads must keep the Tokenizer contract on a fixed
// text: ids in [0, vocab_size), special ids inside the vocabulary, every id decodable.
#include <cstdint>

#include "core/error.h"
#include "data/tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const dark::fuzz::MemFile file(data, size);
  std::unique_ptr<dark::data::Tokenizer> tok;
  try {
    tok = dark::data::load_gguf_tokenizer(file.path());
  } catch (const dark::Error&) {
    return 0;
  }
  const std::int32_t vocab = tok->vocab_size();
  DARK_FUZZ_ASSERT(tok->eos_id() >= 0 && tok->eos_id() < vocab);
  DARK_FUZZ_ASSERT(tok->bos_id() >= -1 && tok->bos_id() < vocab);
  const std::vector<std::int32_t> ids =
      tok->encode("Hello, world!\n  x = 42 <|im_end|> <start_of_turn>\t\t\xe2\x96\x81 \xc3\xa9\xff");
  for (const std::int32_t id : ids) DARK_FUZZ_ASSERT(id >= 0 && id < vocab);
  (void)tok->decode(ids);
  return 0;
}
