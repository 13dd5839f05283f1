// The CUDA kernels of the fused model ops (argmax, RMSNorm, RoPE, SwiGLU / GeGLU / GeGLU-tanh,
// cross entropy, flash attention (also with a sliding window), linear attention (also with a
// sliding window) and the fused random-feature attention, each also with its log normaliser,
// merge_attention and the exact window) and of the optimizer, against the CPU: forward values
// and input gradients in f32 (tolerance 1e-4 relative) and bf16 (inputs rounded to bf16 on
// both sides; 5e-2 elementwise and 2e-2 in relative L2), the CPU computing in float64. Shapes
// cross tile and chunk boundaries, use odd sizes, grouped-query heads, padded head dimensions,
// key masks (right, left, holes), cached prefixes (T < S) and strided views. Runs on a GPU
// when there is one, and always in test_gpu_kernels_emulated on the CUDA emulator (with 2
// multiprocessors, so that the linear-attention kernels cut sequences into several segments
// of several chunks). The packed loops of the elementwise, copy, cast and gated-activation
// kernels are held to exact bits at every alignment of their operands.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "attention/exact_window.h"
#include "attention/random_feature_attention.h"
#include "autograd/grad_mode.h"
#include "autograd/ops.h"
#include "autograd/weights.h"
#include "core/deferred_checks.h"
#include "core/kernels.h"
#include "tests/fused_op_checks.h"
#include "tests/gpu_compare.h"
#include "test_util.h"

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
#include "cuda_emulator/wgmma.h"
#endif

