// Finetuning sources, architecture adoption, attention swap and freezing (see finetune.h).
#include "train/swap/finetune.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <set>

#include "autograd/grad_mode.h"
#include "nn/optim.h"
#include "train/formats/checkpoint.h"
#include "train/formats/gguf_import.h"
#include "train/formats/hf_import.h"
#include "train/portable_checkpoint.h"

namespace dark::train {
namespace fs = std::filesystem;

namespace {

// Attention-kind parameters live under "...self_attn.feature_map."; they are the only
// parameters an attention swap may add or drop.
bool is_feature_map_parameter(const std::string& name) { return name.find(".feature_map.") != std::string::npos; }

InitSource load_checkpoint_source(const std::string& path) {
  const fs::path dir = formats::find_checkpoint(path);
  // A source gives its weights: its optimizer state is neither read nor verified.
  formats::CheckpointData ck = formats::load_checkpoint(dir, {.optimizer = false});
  const RunConfig trained = parse_config(ck.state.at("config"));
  InitSource source;
  source.path = path;
  source.description = "checkpoint " + dir.string();
  source.model = trained.model;
  source.parameters = std::move(ck.model);
  source.data_dir = trained.data.dir;
  source.tokenizer_hash = checkpoint_tokenizer_hash(ck);
  return source;
}

// One architecture key: its schema path and accessors on nn::ModelConfig.
struct ArchitectureKey {
  const char* path;
  std::function<nlohmann::json(const nn::ModelConfig&)> get;
  std::function<void(nn::ModelConfig&, const nn::ModelConfig&)> copy;
};

#define DARK_ARCH_KEY(member)                                                  \
  ArchitectureKey {                                                            \
    "model." #member, [](const nn::ModelConfig& m) { return nlohmann::json(m.member); }, \
        [](nn::ModelConfig& to, const nn::ModelConfig& from) { to.member = from.member; }    \
  }

const std::vector<ArchitectureKey>& architecture_keys() {
  static const std::vector<ArchitectureKey> keys = {
      DARK_ARCH_KEY(family),         DARK_ARCH_KEY(vocab_size),     DARK_ARCH_KEY(d_model),
      DARK_ARCH_KEY(n_layers),       DARK_ARCH_KEY(n_heads),        DARK_ARCH_KEY(n_kv_heads),
      DARK_ARCH_KEY(head_dim),       DARK_ARCH_KEY(d_ff),           DARK_ARCH_KEY(mlp),
      DARK_ARCH_KEY(rope_theta),     DARK_ARCH_KEY(norm_eps),       DARK_ARCH_KEY(tie_embeddings),
      DARK_ARCH_KEY(sliding_window), DARK_ARCH_KEY(sliding_window_pattern), DARK_ARCH_KEY(rope_local_theta)};
  return keys;
}
#undef DARK_ARCH_KEY

}  // namespace

InitSource load_init_source(const std::string& path) {
  if (path.ends_with(".gguf")) {
    formats::ImportedModel imported = formats::import_gguf(path);
    InitSource source;
    source.path = path;
    source.description = "GGUF " + path;
    source.model = imported.model;
    source.parameters = std::move(imported.parameters);
    return source;
  }
  if (formats::is_hf_model_folder(path)) {
    formats::ImportedModel imported = formats::import_hf_llama(path);
    const formats::HfTokenizerFile tokenizer = formats::hf_tokenizer_file(path);
    InitSource source;
    source.path = path;
    source.description = "Hugging Face folder " + path;
    source.model = imported.model;
    source.parameters = std::move(imported.parameters);
    source.tokenizer_hash = data::load_tokenizer(tokenizer.kind, tokenizer.path)->hash();
    return source;
  }
  return load_checkpoint_source(path);
}

void adopt_architecture(RunConfig& config, const nn::ModelConfig& source, const std::string& source_name) {
  for (const ArchitectureKey& key : architecture_keys()) {
    if (!config.given.contains(key.path)) {
      key.copy(config.model, source);
      continue;
    }
    DARK_CHECK(key.get(config.model) == key.get(source), "config: ", key.path, ": ", key.get(config.model).dump(),
               " differs from ", source_name, " (", key.get(source).dump(),
               "); finetune.init_from takes the architecture from its source: remove the key or match it");
  }
  // The context comes from the model: the source's (a GGUF's context_length, a folder's
  // max_position_embeddings, our checkpoint's max_seq_len), or data.seq_len where the run
  // trains longer than that (it has then been trained at that length). A config that sets
  // model.max_seq_len keeps its own.
  if (!config.given.contains("model.max_seq_len"))
    config.model.max_seq_len = std::max(source.max_seq_len, config.data.seq_len);
  validate_config(config);
}

std::size_t load_source_weights(nn::CausalLM& model, const InitSource& source) {
  NoGradGuard no_grad;
  std::size_t loaded = 0;
  std::vector<std::string> kept_init, dropped;
  auto params = model.named_parameters();
  for (auto& [name, p] : params) {
    auto it = source.parameters.find(name);
    if (it == source.parameters.end()) {
      DARK_CHECK(is_feature_map_parameter(name), source.description, ": parameter '", name, "' is missing");
      kept_init.push_back(name);
      continue;
    }
    DARK_CHECK(it->second.shape() == p->shape(), source.description, ": parameter '", name, "' has shape ",
               shape_str(it->second.shape()), ", the model expects ", shape_str(p->shape()));
    DARK_CHECK(it->second.dtype() == p->dtype(), source.description, ": parameter '", name, "' is ",
               dtype_name(it->second.dtype()), ", the model expects ", dtype_name(p->dtype()));
    p->copy_(it->second);
    ++loaded;
  }
  std::set<std::string> model_names;
  for (const auto& [name, p] : params) model_names.insert(name);
  for (const auto& [name, t] : source.parameters) {
    if (model_names.contains(name)) continue;
    DARK_CHECK(is_feature_map_parameter(name), source.description, ": holds '", name,
               "', which this model does not have (a different architecture?)");
    dropped.push_back(name);
  }
  spdlog::info("init_from {}: {} tensors loaded", source.description, loaded);
  if (!kept_init.empty())
    spdlog::info("init_from: {} attention feature-map parameter(s) new to this kind keep their initialisation (e.g. {})",
                 kept_init.size(), kept_init.front());
  if (!dropped.empty())
    spdlog::info("init_from: {} feature-map parameter(s) of the source are not used by this attention kind (e.g. {})",
                 dropped.size(), dropped.front());
  return loaded;
}

std::vector<std::string> trainable_globs(const std::vector<std::string>& entries) {
  std::vector<std::string> globs;
  for (const std::string& e : entries) {
    if (e == "all") {
      globs.push_back("*");
    } else if (e == "limited_attention") {
      for (const char* g : {"*.self_attn.q_proj.*", "*.self_attn.k_proj.*", "*.self_attn.v_proj.*",
                            "*.self_attn.feature_map.*"})
        globs.push_back(g);
    } else {
      globs.push_back(e);
    }
  }
  return globs;
}

Freezing freeze_parameters(nn::CausalLM& model, const std::vector<std::string>& entries) {
  Freezing f;
  auto params = model.named_parameters();
  for (const std::string& entry : entries) {
    const std::vector<std::string> globs = trainable_globs({entry});
    // limited_attention on a softmax model has no feature maps: the preset as a whole must match.
    const bool matches = std::any_of(params.begin(), params.end(),
                                     [&](const auto& np) { return nn::matches_any(np.first, globs); });
    DARK_CHECK(matches, "config: finetune.trainable: \"", entry,
               "\" matches no parameter (names look like model.layers.0.self_attn.q_proj.weight)");
  }
  const std::vector<std::string> globs = trainable_globs(entries);
  for (auto& [name, p] : params) {
    if (nn::matches_any(name, globs)) {
      f.trainable.emplace_back(name, p);
      f.trainable_numel += p->numel();
    } else {
      p->set_requires_grad(false);
      f.frozen.push_back(name);
      f.frozen_numel += p->numel();
    }
  }
  DARK_CHECK(!f.trainable.empty(), "config: finetune.trainable selects no parameter");
  return f;
}

std::int64_t frozen_bytes_saved(const Freezing& f, const RunConfig& config) {
  const bool adamw = config.optimizer.name == nn::OptimizerKind::adamw;
  const std::int64_t per_parameter = 4 + (adamw ? 8 : 4);  // the trainer's SGD always keeps a momentum buffer
  return f.frozen_numel * per_parameter;
}

}  // namespace dark::train
