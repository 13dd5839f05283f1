// Activation checkpointing: run a piece of the forward pass without keeping what its ops save
// for backward, and run it again when backward reaches it.
#pragma once
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace dark {

// fn(inputs) computed without recording; one tape entry stands for it. Its backward rebinds
// each of `params` (the leaves fn reads through these pointers, e.g. a module's parameters)
// to a fresh leaf on the same storage, reruns fn on fresh leaves of the inputs with recording
// on, on a tape of its own, backpropagates the output's gradient through that, and hands the
// gradients of the inputs and params back to the enclosing backward, which accumulates them as
// if the ops had been recorded there (buffer-bound parameters included, with their
// gradient-ready hooks firing once). fn must be deterministic (the same bits when rerun:
// dropout from counter-based streams is): then losses and gradients equal an unchecked run's
// bit for bit. Without grad mode, or when nothing requires grad, this is just fn(inputs).
Tensor checkpoint(const std::function<Tensor(const std::vector<Tensor>&)>& fn, const std::vector<Tensor>& inputs,
                  const std::vector<Tensor*>& params);

}  // namespace dark
