// Builds the attention kernel of each layer from its settings (the run config's attention
// section with that layer's overrides applied; see train/model_builder.cpp).
#pragma once
#include <functional>

#include "attention/config.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

// Every layer gets the same settings.
nn::AttentionFactory make_factory(const AttentionConfig& config);
// Per-layer settings.
nn::AttentionFactory make_layer_factory(std::function<AttentionConfig(int layer)> config_of_layer);

}  // namespace dark::attention
