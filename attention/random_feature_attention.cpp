// Shared random-feature attention (see random_feature_attention.h).
#include "attention/random_feature_attention.h"

#include <cmath>

#include "attention/attention_stats.h"
#include "attention/exact_window.h"
#include "attention/kv_cache.h"
#include "attention/recurrent_state.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::attention {

Tensor per_head_project(const Tensor& x, const Tensor& w, std::int64_t kv_heads) {
  DARK_CHECK(x.dim() == 4 && w.dim() == 3 && x.size(3) == w.size(2) && x.size(2) % kv_heads == 0 &&
                 (w.size(0) == 1 || w.size(0) == kv_heads),
             "per_head_project: expected x (B, T, H, r) and w (1 or ", kv_heads, ", n, r), got ", x.describe(), ", ",
             w.describe());
  const std::int64_t B = x.size(0), T = x.size(1), H = x.size(2), r = x.size(3), n = w.size(1);
  if (w.size(0) == 1) return reshape(matmul(reshape(x, {B * T * H, r}), reshape(w, {n, r}), false, true), {B, T, H, n});
  return per_head_matmul(x, w);
}

RandomFeatureAttention::RandomFeatureAttention(const nn::AttentionShape& shape, const AttentionConfig& config)
    : shape_(shape), config_(config), rank_(config.darkformer.rank > 0 ? config.darkformer.rank : shape.head_dim) {
  DARK_CHECK(config.num_features >= 1, "attention: num_features must be >= 1, got ", config.num_features);
  DARK_CHECK(rank_ <= shape.head_dim, "attention: darkformer rank ", rank_, " exceeds the head dimension ",
             shape.head_dim);
  DARK_CHECK(config.chunk_size >= 1 && config.eps > 0, "attention: chunk_size must be >= 1 and eps > 0");
  DARK_CHECK(config.exact_window >= 0, "attention: exact_window must be >= 0, got ", config.exact_window);
  DARK_CHECK(config.far_field == FarField::features || config.exact_window > 0,
             "attention: far_field none needs an exact window (exact_window > 0)");
  DARK_CHECK(!config.window_balance || (config.exact_window > 0 && config.far_field == FarField::features),
             "attention: window_balance needs an exact window and its far field (exact_window > 0, far_field features)");
  if (config.window_balance)  // 0: the window and the features as the estimator weighs them
    window_balance_ = &register_parameter("window_balance", Tensor::zeros({shape.n_heads}, shape.dtype));
}

Tensor RandomFeatureAttention::transformed(const Tensor& x) const {
  return apply_transform(x, std::pow(static_cast<double>(shape_.head_dim), -0.25));
}

Tensor RandomFeatureAttention::base_draw(std::int64_t kv_head) const {
  return draw_features(config_.num_features, rank_, config_.draw,
                       FeatureKey{config_.seed, shape_.layer, static_cast<int>(kv_head), epoch_}, DType::f64);
}

std::pair<Tensor, Tensor> RandomFeatureAttention::features(DType dtype, Device device) {
  // While calibrating, the isotropic draw stands in (the proposal is what is being measured for).
  DARK_CHECK(!needs_proposal() || !proposals_.empty() || moments_, "attention layer ", shape_.layer,
             ": proposal variance_optimal needs a calibration (begin_calibration, forward passes, end_calibration) ",
             "or a checkpoint that holds the proposal");
  if (drawn_.epoch != epoch_ || drawn_.dtype != dtype || drawn_.device != device || !drawn_.omega.defined()) {
    std::vector<Tensor> omegas, weights;
    for (std::int64_t h = 0; h < shape_.n_kv_heads; ++h) {
      const Tensor g = base_draw(h);
      if (proposals_.empty()) {
        omegas.push_back(g);
      } else {
        ProposalFeatures p = apply_proposal(proposals_[h], g);
        omegas.push_back(p.omega);
        weights.push_back(p.half_log_weight);
      }
    }
    const std::int64_t m = config_.num_features;
    drawn_.omega = reshape(concat(omegas, 0), {shape_.n_kv_heads, m, rank_}).to(dtype).to(device);
    drawn_.log_weight =
        weights.empty() ? Tensor() : reshape(concat(weights, 0), {shape_.n_kv_heads, m}).to(dtype).to(device);
    drawn_.epoch = epoch_;
    drawn_.dtype = dtype;
    drawn_.device = device;
  }
  return {drawn_.omega, drawn_.log_weight};
}

Tensor RandomFeatureAttention::feature_logits(const Tensor& x) {
  const auto [omega, log_weight] = features(x.dtype(), x.device());
  const std::int64_t H = x.size(2), m = omega.size(1);
  // |x|^2 / 2 + ln(m) / 2 is one number per row: folding the constant there saves a pass over
  // the (B, T, H, m) logits in the forward and in the backward.
  const Tensor row_offset = add_scalar(mul_scalar(sum(square(x), {3}, true), 0.5), 0.5 * std::log(static_cast<double>(m)));
  Tensor logits = sub(per_head_project(x, omega, shape_.n_kv_heads), row_offset);
  if (log_weight.defined()) {
    // (Hkv, m) -> (H, m): query head h uses kv head h / group.
    const std::int64_t group = H / shape_.n_kv_heads;
    const Tensor per_head = reshape(expand(reshape(log_weight, {shape_.n_kv_heads, 1, m}), {shape_.n_kv_heads, group, m}), {H, m});
    logits = add(logits, per_head);
  }
  return logits;
}

