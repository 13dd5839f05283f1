// Exact causal softmax attention (see softmax_attention.h).
#include "attention/softmax_attention.h"

#include <cmath>

#include "autograd/ops.h"

namespace dark::attention {

Tensor SoftmaxAttention::forward(const Tensor& q, const Tensor& k, const Tensor& v) {
  return flash_attention(q, k, v, /*causal=*/true, 1.0 / std::sqrt(static_cast<double>(shape_.head_dim)));
}

}  // namespace dark::attention
