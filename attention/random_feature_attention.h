// What Performer, LFK and DARKFormer share (docs/method.md sections 2-5): queries and keys
// scaled by d^(-1/4) (after RoPE), an optional per-head transform (DARKFormer's M), positive
// random features in log space, phi(x) = exp(Omega x - |x|^2 / 2 - ln(m) / 2 [+ proposal
// weight]), and the fused chunked linear-attention op (causal, offsets, normaliser in the same
// pass; the fused op random_feature_attention computes the logits inside its kernel). Key-side
// features are computed once per key/value head (grouped-query attention);
// the feature matrices are per key/value head, shared by the query heads that read it.
//
// Modes: linear (the random-feature estimate) or exact (the same kernel evaluated exactly:
// flash softmax with scale 1 on the transformed queries and keys). In linear mode, an exact
// window (exact_window.h) evaluates the nearest keys exactly and estimates the rest, or, with
// attention.far_field none, gives the rest no weight (window only).
// Redraws: features are drawn from Philox keyed by (seed, layer, kv head, epoch); the
// trainer sets the epoch from the optimizer step, so every rank and every resumed run draws
// the same matrices. Calibration: see nn::AttentionKernel.
#pragma once
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "attention/covariance.h"
#include "attention/exact_window.h"
#include "attention/factory.h"
#include "attention/variance_optimal.h"
#include "autograd/ops.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

class RandomFeatureAttention : public nn::AttentionKernel {
 public:
  RandomFeatureAttention(const nn::AttentionShape& shape, const AttentionConfig& config);

  Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask = Tensor()) override;
  Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<nn::DecodeState>& state) override;
  // Mode linear: the recurrent feature state (plus the last W keys of an exact window, or the
  // layer's sliding window); mode exact keeps a growing cache unless the layer has a window.
  bool bounded_decode_state() const override { return config_.mode == Mode::linear || shape_.window > 0; }

  std::string describe() const override;
  void set_feature_epoch(std::int64_t epoch) override;
  std::int64_t feature_epoch() const override { return epoch_; }
  bool redraws_features() const override { return config_.mode == Mode::linear && !window_only(); }

  bool needs_calibration() const override;
  void begin_calibration() override;
  void end_calibration() override;

  // The variance-optimal proposal in force (empty before calibration or when isotropic):
  // "proposal_sqrt_cov" (Hkv, r, r) and "proposal_log_det" (Hkv), for checkpoints.
  std::map<std::string, Tensor> extra_state() const override;
  void load_extra_state(const std::map<std::string, Tensor>& saved) override;
  // num_features, rank, eps, exact_window, exact (1 in mode exact), feature_epoch, log_weight
  // (1 when the features carry a proposal's log-weights); tensors "omega" (Hkv, m, r) f32, the
  // features of the current epoch (mode linear), and "log_weight" (Hkv, m) with a proposal.
  Export export_form() override;

  // Pieces exposed for the probe and tests.
  // Queries or keys (B, T, H, d) after RoPE -> scaled by d^(-1/4) and transformed (B, T, H, r).
  Tensor transformed(const Tensor& x) const;
  // Feature logits of transformed inputs (B, T, H, r) -> (B, T, H, m) with the current features.
  Tensor feature_logits(const Tensor& transformed_x);
  const AttentionConfig& config() const { return config_; }
  // The exact window of this layer (exact_window.h); meaningful when config().exact_window > 0.
  ExactWindowSpec exact_window() const;
  // Sets attention.exact_window (0 = none) on a built kernel: the probe measures one estimator
  // (its features, M and proposal) with and without the window.
  void set_exact_window(int window);
  // Sets attention.far_field on a built kernel (forward and decode follow it): none needs an
  // exact window. Evaluation's ablations (train/ablation.h) set it for a pass and restore it.
  void set_far_field(FarField far_field);
  // An exact window whose far keys get no weight: sliding-window attention with the exact kernel.
  bool window_only() const { return config_.exact_window > 0 && config_.far_field == FarField::none; }
  std::int64_t kv_heads() const { return shape_.n_kv_heads; }
  std::int64_t transformed_dim() const { return rank_; }

 protected:
  // DARKFormer's M as r x d (row-major, double) for key/value head h; identity by default.
  virtual std::vector<double> transform_matrix(std::int64_t kv_head) const;
  // x (B, T, H, d) -> scale M x (B, T, H, r); M = I by default. Taking the scale here lets
  // DARKFormer fold it into the small M instead of a pass over x.
  virtual Tensor apply_transform(const Tensor& x, double scale) const { return mul_scalar(x, scale); }
  // Feature matrices (Hkv, m, r) and the per-feature log-weight (Hkv, m) or undefined.
  // Default: drawn for the current epoch (with the proposal when there is one).
  virtual std::pair<Tensor, Tensor> features(DType dtype, Device device);
  // Drawn features live on the queries' device; a model moving elsewhere drops them (they are
  // redrawn there on the next forward, bit-identical since they depend on (seed, epoch) only).
  void move_state(Device /*device*/) override { drawn_ = Drawn{}; }
  // Called by end_calibration with the measured second moments of the scaled inputs
  // (DARKFormer's whiten initialisation sets M here), before the proposal is built.
  virtual void calibrated(const SecondMoments& /*moments*/) {}
  // The isotropic draw of key/value head h for the current epoch: (m, r) f64 on the CPU.
  Tensor base_draw(std::int64_t kv_head) const;

  nn::AttentionShape shape_;
  AttentionConfig config_;
  std::int64_t rank_;  // transformed dimension r
  // attention.window_balance: b (Hq), the far keys' weights times exp(b_h); null without it.
  Tensor* window_balance_ = nullptr;

 private:
  bool needs_proposal() const;
  std::int64_t epoch_ = 0;
  std::vector<ImportanceProposal> proposals_;  // per kv head when variance_optimal is in force
  std::optional<SecondMoments> moments_;       // while calibrating
  // Drawn features for (epoch, dtype, device), rebuilt when any of them changes.
  struct Drawn {
    std::int64_t epoch = -1;
    DType dtype = DType::f32;
    Device device = Device::cpu();
    Tensor omega, log_weight;
  } drawn_;
};

// x (B, T, H, r) with H a multiple of Hkv and w (Hw, n, r) with Hw = 1 (shared) or Hkv ->
// (B, T, H, n): row x[b, t, h] times w[h / (H / Hkv)]^T. Differentiable in both.
Tensor per_head_project(const Tensor& x, const Tensor& w, std::int64_t kv_heads);

}  // namespace dark::attention
