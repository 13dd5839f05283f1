// SpmTokenizer::from_gguf: the tokenizer.ggml.* metadata of a GGUF file (model "llama") as
// an SpmVocab, with llama.cpp's defaults and its re-typing of end-of-generation tokens.
// Every problem is a dark::Error naming the file and the key.
#include <climits>
#include <cmath>
#include <cstdint>
#include <string_view>

#include "core/error.h"
#include "data/gguf.h"
#include "data/spm_tokenizer.h"

namespace dark::data {

namespace {

// Token texts llama.cpp (llama-vocab.cpp, as of llama-cpp-python 0.3.x) treats as ending
// generation and therefore forces to control type whatever the file says: with
// parse_special = false their text is then ordinary text, and they decode to nothing.
// Gemma 3 has "</s>" (an HTML strike-through tag) as a user-defined token.
constexpr std::string_view kEndOfGeneration[] = {
    "<|eot_id|>",     "<|im_end|>",         "<|end|>",   "<|return|>",       "<|call|>",
    "<|flush|>",      "<|calls|>",          "<end_of_turn>", "<|endoftext|>", "</s>",
    "<|eom_id|>",     "<EOT>",              "_<EOT>",    "[EOT]",            "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>",    "<turn|>",          "<|tool_response>",
    "<\xEF\xBD\x9C" "end\xE2\x96\x81of\xE2\x96\x81sentence\xEF\xBD\x9C>",  // DeepSeek's <｜end▁of▁sentence｜>
    "[e~[",
};

}  // namespace

std::unique_ptr<SpmTokenizer> SpmTokenizer::from_gguf(const std::string& path) {
  const GgufFile f = GgufFile::open(path);
  const std::string model = f.get_string("tokenizer.ggml.model");
  DARK_CHECK(model == "llama", path, ": tokenizer.ggml.model is '", model,
             "'; the SentencePiece tokenizer reads only \"llama\"");
  SpmVocab v;
  v.tokens = f.get_string_array("tokenizer.ggml.tokens");
  const std::size_t n = v.tokens.size();
  DARK_CHECK(n > 0 && n < static_cast<std::size_t>(INT32_MAX), path, ": tokenizer.ggml.tokens has ", n,
             " tokens (need 1 .. 2^31-2)");

  DARK_CHECK(f.has("tokenizer.ggml.scores"), path,
             ": tokenizer.ggml.scores is missing (a SentencePiece vocabulary needs one score per token)");
  const std::vector<double> scores = f.get_float_array("tokenizer.ggml.scores");
  DARK_CHECK(scores.size() == n, path, ": tokenizer.ggml.scores has ", scores.size(), " entries for ", n, " tokens");
  v.scores.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<float>(scores[i]);
    DARK_CHECK(std::isfinite(s), path, ": tokenizer.ggml.scores[", i, "] is ", scores[i], ", not a finite float");
    v.scores.push_back(s);
  }

  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<std::int64_t> types = f.get_int_array("tokenizer.ggml.token_type");
    DARK_CHECK(types.size() == n, path, ": tokenizer.ggml.token_type has ", types.size(), " entries for ", n,
               " tokens");
    v.token_types.reserve(n);
    for (std::size_t i = 0; i < n; ++i) {
      DARK_CHECK(types[i] >= 1 && types[i] <= 6, path, ": tokenizer.ggml.token_type[", i, "] is ", types[i],
                 " (token types are 1 normal, 2 unknown, 3 control, 4 user-defined, 5 unused, 6 byte)");
      v.token_types.push_back(static_cast<std::int32_t>(types[i]));
    }
  } else {
    v.token_types.assign(n, static_cast<std::int32_t>(BpeTokenType::normal));
  }
  for (std::size_t i = 0; i < n; ++i) {
    for (const std::string_view name : kEndOfGeneration)
      if (v.tokens[i] == name) v.token_types[i] = static_cast<std::int32_t>(BpeTokenType::control);
  }

  // -1 means none, also written as u32 4294967295 by some converters; anything else must be
  // an id of this vocabulary (cutting 2^32 + 5 down to 5 would pick a real token).
  auto id_of = [&](const char* key) -> std::int32_t {
    if (!f.has(key)) return -1;
    const std::int64_t id = f.get_int(key);
    if (id == UINT32_MAX || id == -1) return -1;
    DARK_CHECK(id >= 0 && id < static_cast<std::int64_t>(n), path, ": ", key, " is ", id,
               ", outside the vocabulary [0, ", n, ")");
    return static_cast<std::int32_t>(id);
  };
  v.bos_id = id_of("tokenizer.ggml.bos_token_id");
  v.eos_id = id_of("tokenizer.ggml.eos_token_id");
  v.unk_id = id_of("tokenizer.ggml.unknown_token_id");
  v.pad_id = id_of("tokenizer.ggml.padding_token_id");
  DARK_CHECK(v.eos_id >= 0, path, ": tokenizer.ggml.eos_token_id is missing");
  // llama.cpp's defaults for a "llama" vocabulary.
  v.add_bos = !f.has("tokenizer.ggml.add_bos_token") || f.get_bool("tokenizer.ggml.add_bos_token");
  v.add_eos = f.has("tokenizer.ggml.add_eos_token") && f.get_bool("tokenizer.ggml.add_eos_token");
  v.add_space_prefix = !f.has("tokenizer.ggml.add_space_prefix") || f.get_bool("tokenizer.ggml.add_space_prefix");
  DARK_CHECK(!v.add_bos || v.bos_id >= 0, path,
             ": tokenizer.ggml.add_bos_token is true (or absent: true by default) but tokenizer.ggml.bos_token_id is "
             "missing");
  try {
    return std::make_unique<SpmTokenizer>(std::move(v));
  } catch (const Error& e) {
    throw Error(str(path, ": ", e.what()));
  }
}

}  // namespace dark::data
