// The attention interface: what happens between the q/k/v projections (after RoPE) and
// the output projection. Exact softmax, Performer, LFK and DARKFormer implement it in
// attention/; the model receives a factory, so nn/ does not depend on the kinds.
// A kernel is a Module: its own parameters (DARKFormer's M, LFK's W) are registered
// under "<layer>.self_attn.feature_map".
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "nn/module.h"

namespace dark::nn {

struct AttentionShape {
  std::int64_t n_heads = 0, n_kv_heads = 0, head_dim = 0;
  int layer = 0;
  DType dtype = DType::f32;  // the model's parameter dtype (for a kernel's own parameters)
  // Sliding-window attention (Gemma's local layers): > 0 means query t sees only the keys s
  // with t - s < window (itself and the window - 1 before it); 0 = every earlier key.
  std::int64_t window = 0;
};

// What a kernel keeps between decoding calls: a key/value cache for softmax, the recurrent
// random-feature state (S, z) for the others. Opaque to the model.
struct DecodeState {
  virtual ~DecodeState() = default;
};

// What drives a random-feature estimator's variance, measured on one forward pass (docs/method.md
// section 3: one feature's relative variance for the pair (q, k) is exp(|q~ + k~|^2) - 1, with q~, k~
// the scaled and, for DARKFormer, transformed query and key). Percentiles over the batch's
// positions and query heads; NaN where a kind has no such quantity (softmax has no features).
struct AttentionStats {
  // s = |q~|^2 + |k~|^2 at one position (the key of the query's key/value head): exp(s) - 1 is
  // the relative variance of a feature for a pair of such vectors with uncorrelated directions.
  double sq_norm_p50 = 0, sq_norm_p99 = 0;
  // The spread of the feature logits w . x~ over the m features of one query or key (their
  // standard deviation; |x~| for isotropic draws): how unequal the features' weights are.
  double logit_sd_p50 = 0, logit_sd_p99 = 0;
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
  // Whether decode()'s state stays the same size however long the sequence grows (a
  // random-feature kind's recurrent state, with or without its exact window; a sliding-window
  // layer's last `window` keys), so decoding needs no context limit; false when it keeps every
  // key and value seen (softmax on a global layer). False by default: a kernel that does not
  // say so is assumed to grow.
  virtual bool bounded_decode_state() const { return false; }
  virtual const char* kind() const = 0;
  // kind() and any setting that changes what it computes, in words, for messages (an export
  // refusal says what the layer runs).
  virtual std::string describe() const { return kind(); }

  // Random features are redrawn by epoch (the trainer sets epoch = step / redraw_interval
  // before each optimizer step); kernels without redrawn features ignore it.
  virtual void set_feature_epoch(std::int64_t /*epoch*/) {}
  virtual std::int64_t feature_epoch() const { return 0; }
  // Whether a new epoch changes this kernel's output (Performer's and DARKFormer's linear mode):
  // the trainer measures such redraws' shock (train/metrics/redraw_shock.h).
  virtual bool redraws_features() const { return false; }

  // Statistics of the next forward pass's queries and keys (AttentionStats): request, run
  // forward, take (once; empty when no forward ran since the request). Measured without
  // recording, so gradients are unchanged.
  void request_stats() { stats_requested_ = true; }
  bool stats_requested() const { return stats_requested_; }
  std::optional<AttentionStats> take_stats() {
    std::optional<AttentionStats> s = std::move(stats_);
    stats_.reset();
    return s;
  }

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

  // What computing this kernel outside the framework takes (export-hf's modeling file): its
  // settings beyond the layer's shape, as the JSON object that goes into the exported
  // config's attention_layers entry (each value with its own type: integers, numbers, booleans,
  // strings), and the tensors that are not parameters (the feature matrices in force for the
  // current epoch), by name. Empty for softmax.
  struct Export {
    nlohmann::json settings = nlohmann::json::object();
    std::map<std::string, Tensor> tensors;
  };
  virtual Export export_form() { return {}; }

 protected:
  // In forward(): true once after request_stats(); the kernel then stores what it measured.
  bool stats_due() { return std::exchange(stats_requested_, false); }
  void store_stats(const AttentionStats& s) { stats_ = s; }

 private:
  bool stats_requested_ = false;
  std::optional<AttentionStats> stats_;
};

using AttentionFactory = std::function<std::unique_ptr<AttentionKernel>(const AttentionShape&)>;

}  // namespace dark::nn
