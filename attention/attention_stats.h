// Measures nn::AttentionStats (what drives a random-feature estimator's variance) on one
// forward pass's scaled, transformed queries and keys: the per-position s = |q~|^2 + |k~|^2 and,
// with feature matrices, the spread of the feature logits. The per-position values come to
// the host once (B T H numbers per layer) for the percentiles; the trainer asks for this only
// on its log steps.
#pragma once
#include <vector>

#include "core/tensor.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

// q~ (B, T, H, r), k~ (B, T, Hkv, r) with H a multiple of Hkv; omega (Hkv, m, r) or undefined
// (softmax: the logit spread is then NaN). Nothing is recorded on the tape.
nn::AttentionStats measure_attention_stats(const Tensor& q_scaled, const Tensor& k_scaled, const Tensor& omega);

// The p-th percentile (0 <= p <= 100) of the values, linearly interpolated between order
// statistics (numpy's default); NaN values are left out; NaN for none.
double percentile(std::vector<double> values, double p);

}  // namespace dark::attention
