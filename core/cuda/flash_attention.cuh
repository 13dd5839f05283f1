// The shape of one flash-attention call, shared by the CUDA kernels of every precision
// (flash_attention.cu: f32 and the host side; flash_attention_bf16.cu: bf16 on the tensor
// cores). Semantics: core/kernels.h, flash_attention_forward.
#pragma once
#include <cstdint>

#include "core/cuda/flash_attention_sm90_guard.h"
#include "core/cuda/launch.cuh"
#include "core/tensor.h"

namespace dark::cuda::flash {

struct AttnShape {
  std::int64_t batch, t, s, hq, hkv, d, group;
  std::int64_t q_stride[3], k_stride[3], v_stride[3];  // batch, sequence, head (D has stride 1)
  bool causal;
  std::int64_t window;  // > 0: sliding window (causal only); 0: none (also for window >= S)
  float scale;
  const std::int32_t* key_mask;  // (B, S); nullptr: every key is real
  bool aligned;                  // 16-byte rows: D, every stride and pointer a multiple of 8 elements

  // Whether query tq sees key sk (both may lie past the end: then it does not).
  __device__ __forceinline__ bool visible(std::int64_t b, std::int64_t tq, std::int64_t sk) const {
    if (tq >= t || sk >= s) return false;
    if (causal && sk > tq + (s - t)) return false;
    if (window > 0 && sk <= tq + (s - t) - window) return false;
    return key_mask == nullptr || key_mask[b * s + sk] != 0;
  }
  // The first key of the tile (of `tile` keys) holding query tq's first visible key.
  __device__ __forceinline__ std::int64_t first_key_tile(std::int64_t tq, int tile) const {
    if (window == 0) return 0;
    const std::int64_t first = tq + (s - t) - window + 1;
    return first <= 0 ? 0 : first / tile * tile;
  }
  // One past the last key any query of [t0, t0 + rows) sees.
  __device__ __forceinline__ std::int64_t key_end(std::int64_t t0, std::int64_t rows) const {
    return causal ? (t0 + rows + s - t < s ? t0 + rows + s - t : s) : s;
  }
  // Whether every query in [q0, q1) sees every key in [k0, k1): then a tile needs no mask.
  __device__ __forceinline__ bool all_visible(std::int64_t q0, std::int64_t q1, std::int64_t k0, std::int64_t k1) const {
    if (key_mask != nullptr || q1 > t || k1 > s) return false;
    if (causal && k1 - 1 > q0 + (s - t)) return false;
    return window == 0 || k0 > q1 - 1 + (s - t) - window;
  }
  // One past the last query that sees key sk (t without a window).
  __device__ __forceinline__ std::int64_t query_end(std::int64_t sk) const {
    if (window == 0) return t;
    const std::int64_t end = sk - (s - t) + window;
    return end < 0 ? 0 : (end > t ? t : end);
  }
};


// The bf16 kernels (flash_attention_bf16.cu), for head dimensions padded to kd in {32, 64,
// 128, 256}. delta = rowsum(dout * out) (B, Hq, T) is computed by the caller.
void forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, int kd, Tensor& out,
                  Tensor& lse);
void backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                   const Tensor& delta, const AttnShape& g, int kd, Tensor& dq, Tensor& dk, Tensor& dv);

// The Hopper kernels (flash_attention_sm90.cu, flash_attention_sm90_backward.cu: wgmma), for
// kd in {64, 128, 256} and 16-byte-aligned rows (dO's too) on compute capability 9.0 only;
// sm90_built() says whether this build has them (sm_90a code: DARK_CUDA_ARCHITECTURES names
// 90a; or the emulator). flash_attention.cu runs them only where flash_attention_sm90_guard.h
// allows.
bool sm90_built();
void forward_sm90(const Tensor& q, const Tensor& k, const Tensor& v, const AttnShape& g, int kd, Tensor& out,
                  Tensor& lse);
void backward_sm90(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dout, const Tensor& lse,
                   const Tensor& delta, const AttnShape& g, int kd, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace dark::cuda::flash