namespace dark::testing {
namespace {

Tensor mask_on(const Tensor& like, Padding kind, std::int64_t batch, std::int64_t len) {
  return mask_tensor(padding_mask(kind, batch, len), batch).to(like.device());
}

// out and log_norm of one attention state as one flat tensor of out's dtype, so that a case's
// loss, sum(result * r), uses both. log_norm's -inf (rows that see no key) become 0 with no
// gradient.
Tensor out_and_log_norm(const NormalizedAttention& a) {
  const double inf = std::numeric_limits<double>::infinity();
  const Tensor none = Tensor::scalar(-inf, a.log_norm.dtype(), a.log_norm.device());
  const Tensor log_norm = masked_fill(a.log_norm, eq(a.log_norm, none), 0.0);
  return concat({reshape(a.out, {-1}), reshape(to_dtype(log_norm, a.out.dtype()), {-1})}, 0);
}

// The exact window of random-feature attention (attention/exact_window.h) on x_q, x_k, v,
// omega and a log weight (x[4], scaled here), with the far part's feature logits of a
// sliding-window layer from small ops.
Tensor exact_window_case(const std::vector<Tensor>& x, const attention::ExactWindowSpec& spec, const Tensor& mask) {
  const Tensor log_weight = mul_scalar(x[4], 0.3);
  const std::int64_t hkv = x[3].size(0), m = x[3].size(1);
  const auto logits = [&](const Tensor& y) {
    const std::int64_t group = y.size(2) / hkv;
    const Tensor shift = add_scalar(mul_scalar(sum(square(y), {3}, true), 0.5), 0.5 * std::log(static_cast<double>(m)));
    const Tensor lw = reshape(expand(reshape(log_weight, {hkv, 1, m}), {hkv, group, m}), {1, 1, y.size(2), m});
    return add(sub(attention::per_head_project(y, x[3], hkv), shift), lw);
  };
  return attention::exact_window_attention(x[0], x[1], x[2], x[3], log_weight, mask, spec, logits);
}

Tensor targets_on(const Tensor& like, std::int64_t rows, std::int64_t classes) {
  std::vector<std::int64_t> t;
  for (std::int64_t r = 0; r < rows; ++r) t.push_back(r % 5 == 3 ? -100 : (r * 7919 + 13) % classes);
  return Tensor::from_vector(t, {rows}).to(like.device());
}

std::vector<OpCase> fused_cases() {
  using S = InputSpec;
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::vector<InputSpec> inputs, std::function<Tensor(const std::vector<Tensor>&)> fn) {
    cases.push_back({std::move(name), std::move(inputs), std::move(fn)});
  };
  add("rms_norm[5,33]", {{{5, 33}}, {{33}, S::positive}}, [](auto& x) { return rms_norm(x[0], x[1], 1e-5); });
  add("rms_norm[3,7,256]", {{{3, 7, 256}}, {{256}, S::positive}}, [](auto& x) { return rms_norm(x[0], x[1], 1e-6); });
  add("rms_norm[300,20]", {{{300, 20}}, {{20}, S::positive}}, [](auto& x) { return rms_norm(x[0], x[1], 1e-5); });
  add("rope[2,9,3,16]", {{{2, 9, 3, 16}}}, [](auto& x) { return rope(x[0], 10000.0); });
  add("rope[1,5,2,64]+7", {{{1, 5, 2, 64}}}, [](auto& x) { return rope(x[0], 500000.0, 7); });
  // more pairs per position (9 x 35) than a block's 256 threads, an odd half
  add("rope[2,3,9,70]", {{{2, 3, 9, 70}}}, [](auto& x) { return rope(x[0], 10000.0); });
  // queries and keys in one launch; the second with 12 x 35 pairs per position, over 256 threads
  add("rope_pair[2,9,4,16]+[2,9,2,16]", {{{2, 9, 4, 16}}, {{2, 9, 2, 16}}}, [](auto& x) {
    const RopedPair r = rope_pair(x[0], x[1], 10000.0);
    return concat({r.q, r.k}, 2);
  });
  add("rope_pair[1,3,9,70]+[1,3,3,70]+5", {{{1, 3, 9, 70}}, {{1, 3, 3, 70}}}, [](auto& x) {
    const RopedPair r = rope_pair(x[0], x[1], 500000.0, 5);
    return concat({r.q, r.k}, 2);
  });
  add("swiglu[7,33]", {{{7, 33}}, {{7, 33}}}, [](auto& x) { return swiglu(x[0], x[1]); });
  add("geglu[4,65]", {{{4, 65}}, {{4, 65}}}, [](auto& x) { return geglu(x[0], x[1]); });
  add("geglu_tanh[4,65]", {{{4, 65}}, {{4, 65}}}, [](auto& x) { return geglu_tanh(x[0], x[1]); });
  // gate over about [-15, 15]: the tails, where 1 + tanh cancels
  add("geglu_tanh_wide[3,300]", {{{3, 300}}, {{3, 300}}},
      [](auto& x) { return geglu_tanh(mul_scalar(x[0], 4.0), x[1]); });
  add("cross_entropy[9,37]", {{{9, 37}}}, [](auto& x) { return cross_entropy(x[0], targets_on(x[0], 9, 37)); });
  add("cross_entropy[3,5000]", {{{3, 5000}}}, [](auto& x) { return cross_entropy(x[0], targets_on(x[0], 3, 5000)); });
  add("add_rms_norm[5,7,96]", {{{5, 7, 96}}, {{5, 7, 96}}, {{96}}}, [](auto& x) {
    const SumAndNorm out = add_rms_norm(x[0], x[1], x[2], 1e-5);
    return dark::add(mul_scalar(out.sum, 0.3), out.normed);
  });
  add("linear_cross_entropy[33,24,1000]/10", {{{33, 24}}, {{1000, 24}}},  // 4 chunks of rows
      [](auto& x) { return linear_cross_entropy(x[0], x[1], targets_on(x[0], 33, 1000), -100, 10); });
  // flash attention: q (B, T, Hq, D), k, v (B, S, Hkv, D)
  add("flash_causal_gqa[2,77,4/2,16]", {{{2, 77, 4, 16}}, {{2, 77, 2, 16}}, {{2, 77, 2, 16}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.25); });
  add("flash_masked[2,33/70,2,64]", {{{2, 33, 2, 64}}, {{2, 70, 2, 64}}, {{2, 70, 2, 64}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], false, 0.125, mask_on(x[0], Padding::holes, 2, 70)); });
  add("flash_prefix[1,20/90,3,40]", {{{1, 20, 3, 40}}, {{1, 90, 3, 40}}, {{1, 90, 3, 40}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / std::sqrt(40.0)); });
  add("flash_left_padding[2,50,2,32]", {{{2, 50, 2, 32}}, {{2, 50, 2, 32}}, {{2, 50, 2, 32}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.2, mask_on(x[0], Padding::left, 2, 50)); });
  add("flash_d128[1,65,2,128]", {{{1, 65, 2, 128}}, {{1, 65, 1, 128}}, {{1, 65, 1, 128}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / std::sqrt(128.0)); });
  // Several query blocks and key tiles of the sm_90 kernels (128 queries x 128 keys, 64 at d
  // 256), both warpgroups, GQA, both column passes of dK, dV at d 256; on compute capability
  // 8.0 (the .sm80 run) the mma.sync kernels take them.
  add("flash_tiles_d64[1,300,4/2,64]", {{{1, 300, 4, 64}}, {{1, 300, 2, 64}}, {{1, 300, 2, 64}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.125); });
  add("flash_tiles_d128[2,140/270,2,128]", {{{2, 140, 2, 128}}, {{2, 270, 2, 128}}, {{2, 270, 2, 128}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.09, mask_on(x[0], Padding::holes, 2, 270)); });
  add("flash_tiles_d256[1,150,2/1,256]", {{{1, 150, 2, 256}}, {{1, 150, 1, 256}}, {{1, 150, 1, 256}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / 16.0); });
  // More key tiles than the sm_90 forward's three buffers: each buffer is filled again after
  // every warp freed it, the mbarriers' phases wrapping (parities 0, 1, 0).
  add("flash_ring_d64[1,100/520,2,64]", {{{1, 100, 2, 64}}, {{1, 520, 2, 64}}, {{1, 520, 2, 64}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], false, 0.125, mask_on(x[0], Padding::holes, 1, 520)); });
  add("flash_ring_d256[1,40/330,1,256]", {{{1, 40, 1, 256}}, {{1, 330, 1, 256}}, {{1, 330, 1, 256}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / 16.0); });
  add("flash_d256[1,40,2,256]", {{{1, 40, 2, 256}}, {{1, 40, 1, 256}}, {{1, 40, 1, 256}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / 16.0); });
  // D = 20: rows are not 16-byte aligned, so the bf16 kernels load element by element
  add("flash_unaligned_d20[2,70,4/2,20]", {{{2, 70, 4, 20}}, {{2, 70, 2, 20}}, {{2, 70, 2, 20}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.22, mask_on(x[0], Padding::right, 2, 70)); });
  // a (B, H, T, D) tensor viewed as (B, T, H, D): head stride T D, sequence stride D
  add("flash_strided[2,H,T,D]", {{{2, 3, 70, 16}}, {{2, 3, 70, 16}}, {{2, 3, 70, 16}}}, [](auto& x) {
    auto view = [](const Tensor& t) { return permute(t, {0, 2, 1, 3}); };
    return flash_attention(view(x[0]), view(x[1]), view(x[2]), true, 0.25);
  });
  // sliding-window flash attention (window W: query t sees keys t + S - T - W < s <= t + S - T),
  // T and S not multiples of the tiles (64; 32 for f32 at D = 256): W = 1, 3, T - 1, >= T, and
  // windows that skip whole key tiles. With W = 1 each query sees only its own key: out = v
  // and dq = dk = 0 exactly in exact arithmetic (nothing to compare relatively), so only the
  // output and dv are compared there.
  add("flash_window1_gqa[2,150,4/2,16]",
      {{{2, 150, 4, 16}, S::normal, false, false}, {{2, 150, 2, 16}, S::normal, false, false}, {{2, 150, 2, 16}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.25, Tensor(), 1); });
  for (const std::int64_t w : {2, 3, 37, 149, 150, 400})
    add("flash_window" + std::to_string(w) + "_gqa[2,150,4/2,16]", {{{2, 150, 4, 16}}, {{2, 150, 2, 16}}, {{2, 150, 2, 16}}},
        [w](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.25, Tensor(), w); });
  for (const std::int64_t w : {3, 30, 219})
    add("flash_window" + std::to_string(w) + "_prefix[1,20/220,3,40]",
        {{{1, 20, 3, 40}}, {{1, 220, 3, 40}}, {{1, 220, 3, 40}}},
        [w](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / std::sqrt(40.0), Tensor(), w); });
  for (const Padding kind : kPaddings)
    add(std::string("flash_window40_") + (kind == Padding::left ? "left" : kind == Padding::right ? "right" : "holes") +
            "[2,130,2,32]",
        {{{2, 130, 2, 32}}, {{2, 130, 2, 32}}, {{2, 130, 2, 32}}},
        [kind](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.2, mask_on(x[0], kind, 2, 130), 40); });
  add("flash_window45_d256[1,100,2/1,256]", {{{1, 100, 2, 256}}, {{1, 100, 1, 256}}, {{1, 100, 1, 256}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 1.0 / 16.0, Tensor(), 45); });
  add("flash_window5_decode[2,1/90,4/2,64]", {{{2, 1, 4, 64}}, {{2, 90, 2, 64}}, {{2, 90, 2, 64}}},
      [](auto& x) { return flash_attention(x[0], x[1], x[2], true, 0.125, Tensor(), 5); });
  // linear attention on feature logits: q (B, T, Hq, m), k (B, T, Hkv, m), v (B, T, Hkv, Dv)
  add("linear_causal_gqa[2,150,4/2,16,8]", {{{2, 150, 4, 16}}, {{2, 150, 2, 16}}, {{2, 150, 2, 8}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 16); });
  add("linear_bidirectional_holes[2,70,2,8,6]", {{{2, 70, 2, 8}}, {{2, 70, 2, 8}}, {{2, 70, 2, 6}}}, [](auto& x) {
    return linear_attention(x[0], x[1], x[2], false, 1e-6, 8, mask_on(x[0], Padding::holes, 2, 70));
  });
  add("linear_left_padding[2,90,2/1,12,5]", {{{2, 90, 2, 12}}, {{2, 90, 1, 12}}, {{2, 90, 1, 5}}}, [](auto& x) {
    return linear_attention(x[0], x[1], x[2], true, 1e-6, 16, mask_on(x[0], Padding::left, 2, 90));
  });
  add("linear_long[1,400,1,8,4]", {{{1, 400, 1, 8}}, {{1, 400, 1, 8}}, {{1, 400, 1, 4}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 64); });
  // sliding-window linear attention (window W: query t sees the keys t - W < j <= t), T not a
  // multiple of the chunk: W = 1, W < chunk, windows whose middle spans several chunks, key
  // masks (left padding leaves queries that see no key), chunk 8, and W >= T (the causal
  // kernel runs). With W = 1 each query sees only its own key: out = v a / (a + eps), whose
  // dq and dk are eps-sized (nothing to compare relatively), so only the output and dv are
  // compared there.
  add("linear_window1_gqa[2,150,4/2,16,8]",
      {{{2, 150, 4, 16}, S::normal, false, false}, {{2, 150, 2, 16}, S::normal, false, false}, {{2, 150, 2, 8}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 16, Tensor(), 1); });
  for (const std::int64_t w : {5, 37, 64, 150, 400})
    add("linear_window" + std::to_string(w) + "_gqa[2,150,4/2,16,8]",
        {{{2, 150, 4, 16}}, {{2, 150, 2, 16}}, {{2, 150, 2, 8}}},
        [w](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 16, Tensor(), w); });
  for (const Padding kind : kPaddings)
    add(std::string("linear_window40_") +
            (kind == Padding::left ? "left" : kind == Padding::right ? "right" : "holes") + "[2,130,2,12,6]",
        {{{2, 130, 2, 12}}, {{2, 130, 2, 12}}, {{2, 130, 2, 6}}}, [kind](auto& x) {
          return linear_attention(x[0], x[1], x[2], true, 1e-6, 16, mask_on(x[0], kind, 2, 130), 40);
        });
  add("linear_window100_chunk8[1,203,3/1,8,5]", {{{1, 203, 3, 8}}, {{1, 203, 1, 8}}, {{1, 203, 1, 5}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 8, Tensor(), 100); });
  // the benchmark's sizes, whole 64-row chunks: two or three middle chunks per query chunk
  add("linear_window200_wide[1,260,2,64,64]", {{{1, 260, 2, 64}}, {{1, 260, 2, 64}}, {{1, 260, 2, 64}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 64, Tensor(), 200); });
  // random-feature attention with in-kernel logits: x_q (B, T, Hq, r), x_k (B, T, Hkv, r),
  // v (B, T, Hkv, Dv), omega (Hkv, m, r), log_weight (Hkv, m)
  add("rfa_causal_gqa[2,130,4/2,r8,m16,6]",
      {{{2, 130, 4, 8}}, {{2, 130, 2, 8}}, {{2, 130, 2, 6}}, {{2, 16, 8}}},
      [](auto& x) { return random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 16); });
  add("rfa_weighted_right[1,70,2,r6,m12,4]",
      {{{1, 70, 2, 6}}, {{1, 70, 2, 6}}, {{1, 70, 2, 4}}, {{2, 12, 6}}, {{2, 12}, S::normal, false, false}},
      [](auto& x) {
        return random_feature_attention(x[0], x[1], x[2], x[3], mul_scalar(x[4], 0.3), true, 1e-6, 8,
                                        mask_on(x[0], Padding::right, 1, 70));
      });
  add("rfa_bidirectional[2,40,2,r5,m8,3]", {{{2, 40, 2, 5}}, {{2, 40, 2, 5}}, {{2, 40, 2, 3}}, {{2, 8, 5}}},
      [](auto& x) { return random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), false, 1e-6, 8); });
  // Attention states that merge (the exact window): out and log_norm of one call, compared
  // together and both in the loss (out_and_log_norm), and merge_attention of a flash and a
  // linear state. Left padding leaves rows that see no key (log_norm -inf).
  add("flash_with_lse_left_padding[2,70,4/2,32]", {{{2, 70, 4, 32}}, {{2, 70, 2, 32}}, {{2, 70, 2, 32}}},
      [](auto& x) {
        return out_and_log_norm(
            flash_attention_with_lse(x[0], x[1], x[2], true, 0.2, mask_on(x[0], Padding::left, 2, 70)));
      });
  add("flash_with_lse_window40_holes[1,130,2,32]", {{{1, 130, 2, 32}}, {{1, 130, 2, 32}}, {{1, 130, 2, 32}}},
      [](auto& x) {
        return out_and_log_norm(
            flash_attention_with_lse(x[0], x[1], x[2], true, 0.2, mask_on(x[0], Padding::holes, 1, 130), 40));
      });
  add("linear_with_norm_causal_gqa[2,150,4/2,16,8]", {{{2, 150, 4, 16}}, {{2, 150, 2, 16}}, {{2, 150, 2, 8}}},
      [](auto& x) { return out_and_log_norm(linear_attention_with_norm(x[0], x[1], x[2], true, 1e-6, 16)); });
  add("linear_with_norm_left_padding[2,90,2/1,12,5]", {{{2, 90, 2, 12}}, {{2, 90, 1, 12}}, {{2, 90, 1, 5}}},
      [](auto& x) {
        return out_and_log_norm(
            linear_attention_with_norm(x[0], x[1], x[2], true, 1e-6, 16, mask_on(x[0], Padding::left, 2, 90)));
      });
  add("linear_with_norm_bidirectional_holes[2,70,2,8,6]", {{{2, 70, 2, 8}}, {{2, 70, 2, 8}}, {{2, 70, 2, 6}}},
      [](auto& x) {
        return out_and_log_norm(
            linear_attention_with_norm(x[0], x[1], x[2], false, 1e-6, 8, mask_on(x[0], Padding::holes, 2, 70)));
      });
  add("linear_with_norm_window40_left[2,130,2,12,6]", {{{2, 130, 2, 12}}, {{2, 130, 2, 12}}, {{2, 130, 2, 6}}},
      [](auto& x) {
        return out_and_log_norm(
            linear_attention_with_norm(x[0], x[1], x[2], true, 1e-6, 16, mask_on(x[0], Padding::left, 2, 130), 40));
      });
  add("rfa_with_norm_causal_gqa[2,130,4/2,r8,m16,6]",
      {{{2, 130, 4, 8}}, {{2, 130, 2, 8}}, {{2, 130, 2, 6}}, {{2, 16, 8}}}, [](auto& x) {
        return out_and_log_norm(random_feature_attention_with_norm(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 16));
      });
  add("rfa_with_norm_weighted_right[1,70,2,r6,m12,4]",
      {{{1, 70, 2, 6}}, {{1, 70, 2, 6}}, {{1, 70, 2, 4}}, {{2, 12, 6}}, {{2, 12}, S::normal, false, false}},
      [](auto& x) {
        return out_and_log_norm(random_feature_attention_with_norm(x[0], x[1], x[2], x[3], mul_scalar(x[4], 0.3), true,
                                                                   1e-6, 8, mask_on(x[0], Padding::right, 1, 70)));
      });
  // q, k for the flash state (window 20, left padding: its first rows see no key), feature
  // logits for the linear state over every key, one v for both
  add("merge_flash_window20_linear[2,90,4/2,16]",
      {{{2, 90, 4, 16}}, {{2, 90, 2, 16}}, {{2, 90, 2, 16}}, {{2, 90, 4, 12}}, {{2, 90, 2, 12}}}, [](auto& x) {
        const NormalizedAttention exact =
            flash_attention_with_lse(x[0], x[1], x[2], true, 0.25, mask_on(x[0], Padding::left, 2, 90), 20);
        return merge_attention(exact, linear_attention_with_norm(x[3], x[4], x[2], true, 1e-6, 16));
      });
  // the exact window (W = 20) of a global layer (its far part: random_feature_attention) and
  // of a sliding-window layer (w = 60: the windowed linear attention), x at the scale of the
  // transformed rows
  const S xq{{2, 100, 4, 8}, S::normal, false, true, 0.6}, xk{{2, 100, 2, 8}, S::normal, false, true, 0.6};
  const S omega{{2, 16, 8}, S::normal, false, true, 0.8}, log_weight{{2, 16}, S::normal, false, false};
  add("exact_window20_holes[2,100,4/2,r8,m16,12]", {xq, xk, {{2, 100, 2, 12}}, omega, log_weight}, [](auto& x) {
    return exact_window_case(x, {20, 0, 1e-6, 16}, mask_on(x[0], Padding::holes, 2, 100));
  });
  add("exact_window20_layer60[2,100,4/2,r8,m16,12]", {xq, xk, {{2, 100, 2, 12}}, omega, log_weight},
      [](auto& x) { return exact_window_case(x, {20, 60, 1e-6, 16}, Tensor()); });
  return cases;
}

