// Hugging Face export (see hf_export.h).
#include "train/formats/hf_export.h"


#include <spdlog/spdlog.h>

#include <nlohmann/json.hpp>
#include <algorithm>
#include <optional>
#include <string_view>

#include "autograd/ops.h"
#include "core/file_io.h"
#include "data/bpe_tokenizer.h"
#include "data/hf_tokenizer_json.h"
#include "data/sentencepiece_tokenizer.h"
#include "data/spm_tokenizer.h"
#include "data/spm_tokenizer_json.h"
#include "train/formats/hf_modeling_sources.h"  // generated: the Python files, embedded
#include "train/formats/safetensors.h"

namespace dark::formats {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json id_or_null(std::int32_t id) { return id >= 0 ? json(id) : json(nullptr); }

std::int32_t pad_id(const data::Tokenizer* t) {
  if (const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(t)) return bpe->pad_id();
  if (const auto* spm = dynamic_cast<const data::SpmTokenizer*>(t)) return spm->pad_id();
  return -1;
}

// A tokenizer's files: (file name, contents) pairs and the two special-token configs.
struct TokenizerFiles {
  std::vector<std::pair<std::string, std::string>> files;
  json config;   // tokenizer_config.json
  json special;  // special_tokens_map.json
};

json special_tokens(const data::Tokenizer& t, std::int32_t unk_id, std::int32_t pad_id) {
  json s = json::object();
  for (const auto& [key, id] : {std::pair<const char*, std::int32_t>{"bos_token", t.bos_id()}, {"eos_token", t.eos_id()},
                                {"unk_token", unk_id}, {"pad_token", pad_id}})
    if (id >= 0) s[key] = t.piece(id);
  return s;
}

// PreTrainedTokenizerFast: transformers (4.x and 5.x) then takes tokenizer.json as written;
// a model-specific class (LlamaTokenizer, GemmaTokenizer) would rebuild its own normalizer and
// pre-tokenizer, or convert tokenizer.model (which needs protobuf).
json base_tokenizer_config(const json& special, bool add_bos, const nn::ModelConfig& config) {
  json c = {{"tokenizer_class", "PreTrainedTokenizerFast"},
            {"add_bos_token", add_bos},
            {"add_eos_token", false},
            {"clean_up_tokenization_spaces", false},
            {"model_max_length", config.max_seq_len}};
  for (const char* key : {"bos_token", "eos_token", "unk_token", "pad_token"})
    c[key] = special.contains(key) ? special[key] : json(nullptr);
  return c;
}

// SentencePiece-style BPE (a SentencePiece model trained here, or a GGUF's SpmTokenizer):
// tokenizer.json, and for a SentencePiece model its tokenizer.model too. split_special_tokens
// true: our encode reads the text "</s>" or "<eos>" as ordinary pieces, where transformers
// would otherwise emit the token.
TokenizerFiles spm_files(const data::SpmVocab& vocab, const data::Tokenizer& t, bool merge_into_any_type,
                         bool add_bos, const nn::ModelConfig& config) {
  TokenizerFiles f;
  f.special = special_tokens(t, vocab.unk_id, vocab.pad_id);
  f.config = base_tokenizer_config(f.special, add_bos, config);
  f.config["split_special_tokens"] = true;
  data::SpmJsonOptions options;
  options.bos_first = add_bos;
  options.merge_into_any_type = merge_into_any_type;
  f.files.emplace_back("tokenizer.json", data::spm_tokenizer_json(vocab, options));
  return f;
}

TokenizerFiles bpe_files(const data::BpeVocab& vocab, const data::Tokenizer& t, bool split_special_tokens,
                         bool add_bos, const nn::ModelConfig& config) {
  TokenizerFiles f;
  f.special = special_tokens(t, vocab.unk_id, vocab.pad_id);
  f.config = base_tokenizer_config(f.special, add_bos, config);
  f.config["split_special_tokens"] = split_special_tokens;
  f.files.emplace_back("tokenizer.json", data::hf_tokenizer_json(vocab, add_bos));
  return f;
}

// Hugging Face's hidden_act of a gated-MLP kind.
const char* hf_hidden_act(nn::MlpKind kind) {
  switch (kind) {
    case nn::MlpKind::swiglu: return "silu";
    case nn::MlpKind::geglu: return "gelu";
    case nn::MlpKind::geglu_tanh: return "gelu_pytorch_tanh";
  }
  throw Error(str("export-hf: unknown MLP kind ", static_cast<int>(kind)));
}

// Gemma3ForCausalLM's keys over the Llama ones: the local layers as both transformers
// spellings (layer_types, newer; sliding_window_pattern, older), Gemma's query scaling
// (1/sqrt(query_pre_attn_scalar), which is our 1/sqrt(head_dim)) and no soft-capping.
void add_gemma3_keys(json& hf, const nn::ModelConfig& m) {
  hf["architectures"] = {"Gemma3ForCausalLM"};
  hf["model_type"] = "gemma3_text";
  hf["hidden_activation"] = hf.at("hidden_act");
  hf["query_pre_attn_scalar"] = m.head_size();
  hf["sliding_window"] = m.sliding_window;
  hf["sliding_window_pattern"] = m.sliding_window_pattern;
  hf["rope_local_base_freq"] = m.rope_local_theta;
  json types = json::array();
  for (int layer = 0; layer < m.n_layers; ++layer)
    types.push_back(m.is_local_layer(layer) ? "sliding_attention" : "full_attention");
  hf["layer_types"] = types;
  hf["final_logit_softcapping"] = nullptr;
  hf["attn_logit_softcapping"] = nullptr;
  hf["rope_scaling"] = nullptr;
}

const char* const kModelingFile = "modeling_darkformer.py";
const char* const kConfigurationFile = "configuration_darkformer.py";

// A model with random-feature layers: our own architecture (modeling_darkformer.py beside the
// weights, loaded with trust_remote_code), its body the family's keys above, each layer's
// attention in "attention_layers" and its tensors that are not parameters (the features in
// force) among the weights, under the layer's feature_map.
void add_darkformer_keys(json& hf, const nn::ModelConfig& m, const std::vector<nn::AttentionKernel*>& kernels,
                         TensorMap& tensors) {
  hf["family"] = m.family == nn::ModelFamily::gemma3 ? "gemma3" : "llama";
  hf["architectures"] = {"DarkformerForCausalLM"};
  hf["model_type"] = "darkformer";
  hf["auto_map"] = {{"AutoConfig", "configuration_darkformer.DarkformerConfig"},
                    {"AutoModelForCausalLM", "modeling_darkformer.DarkformerForCausalLM"}};
  hf["use_cache"] = false;  // the modeling file recomputes the prefix (no key/value cache)
  if (!hf.contains("layer_types")) hf["layer_types"] = json::array();
  json layers = json::array();
  for (std::size_t layer = 0; layer < kernels.size(); ++layer) {
    if (m.family != nn::ModelFamily::gemma3) hf["layer_types"].push_back("full_attention");
    nn::AttentionKernel::Export e = kernels[layer]->export_form();
    json spec = e.settings;  // the kernel's own settings, typed as it wrote them
    spec["kind"] = kernels[layer]->kind();
    layers.push_back(spec);
    for (auto& [name, t] : e.tensors) tensors[str("model.layers.", layer, ".self_attn.feature_map.", name)] = t;
  }
  hf["attention_layers"] = layers;
}

}  // namespace

