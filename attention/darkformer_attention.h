// DARKFormer (docs/method.md section 3): FAVOR+ applied to M q~ and M k~ with a learned M
// (r x d) per key/value head (attention.darkformer.scope "head") or one per layer ("layer"),
// so the features estimate the data-aligned kernel exp(q~^T M^T M k~) without ever forming
// M^T M. The Gaussian matrix G (m x r) is drawn and redrawn like Performer's Omega.
// Initialisation (attention.darkformer.init):
//   identity: M = I (full rank), which makes the layer exactly a Performer layer with the
//             same G; with rank r < d, M = sqrt(d / r) times r orthonormal rows of a Haar
//             rotation (E[M^T M] = I), the closest rank-r analogue;
//   whiten:   M from the calibration batch's second moment Lambda of the scaled queries and
//             keys: M = sqrt(tr(Lambda) / r) Lambda^(-1/2) over the top r eigen-directions
//             (whitening_matrix in covariance.h). It equalises the eigenvalues of
//             M Lambda M^T (minimum estimator variance at fixed kernel scale) while keeping the
//             scale tr(M Lambda M^T) = tr(Lambda). This changes the kernel: a finetuning start.
#pragma once
#include "attention/random_feature_attention.h"

namespace dark::attention {

class DarkformerAttention final : public RandomFeatureAttention {
 public:
  DarkformerAttention(const nn::AttentionShape& shape, const AttentionConfig& config);
  const char* kind() const override { return "darkformer"; }
  bool needs_calibration() const override;
  // The base's, and "matrices": how many M the layer has (1 with scope layer, else Hkv).
  Export export_form() override {
    Export e = RandomFeatureAttention::export_form();
    e.settings["matrices"] = matrix->size(0);
    return e;
  }

  Tensor* matrix;  // M: (Hkv or 1, r, d), registered as "M"

 protected:
  std::vector<double> transform_matrix(std::int64_t kv_head) const override;
  Tensor apply_transform(const Tensor& x, double scale) const override;
  void calibrated(const SecondMoments& moments) override;
};

}  // namespace dark::attention
