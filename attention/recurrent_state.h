// O(1)-per-token decoding for the random-feature kinds: the running state
// S = sum_j exp(k_j - o) [v_j, 1]^T (m x (Dv + 1) per key/value head) held at the running key
// offset o = max over seen keys and features of the key logits, rescaled by exp(o - o_new)
// <= 1 when o grows. Each new query reads out = num / (den + eps) from Phi_q S with
// Phi_q = exp(q - max_f q): the same formula, offsets and eps units as the chunked
// linear_attention op (autograd/ops.h), so decoding equals the training path.
#pragma once
#include "nn/attention_kernel.h"

namespace dark::attention {

struct RecurrentState final : nn::DecodeState {
  Tensor state;   // (B, Hkv, m, Dv + 1), float32 or float64
  Tensor offset;  // (B, Hkv, 1, 1)
};

// q_logits (B, T, Hq, m), k_logits (B, T, Hkv, m), v (B, T, Hkv, Dv) for T new positions ->
// (B, T, Hq, Dv) in v's dtype. bfloat16 inputs accumulate in float32.
Tensor linear_attention_decode(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v, double eps,
                               std::unique_ptr<nn::DecodeState>& state);

// Sliding-window layers (Gemma 3's local layers with a random-feature kind): a key that
// leaves the window must leave the state, which a running sum cannot do exactly, so the
// state is the window itself, the last `window` key logits and values, and each call runs
// the windowed op (linear_attention with window) over cache + new positions: the same
// formula and offsets as the training path, O(window m Dv) per new token.
struct WindowedFeatureCache final : nn::DecodeState {
  Tensor keys;    // (B, L, Hkv, m) key logits, L <= window
  Tensor values;  // (B, L, Hkv, Dv)
};

Tensor windowed_linear_attention_decode(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v, double eps,
                                        std::int64_t window, std::int64_t chunk,
                                        std::unique_ptr<nn::DecodeState>& state);

}  // namespace dark::attention
