// The attention interface: what happens between the q/k/v projections (after RoPE) and
// the output projection. Exact softmax, Performer, LFK and DARKFormer implement it in
// attention/; the model receives a factory, so nn/ does not depend on the kinds.
// A kernel is a Module: its own parameters (DARKFormer's M, LFK's W) are registered
// under "<layer>.self_attn.feature_map".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include "nn/module.h"

namespace dark::nn {

struct AttentionShape {
  std::int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int layer = 0;
  DType dtype = DType::f32;  // the model's parameter dtype (for a kernel's own parameters)
};

// What a kernel keeps between decoding calls: a key/value cache for softmax, the recurrent
// random-feature state (S, z) for the others. Opaque to the model.
struct DecodeState {
  virtual ~DecodeState() = default;
};

class AttentionKernel : public Module {
 public:
  // q: (B, T, Hq, D), k, v: (B, T, Hkv, D), RoPE already applied -> (B, T, Hq, D), causal.
  // key_mask: undefined, or (B, T) with zeros at padded keys (variable-length documents):
  // padded keys drop out of every query's attention.
  virtual Tensor forward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& key_mask = Tensor()) = 0;
  // Incremental decoding: the T new positions that follow everything `state` has seen (a null
  // state is created on the first call). Gives the outputs forward() gives at those positions
  // of the whole sequence; no gradient.
  virtual Tensor decode(const Tensor& q, const Tensor& k, const Tensor& v, std::unique_ptr<DecodeState>& state) = 0;
  virtual const char* kind() const = 0;

  // Random features are redrawn by epoch (the trainer sets epoch = step / redraw_interval
  // before each optimizer step); kernels without redrawn features ignore it.
  virtual void set_feature_epoch(std::int64_t /*epoch*/) {}
  virtual std::int64_t feature_epoch() const { return 0; }

  // Calibration (DARKFormer's whiten initialisation, the variance-optimal proposal): between
  // begin and end the kernel measures the queries and keys that forward() sees; end derives
  // its settings from them. needs_calibration() says whether the trainer must run it.
  virtual bool needs_calibration() const { return false; }
  virtual void begin_calibration() {}
  virtual void end_calibration() {}

  // State that is neither a parameter nor a function of (seed, epoch) and that a checkpoint
  // must keep (the variance-optimal proposal), by name; empty for most kernels.
  virtual std::map<std::string, Tensor> extra_state() const { return {}; }
  virtual void load_extra_state(const std::map<std::string, Tensor>& /*saved*/) {}
};

using AttentionFactory = std::function<std::unique_ptr<AttentionKernel>(const AttentionShape&)>;

}  // namespace dark::nn