Tensor RandomFeatureAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) {
  const Tensor qt = transformed(q), kt = transformed(k);
  if (moments_) {
    NoGradGuard no_grad;
    moments_->add(mul_scalar(q, std::pow(static_cast<double>(shape_.head_dim), -0.25)));
    moments_->add(mul_scalar(k, std::pow(static_cast<double>(shape_.head_dim), -0.25)));
  }
  if (config_.mode == Mode::exact) {
    if (stats_due()) store_stats(measure_attention_stats(qt, kt, Tensor()));
    return flash_attention(pad_last_dim(qt, v.size(3)), pad_last_dim(kt, v.size(3)), v, /*causal=*/true, 1.0, key_mask,
                           shape_.window);
  }
  if (window_only()) {
    if (stats_due()) store_stats(measure_attention_stats(qt, kt, Tensor()));  // no features in use
    return window_only_attention(qt, kt, v, key_mask, exact_window());
  }
  // The logits are computed inside the op (random_feature_attention): a layer keeps O(T r)
  // for its backward instead of the (B, T, H, m) logits.
  const auto [omega, log_weight] = features(qt.dtype(), qt.device());
  if (stats_due()) store_stats(measure_attention_stats(qt, kt, omega));
  if (config_.exact_window > 0)
    return exact_window_attention(qt, kt, v, omega, log_weight, key_mask, exact_window(),
                                  [this](const Tensor& x) { return feature_logits(x); },
                                  window_balance_ ? *window_balance_ : Tensor());
  if (shape_.window > 0 && shape_.window < q.size(1)) {
    // A sliding-window layer (every layer swapped on Gemma 3) longer than its window: the
    // fused op has no window, so the logits are materialised for the windowed op (O(T m) of
    // backward memory on these layers; nothing changes while T <= window).
    return linear_attention(feature_logits(qt), feature_logits(kt), v, /*causal=*/true, config_.eps,
                            config_.chunk_size, key_mask, shape_.window);
  }
  return random_feature_attention(qt, kt, v, omega, log_weight, /*causal=*/true, config_.eps, config_.chunk_size,
                                  key_mask);
}

Tensor RandomFeatureAttention::decode(const Tensor& q, const Tensor& k, const Tensor& v,
                                      std::unique_ptr<nn::DecodeState>& state) {
  NoGradGuard no_grad;
  const Tensor qt = transformed(q), kt = transformed(k);
  if (config_.mode == Mode::exact)
    return attend_with_cache(pad_last_dim(qt, v.size(3)), pad_last_dim(kt, v.size(3)), v, 1.0, state, shape_.window);
  if (window_only()) return window_only_decode(qt, kt, v, exact_window(), state);
  if (config_.exact_window > 0)
    return exact_window_decode(qt, kt, feature_logits(qt), feature_logits(kt), v, exact_window(), state,
                               window_balance_ ? *window_balance_ : Tensor());
  if (shape_.window > 0)
    return windowed_linear_attention_decode(feature_logits(qt), feature_logits(kt), v, config_.eps, shape_.window,
                                            config_.chunk_size, state);
  return linear_attention_decode(feature_logits(qt), feature_logits(kt), v, config_.eps, config_.chunk_size, state);
}

nn::AttentionKernel::Export RandomFeatureAttention::export_form() {
  DARK_CHECK(!window_only(), "attention layer ", shape_.layer, " runs ", describe(),
             ": attention.far_field \"none\" is not part of the exported modeling file");
  DARK_CHECK(window_balance_ == nullptr, "attention layer ", shape_.layer,
             " learns a window balance (attention.window_balance): it is not part of the exported modeling file");
  Export e;
  e.settings = {{"num_features", config_.num_features},
                {"rank", rank_},
                {"eps", config_.eps},
                {"exact_window", config_.exact_window},
                {"mode", config_.mode == Mode::exact ? "exact" : "linear"},
                {"feature_epoch", epoch_},
                {"log_weight", false}};
  if (config_.mode == Mode::exact) return e;  // the exact kernel draws no features
  const auto [omega, log_weight] = features(shape_.dtype, Device::cpu());
  e.tensors["omega"] = omega.to(DType::f32);
  if (log_weight.defined()) {
    e.tensors["log_weight"] = log_weight.to(DType::f32);
    e.settings["log_weight"] = true;
  }
  return e;
}

ExactWindowSpec RandomFeatureAttention::exact_window() const {
  return {config_.exact_window, shape_.window, config_.eps, config_.chunk_size};
}

