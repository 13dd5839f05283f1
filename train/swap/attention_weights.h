// The attention-weight term of attention transfer (finetune.transfer.attention_weight): how
// far the swapped kernel's attention weights are from the source's, on a sample of query rows.
// LoLCATs adds a cross-entropy on the attention weights to its output loss and Hedgehog
// distils the weights alone; an output loss alone can be won by going silent (a layer whose
// features' sum falls under the eps guard outputs zero and scores 1), which the weights
// cannot: a silent row puts its mass nowhere, and its divergence grows without bound.
//
// For query row i with keys j (causal, and within the layer's sliding window on a local
// layer), P_ij is the source's exact softmax weight and Q_ij = w_ij / Z_i the swapped
// kernel's, with
//   w_ij = exp(q~_i . k~_j)        for the exact window's near keys, i - W < j <= i,
//   w_ij = phi(q~_i) . phi(k~_j)   for the far keys (every key without a window),
//   Z_i  = sum_j w_ij + eps exp(qoff_i + o_i),
// the normaliser and eps guard of the kernel's own output (docs/method.md, "The exact
// window": qoff_i the query's largest feature logit, o_i the largest far-key logit so far), so
// that the output the kernel computes is exactly sum_j Q_ij v_j. (A window-only layer,
// attention.far_field none, weighs its window's keys alone: P is then the source's weights
// renormalised over them.) The term is KL(P || Q) =
// sum_j P_ij (log P_ij - log Q_ij), averaged over the sampled rows, the batch and the query
// heads, in nats; 0 when the kernel's weights are the source's.
//
// Everything is computed in the inputs' dtype, in log space: the far weights as
// qoff_i + o_j + log(exp(l_q,i - qoff_i) . exp(l_k,j - o_j)) with per-key offsets o_j (each
// factor <= 1, the products floored far below any weight that matters), so no weight of a
// pretrained model's heavy-tailed features overflows or underflows to an infinite divergence.
// (float64 would cost more than the model: the CPU's float64 products are plain loops.)
// Cost per sampled row: O(T (m + r)) per head; (B, Hq, R, T) tensors; no key is repeated for
// the query heads that share it.
#pragma once
#include <cstdint>
#include <vector>

#include "attention/random_feature_attention.h"

namespace dark::train {

// q (B, T, Hq, D), k (B, T, Hkv, D): the swapped kernel's inputs (after RoPE); q_source,
// k_source the source's at the same layer; rows: the sampled query positions (each in
// [0, T)). Differentiable in q, k and the kernel's parameters (through its transform and
// features at their current epoch). -> a one-element tensor of q's dtype.
Tensor attention_weight_divergence(attention::RandomFeatureAttention& kernel, const Tensor& q, const Tensor& k,
                                   const Tensor& q_source, const Tensor& k_source, const std::vector<std::int64_t>& rows);

}  // namespace dark::train
