// Attention statistics of one forward pass (see attention_stats.h).
#include "attention/attention_stats.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "attention/random_feature_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::attention {

double percentile(std::vector<double> values, double p) {
  // NaN would break the sort's ordering (a poisoned or diverging step); it has no rank anyway.
  std::erase_if(values, [](double v) { return std::isnan(v); });
  if (values.empty()) return std::numeric_limits<double>::quiet_NaN();
  std::sort(values.begin(), values.end());
  const double rank = std::clamp(p, 0.0, 100.0) / 100.0 * static_cast<double>(values.size() - 1);
  const std::size_t lo = static_cast<std::size_t>(std::floor(rank));
  const std::size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

namespace {
std::vector<double> host_values(const Tensor& t) { return t.to(DType::f64).to(Device::cpu()).contiguous().to_vector<double>(); }

// The standard deviation over the last axis of the logits of x (B, T, H, r) under omega: (B, T, H).
Tensor logit_sd(const Tensor& x, const Tensor& omega) {
  const Tensor logits = per_head_project(x, omega.to(x.dtype()), omega.size(0)).to(DType::f64);
  return sqrt(mean(square(sub(logits, mean(logits, {3}, true))), {3}));
}
}  // namespace

nn::AttentionStats measure_attention_stats(const Tensor& q_scaled, const Tensor& k_scaled, const Tensor& omega) {
  NoGradGuard no_grad;
  const Tensor q = q_scaled.detach(), k = k_scaled.detach();
  DARK_CHECK(q.dim() == 4 && k.dim() == 4 && q.size(2) % k.size(2) == 0 && q.size(3) == k.size(3),
             "measure_attention_stats: expected q~ (B, T, H, r) and k~ (B, T, Hkv, r), got ", q.describe(), ", ",
             k.describe());
  const std::int64_t B = q.size(0), T = q.size(1), H = q.size(2), Hkv = k.size(2), group = H / Hkv;
  const Tensor q_sq = sum(square(q.to(DType::f64)), {3});  // (B, T, H)
  const Tensor k_sq = sum(square(k.to(DType::f64)), {3});  // (B, T, Hkv) -> each query head's kv head
  const Tensor k_per_query = reshape(expand(reshape(k_sq, {B, T, Hkv, 1}), {B, T, Hkv, group}), {B, T, H});
  nn::AttentionStats s;
  const std::vector<double> sq = host_values(add(q_sq, k_per_query));
  s.sq_norm_p50 = percentile(sq, 50);
  s.sq_norm_p99 = percentile(sq, 99);
  if (!omega.defined()) {
    s.logit_sd_p50 = s.logit_sd_p99 = std::numeric_limits<double>::quiet_NaN();
    return s;
  }
  std::vector<double> sd = host_values(logit_sd(q, omega));
  const std::vector<double> sd_k = host_values(logit_sd(k, omega));
  sd.insert(sd.end(), sd_k.begin(), sd_k.end());
  s.logit_sd_p50 = percentile(sd, 50);
  s.logit_sd_p99 = percentile(sd, 99);
  return s;
}

}  // namespace dark::attention
