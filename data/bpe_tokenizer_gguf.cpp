// BpeTokenizer::from_gguf: the tokenizer.ggml.* metadata of a GGUF file as a BpeVocab.
#include <algorithm>
#include <cstdint>

#include "core/error.h"
#include "data/bpe_tokenizer.h"
#include "data/gguf.h"

namespace dark::data {

std::unique_ptr<BpeTokenizer> BpeTokenizer::from_gguf(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  const std::string model = f.get_string("tokenizer.ggml.model");
  DARK_CHECK(model == "gpt2", path, ": tokenizer.ggml.model is '", model,
             "'; only \"gpt2\" (byte-level BPE) is supported");
  BpeVocab v;
  // llama.cpp treats a missing pre as "default", whose regexes differ from GPT-2's: refuse it.
  v.pre = f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : std::string("default");
  const auto& supported = supported_pre();
  if (std::find(supported.begin(), supported.end(), v.pre) == supported.end()) {
    std::string allowed;
    for (const auto& s : supported) allowed += (allowed.empty() ? "\"" : ", \"") + s + "\"";
    throw Error(str(path, ": tokenizer.ggml.pre is '", v.pre, "'; supported: ", allowed));
  }
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  v.merges = f.get_string_array("tokenizer.ggml.merges");
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<std::int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
    for (std::size_t i = 0; i < types.size(); ++i)
      DARK_CHECK(types[i] >= INT32_MIN && types[i] <= INT32_MAX, path, ": tokenizer.ggml.token_type[", i, "] is ",
                 types[i], ", not a token type");
    v.token_types.assign(types.begin(), types.end());
  }
  // Ids must fit in int32 as they are: cutting 2^32 + 5 down to 5 would pick a real token.
  // -1 means none, also written as u32 4294967295 by some converters.
  auto id_of = [&](const char* key) -> std::int32_t {
    if (!f.has(key)) return -1;
    const std::int64_t id = f.get_int(key);
    if (id == UINT32_MAX) return -1;
    DARK_CHECK(id >= -1 && id <= INT32_MAX, path, ": ", key, " is ", id, ", not a token id");
    return static_cast<std::int32_t>(id);
  };
  v.bos_id = id_of("tokenizer.ggml.bos_token_id");
  v.eos_id = id_of("tokenizer.ggml.eos_token_id");
  v.unk_id = id_of("tokenizer.ggml.unknown_token_id");
  v.pad_id = id_of("tokenizer.ggml.padding_token_id");
  DARK_CHECK(v.eos_id >= 0, path, ": tokenizer.ggml.eos_token_id is missing");
  v.add_bos = f.has("tokenizer.ggml.add_bos_token") && f.get_bool("tokenizer.ggml.add_bos_token");
  DARK_CHECK(!(f.has("tokenizer.ggml.add_space_prefix") && f.get_bool("tokenizer.ggml.add_space_prefix")), path,
             ": tokenizer.ggml.add_space_prefix is true, which the byte-level BPE tokenizer does not support");
  try {
    return std::make_unique<BpeTokenizer>(std::move(v));
  } catch (const Error& e) {
    throw Error(str(path, ": ", e.what()));
  }
}

}  // namespace dark::data
