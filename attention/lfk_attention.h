// LFK, the learned-feature-kernel baseline (docs/method.md section 4; our reading of an
// under-specified baseline): the FAVOR+ form with a trainable projection W (m x d) per
// key/value head, phi_W(x) = m^(-1/2) exp(W x~ - |x~|^2 / 2), initialised from a Performer
// draw (attention.lfk.init) and never redrawn. It estimates no fixed kernel, so it has no
// exact mode and no variance-optimal proposal.
#pragma once
#include "attention/random_feature_attention.h"

namespace dark::attention {

class LfkAttention final : public RandomFeatureAttention {
 public:
  LfkAttention(const nn::AttentionShape& shape, const AttentionConfig& config);
  const char* kind() const override { return "lfk"; }
  void set_feature_epoch(std::int64_t) override {}  // W is learned, never redrawn
  bool redraws_features() const override { return false; }
  // Its features are W itself, a parameter: no "omega" beside it.
  Export export_form() override {
    Export e = RandomFeatureAttention::export_form();
    e.tensors.erase("omega");
    return e;
  }

  Tensor* weight;  // W: (Hkv, m, d), registered as "W"

 protected:
  std::pair<Tensor, Tensor> features(DType dtype, Device device) override;
};

}  // namespace dark::attention