// Random-feature attention at the benchmark's sizes (64 features, r = Dv = 64, whole 64-row
// chunks; bf16 products on the tensor cores). Its input gradients are long sums that cancel:
// even in f32 single elements are off by 1e-3 relative while the whole is off by 1e-6, so
// these cases are held to the relative L2 error, and elementwise to a fraction of the largest.
std::vector<OpCase> long_sum_cases() {
  using S = InputSpec;
  std::vector<OpCase> cases;
  auto add = [&](std::string name, std::vector<InputSpec> inputs, std::function<Tensor(const std::vector<Tensor>&)> fn) {
    cases.push_back({std::move(name), std::move(inputs), std::move(fn)});
  };
  // x drawn at the scale of the performer layers' d^(-1/4), before rounding (scaling in the
  // graph would round differently on the two sides, which dx and domega amplify)
  const S xw{{1, 300, 4, 64}, S::normal, false, true, 0.35}, kw{{1, 300, 2, 64}, S::normal, false, true, 0.35};
  add("rfa_wide_causal_gqa[1,300,4/2,r64,m64,64]", {xw, kw, {{1, 300, 2, 64}}, {{2, 64, 64}}}, [](auto& x) {
    return random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 64);
  });
  const S xh{{2, 150, 2, 32}, S::normal, false, true, 0.42};
  add("rfa_wide_holes[2,150,2,r32,m64,48]",
      {xh, xh, {{2, 150, 2, 48}}, {{2, 64, 32}}, {{2, 64}, S::normal, false, false, 0.3}}, [](auto& x) {
        return random_feature_attention(x[0], x[1], x[2], x[3], x[4], true, 1e-6, 64,
                                        mask_on(x[0], Padding::holes, 2, 150));
      });
  const S xb{{1, 200, 2, 64}, S::normal, false, true, 0.35};
  add("rfa_wide_bidirectional[1,200,2,r64,m80,64]", {xb, xb, {{1, 200, 2, 64}}, {{2, 80, 64}}}, [](auto& x) {
    return random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), false, 1e-6, 64);
  });
  add("linear_wide[1,260,2,64,64]", {{{1, 260, 2, 64}}, {{1, 260, 2, 64}}, {{1, 260, 2, 64}}},
      [](auto& x) { return linear_attention(x[0], x[1], x[2], true, 1e-6, 64); });
  return cases;
}

