// Attention factory (see factory.h).
#include "attention/factory.h"

#include "attention/darkformer_attention.h"
#include "attention/lfk_attention.h"
#include "attention/performer_attention.h"
#include "attention/softmax_attention.h"
#include "core/error.h"

namespace dark::attention {

nn::AttentionFactory make_factory(const AttentionConfig& config) {
  return make_layer_factory([config](int) { return config; });
}

nn::AttentionFactory make_layer_factory(std::function<AttentionConfig(int layer)> config_of_layer) {
  return [config_of_layer](const nn::AttentionShape& shape) -> std::unique_ptr<nn::AttentionKernel> {
    const AttentionConfig c = config_of_layer(shape.layer);
    // Which kind a sliding-window layer runs is the run config's decision (train/config.h,
    // attention_for_layer); every kind attends through shape.window here.
    switch (c.kind) {
      case Kind::softmax: return std::make_unique<SoftmaxAttention>(shape);
      case Kind::performer: return std::make_unique<PerformerAttention>(shape, c);
      case Kind::lfk: return std::make_unique<LfkAttention>(shape, c);
      case Kind::darkformer: return std::make_unique<DarkformerAttention>(shape, c);
    }
    throw Error("attention: unknown kind");
  };
}

}  // namespace dark::attention
