// From a resolved run config to the pieces a run needs: the model (each layer with its
// attention settings) and the data (prepared once, reused after). The config sections are the
// layers' own config structs, so building is passing them on plus the run's seed.
#pragma once
#include <memory>

#include "data/prepare.h"
#include "nn/model.h"
#include "train/config.h"

namespace dark::train {

std::unique_ptr<nn::CausalLM> build_model(const RunConfig& config);

// Prepares (or reuses) the data and sets model.vocab_size from the tokenizer when it is 0;
// an explicit vocab_size smaller than the tokenizer's is an error.
data::PreparedData prepare_data_for(RunConfig& config);

}  // namespace dark::train
