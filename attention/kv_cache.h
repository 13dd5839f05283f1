// The decoding state of exact attention (softmax, and the exact mode of the random-feature
// kinds): every key and value seen so far (the last `window` of them for sliding-window
// attention), attended with the flash op's cached-prefix mask.
#pragma once
#include "nn/attention_kernel.h"

namespace dark::attention {

struct KeyValueCache final : nn::DecodeState {
  Tensor keys, values;  // (B, S, Hkv, D)
};

// Appends k, v (B, T, Hkv, D) to the cache in `state` (created when null) and returns the
// causal attention of q (B, T, Hq, D) over all cached positions. window > 0 (sliding-window
// attention): each query sees only the window positions ending at its own, and the cache
// then keeps only the last window positions (all a later query can see); 0 = no window.
Tensor attend_with_cache(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                         std::unique_ptr<nn::DecodeState>& state, std::int64_t window = 0);

}  // namespace dark::attention
