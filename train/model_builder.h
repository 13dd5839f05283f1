// From a resolved run config to the pieces a run needs: the model (with its attention
// kind), the data (prepared once, reused after), the optimizer and schedule settings.
#pragma once
#include <memory>

#include "attention/factory.h"
#include "data/prepare.h"
#include "nn/model.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"

namespace dark::train {

nn::ModelConfig model_config(const RunConfig& config);
// The attention settings of one layer (the attention section with that layer's overrides).
attention::AttentionConfig attention_settings(const RunConfig& config, int layer);
std::unique_ptr<nn::CausalLM> build_model(const RunConfig& config);
data::DataConfig data_config(const RunConfig& config);
nn::OptimizerConfig optimizer_config(const RunConfig& config);
nn::ScheduleConfig schedule_config(const RunConfig& config);

// Prepares (or reuses) the data and sets model.vocab_size from the tokenizer when it is 0;
// an explicit vocab_size smaller than the tokenizer's is an error.
data::PreparedData prepare_data_for(RunConfig& config);

}  // namespace dark::train
