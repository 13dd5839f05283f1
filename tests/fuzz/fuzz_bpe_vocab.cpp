// libFuzzer target: the BpeTokenizer constructor (data/bpe_tokenizer.h) on a BpeVocab built
// from the input: tokens, merges, token types, special ids and the pre-tokenizer, with the
// rest of the input encoded by the tokenizer when the vocabulary is accepted. The
// constructor must accept the vocabulary or throw dark::Error; an accepted one must give
// ids in [0, vocab_size) that decode.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdint>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  FuzzedDataProvider in(data, size);
  dark::data::BpeVocab v;
  // Half of the inputs start from the 256 byte pieces, so that merges and encoding get far.
  if (in.ConsumeBool()) {
    for (int b = 0; b < 256; ++b) v.tokens.push_back(dark::data::BpeTokenizer::byte_encode(std::string(1, char(b))));
  }
  const int extra_tokens = in.ConsumeIntegralInRange(0, 24);
  for (int i = 0; i < extra_tokens; ++i) v.tokens.push_back(in.ConsumeRandomLengthString(16));
  const int merges = in.ConsumeIntegralInRange(0, 24);
  for (int i = 0; i < merges; ++i) v.merges.push_back(in.ConsumeRandomLengthString(16));
  if (in.ConsumeBool()) {
    for (std::size_t i = 0; i < v.tokens.size(); ++i)
      v.token_types.push_back(in.ConsumeBool() ? 1 : in.ConsumeIntegralInRange<std::int32_t>(-1, 7));
  }
  const auto n = static_cast<std::int32_t>(v.tokens.size());
  v.eos_id = in.ConsumeIntegralInRange<std::int32_t>(-2, n);
  v.bos_id = in.ConsumeIntegralInRange<std::int32_t>(-2, n);
  v.unk_id = in.ConsumeIntegralInRange<std::int32_t>(-2, n);
  v.pad_id = in.ConsumeIntegralInRange<std::int32_t>(-2, n);
  const int pre = in.ConsumeIntegralInRange(0, 2);
  v.pre = pre == 0 ? "gpt2" : pre == 1 ? "smollm" : in.ConsumeRandomLengthString(8);
  v.add_bos = in.ConsumeBool();
  std::unique_ptr<dark::data::BpeTokenizer> tok;
  try {
    tok = std::make_unique<dark::data::BpeTokenizer>(std::move(v));
  } catch (const dark::Error&) {
    return 0;
  }
  const std::int32_t vocab = tok->vocab_size();
  DARK_FUZZ_ASSERT(vocab == n);
  DARK_FUZZ_ASSERT(tok->eos_id() >= 0 && tok->eos_id() < vocab);
  const std::string text = in.ConsumeRemainingBytesAsString();
  const std::vector<std::int32_t> ids = tok->encode(text);
  for (const std::int32_t id : ids) DARK_FUZZ_ASSERT(id >= 0 && id < vocab);
  (void)tok->decode(ids);
  return 0;
}