class GpuLongSums : public ::testing::TestWithParam<std::tuple<OpCase, DType>> {};

TEST_P(GpuLongSums, MatchCpuFloat64) {
  DARK_REQUIRE_GPU();
  const auto& [c, dtype] = GetParam();
  expect_case_matches_cpu(c, dtype,
                          dtype == DType::f32 ? Tolerance{1e-4, 1e-5, 1e-5, 1e-4} : Tolerance{5e-2, 5e-2, 1e-2, 2e-2});
}

INSTANTIATE_TEST_SUITE_P(WideRandomFeatures, GpuLongSums,
                         ::testing::Combine(::testing::ValuesIn(long_sum_cases()),
                                            ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param), std::get<1>(info.param), info.index);
                         });

class GpuKernels : public ::testing::TestWithParam<std::tuple<OpCase, DType>> {};

TEST_P(GpuKernels, MatchCpuFloat64) {
  DARK_REQUIRE_GPU();
  const auto& [c, dtype] = GetParam();
  expect_case_matches_cpu(c, dtype, dtype == DType::f32 ? Tolerance{1e-4, 1e-5} : Tolerance{5e-2, 5e-2, 2e-2});
}

INSTANTIATE_TEST_SUITE_P(FusedOps, GpuKernels,
                         ::testing::Combine(::testing::ValuesIn(fused_cases()), ::testing::Values(DType::f32, DType::bf16)),
                         [](const auto& info) {
                           return case_name(std::get<0>(info.param), std::get<1>(info.param), info.index);
                         });

// argmax is exact: the same index as the CPU, NaN and ties included.
TEST(GpuArgmax, EqualsTheCpuIncludingNanAndTies) {
  DARK_REQUIRE_GPU();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  std::vector<double> v;
  const std::int64_t n = 700;
  for (int r = 0; r < 6; ++r)
    for (std::int64_t j = 0; j < n; ++j) v.push_back(std::sin(0.37 * static_cast<double>(j * (r + 1))));
  v[0 * n + 0] = nan;                      // NaN first: index 0
  v[1 * n + 5] = nan;                      // NaN later: never chosen
  v[2 * n + 100] = 5, v[2 * n + 600] = 5;  // a tie: the first
  for (std::int64_t j = 0; j < n; ++j) v[3 * n + j] = -1;  // all equal: 0
  v[4 * n + n - 1] = 9;                    // the last element
  for (DType dtype : {DType::f32, DType::f64, DType::bf16}) {
    const Tensor x = Tensor::from_vector(v, {6, n}).to(dtype);
    EXPECT_EQ(argmax(x.to(Device::cuda(0))).to_vector<std::int64_t>(), argmax(x).to_vector<std::int64_t>())
        << dtype_name(dtype);
  }
}

TEST(GpuCrossEntropy, AnOutOfRangeTargetIsTheCpuError) {
  DARK_REQUIRE_GPU();
  const Tensor logits = Tensor::randn({4, 6}, 1);
  const Tensor targets = Tensor::from_vector<std::int64_t>({1, -100, 6, 2}, {4});
  const std::string want = error_of([&] { cross_entropy(logits, targets); });
  EXPECT_NE(want, "");
  EXPECT_EQ(error_of([&] { cross_entropy(logits.to(Device::cuda(0)), targets.to(Device::cuda(0))); }), want);
}

// Inside a DeferredChecks scope a bad index reads nothing back and touches nothing out of
// bounds; the scope's verdicts, read back later, give the CPU's message for the first one.
TEST(GpuDeferredChecks, ABadIndexIsReportedWhenTheVerdictsAreRead) {
  DARK_REQUIRE_GPU();
  const Tensor x = Tensor::randn({4, 3}, 1).to(Device::cuda(0));
  const Tensor good = Tensor::from_vector<std::int64_t>({1, 2}, {2}).to(Device::cuda(0));
  const Tensor bad = Tensor::from_vector<std::int32_t>({0, 3, 7, 9}, {4}).to(Device::cuda(0));
  const DeferredChecks checks(Device::cuda(0));
  index_select(x, 0, good);
  const Tensor rows = index_select(x, 0, bad);
  Tensor dx = Tensor::zeros({4, 3}, DType::f32, Device::cuda(0));
  kernels::scatter_add().get(DeviceType::cuda, DType::f32)(Tensor::ones({4, 3}, DType::f32, Device::cuda(0)), bad, dx, 1,
                                                           4, 3);
  const std::vector<double> verdicts = checks.verdicts().to_vector<double>();
  EXPECT_EQ(verdicts, (std::vector<double>{-1, 2, 2}));
  EXPECT_EQ(error_of([&] { checks.raise(verdicts); }), "gather: index 7 at position 2 is out of range [0, 4)");
  EXPECT_EQ(rows.to_vector<float>()[2 * 3], 0.0f) << "a bad index gathers 0";
  const std::vector<float> d = dx.to_vector<float>();
  EXPECT_EQ(d, (std::vector<float>{1, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1})) << "a bad index scatters nothing";
}

#if defined(DARK_TEST_ON_CUDA_EMULATOR)
// DARK_FLASH_SM90=off keeps an H100 / H200 (the emulated GPU is one) on the mma.sync kernels,
// read at each call: no wgmma runs then, and the results agree with the wgmma kernels' to
// bf16 rounding.
TEST(GpuFlashAttention, SwitchingTheHopperKernelsOffRunsTheMmaSyncOnes) {
  const Device gpu = Device::cuda(0);
  auto input = [&](std::uint64_t stream) {
    return Tensor::randn({1, 150, 2, 64}, 3, stream, DType::f32, gpu).to(DType::bf16);
  };
  const Tensor q = input(0), k = input(1), v = input(2);
  auto run = [&] { return flash_attention(q, k, v, true, 0.125).to(DType::f32).to(Device::cpu()).to_vector<float>(); };
  const std::uint64_t before = cuda_emu::wgmma_issued();
  const std::vector<float> hopper = run();
  const std::uint64_t after = cuda_emu::wgmma_issued();
  EXPECT_GT(after, before) << "the wgmma kernels by default";
  ASSERT_EQ(setenv("DARK_FLASH_SM90", "off", 1), 0);
  const std::vector<float> mma_sync = run();
  unsetenv("DARK_FLASH_SM90");
  EXPECT_EQ(cuda_emu::wgmma_issued(), after) << "DARK_FLASH_SM90=off ran wgmma";
  ASSERT_EQ(hopper.size(), mma_sync.size());
  for (std::size_t i = 0; i < hopper.size(); ++i) ASSERT_NEAR(hopper[i], mma_sync[i], 2e-2) << "element " << i;
}
#endif

