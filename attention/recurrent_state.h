// O(1)-per-token decoding for the random-feature kinds: the running state
// S = sum_j exp(k_j - o) [v_j, 1]^T (m x (Dv + 1) per key/value head) held at the running key
// offset o = max over seen keys and features of the key logits, rescaled by exp(o - o_new)
// <= 1 when o grows. Each new query reads out = num / (den + eps) from Phi_q S with
// Phi_q = exp(q - max_f q): the same formula, offsets and eps units as the chunked
// linear_attention op (autograd/ops.h), so decoding equals the training path.
#pragma once
#include "autograd/ops.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

struct RecurrentState final : nn::DecodeState {
  Tensor state;   // (B, Hkv, m, Dv + 1), float32 or float64
  Tensor offset;  // (B, Hkv, 1, 1)
};

// q_logits (B, T, Hq, m), k_logits (B, T, Hkv, m), v (B, T, Hkv, Dv) for T new positions ->
// (B, T, Hq, Dv) in v's dtype. bfloat16 inputs accumulate in float32. A prompt (T > 1 into
// an empty state) runs the chunked op (`chunk` positions a chunk) and folds its keys into the
// state with one product; later calls fold and read position by position.
Tensor linear_attention_decode(const Tensor& q_logits, const Tensor& k_logits, const Tensor& v, double eps,
                               std::int64_t chunk, std::unique_ptr<nn::DecodeState>& state);

// The two steps of that decoding, for callers that keep their own positions (the exact
// window's far part, attention/exact_window.h), in the inputs' dtype (f32 or f64):
// n positions' key logits (B, n, Hkv, m) and values (B, n, Hkv, Dv), in order, into the state
// (a RecurrentState, created when null), with one product whatever n ...
void fold_positions(std::unique_ptr<nn::DecodeState>& state, const Tensor& k_logits, const Tensor& v);
// ... and the state read by one position's query logits (B, 1, Hq, m): out (B, 1, Hq, Dv) and
// log_norm (B, Hq, 1) = qoff + o + log(den + eps), as linear_attention_with_norm's.
NormalizedAttention read_state(const nn::DecodeState& state, const Tensor& q_logits, double eps);

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
