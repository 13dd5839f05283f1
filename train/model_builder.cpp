// Config -> model / data / optimizer settings (see model_builder.h).
#include "train/model_builder.h"

#include "attention/factory.h"

namespace dark::train {

nn::ModelConfig model_config(const RunConfig& c) {
  nn::ModelConfig m;
  m.vocab_size = c.model.vocab_size;
  m.d_model = c.model.d_model;
  m.n_layers = c.model.n_layers;
  m.n_heads = c.model.n_heads;
  m.n_kv_heads = c.model.n_kv_heads;
  m.d_ff = c.model.d_ff;
  m.mlp = c.model.mlp == MlpKind::swiglu ? nn::GatedMlp::Activation::silu : nn::GatedMlp::Activation::gelu;
  m.rope_theta = c.model.rope_theta;
  m.norm_eps = c.model.norm_eps;
  m.tie_embeddings = c.model.tie_embeddings;
  m.dropout = c.model.dropout;
  m.init_std = c.model.init_std;
  m.seed = c.seed;
  return m;
}

attention::AttentionConfig attention_settings(const RunConfig& c, int layer) {
  const AttentionConfig s = attention_for_layer(c, layer);
  attention::AttentionConfig a;
  a.kind = attention::parse_kind(std::string(enum_name(s.kind)));
  a.num_features = s.num_features;
  a.draw = s.draw == FeatureDrawKind::iid ? attention::FeatureDraw::iid : attention::FeatureDraw::orthogonal;
  a.eps = s.eps;
  a.mode = s.mode == AttentionMode::exact ? attention::Mode::exact : attention::Mode::linear;
  a.proposal = s.proposal == ProposalKind::variance_optimal ? attention::Proposal::variance_optimal
                                                            : attention::Proposal::isotropic;
  a.chunk = s.chunk_size;
  a.scope = s.darkformer.scope == DarkformerScope::layer ? attention::MatrixScope::layer : attention::MatrixScope::head;
  a.rank = s.darkformer.rank;
  a.init = s.darkformer.init == DarkformerInit::whiten ? attention::MatrixInit::whiten : attention::MatrixInit::identity;
  a.lfk_init = s.lfk.init == LfkInit::iid ? attention::FeatureDraw::iid : attention::FeatureDraw::orthogonal;
  a.seed = c.seed;
  return a;
}

std::unique_ptr<nn::CausalLM> build_model(const RunConfig& c) {
  return std::make_unique<nn::CausalLM>(model_config(c),
                                        attention::make_layer_factory([c](int layer) { return attention_settings(c, layer); }));
}

data::DataConfig data_config(const RunConfig& c) {
  data::DataConfig d;
  d.corpus = c.data.corpus;
  d.sources = c.data.sources;
  d.dir = c.data.dir;
  d.tokenizer = std::string(enum_name(c.data.tokenizer));
  d.tokenizer_model = c.data.tokenizer_model;
  d.vocab_size = c.data.vocab_size;
  d.val_fraction = c.data.val_fraction;
  d.seed = c.seed;
  return d;
}

nn::OptimizerConfig optimizer_config(const RunConfig& c) {
  nn::OptimizerConfig o;
  o.name = std::string(enum_name(c.optimizer.name));
  o.beta1 = c.optimizer.betas[0];
  o.beta2 = c.optimizer.betas[1];
  o.eps = c.optimizer.eps;
  o.weight_decay = c.optimizer.weight_decay;
  o.momentum = c.optimizer.momentum;
  o.no_decay = c.optimizer.no_decay;
  return o;
}

nn::ScheduleConfig schedule_config(const RunConfig& c) {
  return {std::string(enum_name(c.schedule.kind)), c.schedule.warmup_steps, c.training.steps, c.schedule.min_lr_ratio};
}

data::PreparedData prepare_data_for(RunConfig& config) {
  data::PreparedData prepared = data::prepare(data_config(config));
  const int tokenizer_vocab = prepared.tokenizer->vocab_size();
  if (config.model.vocab_size == 0) config.model.vocab_size = tokenizer_vocab;
  DARK_CHECK(config.model.vocab_size >= tokenizer_vocab, "config: model.vocab_size: ", config.model.vocab_size,
             " is smaller than the tokenizer's vocabulary (", tokenizer_vocab, ")");
  return prepared;
}

}  // namespace dark::train
