// Builds the attention kernel of each layer from the kind named in the run config.
// Only "softmax" exists so far; performer, lfk and darkformer arrive with the attention
// issue and are rejected with a clear error until then.
#pragma once
#include <string>

#include "nn/attention_kernel.h"

namespace dark::attention {

struct AttentionConfig {
  std::string kind = "softmax";
};

nn::AttentionFactory make_factory(const AttentionConfig& config);

}  // namespace dark::attention
