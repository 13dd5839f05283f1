// The source model's exact attention at the swapped layers, which attention transfer fits
// them to (train/swap/transfer.h). The swapped model itself carries the source's weights
// everywhere but in what the transfer trains, and each swapped layer passes the target on
// (so the residual stream stays the source's), so the targets need no second model: a frozen
// copy of each swapped layer's attention projections (q, k, v, QK-norm, as loaded from the
// source) computes the source's queries, keys, values and its exact softmax attention from
// the swapped layer's own input, handed over by the layer (nn::SelfAttention::input_observer)
// before its kernel runs. Memory: the projections of the swapped layers only (for Gemma 3's
// global arm 3 of 18 layers' attention; never the MLPs, the embedding or the head).
#pragma once
#include <memory>
#include <vector>

#include "nn/model.h"

namespace dark::train {

class SourceAttention {
 public:
  // What the source computes at one swapped layer for the batch being run: its exact attention
  // output (B, T, Hq, D) (before the output projection), and the queries (B, T, Hq, D) and keys
  // (B, T, Hkv, D) it attends with (after QK-norm and RoPE). No gradient.
  struct Target {
    Tensor out, q, k;
  };

  // Copies the attention weights `model` holds now (the source's) of `layers` and installs the
  // observers; the model's layers are left as they were when the object goes.
  SourceAttention(nn::CausalLM& model, const std::vector<int>& layers);
  ~SourceAttention();
  SourceAttention(const SourceAttention&) = delete;
  SourceAttention& operator=(const SourceAttention&) = delete;

  // The target of layers[j] computed by the last forward pass through that layer (then cleared).
  Target take(std::size_t j);
  const std::vector<int>& layers() const { return layers_; }

 private:
  nn::CausalLM& model_;
  std::vector<int> layers_;
  std::vector<std::unique_ptr<nn::SelfAttention>> frozen_;  // softmax kernels, the layers' own windows
  std::vector<Target> targets_;
};

}  // namespace dark::train
