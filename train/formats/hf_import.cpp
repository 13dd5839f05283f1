// Hugging Face Llama folder import (see hf_import.h).
#include "train/formats/hf_import.h"

#include <spdlog/spdlog.h>

#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "core/file_io.h"
#include "core/json_depth.h"
#include "train/formats/safetensors.h"

namespace dark::formats {
namespace fs = std::filesystem;
using nlohmann::json;

namespace {

json read_json(const fs::path& path) {
  DARK_CHECK(fs::is_regular_file(path), "Hugging Face import: ", path.string(), " does not exist");
  try {
    return json::parse(read_file(path), json_depth_limit());
  } catch (const json::exception& e) {
    throw Error(str("Hugging Face import: ", path.string(), " is not valid JSON: ", e.what()));
  } catch (const Error& e) {
    throw Error(str("Hugging Face import: ", path.string(), ": ", e.what()));
  }
}

// The config.json keys, with errors naming the file and key.
class HfConfig {
 public:
  HfConfig(json doc, fs::path path) : doc_(std::move(doc)), path_(std::move(path)) {
    DARK_CHECK(doc_.is_object(), "Hugging Face import: ", path_.string(), " is not a JSON object");
  }
  bool has(const char* key) const { return doc_.contains(key) && !doc_[key].is_null(); }
  const json& at(const char* key) const { return doc_.at(key); }
  [[noreturn]] void fail(const std::string& key, const std::string& message) const {
    throw Error(str("Hugging Face import: ", path_.string(), ": ", key, ": ", message));
  }
  int positive_int(const char* key, std::optional<int> fallback = std::nullopt) const {
    if (!has(key)) {
      if (fallback) return *fallback;
      fail(key, "missing (a Llama config.json has it)");
    }
    const json& v = doc_[key];
    if (!v.is_number_integer() || v.get<std::int64_t>() <= 0 || v.get<std::int64_t>() >= (1ll << 31))
      fail(key, str("expected a positive integer, got ", v.dump()));
    return v.get<int>();
  }
  double positive_number(const json& v, const std::string& key) const {
    if (!v.is_number() || !(v.get<double>() > 0)) fail(key, str("expected a positive number, got ", v.dump()));
    return v.get<double>();
  }
  double positive_number(const char* key, double fallback) const {
    return has(key) ? positive_number(doc_[key], key) : fallback;
  }
  bool flag(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    if (!doc_[key].is_boolean()) fail(key, str("expected true or false, got ", doc_[key].dump()));
    return doc_[key].get<bool>();
  }
  std::string text(const char* key) const {
    if (!has(key)) return "";
    if (!doc_[key].is_string()) fail(key, str("expected a string, got ", doc_[key].dump()));
    return doc_[key].get<std::string>();
  }

