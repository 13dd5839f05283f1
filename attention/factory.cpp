// Attention factory (see factory.h).
#include "attention/factory.h"

#include "attention/softmax_attention.h"
#include "core/error.h"

namespace dark::attention {

nn::AttentionFactory make_factory(const AttentionConfig& config) {
  if (config.kind == "softmax")
    return [](const nn::AttentionShape& shape) { return std::make_unique<SoftmaxAttention>(shape); };
  throw Error(str("attention.kind: '", config.kind,
                  "' is not available yet (implemented: softmax; performer, lfk and darkformer are planned)"));
}

}  // namespace dark::attention
