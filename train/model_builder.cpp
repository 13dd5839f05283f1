// Config -> model and data (see model_builder.h).
#include "train/model_builder.h"

#include <spdlog/spdlog.h>

#include <string>

#include "attention/factory.h"

namespace dark::train {

std::unique_ptr<nn::CausalLM> build_model(const RunConfig& c) {
  nn::ModelConfig model = c.model;
  model.seed = c.seed;
  int kept_softmax = 0, windowed_features = 0;
  for (int layer = 0; layer < model.n_layers; ++layer) {
    kept_softmax += keeps_windowed_softmax(c, layer);
    windowed_features +=
        model.is_local_layer(layer) && attention_for_layer(c, layer).kind != attention::Kind::softmax;
  }
  if (kept_softmax > 0)
    spdlog::info("attention: {} sliding-window layer(s) keep exact windowed softmax (attention.windowed_layers = "
                 "\"softmax\"); the other kinds run on the global layers",
                 kept_softmax);
  if (windowed_features > 0)
    spdlog::info("attention: {} sliding-window layer(s) run their random-feature kind through a {}-token window "
                 "(attention.windowed_layers = \"same\"){}",
                 windowed_features, model.sliding_window,
                 c.data.seq_len <= model.sliding_window ? "; at data.seq_len " + std::to_string(c.data.seq_len) +
                                                             " the window never binds"
                                                       : "");
  return std::make_unique<nn::CausalLM>(model,
                                        attention::make_layer_factory([c](int layer) { return attention_for_layer(c, layer); }));
}

data::PreparedData prepare_data_for(RunConfig& config) {
  // The data section alone decides the prepared folder, tokenizer included (its line sampling
  // keeps DataConfig's own seed): runs that differ only in `seed`, a sweep's replicates, read
  // the same tokens, and do not rebuild one folder over each other.
  data::PreparedData prepared = data::prepare(config.data);
  const int tokenizer_vocab = prepared.tokenizer->vocab_size();
  if (config.model.vocab_size == 0) config.model.vocab_size = tokenizer_vocab;
  DARK_CHECK(config.model.vocab_size >= tokenizer_vocab, "config: model.vocab_size: ", config.model.vocab_size,
             " is smaller than the tokenizer's vocabulary (", tokenizer_vocab, ")");
  return prepared;
}

}  // namespace dark::train