std::string RandomFeatureAttention::describe() const {
  if (config_.exact_window == 0) return kind();
  if (window_only())
    return str(kind(), " with an exact window of ", config_.exact_window,
               " keys and no far field (window only: sliding-window attention with the kind's exact kernel)");
  return str(kind(), " with an exact window of ", config_.exact_window, " keys (exact weights near, random features far",
             window_balance_ ? ", a learned balance per head)" : ")");
}

void RandomFeatureAttention::set_exact_window(int window) {
  DARK_CHECK(window >= 0, "attention: exact_window must be >= 0, got ", window);
  DARK_CHECK(window == 0 || config_.mode == Mode::linear, "attention: exact_window needs mode linear");
  DARK_CHECK(window > 0 || config_.far_field == FarField::features,
             "attention: exact_window 0 with far_field none leaves no key; set far_field features first");
  config_.exact_window = window;
}

void RandomFeatureAttention::set_far_field(FarField far_field) {
  DARK_CHECK(far_field == FarField::features || config_.exact_window > 0, "attention layer ", shape_.layer,
             ": far_field none needs an exact window (attention.exact_window > 0)");
  config_.far_field = far_field;
}

void RandomFeatureAttention::set_feature_epoch(std::int64_t epoch) {
  DARK_CHECK(epoch >= 0, "attention: feature epoch must be >= 0, got ", epoch);
  epoch_ = epoch;
}

bool RandomFeatureAttention::needs_proposal() const {
  return config_.proposal == Proposal::variance_optimal && config_.mode == Mode::linear;
}

bool RandomFeatureAttention::needs_calibration() const { return needs_proposal(); }

void RandomFeatureAttention::begin_calibration() { moments_.emplace(shape_.n_kv_heads, shape_.head_dim); }

void RandomFeatureAttention::end_calibration() {
  DARK_CHECK(moments_ && !moments_->empty(), "attention layer ", shape_.layer,
             ": calibration saw no queries or keys (run forward passes between begin and end)");
  calibrated(*moments_);
  if (needs_proposal()) {
    proposals_.clear();
    for (std::int64_t h = 0; h < shape_.n_kv_heads; ++h) {
      // The proposal lives in the transformed space: Lambda_a = M Lambda M^T.
      const std::vector<double> lambda = congruence(transform_matrix(h), moments_->moment(h), rank_, shape_.head_dim);
      proposals_.push_back(variance_optimal_proposal(lambda, rank_, str("attention layer ", shape_.layer, " kv head ", h)));
    }
    drawn_.omega = Tensor();
  }
  moments_.reset();
}

std::vector<double> RandomFeatureAttention::transform_matrix(std::int64_t) const {
  const std::int64_t d = shape_.head_dim;
  std::vector<double> identity(d * d, 0.0);
  for (std::int64_t i = 0; i < d; ++i) identity[i * d + i] = 1.0;
  return identity;
}

std::map<std::string, Tensor> RandomFeatureAttention::extra_state() const {
  if (proposals_.empty()) return {};
  std::vector<double> roots, log_dets;
  for (const ImportanceProposal& p : proposals_) {
    roots.insert(roots.end(), p.sqrt_cov.begin(), p.sqrt_cov.end());
    log_dets.push_back(p.log_det);
  }
  return {{"proposal_sqrt_cov", Tensor::from_vector(roots, {shape_.n_kv_heads, rank_, rank_})},
          {"proposal_log_det", Tensor::from_vector(log_dets, {shape_.n_kv_heads})}};
}

void RandomFeatureAttention::load_extra_state(const std::map<std::string, Tensor>& saved) {
  if (saved.empty() && !needs_proposal()) return;
  DARK_CHECK(needs_proposal(), "attention layer ", shape_.layer,
             ": the checkpoint holds a variance-optimal proposal but this layer uses proposal isotropic");
  const auto roots = saved.find("proposal_sqrt_cov");
  const auto log_dets = saved.find("proposal_log_det");
  DARK_CHECK(roots != saved.end() && log_dets != saved.end(), "attention layer ", shape_.layer,
             ": the checkpoint has no variance-optimal proposal (proposal_sqrt_cov, proposal_log_det)");
  DARK_CHECK(roots->second.shape() == Shape({shape_.n_kv_heads, rank_, rank_}) &&
                 log_dets->second.shape() == Shape({shape_.n_kv_heads}),
             "attention layer ", shape_.layer, ": saved proposal has shapes ", roots->second.describe(), ", ",
             log_dets->second.describe(), "; expected (", shape_.n_kv_heads, ", ", rank_, ", ", rank_, ") and (",
             shape_.n_kv_heads, ")");
  const std::vector<double> r = roots->second.to(DType::f64).contiguous().to_vector<double>();
  const std::vector<double> l = log_dets->second.to(DType::f64).contiguous().to_vector<double>();
  proposals_.clear();
  for (std::int64_t h = 0; h < shape_.n_kv_heads; ++h)
    proposals_.push_back({rank_, std::vector<double>(r.begin() + h * rank_ * rank_, r.begin() + (h + 1) * rank_ * rank_), l[h]});
  drawn_.omega = Tensor();
}

}  // namespace dark::attention