 private:
  json doc_;
  fs::path path_;
};

void check_model_type(const HfConfig& c) {
  const std::string type = c.text("model_type");
  std::vector<std::string> architectures;
  if (c.has("architectures")) {
    if (!c.at("architectures").is_array()) c.fail("architectures", "expected a list of class names");
    for (const json& a : c.at("architectures"))
      if (a.is_string()) architectures.push_back(a.get<std::string>());
  }
  const bool causal_lm =
      std::find(architectures.begin(), architectures.end(), "LlamaForCausalLM") != architectures.end();
  if (!type.empty() && type != "llama")
    c.fail("model_type", str("\"", type, "\" is not supported; only \"llama\" (LlamaForCausalLM) models import"));
  if (type.empty() && !causal_lm)
    c.fail("model_type", "missing, and architectures does not name LlamaForCausalLM; only Llama models import");
  if (!architectures.empty() && !causal_lm)
    c.fail("architectures", str(json(architectures).dump(), " has no LlamaForCausalLM (a causal language model)"));
}

// The RoPE base, refusing every variant our RoPE does not compute.
double rope_theta(const HfConfig& c) {
  auto check_type = [&](const json& params, const std::string& key) {
    if (!params.is_object()) c.fail(key, str("expected an object, got ", params.dump()));
    const json type = params.contains("rope_type") ? params["rope_type"] : params.value("type", json("default"));
    if (type != "default")
      c.fail(key, str("rope_type ", type.dump(), " (scaled RoPE) is not supported; only \"default\""));
    if (params.contains("partial_rotary_factor") && params["partial_rotary_factor"] != 1.0 &&
        params["partial_rotary_factor"] != 1)
      c.fail(key + ".partial_rotary_factor", str(params["partial_rotary_factor"].dump(),
                                                 ": partial rotary embeddings are not supported"));
  };
  if (c.has("rope_scaling")) check_type(c.at("rope_scaling"), "rope_scaling");
  if (c.has("partial_rotary_factor") && c.positive_number("partial_rotary_factor", 1.0) != 1.0)
    c.fail("partial_rotary_factor", "partial rotary embeddings are not supported");
  if (c.has("rope_parameters")) {
    const json& p = c.at("rope_parameters");
    check_type(p, "rope_parameters");
    if (p.contains("rope_theta")) return c.positive_number(p["rope_theta"], "rope_parameters.rope_theta");
  }
  return c.positive_number("rope_theta", 10000.0);
}

nn::ModelConfig llama_shape(const HfConfig& c) {
  check_model_type(c);
  nn::ModelConfig m;
  m.vocab_size = c.positive_int("vocab_size");
  m.d_model = c.positive_int("hidden_size");
  m.n_layers = c.positive_int("num_hidden_layers");
  m.n_heads = c.positive_int("num_attention_heads");
  m.n_kv_heads = c.positive_int("num_key_value_heads", m.n_heads);
  m.d_ff = c.positive_int("intermediate_size");
  m.max_seq_len = c.positive_int("max_position_embeddings", 2048);  // LlamaConfig's defaults
  m.norm_eps = c.positive_number("rms_norm_eps", 1e-6);
  m.tie_embeddings = c.flag("tie_word_embeddings", false);
  m.rope_theta = rope_theta(c);
  const std::string act = c.has("hidden_act") ? c.text("hidden_act") : "silu";
  if (act == "silu") {
    m.mlp = nn::MlpKind::swiglu;
  } else if (act == "gelu") {
    m.mlp = nn::MlpKind::geglu;
  } else if (act == "gelu_pytorch_tanh") {
    m.mlp = nn::MlpKind::geglu_tanh;
  } else {
    c.fail("hidden_act", str("\"", act, "\" is not supported; \"silu\" (swiglu), \"gelu\" (geglu, exact GELU) or ",
                             "\"gelu_pytorch_tanh\" (geglu_tanh, tanh-approximated GELU)"));
  }
  for (const char* key : {"attention_bias", "mlp_bias"})
    if (c.flag(key, false)) c.fail(key, "true is not supported: our projections have no bias");
  if (m.d_model % m.n_heads != 0)
    c.fail("hidden_size", str(m.d_model, " is not a multiple of num_attention_heads (", m.n_heads, ")"));
  if (c.has("head_dim") && c.positive_int("head_dim") != m.d_model / m.n_heads)
    c.fail("head_dim", str(c.positive_int("head_dim"), " differs from hidden_size / num_attention_heads (",
                           m.d_model / m.n_heads, "); our heads split the residual stream evenly"));
  return m;
}

// Every tensor of the folder's weights by name, float32.
std::map<std::string, Tensor> read_weights(const fs::path& dir) {
  std::map<std::string, Tensor> out;
  auto take = [&](TensorMap&& tensors, const fs::path& file, const std::set<std::string>* listed) {
    for (auto& [name, t] : tensors) {
      DARK_CHECK(!listed || listed->contains(name), "Hugging Face import: ", file.string(), " holds '", name,
                 "', which model.safetensors.index.json does not list");
      DARK_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f64, "Hugging Face import: ",
                 file.string(), ": '", name, "' is ", dtype_name(t.dtype()), ", not floating point");
      DARK_CHECK(!out.contains(name), "Hugging Face import: '", name, "' is in more than one shard (", file.string(), ")");
      out.emplace(name, t.dtype() == DType::f32 ? std::move(t) : t.to(DType::f32));
    }
  };
  if (fs::exists(dir / "model.safetensors")) {
    take(load_safetensors(dir / "model.safetensors").tensors, dir / "model.safetensors", nullptr);
    return out;
  }
  const fs::path index_path = dir / "model.safetensors.index.json";
  DARK_CHECK(fs::exists(index_path), "Hugging Face import: ", dir.string(), " has neither model.safetensors nor "
             "model.safetensors.index.json (PyTorch .bin weights are not read: save with safe_serialization=True)");
  const json index = read_json(index_path);
  DARK_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
             "Hugging Face import: ", index_path.string(), ": weight_map: missing or not an object");
  std::map<std::string, std::set<std::string>> by_shard;
  for (const auto& [name, shard] : index["weight_map"].items()) {
    DARK_CHECK(shard.is_string(), "Hugging Face import: ", index_path.string(), ": weight_map: '", name, "' names ",
               shard.dump(), ", not a file");
    const std::string file = shard.get<std::string>();
    DARK_CHECK(!file.empty() && fs::path(file).filename() == file, "Hugging Face import: ", index_path.string(),
               ": weight_map: '", name, "' names '", file, "', not a file in the folder");
    by_shard[file].insert(name);
  }
  for (const auto& [file, names] : by_shard) {
    take(load_safetensors(dir / file).tensors, dir / file, &names);
    for (const std::string& name : names)
      DARK_CHECK(out.contains(name), "Hugging Face import: ", (dir / file).string(), " lacks '", name,
                 "', which model.safetensors.index.json places there");
  }
  return out;
}

}  // namespace

ImportedModel import_hf_llama(const std::string& dir) {
  const fs::path config_path = fs::path(dir) / "config.json";
  ImportedModel out;
  out.model = llama_shape(HfConfig(read_json(config_path), config_path));
  const nn::ModelConfig& m = out.model;
  std::size_t ignored = 0;
  for (auto& [name, t] : read_weights(dir)) {
    if (name.ends_with("rotary_emb.inv_freq")) {  // a buffer older transformers saved; recomputed from rope_theta
      ++ignored;
      continue;
    }
    if (m.tie_embeddings && name == "lm_head.weight") {  // the embedding matrix again
      ++ignored;
      continue;
    }
    out.parameters.emplace(name, std::move(t));
  }
  spdlog::info("{}: llama, {} layers, d_model {}, {} heads ({} kv), d_ff {}, vocab {}, {} tensors ({} ignored)", dir,
               m.n_layers, m.d_model, m.n_heads, m.n_kv_heads, m.d_ff, m.vocab_size, out.parameters.size(), ignored);
  return out;
}

}  // namespace dark::formats