// Flash attention's backward on the GPU is bitwise reproducible (no atomics): f32, and bf16
// at head dimensions 64 and 128 (on an H100 / H200 the wgmma kernels) with GQA and several
// query and key blocks.
TEST(GpuFlashAttention, BackwardIsDeterministic) {
  DARK_REQUIRE_GPU();
  auto grads = [](DType dtype, std::int64_t d) {
    const Device dev = Device::cuda(0);
    auto input = [&](std::int64_t heads, std::uint64_t stream) {
      return Tensor::randn({2, 140, heads, d}, 3, stream, DType::f32, dev).to(dtype).set_requires_grad(true);
    };
    Tensor q = input(4, 0), k = input(2, 1), v = input(2, 2);
    backward(flash_attention(q, k, v, true, 0.2), Tensor::randn({2, 140, 4, d}, 3, 3, DType::f32, dev).to(dtype));
    return std::vector<std::vector<float>>{q.grad().to(DType::f32).to_vector<float>(),
                                           k.grad().to(DType::f32).to_vector<float>(),
                                           v.grad().to(DType::f32).to_vector<float>()};
  };
  for (const auto& [dtype, d] : {std::pair{DType::f32, std::int64_t{32}}, std::pair{DType::bf16, std::int64_t{64}},
                                 std::pair{DType::bf16, std::int64_t{128}}})
    EXPECT_EQ(grads(dtype, d), grads(dtype, d)) << dtype_name(dtype) << ", d " << d;
}

// With a sliding window: the window >= S gives the bits of no window, and the backward is
// bitwise reproducible.
TEST(GpuFlashAttention, WindowIsDeterministicAndAWindowOfAtLeastSIsNone) {
  DARK_REQUIRE_GPU();
  auto run = [](std::int64_t window) {
    const Device dev = Device::cuda(0);
    Tensor q = Tensor::randn({2, 150, 4, 32}, 4, 0, DType::f32, dev).set_requires_grad(true);
    Tensor k = Tensor::randn({2, 150, 2, 32}, 4, 1, DType::f32, dev).set_requires_grad(true);
    Tensor v = Tensor::randn({2, 150, 2, 32}, 4, 2, DType::f32, dev).set_requires_grad(true);
    const Tensor out = flash_attention(q, k, v, true, 0.2, Tensor(), window);
    backward(out, Tensor::randn({2, 150, 4, 32}, 4, 3, DType::f32, dev));
    return std::vector<std::vector<float>>{out.to_vector<float>(), q.grad().to_vector<float>(),
                                           k.grad().to_vector<float>(), v.grad().to_vector<float>()};
  };
  EXPECT_EQ(run(20), run(20));
  EXPECT_EQ(run(150), run(0));
  EXPECT_EQ(run(1000), run(0));
}

// Asking for the log normaliser changes no bit of the output, nor of the input gradients of a
// loss on the output alone (no dlse / dlog_norm then): flash attention, linear attention
// (causal and windowed) and random-feature attention, f32 and bf16.
TEST(GpuAttentionNorms, AskingForTheNormChangesNoBitOfTheOutputOrItsGradients) {
  DARK_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  using Fn = std::function<NormalizedAttention(const std::vector<Tensor>&, bool)>;
  auto plain = [](Tensor out) { return NormalizedAttention{std::move(out), Tensor()}; };
  const std::vector<std::tuple<std::string, std::vector<Shape>, Fn>> ops = {
      {"flash", {{2, 90, 4, 32}, {2, 90, 2, 32}, {2, 90, 2, 32}},
       [&](const auto& x, bool norm) {
         return norm ? flash_attention_with_lse(x[0], x[1], x[2], true, 0.2, Tensor(), 30)
                     : plain(flash_attention(x[0], x[1], x[2], true, 0.2, Tensor(), 30));
       }},
      {"linear", {{2, 150, 4, 16}, {2, 150, 2, 16}, {2, 150, 2, 8}},
       [&](const auto& x, bool norm) {
         return norm ? linear_attention_with_norm(x[0], x[1], x[2], true, 1e-6, 16)
                     : plain(linear_attention(x[0], x[1], x[2], true, 1e-6, 16));
       }},
      {"linear_window40", {{2, 130, 2, 12}, {2, 130, 2, 12}, {2, 130, 2, 6}},
       [&](const auto& x, bool norm) {
         return norm ? linear_attention_with_norm(x[0], x[1], x[2], true, 1e-6, 16, Tensor(), 40)
                     : plain(linear_attention(x[0], x[1], x[2], true, 1e-6, 16, Tensor(), 40));
       }},
      {"random_feature", {{2, 130, 4, 8}, {2, 130, 2, 8}, {2, 130, 2, 6}, {2, 16, 8}},
       [&](const auto& x, bool norm) {
         return norm ? random_feature_attention_with_norm(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 16)
                     : plain(random_feature_attention(x[0], x[1], x[2], x[3], Tensor(), true, 1e-6, 16));
       }},
  };
  for (const DType dtype : {DType::f32, DType::bf16})
    for (const auto& [name, shapes, fn] : ops) {
      std::vector<std::vector<std::vector<float>>> runs;
      for (const bool norm : {false, true}) {
        std::vector<Tensor> x;
        for (std::size_t i = 0; i < shapes.size(); ++i)
          x.push_back(Tensor::randn(shapes[i], 6, i, DType::f32, dev).to(dtype).set_requires_grad(true));
        const NormalizedAttention a = fn(x, norm);
        EXPECT_EQ(a.log_norm.defined(), norm) << name;
        backward(a.out, Tensor::randn(a.out.shape(), 6, 9, DType::f32, dev).to(dtype));
        std::vector<std::vector<float>> values = {a.out.to(DType::f32).to_vector<float>()};
        for (const Tensor& t : x) values.push_back(t.grad().to(DType::f32).to_vector<float>());
        runs.push_back(std::move(values));
      }
      EXPECT_TRUE(runs[0] == runs[1]) << name << " " << dtype_name(dtype);
    }
}

