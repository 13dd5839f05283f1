// Exact causal softmax attention (see softmax_attention.h).
#include "attention/softmax_attention.h"

#include <cmath>

#include "attention/attention_stats.h"
#include "attention/kv_cache.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"

namespace dark::attention {

double SoftmaxAttention::scale() const { return 1.0 / std::sqrt(static_cast<double>(shape_.head_dim)); }

Tensor SoftmaxAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask) {
  if (stats_due()) {  // on q~ = d^(-1/4) q, as the random-feature kinds see it: comparable across kinds
    NoGradGuard no_grad;
    const double s = std::pow(static_cast<double>(shape_.head_dim), -0.25);
    store_stats(measure_attention_stats(mul_scalar(q, s), mul_scalar(k, s), Tensor()));
  }
  return flash_attention(q, k, v, /*causal=*/true, scale(), key_mask, shape_.window);
}

Tensor SoftmaxAttention::decode(const Tensor& q, const Tensor& k, const Tensor& v,
                                std::unique_ptr<nn::DecodeState>& state) {
  return attend_with_cache(q, k, v, scale(), state, shape_.window);
}

}  // namespace dark::attention
