// Performer (FAVOR+): isotropic positive random features, Omega ~ N(0, I) per key/value head,
// fixed between redraws (docs/method.md section 2). Everything is in the shared base.
#pragma once
#include "attention/random_feature_attention.h"

namespace dark::attention {

class PerformerAttention final : public RandomFeatureAttention {
 public:
  PerformerAttention(const nn::AttentionShape& shape, const AttentionConfig& config)
      : RandomFeatureAttention(shape, with_full_rank(config)) {}
  const char* kind() const override { return "performer"; }

 private:
  // Performer has no transform: its features live in the full head dimension.
  static AttentionConfig with_full_rank(AttentionConfig c) {
    c.darkformer.rank = 0;
    return c;
  }
};

}  // namespace dark::attention