std::vector<fs::path> export_hf(nn::CausalLM& model, const data::Tokenizer* tokenizer, const fs::path& out,
                                bool add_bos) {
  const std::vector<nn::AttentionKernel*> kernels = model.attention_kernels();
  const bool all_softmax = std::all_of(kernels.begin(), kernels.end(),
                                       [](nn::AttentionKernel* k) { return std::string_view(k->kind()) == "softmax"; });
  DARK_CHECK(!add_bos || (tokenizer && tokenizer->bos_id() >= 0), "export-hf: the run fed bos at every sequence "
             "start but its tokenizer ", tokenizer ? tokenizer->kind() : std::string("(none)"), " has no bos token");
  const nn::ModelConfig& m = model.config();
  std::optional<TokenizerFiles> tok;
  if (const auto* sp = dynamic_cast<const data::SentencePieceTokenizer*>(tokenizer)) {
    // The sentencepiece library forms only normal and user-defined pieces by merging.
    tok = spm_files(data::sentencepiece_vocab(*sp), *sp, false, add_bos, m);
    tok->files.emplace_back("tokenizer.model", sp->model_bytes());
  } else if (const auto* spm = dynamic_cast<const data::SpmTokenizer*>(tokenizer)) {
    tok = spm_files(spm->vocab(), *spm, true, add_bos, m);  // llama.cpp's SPM merges into any piece
  } else if (const auto* bpe = dynamic_cast<const data::BpeTokenizer*>(tokenizer)) {
    tok = bpe_files(bpe->vocab(), *bpe, false, add_bos, m);
  } else if (const auto* bytes = dynamic_cast<const data::ByteTokenizer*>(tokenizer)) {
    const data::BpeTokenizer same(data::byte_tokenizer_vocab());
    tok = bpe_files(same.vocab(), *bytes, true, add_bos, m);
  } else {
    spdlog::warn("export-hf: tokenizer {} has no Hugging Face form here; the folder has no tokenizer files",
                 tokenizer ? tokenizer->kind() : std::string("(none)"));
  }
  const std::int32_t bos = tokenizer ? tokenizer->bos_id() : -1, eos = tokenizer ? tokenizer->eos_id() : -1;

  fs::create_directories(out);
  std::vector<fs::path> written;
  auto write = [&](const std::string& name, const std::string& bytes) {
    write_file_atomic(out / name, bytes);
    written.push_back(out / name);
  };
  json hf = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", m.vocab_size},
      {"hidden_size", m.d_model},
      {"intermediate_size", m.d_ff},
      {"num_hidden_layers", m.n_layers},
      {"num_attention_heads", m.n_heads},
      {"num_key_value_heads", m.n_kv_heads},
      {"head_dim", m.head_size()},
      {"hidden_act", hf_hidden_act(m.mlp)},
      {"max_position_embeddings", m.max_seq_len},
      {"rms_norm_eps", m.norm_eps},
      {"rope_theta", m.rope_theta},
      {"tie_word_embeddings", m.tie_embeddings},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"bos_token_id", id_or_null(bos)},
      {"eos_token_id", id_or_null(eos)},
      {"torch_dtype", "float32"}};
  const bool gemma = m.family == nn::ModelFamily::gemma3;
  if (gemma) add_gemma3_keys(hf, m);
  TensorMap tensors;
  if (!all_softmax) {
    add_darkformer_keys(hf, m, kernels, tensors);
    write(kConfigurationFile, hf_modeling::configuration_darkformer_py);
    write(kModelingFile, hf_modeling::modeling_darkformer_py);
  }
  write("config.json", hf.dump(2) + "\n");
  // pad_token_id only fills finished rows of a batch; without a pad token eos does, as
  // transformers itself falls back to (saying so on every call otherwise).
  const std::int32_t pad = pad_id(tokenizer) >= 0 ? pad_id(tokenizer) : eos;
  const json generation = {{"bos_token_id", id_or_null(bos)}, {"eos_token_id", id_or_null(eos)},
                           {"pad_token_id", id_or_null(pad)}, {"do_sample", false},
                           {"num_beams", 1}, {"use_cache", all_softmax}};
  write("generation_config.json", generation.dump(2) + "\n");
  for (auto& [name, p] : model.named_parameters()) {
    // Gemma's checkpoints hold w for the multiplier 1 + w (Gemma3RMSNorm); ours, and our
    // modeling file's, the multiplier.
    const bool shifted = gemma && all_softmax && name.ends_with("norm.weight");
    tensors[name] = shifted ? add_scalar(p->detach(), -1.0) : *p;
  }
  save_safetensors(out / "model.safetensors", tensors, {{"format", "pt"}});
  written.push_back(out / "model.safetensors");
  if (tok) {
    for (const auto& [name, bytes] : tok->files) write(name, bytes);
    write("tokenizer_config.json", tok->config.dump(2) + "\n");
    write("special_tokens_map.json", tok->special.dump(2) + "\n");
  }
  return written;
}

}  // namespace dark::formats