// The optimizer kernels over a flat buffer with decay ranges: the CUDA update equals the
// CPU's bit for bit. Both round every product, sum, quotient and square root on its own
// (core/cuda/optim.cu, core/cpu/optim.cpp), and each of those is correctly rounded IEEE
// float32 on both devices, so there is no error to allow for. (With a * b + c contracted
// into FMAs, as nvcc does unless told not to, SGD's momentum buffer came out 2e-5 relative
// off on an H200; the emulator contracts as nvcc does, so it fails the same way.)
TEST(GpuOptimizer, AdamWAndSgdOverDecayRangesMatchTheCpu) {
  DARK_REQUIRE_GPU();
  const std::int64_t n = 5000;
  const Tensor ranges = Tensor::from_vector<std::int64_t>({0, 700, 1200, 1201, 3000, 4999}, {3, 2});
  for (int sgd = 0; sgd < 2; ++sgd) {
    std::vector<Tensor> cpu = {Tensor::randn({n}, 5, 0), Tensor::zeros({n}), Tensor::zeros({n})};
    std::vector<Tensor> gpu = {cpu[0].to(Device::cuda(0)), cpu[1].to(Device::cuda(0)), cpu[2].to(Device::cuda(0))};
    const Tensor ranges_gpu = ranges.to(Device::cuda(0));
    for (int step = 1; step <= 3; ++step) {
      const Tensor g = Tensor::randn({n}, 6, static_cast<std::uint64_t>(step));
      const Tensor g_gpu = g.to(Device::cuda(0));
      if (sgd) {
        const SgdParams p{0.05, 0.9, 0.01};
        kernels::sgd_step().get(DeviceType::cpu, DType::f32)(cpu[0], g, cpu[1], ranges, p);
        kernels::sgd_step().get(DeviceType::cuda, DType::f32)(gpu[0], g_gpu, gpu[1], ranges_gpu, p);
      } else {
        AdamWParams p;
        p.lr = 1e-2, p.weight_decay = 0.1, p.bias_correction1 = 1 - std::pow(0.9, step),
        p.bias_correction2 = 1 - std::pow(0.999, step);
        kernels::adamw_step().get(DeviceType::cpu, DType::f32)(cpu[0], g, cpu[1], cpu[2], ranges, p);
        kernels::adamw_step().get(DeviceType::cuda, DType::f32)(gpu[0], g_gpu, gpu[1], gpu[2], ranges_gpu, p);
      }
    }
    for (int i = 0; i < (sgd ? 2 : 3); ++i)
      EXPECT_EQ(compare(gpu[i], cpu[i], {0, 0}), "") << (sgd ? "sgd" : "adamw") << " buffer " << i;
  }
}

// The gradient norm's chunk kernel: on the GPU, the bits of the composition it replaced for
// the norm's 4096-long chunks (float64 cast, square, then reduce's block-per-row sum: the
// same tree by construction), and the CPU's sequential sums within float64's summation
// bound. Chunks of 4096 and of 1000 (not a multiple of the block), one holding an infinity.
TEST(GpuOptimizer, ChunkSquareNormsEqualTheComposedSumOnTheGpuAndTheCpu) {
  DARK_REQUIRE_GPU();
  for (const std::int64_t chunk : {4096, 1000}) {
    const std::int64_t chunks = 7;
    Tensor x = mul_scalar(Tensor::randn({chunks * chunk}, 8, static_cast<std::uint64_t>(chunk)), 50.0);
    if (chunk == 1000) slice(x, 0, 2500, 2501).fill_(std::numeric_limits<float>::infinity());
    const Tensor x_gpu = x.to(Device::cuda(0));
    Tensor gpu = Tensor::empty({chunks}, DType::f64, Device::cuda(0)), cpu = Tensor::empty({chunks}, DType::f64);
    kernels::chunk_sq_norms().get(DeviceType::cuda, DType::f32)(x_gpu, gpu, chunk);
    kernels::chunk_sq_norms().get(DeviceType::cpu, DType::f32)(x, cpu, chunk);
    const Tensor composed = sum(reshape(square(x_gpu.to(DType::f64)), {chunks, chunk}), {1});
    if (chunk > 1024) EXPECT_EQ(gpu.to_vector<double>(), composed.to_vector<double>());  // reduce's block-per-row tree
    const std::vector<double> g = gpu.to_vector<double>(), c = cpu.to_vector<double>();
    for (std::int64_t i = 0; i < chunks; ++i) {
      // Positive terms: each order is within (chunk - 1) u of the exact sum (u = 2^-53).
      if (std::isfinite(c[i])) EXPECT_NEAR(g[i], c[i], 2.0 * chunk * 0x1p-53 * c[i]) << "chunk " << chunk << ", sum " << i;
      else EXPECT_EQ(g[i], c[i]) << "chunk " << chunk << ", sum " << i;
    }
    if (chunk == 1000) EXPECT_TRUE(std::isinf(c[2]));
  }
}

// The LM head's chunk gradient written straight as bf16 is the f32 gradient cast, bit for
// bit (one rounding either way); the f32 one in place matches the CPU's. Row 1 targets a
// class outside the chunk, row 2 the chunk's first column, row 0 its last.
TEST(GpuCrossEntropy, ChunkGradientAsBf16IsTheCastOfTheF32One) {
  DARK_REQUIRE_GPU();
  const std::int64_t rows = 3, cols = 257, v0 = 100;
  const Tensor logits = mul_scalar(Tensor::randn({rows, cols}, 12, 0), 3.0);
  const Tensor lse = Tensor::from_vector<float>({4.0f, 5.5f, 3.25f}, {rows});
  const Tensor scale = Tensor::from_vector<float>({0.5f, 0.25f, 0.0f}, {rows});
  const Tensor targets = Tensor::from_vector<std::int64_t>({v0 + cols - 1, 7, v0}, {rows});
  const Device gpu = Device::cuda(0);
  Tensor cpu = logits.clone(), f32 = logits.to(gpu), bf16 = Tensor::empty({rows, cols}, DType::bf16, gpu);
  kernels::cross_entropy_chunk_backward().get(DeviceType::cpu, DType::f32)(cpu, lse, scale, targets, v0, cpu);
  kernels::cross_entropy_chunk_backward().get(DeviceType::cuda, DType::f32)(f32, lse.to(gpu), scale.to(gpu),
                                                                            targets.to(gpu), v0, f32);
  kernels::cross_entropy_chunk_backward().get(DeviceType::cuda, DType::f32)(logits.to(gpu), lse.to(gpu), scale.to(gpu),
                                                                            targets.to(gpu), v0, bf16);
  EXPECT_EQ(compare(f32, cpu, {1e-6, 1e-7}), "");
  EXPECT_EQ(bf16.to(DType::f32).to_vector<float>(), f32.to(DType::bf16).to(DType::f32).to_vector<float>());
  EXPECT_LT(cpu.to_vector<float>()[cols - 1], 0.0f);  // the target's column got -scale
}

// ---- contiguous elementwise kernels: 16-byte packs between scalar heads and tails
// (core/cuda/vector_access.cuh). Each operand is a view of n elements `offset` elements into
// its own 16-byte aligned buffer of n + 8: operands that share a misalignment take packs after
// a head of 0..7 elements, others (views one element apart) the scalar loop. Sizes around a
// pack (1, 7, 8, 9) and a larger odd one over many blocks leave tails of every length. Results
// are compared bit for bit, and the buffers around the views must be untouched.

// One kernel call over views in `dtypes`, outputs among them. With cpu_in_f32 the CPU, which
// has no bf16 arithmetic kernels, runs bf16 operands as f32: inputs widened exactly, outputs
// rounded to bf16 once afterwards, as the GPU rounds its float result.
struct PackCase {
  std::string name;
  std::vector<DType> dtypes;
  std::function<void(std::vector<Tensor>&)> call;
  bool cpu_in_f32 = false;
};

// The kernel of `table` for t's device and dtype.
template <class Table>
auto kernel_for(Table& table, const Tensor& t) { return table.get(t.device().type, t.dtype()); }

std::vector<std::uint64_t> bits_of(const Tensor& t) {
  const Tensor h = t.to(Device::cpu());
  std::vector<std::uint64_t> bits;
  if (h.dtype() == DType::bf16)
    for (BFloat16 v : h.to_vector<BFloat16>()) bits.push_back(v.bits);
  else if (h.dtype() == DType::f32)
    for (float v : h.to_vector<float>()) bits.push_back(std::bit_cast<std::uint32_t>(v));
  else
    for (double v : h.to_vector<double>()) bits.push_back(std::bit_cast<std::uint64_t>(v));
  return bits;
}

// Operand k's buffer of n + 8: its view's values (the same at every offset) at `offset`, 1e6
// around them. Operand 0 (where's cond) is 0 at every third element.
Tensor pack_buffer(std::size_t k, std::int64_t n, int offset, DType dtype) {
  std::vector<double> v(n + 8, 1e6);
  for (std::int64_t i = 0; i < n; ++i)
    v[offset + i] = k == 0 && i % 3 == 0 ? 0.0 : 4 * std::sin(12.9898 * static_cast<double>(i) + 78.233 * k);
  return Tensor::from_vector(v, {n + 8}).to(dtype);
}

