// The exact window of the random-feature kinds (docs/method.md, "The exact window"): for
// query t, the keys j with t - W < j <= t get the exact weight of the kernel the kind
// estimates, exp(q~_t . k~_j) on the transformed queries and keys (softmax for Performer and
// LFK, DARKFormer's exact learned kernel), and the keys j <= t - W its random-feature
// weight phi(q~_t) . phi(k~_j), both in one numerator and one denominator:
//   out_t = (sum_near w_tj v_j + sum_far w_tj v_j) / (sum_near w_tj + sum_far w_tj + eps_far).
// Built from two attention states that merge exactly (autograd/ops.h, merge_attention): the
// flash op over the window (its logsumexp), and the kind's linear-attention op over the far
// keys, run on the sequence shifted by W (query t against the keys j <= t - W is causal
// attention of query t at position t - W), with its log normaliser. Each part keeps its own
// offsets (flash its row max, the features theirs: the far keys' running max, as the kind
// has today); the merge weighs the parts by their unscaled normalisers, so neither overflows
// and the sum is the kernel's. eps belongs to the far part's denominator (in its offset units,
// as without a window): a query with no far key (t < W) gets exact softmax over its window.
// Cost: the kind's on T - W positions plus flash attention over a window of W: O(T (W + m) d).
// On global layers the two parts and the merge are one tape entry that saves only the merged
// output (random_feature_attention_exact_window, autograd/ops.h); sliding-window layers
// compose the differentiable ops.
//
// Sliding-window layers (Gemma 3's local layers, window w): the near part is the nearest
// min(W, w) keys, the far part the keys t - w < j <= t - W (none when w <= W).
#pragma once
#include <cstdint>
#include <functional>

#include "autograd/ops.h"
#include "nn/attention_kernel.h"

namespace dark::attention {

// The far part's feature logits of transformed rows (B, T, H, r) -> (B, T, H, m), for the
// windowed op of sliding-window layers (which takes logits, not x and omega).
using FeatureLogitsFn = std::function<Tensor(const Tensor&)>;

struct ExactWindowSpec {
  std::int64_t window = 0;        // W >= 1
  std::int64_t layer_window = 0;  // the layer's sliding window, 0 = global
  double eps = 1e-6;
  std::int64_t chunk = 64;

  std::int64_t near() const { return layer_window > 0 ? std::min(window, layer_window) : window; }
  // Whether some query of a length-len sequence has a far key.
  bool has_far(std::int64_t len) const { return len > window && (layer_window == 0 || layer_window > window); }
  // The far part's window on the shifted sequence: 0 = none (global layers).
  std::int64_t far_window() const { return layer_window > 0 ? layer_window - window : 0; }
};

// xq (B, T, Hq, r), xk (B, T, Hkv, r): transformed queries and keys; v (B, T, Hkv, Dv) with
// r <= Dv; omega (Hkv, m, r) and log_weight (undefined or (Hkv, m)) the kind's features.
// key_mask as for the attention ops. -> (B, T, Hq, Dv). Differentiable in xq, xk, v, omega.
// far_bias: undefined, or (Hq) added to the far part's log normaliser before the merge (the far
// keys' weights times exp(far_bias[h]): attention.window_balance); differentiable in it too.
Tensor exact_window_attention(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& omega,
                              const Tensor& log_weight, const Tensor& key_mask, const ExactWindowSpec& spec,
                              const FeatureLogitsFn& logits, const Tensor& far_bias = Tensor());

// Decoding with the exact window: the state keeps the last max(W, w) transformed keys, key
// logits and values (w = the layer's window, 0 for global layers) and, on global layers, the
// running feature state of the keys that left the window (attention/recurrent_state.h): O(W
// (r + m + Dv) + m Dv) per key/value head, whatever the length. Each new position is one query
// against both parts, merged as in the forward, with the same offsets; a prompt (T > 1 into
// an empty state) on a global layer runs the forward's ops over all of it instead and takes
// the state from it (the same state, to rounding).
struct ExactWindowState final : nn::DecodeState {
  Tensor keys, key_logits, values;  // (B, S, Hkv, r / m / Dv), S <= max(W, w) + 1
  std::unique_ptr<nn::DecodeState> far;  // global layers: the recurrent feature state
};

// Window only (attention.far_field none): the near part alone, the far keys with no weight:
// sliding-window attention over each query's spec.near() nearest keys with the kind's exact
// kernel exp(q~ . k~) (the flash op with scale 1 on the transformed queries and keys, as the
// near part of exact_window_attention computes it). Arguments as there; differentiable in
// xq, xk and v. window_only_decode is its decoding: a key/value cache of the last near()
// transformed keys and values (attention/kv_cache.h).
Tensor window_only_attention(const Tensor& xq, const Tensor& xk, const Tensor& v, const Tensor& key_mask,
                             const ExactWindowSpec& spec);
Tensor window_only_decode(const Tensor& xq, const Tensor& xk, const Tensor& v, const ExactWindowSpec& spec,
                          std::unique_ptr<nn::DecodeState>& state);

// xq, lq (B, T, Hq, r / m) and xk, lk, v (B, T, Hkv, r / m / Dv) for T new positions.
Tensor exact_window_decode(const Tensor& xq, const Tensor& xk, const Tensor& q_logits, const Tensor& k_logits,
                           const Tensor& v, const ExactWindowSpec& spec, std::unique_ptr<nn::DecodeState>& state,
                           const Tensor& far_bias = Tensor());

}  // namespace dark::attention
