// The decoding state of exact attention (softmax, and the exact mode of the random-feature
// kinds): every key and value seen so far, attended with the flash op's cached-prefix mask.
#pragma once
#include "nn/attention_kernel.h"

namespace dark::attention {

struct KeyValueCache final : nn::DecodeState {
  Tensor keys, values;  // (B, S, Hkv, D)
};

// Appends k, v (B, T, Hkv, D) to the cache in `state` (created when null) and returns the
// causal attention of q (B, T, Hq, D) over all cached positions.
Tensor attend_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         std::unique_ptr<nn::DecodeState>& state);

}  // namespace dark::attention