// Runs c on `device` with operand k at offsets[k]; returns the bits of each view in c's dtypes.
std::vector<std::vector<std::uint64_t>> run_views(const PackCase& c, Device device, std::int64_t n,
                                                  const std::vector<int>& offsets) {
  std::vector<Tensor> initial, buffers, views;
  for (std::size_t k = 0; k < c.dtypes.size(); ++k) {
    initial.push_back(pack_buffer(k, n, offsets[k], c.dtypes[k]));
    const bool widen = c.cpu_in_f32 && device.is_cpu() && c.dtypes[k] == DType::bf16;
    buffers.push_back(initial.back().to(widen ? DType::f32 : c.dtypes[k]).to(device));
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(buffers.back().raw_data()) % 16, 0u) << "buffers must be aligned";
    views.push_back(core::slice(buffers.back(), 0, offsets[k], offsets[k] + n));
  }
  c.call(views);
  std::vector<std::vector<std::uint64_t>> results;
  for (std::size_t k = 0; k < buffers.size(); ++k) {
    const auto before = bits_of(initial[k]), after = bits_of(buffers[k].to(Device::cpu()).to(c.dtypes[k]));
    for (std::int64_t i = 0; i < n + 8; ++i)
      if (i < offsets[k] || i >= offsets[k] + n)
        EXPECT_EQ(after[i], before[i]) << c.name << " on " << device.to_string() << ": operand " << k
                                       << "'s buffer changed at " << i << " outside its view at " << offsets[k]
                                       << " of n = " << n;
    results.emplace_back(after.begin() + offsets[k], after.begin() + offsets[k] + n);
  }
  return results;
}

// Offsets of the views of operands in `dtypes`. A pack of W elements is 16 bytes of the
// narrowest dtype; operand j at k + j W (mod 8) for each k < W shares one misalignment, at
// different offsets where W < 8, with heads of every length. Then operand j at k + j for k =
// 0, 1: no common alignment. The large size takes one layout: a head, packs, a tail. (The
// emulator protects all device memory in use at every kernel and copy, so a size of 10^6 made
// this file's single-process run 45 s slower.)
std::vector<std::vector<int>> pack_layouts(const std::vector<DType>& dtypes, std::int64_t n) {
  const int operands = static_cast<int>(dtypes.size());
  if (n > 1000) return {std::vector<int>(operands, 3)};
  std::size_t narrowest = 8;
  for (const DType t : dtypes) narrowest = std::min(narrowest, dtype_size(t));
  const int width = static_cast<int>(16 / narrowest);
  std::vector<std::vector<int>> layouts;
  auto add = [&](int first, int step) {
    layouts.emplace_back();
    for (int j = 0; j < operands; ++j) layouts.back().push_back((first + j * step) % 8);
  };
  for (int k = 0; k < width; ++k) add(k, width);
  if (operands > 1)
    for (int k = 0; k < 2; ++k) add(k, 1);
  return layouts;
}

constexpr std::int64_t kPackSizes[] = {1, 7, 8, 9, 100003};

// Each case on CUDA at every layout and size equals the CPU's bits or, for kernels whose math
// functions round differently on the two devices, the bits of CUDA's scalar loop (operand k
// at offset k: no common alignment).
void expect_packs_match(const std::vector<PackCase>& cases, bool reference_on_cpu = true) {
  for (const std::int64_t n : kPackSizes)  // the small sizes first: the emulator is faster with less memory in use
    for (const PackCase& c : cases) {
      std::vector<int> scalar_offsets(c.dtypes.size());
      std::iota(scalar_offsets.begin(), scalar_offsets.end(), 0);
      const auto scalar = reference_on_cpu ? std::vector<std::vector<std::uint64_t>>()
                                           : run_views(c, Device::cuda(0), n, scalar_offsets);
      for (const std::vector<int>& offsets : pack_layouts(c.dtypes, n)) {
        const std::string layout =
            str(c.name, " n = ", n, " offsets ", shape_str(Shape(offsets.begin(), offsets.end())));
        const auto want = reference_on_cpu ? run_views(c, Device::cpu(), n, offsets) : scalar;
        const auto got = run_views(c, Device::cuda(0), n, offsets);
        for (std::size_t k = 0; k < want.size(); ++k) {
          std::size_t i = 0;
          while (i < want[k].size() && got[k][i] == want[k][i]) ++i;
          EXPECT_EQ(i, want[k].size()) << layout << ": operand " << k << " differs first at element " << i;
        }
      }
    }
}

class GpuPackedElementwise : public ::testing::TestWithParam<DType> {};

// binary, where and the unary kernels (ops exact on both devices), in place too.
TEST_P(GpuPackedElementwise, EqualsTheCpuBitsAtEverySizeAndAlignment) {
  DARK_REQUIRE_GPU();
  const DType t = GetParam();
  auto binary = [](BinaryOp op) {
    return [op](std::vector<Tensor>& v) { kernel_for(kernels::binary(), v[0])(op, v[0], v[1], v.back()); };
  };
  auto unary = [](UnaryOp op, double alpha) {
    return [op, alpha](std::vector<Tensor>& v) {
      kernel_for(kernels::unary_forward(), v[0])(op, v[0], v.back(), alpha);
    };
  };
  expect_packs_match({
      {"add", {t, t, t}, binary(BinaryOp::add), true},
      {"div", {t, t, t}, binary(BinaryOp::div), true},
      {"maximum in place", {t, t}, binary(BinaryOp::maximum), true},
      {"where", {t, t, t, t},
       [](std::vector<Tensor>& v) { kernel_for(kernels::where(), v[0])(v[0], v[1], v[2], v[3]); }, true},
      {"mul_scalar", {t, t}, unary(UnaryOp::mul_scalar, 0.7), true},
      {"square in place", {t}, unary(UnaryOp::square, 0), true},
      {"exp backward (reads y)", {t, t, t, t},
       [](std::vector<Tensor>& v) {
         kernel_for(kernels::unary_backward(), v[0])(UnaryOp::exp, v[0], v[1], v[2], v[3], 0);
       },
       true},
      // On CUDA without y (recomputed where needed; square's derivative reads x only); the CPU
      // always takes a y.
      {"square backward without y", {t, t, t},
       [](std::vector<Tensor>& v) {
         kernel_for(kernels::unary_backward(), v[0])(UnaryOp::square, v[0], v[0].device().is_cpu() ? v[0] : Tensor(),
                                                     v[1], v[2], 0);
       },
       true},
      {"fill", {t}, [](std::vector<Tensor>& v) { kernel_for(kernels::fill(), v[0])(v[0], 0.3); }},
      {"strided_copy", {t, t}, [](std::vector<Tensor>& v) { kernel_for(kernels::strided_copy(), v[0])(v[0], v[1]); }},
  });
}

INSTANTIATE_TEST_SUITE_P(Dtypes, GpuPackedElementwise, ::testing::Values(DType::bf16, DType::f32, DType::f64),
                         [](const auto& info) { return std::string(dtype_name(info.param)); });

// Casts between sizes move packs by element count (8 f32 in two 16-byte loads, one store of 8 bf16).
TEST(GpuPackedElementwise, CastsEqualTheCpuBitsAtEverySizeAndAlignment) {
  DARK_REQUIRE_GPU();
  auto cast = [](DType from, DType to) {
    return PackCase{str("cast ", dtype_name(from), " -> ", dtype_name(to)), {from, to},
                    [](std::vector<Tensor>& v) { kernel_for(kernels::cast(), v[0])(v[0], v[1]); }};
  };
  expect_packs_match({cast(DType::f32, DType::bf16), cast(DType::bf16, DType::f32), cast(DType::f64, DType::bf16),
                      cast(DType::f32, DType::f64)});
}

