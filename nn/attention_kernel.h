// The attention interface: what happens between the q/k/v projections (after RoPE) and
// the output projection. Exact softmax, Performer, LFK and DARKFormer implement it in
// attention/; the model receives a factory, so nn/ does not depend on the kinds.
// A kernel is a Module: its own parameters (DARKFormer's M, LFK's W) are registered
// under "<layer>.self_attn.feature_map".
#pragma once
#include <functional>
#include <memory>

#include "nn/module.h"

namespace dark::nn {

struct AttentionShape {
  std::int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int layer = 0;
};

class AttentionKernel : public Module {
 public:
  // q: (B, T, Hq, D), k, v: (B, T, Hkv, D), RoPE already applied -> (B, T, Hq, D), causal.
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v) = 0;
  virtual const char* kind() const = 0;
};

using AttentionFactory = std::function<std::unique_ptr<AttentionKernel>(const AttentionShape&)>;

}  // namespace dark::nn