// The gated activations call exp / erfc, whose last bits differ between the devices (the
// fused-op cases above hold them to the CPU within a tolerance): here the packed loop gives
// the bits of CUDA's scalar loop, for each set of requested gradients and in place.
TEST(GpuPackedElementwise, GluEqualsItsScalarLoopBitsAtEverySizeAndAlignment) {
  DARK_REQUIRE_GPU();
  std::vector<PackCase> cases;
  for (const DType t : {DType::bf16, DType::f32, DType::f64}) {
    const std::string type = dtype_name(t);
    cases.push_back({"swiglu forward " + type, {t, t, t}, [](std::vector<Tensor>& v) {
                       kernel_for(kernels::glu_forward(), v[0])(GluOp::swiglu, v[0], v[1], v[2]);
                     }});
    cases.push_back({"geglu forward in place " + type, {t, t}, [](std::vector<Tensor>& v) {
                       kernel_for(kernels::glu_forward(), v[0])(GluOp::geglu, v[0], v[1], v[0]);
                     }});
    cases.push_back({"geglu_tanh backward with out " + type, {t, t, t, t, t, t}, [](std::vector<Tensor>& v) {
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::geglu_tanh, v[0], v[1], v[2], v[3], v[4], v[5]);
                     }});
    cases.push_back({"geglu backward " + type, {t, t, t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::geglu, v[0], v[1], v[2], v[3], v[4], none);
                     }});
    cases.push_back({"swiglu backward, dgate and out " + type, {t, t, t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::swiglu, v[0], v[1], v[2], v[3], none, v[4]);
                     }});
    cases.push_back({"swiglu backward, dgate only " + type, {t, t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::swiglu, v[0], v[1], v[2], v[3], none, none);
                     }});
    cases.push_back({"geglu backward, dup and out " + type, {t, t, t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::geglu, v[0], v[1], v[2], none, v[3], v[4]);
                     }});
    cases.push_back({"swiglu backward, dup only " + type, {t, t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::swiglu, v[0], v[1], v[2], none, v[3], none);
                     }});
    cases.push_back({"geglu_tanh backward, out only " + type, {t, t, t}, [](std::vector<Tensor>& v) {
                       Tensor none;
                       kernel_for(kernels::glu_backward(), v[0])(GluOp::geglu_tanh, v[0], v[1], none, none, none, v[2]);
                     }});
  }
  expect_packs_match(cases, /*reference_on_cpu=*/false);
}

}  // namespace
// The gated MLP's backward takes the activation from glu_backward: on the GPU too, the
// forward's bits, in every dtype and for every combination of wanted gradients.
TEST(GpuGlu, BackwardRecomputesTheForwardOutputBitForBit) {
  DARK_REQUIRE_GPU();
  for (DType dt : {DType::bf16, DType::f32, DType::f64}) expect_glu_backward_output_is_the_forward(dt, Device::cuda(0));
}

// add_rms_norm on the GPU: the bits of add then rms_norm there, forward and backward, in bf16
// and f32 (the gradient of the sum is added to the norm's dx after its rounding).
TEST(GpuAddRmsNorm, EqualsAddThenRmsNormBitForBit) {
  DARK_REQUIRE_GPU();
  for (const DType dt : {DType::bf16, DType::f32})
    expect_add_rms_norm_is_add_then_rms_norm(dt, Device::cuda(0), {6, 33, 200}, 1e-6);
}

}  // namespace dark::testing

namespace dark::testing {

// Mixed precision's norm weights: rms_norm with an f32 weight and bf16 x multiplies by the
// weight's bf16 copy (the output has the bits of the bf16 weight's) and gives the weight the
// kernel's f32 sum of dy x rstd unrounded: within f32 rounding of the float64 sum, where a
// bf16 gradient (as a recorded cast of the weight gave) is off by up to 2^-9 of it.
TEST(GpuRmsNorm, AnF32WeightOfBf16ActivationsGetsItsGradientUnrounded) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const std::int64_t rows = 300, d = 96;
  const Tensor x = Tensor::randn({rows, d}, 11, 0, DType::f32, gpu).to(DType::bf16);
  const Tensor dy = Tensor::randn({rows, d}, 11, 1, DType::f32, gpu).to(DType::bf16);
  Tensor w = Tensor::randn({d}, 11, 2, DType::f32, gpu).set_requires_grad(true);
  const Tensor y = rms_norm(x, w, 1e-5);
  const Tensor y_bf16_weight = rms_norm(x, w.detach().to(DType::bf16), 1e-5);
  EXPECT_EQ(y.dtype(), DType::bf16);
  EXPECT_EQ(y.to(DType::f32).to_vector<float>(), y_bf16_weight.to(DType::f32).to_vector<float>());
  backward(y, dy);
  ASSERT_EQ(w.grad().dtype(), DType::f32);
  const std::vector<float> grad = w.grad().to_vector<float>();

  const std::vector<float> xs = x.to(DType::f32).to_vector<float>(), dys = dy.to(DType::f32).to_vector<float>();
  int beyond_bf16 = 0;
  for (std::int64_t j = 0; j < d; ++j) {
    double sum = 0, magnitude = 0;
    for (std::int64_t r = 0; r < rows; ++r) {
      double sq = 0;
      for (std::int64_t c = 0; c < d; ++c) sq += double{xs[r * d + c]} * xs[r * d + c];
      const double term = double{dys[r * d + j]} * xs[r * d + j] / std::sqrt(sq / d + 1e-5);
      sum += term, magnitude += std::abs(term);
    }
    EXPECT_NEAR(grad[j], sum, 1e-6 * magnitude) << "column " << j;
    const double rounded = static_cast<double>(static_cast<float>(BFloat16(static_cast<float>(sum))));
    if (std::abs(rounded - sum) > 1e-6 * magnitude) ++beyond_bf16;
  }
  EXPECT_GT(beyond_bf16, d / 2) << "the tolerance does not tell an unrounded gradient from a bf16 one";
}

// Mixed precision's embedding: within a step (the weights' bf16 copy live) the rows gathered
// from the copy and the bf16 gradients summed into an f32 one give the bits of the recorded
// cast they replace (rows cast after the gather, gradients widened before the scatter),
// repeated ids included; outside one, that cast itself.
TEST(GpuEmbedding, BF16RowsOfAnF32WeightHaveTheBitsOfACastAfterTheGather) {
  DARK_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  const Tensor ids = Tensor::from_vector<std::int32_t>({3, 0, 3, 7, 1, 3, 0, 5}, {2, 4}).to(gpu);
  const Tensor dout = Tensor::randn({2, 4, 40}, 12, 0, DType::f32, gpu).to(DType::bf16);
  Tensor w_cast = Tensor::randn({9, 40}, 12, 1, DType::f32, gpu).set_requires_grad(true);
  const Tensor cast_rows = to_dtype(embedding(w_cast, ids), DType::bf16);
  backward(cast_rows, dout);
  ASSERT_EQ(w_cast.grad().dtype(), DType::f32);
  EXPECT_NE(w_cast.grad().to_vector<float>(), std::vector<float>(9 * 40, 0.0f));
  for (const bool in_step : {true, false}) {
    Tensor w = w_cast.detach().clone().set_requires_grad(true);
    std::optional<WeightCopies> copies;
    if (in_step) copies.emplace().add(w, w.detach().to(DType::bf16));
    const Tensor rows = embedding(w, ids, DType::bf16);
    backward(rows, dout);
    ASSERT_EQ(rows.dtype(), DType::bf16);
    EXPECT_EQ(rows.to(DType::f32).to_vector<float>(), cast_rows.to(DType::f32).to_vector<float>()) << in_step;
    ASSERT_EQ(w.grad().dtype(), DType::f32);
    EXPECT_EQ(w.grad().to_vector<float>(), w_cast.grad().to_vector<float>()) << in_step;
  }
}

}  // namespace dark::testing
